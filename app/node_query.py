"""Asks the node CLI for facts (hardware, identity) in a child process.

The GUI process never imports torch or hivemind: that keeps it small and quick to start, and detecting CUDA can
take seconds. QProcess reports back through the event loop, so nothing blocks.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from PySide6.QtCore import QObject, QProcess

from node.launch import node_command


class NodeQuery(QObject):
    """Runs ``rl-swarm-node <args> --json`` and calls ``done(data)`` or ``failed(message)``."""

    def __init__(self, args: list[str], done: Callable[[dict], None], failed: Callable[[str], None],
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._done, self._failed = done, failed
        command = node_command(*args, "--json")
        self.process = QProcess(self)
        self.process.finished.connect(self._finished)
        self.process.errorOccurred.connect(self._error)
        self.process.start(command[0], command[1:])

    def _finished(self, code: int, status: QProcess.ExitStatus) -> None:
        out = bytes(self.process.readAllStandardOutput()).decode(errors="replace")
        err = bytes(self.process.readAllStandardError()).decode(errors="replace").strip()
        if code == 0 and status == QProcess.ExitStatus.NormalExit:
            try:
                self._done(json.loads(out))
                return
            except ValueError:
                err = f"unreadable answer: {out[:200]}"
        self._failed(err.splitlines()[-1] if err else f"exit status {code}")

    def _error(self, error: QProcess.ProcessError) -> None:
        if error == QProcess.ProcessError.FailedToStart:
            self._failed(f"could not start the node program ({self.process.program()})")
