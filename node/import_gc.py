"""Importing the machine-learning stack without Python's cyclic garbage collector rescanning it.

torch, transformers, TRL, datasets, reasoning-gym and hivemind make millions of objects at import, nearly all of
which live as long as the process. With the collector on, every collection of the oldest generation that the
import triggers walks all of them again, a large share of a node's start-up CPU time on a slow machine
(docs/performance.md, "A node's start-up imports"). Imported with the collector off and frozen afterwards
(``gc.freeze``), they are walked by no collection at all; what the process allocates later is collected as usual.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def collector_off_while_importing() -> Iterator[None]:
    """Run the block (imports of modules kept for the process's life) with the collector off, then move every object
    tracked so far into the permanent generation and turn the collector back on, if it was on before.

    Cyclic garbage made inside the block stays allocated: import-time garbage is small, and a full collection to
    find it would cost what the block saves."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        if was_on:
            gc.enable()
