"""Blocking calls (network, key derivation) off the GUI thread, reporting back through queued signals."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from PySide6.QtCore import QObject, Signal

from node.errors import NodeError

log = logging.getLogger(__name__)


class Worker(QObject):
    done = Signal(object)
    failed = Signal(object)  # the exception: a NodeError, or an unexpected one

    def run(self, call: Callable[[], object], name: str = "app-worker") -> None:
        def work() -> None:
            try:
                self.done.emit(call())
            except NodeError as exc:
                self.failed.emit(exc)
            except Exception as exc:  # noqa: BLE001 - shown to the user instead of dying in a thread
                log.exception("%s failed", name)
                self.failed.emit(exc)  # app.errors.Problem.of says it in one sentence, the exception in the details

        threading.Thread(target=work, name=name, daemon=True).start()
