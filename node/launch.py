"""How to start a node process: from a Python environment, from inside a frozen (PyInstaller) bundle, or on
Windows inside WSL2.

The app and the demo never hard-code ``python -m node``: a frozen bundle has no interpreter to run ``-m`` with,
so its own executable takes ``node ...`` as its first arguments and dispatches to the node CLI. On Windows the
node cannot run natively (hivemind's p2p daemon has no Windows build), so the command runs the Linux bundle
inside WSL2 (see :mod:`node.platform_support`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import psutil

FROZEN_NODE_ARG = "node"


def is_frozen() -> bool:
    return bool(getattr(sys, "frozen", False))


def node_command(*args: str) -> list[str]:
    """The argv that runs ``rl-swarm-node <args>`` in a child process."""
    if sys.platform == "win32":
        from node.platform_support import wsl_node_command

        return wsl_node_command(args)
    if is_frozen():
        return [sys.executable, FROZEN_NODE_ARG, *args]
    return [sys.executable, "-m", "node", *args]


def popen_options() -> dict:
    """Extra ``subprocess.Popen`` arguments for a node child: its own process group (a terminal's Ctrl-C reaches
    only the parent, which stops the node in order), and on Windows no console window flashing up for wsl.exe."""
    if sys.platform == "win32":
        return {"creationflags": subprocess.CREATE_NO_WINDOW | subprocess.CREATE_NEW_PROCESS_GROUP}
    return {"start_new_session": True}


def node_environment() -> dict[str, str]:
    """The environment of a node child: ours, with jemalloc or glibc's malloc tamed (see :mod:`node.allocator`)
    unless the user set those variables.

    Without it the heap fragments: RSS grows by gigabytes per round and torch's threads each grow an arena.
    """
    from node.allocator import allocator_env

    return {**allocator_env(), **os.environ}


def kill_tree(pid: int) -> None:
    """SIGKILL a node and its p2p daemon: a killed parent cannot take its children down, they would be orphans."""
    try:
        parent = psutil.Process(pid)
        family = [*parent.children(recursive=True), parent]
    except psutil.NoSuchProcess:
        return
    for process in family:
        try:
            sockets = _unix_listen_paths(process.cmdline())
            process.kill()
        except psutil.NoSuchProcess:
            continue
        # a SIGKILLed p2pd cannot remove its control socket, and its node no longer can either: one stale file in
        # the temp folder per killed node, for ever
        for path in sockets:
            path.unlink(missing_ok=True)


def _unix_listen_paths(argv: list[str]) -> list[Path]:
    """The unix sockets a p2pd command line listens on (``-listen=/unix/tmp/hivemind-p2pd-....sock``)."""
    prefix = "-listen=/unix"
    return [Path(arg.removeprefix(prefix)) for arg in argv if arg.startswith(prefix + "/")]
