"""Blocking calls (network, key derivation) off the GUI thread, reporting back through queued signals."""

from __future__ import annotations

import threading
from collections.abc import Callable

from PySide6.QtCore import QObject, Signal

from node.errors import NodeError


class Worker(QObject):
    done = Signal(object)
    failed = Signal(object)  # a NodeError

    def run(self, call: Callable[[], object], name: str = "app-worker") -> None:
        def work() -> None:
            try:
                self.done.emit(call())
            except NodeError as exc:
                self.failed.emit(exc)
            except Exception as exc:  # noqa: BLE001 - shown to the user instead of dying in a thread
                self.failed.emit(NodeError(f"{type(exc).__name__}: {exc}", hint="see the Logs tab"))

        threading.Thread(target=work, name=name, daemon=True).start()
