"""How to start a node process: from a Python environment or from inside a frozen (PyInstaller) bundle.

The app and the demo never hard-code ``python -m node``: a frozen bundle has no interpreter to run ``-m`` with,
so its own executable takes ``node ...`` as its first arguments and dispatches to the node CLI.
"""

from __future__ import annotations

import sys

FROZEN_NODE_ARG = "node"


def is_frozen() -> bool:
    return bool(getattr(sys, "frozen", False))


def node_command(*args: str) -> list[str]:
    """The argv that runs ``rl-swarm-node <args>`` in a child process."""
    if is_frozen():
        return [sys.executable, FROZEN_NODE_ARG, *args]
    return [sys.executable, "-m", "node", *args]
