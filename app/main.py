"""Entry point of ``rl-swarm`` (and of the frozen bundle).

Arguments that need no screen are handled before Qt is imported, so a bundle can run its node and self-test on a
headless server.
"""

from __future__ import annotations

import sys

from node.launch import FROZEN_NODE_ARG


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == [FROZEN_NODE_ARG]:
        from node.cli.main import main as node_main

        return node_main(argv[1:])
    if "--self-test" in argv:
        from node.cli.selftest import run_self_test

        return run_self_test()
    from app.qt_libraries import warn_if_missing

    warn_if_missing()
    try:
        from app.gui import run_app
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] in ("PySide6", "pyqtgraph", "shiboken6"):
            print(f"The desktop app needs the 'gui' extra ({exc.name} is not installed): "
                  "pip install 'rl-swarm-desktop[gui]', or `bash installers/setup.sh`. "
                  "A headless server runs the node alone: rl-swarm-node run.", file=sys.stderr)
            return 2
        raise
    return run_app(argv)
