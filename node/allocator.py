"""How a training node allocates memory: resident memory flat over many rounds, little CPU time in the kernel.

Every GRPO step allocates and frees hundreds of megabytes of tensors of varying sizes. With glibc's defaults torch's
threads each grow an arena of their own and the pages freed inside the heap stay resident, so RSS grows round after
round with the bundled model. Serving every large block with its own mmap kept RSS flat, but the kernel then
page-faulted in and zeroed every large tensor, every time it was allocated: a large share of a node's CPU time went
to the kernel (docs/good-citizen.md, bench/allocator.py).

Where glibc's malloc serves a node, it gets instead:

* two arenas (:data:`MALLOC_ENV`), with glibc's own dynamic mmap threshold left alone, so a round reuses the heap's
  free blocks for its tensors. :data:`MALLOC_ENV` is put in the environment of every node child
  (:func:`node.launch.node_environment`), so glibc reads it before the first allocation; :func:`tame_heap`, called by a
  node at start-up, applies it with ``mallopt`` to a process that was started by hand (``python -m node run``). A
  variable the user set explicitly wins in both cases.
* :func:`trim_heap` after every round: ``malloc_trim(0)`` hands the pages that are free inside the heap back to the
  OS, so what stays resident between rounds is what is in use, and the next round faults in its working set once
  instead of faulting in every large tensor it allocates.

Other C libraries (macOS, musl) ignore the settings, and the trim does nothing there.

Where the system has jemalloc (Debian and Ubuntu: ``libjemalloc2``), node children get it instead
(:func:`allocator_env`): two arenas, dirty pages returned after two seconds by a background thread.
``RL_SWARM_ALLOCATOR=glibc`` keeps glibc with the settings above, ``jemalloc`` insists on jemalloc where found;
an ``LD_PRELOAD`` the user set is left alone.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import os
import sys
from collections.abc import Callable, Mapping

log = logging.getLogger(__name__)

ARENA_MAX = 2
# Only the arena count: setting the mmap or trim threshold or the top pad would switch off glibc's dynamic mmap
# threshold, and every large tensor would be mmapped afresh again.
MALLOC_ENV = {"MALLOC_ARENA_MAX": str(ARENA_MAX)}
CHOICE_ENV = "RL_SWARM_ALLOCATOR"  # auto (jemalloc where installed, else glibc tamed) | glibc | jemalloc
JEMALLOC_PATHS = (
    "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2", "/usr/lib/aarch64-linux-gnu/libjemalloc.so.2",
    "/usr/lib64/libjemalloc.so.2", "/usr/lib/libjemalloc.so.2", "/usr/local/lib/libjemalloc.so.2",
)
JEMALLOC_CONF = "background_thread:true,dirty_decay_ms:2000,muzzy_decay_ms:0,narenas:2"
_MALLOPT = {"MALLOC_ARENA_MAX": -8}  # M_ARENA_MAX in glibc's malloc.h


def allocator_env(environ: Mapping[str, str] = os.environ,
                  exists: Callable[[str], bool] = os.path.isfile) -> dict[str, str]:
    """The variables that pick and tune the allocator of a node child: jemalloc where installed (Linux), else
    :data:`MALLOC_ENV`; see the module's docstring for the choice."""
    choice = environ.get(CHOICE_ENV, "auto").strip().lower()
    if choice != "glibc" and sys.platform.startswith("linux") and not environ.get("LD_PRELOAD"):
        library = next((path for path in JEMALLOC_PATHS if exists(path)), None)
        if library is not None:
            return {"LD_PRELOAD": library, "MALLOC_CONF": JEMALLOC_CONF}
        if choice == "jemalloc":
            log.warning("%s=jemalloc, but no libjemalloc.so.2 is installed: glibc's malloc is used", CHOICE_ENV)
    return dict(MALLOC_ENV)


def tame_heap() -> dict[str, int]:
    """Apply :data:`MALLOC_ENV` to this process with ``mallopt`` where glibc runs; return what was set."""
    libc = _glibc()
    if libc is None:
        return {}
    applied = {}
    for name, value in MALLOC_ENV.items():
        if name in os.environ:  # set before start: glibc already read it, and it is the user's choice
            continue
        if libc.mallopt(_MALLOPT[name], int(value)) == 1:
            applied[name] = int(value)
        else:
            log.warning("mallopt(%s=%s) was refused", name, value)
    return applied


def trim_heap() -> bool:
    """Hand the pages that are free inside glibc's heap back to the OS (``malloc_trim(0)``), once after a round.

    What stays resident is then what is in use: the next round faults its working set in once, where a fixed mmap
    threshold would fault in every large tensor it allocates. Returns whether it trimmed: a no-op (False) where
    glibc's malloc does not serve this process (macOS, musl, jemalloc or another malloc preloaded)."""
    libc = _glibc_malloc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True


@functools.cache
def _glibc_malloc():
    """libc where its malloc is the one this process allocates with, else None."""
    libc = _glibc()
    if libc is None or not hasattr(libc, "malloc_trim"):
        return None
    # A preloaded allocator (LD_PRELOAD) interposes malloc: the process-wide symbol is then not libc's own.
    process_malloc = ctypes.cast(ctypes.CDLL(None).malloc, ctypes.c_void_p).value
    if process_malloc != ctypes.cast(libc.malloc, ctypes.c_void_p).value:
        return None
    libc.malloc_trim.argtypes = (ctypes.c_size_t,)
    libc.malloc_trim.restype = ctypes.c_int
    return libc


def _glibc():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None
    if not hasattr(libc, "gnu_get_libc_version") or not hasattr(libc, "mallopt"):  # musl has no mallopt tuning
        return None
    libc.mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    libc.mallopt.restype = ctypes.c_int
    return libc
