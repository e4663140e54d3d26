"""An unexpected exception in the GUI: logged with its traceback, then shown in a dialog with "Copy diagnostics",
and the app goes on running.

Without this hook an exception raised in a Qt slot is printed to a terminal nobody watches (or, from a frozen
bundle, nowhere) and the user only sees a control that silently did nothing. Exceptions in worker threads are
logged the same way and shown once the GUI thread gets to them.
"""

from __future__ import annotations

import logging
import sys
import threading
import traceback
from collections.abc import Callable

from PySide6.QtCore import QObject, Signal
from PySide6.QtWidgets import QApplication, QDialog, QDialogButtonBox, QLabel, QPlainTextEdit, QVBoxLayout

log = logging.getLogger("app.crash")


class _Relay(QObject):
    """Carries a report from any thread to the GUI thread (a queued signal)."""

    report = Signal(str)


class ExceptionDialogs:
    """Installed once per app; keeps at most one dialog open (a failing timer would otherwise stack hundreds)."""

    def __init__(self, diagnostics: Callable[[], str] | None = None) -> None:
        self.diagnostics = diagnostics or (lambda: "")
        self.box: QDialog | None = None
        self.suppressed = 0
        self._relay = _Relay()
        self._relay.report.connect(self.show)
        self._previous = sys.excepthook, threading.excepthook

    def install(self) -> ExceptionDialogs:
        sys.excepthook = self._sys_hook
        threading.excepthook = self._thread_hook
        return self

    def uninstall(self) -> None:
        sys.excepthook, threading.excepthook = self._previous

    def _sys_hook(self, exc_type, exc, tb) -> None:
        if issubclass(exc_type, KeyboardInterrupt):
            self._previous[0](exc_type, exc, tb)
            return
        self._report("".join(traceback.format_exception(exc_type, exc, tb)))

    def _thread_hook(self, args: threading.ExceptHookArgs) -> None:
        if args.exc_type is SystemExit:
            return
        where = f"in thread {args.thread.name if args.thread else '?'}\n"
        self._report(where + "".join(traceback.format_exception(args.exc_type, args.exc_value, args.exc_traceback)))

    def _report(self, text: str) -> None:
        log.error("unexpected exception in the app\n%s", text.rstrip())
        self._relay.report.emit(text)  # queued when raised off the GUI thread

    def show(self, text: str) -> None:
        if self.box is not None and self.box.isVisible():
            self.suppressed += 1
            return
        box = QDialog()
        box.setObjectName("unexpectedErrorBox")
        box.setWindowTitle("RL Swarm")
        summary = QLabel("<b>Something unexpected went wrong in the app.</b>")
        advice = QLabel("Training in the node goes on. If this keeps happening, copy the diagnostics into a bug "
                        "report; the details are in the app's log too.")
        advice.setWordWrap(True)
        details = QPlainTextEdit(text)
        details.setObjectName("errorDetails")
        details.setReadOnly(True)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close)
        copy = buttons.addButton("Copy diagnostics", QDialogButtonBox.ButtonRole.ActionRole)
        copy.setObjectName("copyDiagnostics")
        copy.clicked.connect(lambda: self.copy(text))
        buttons.rejected.connect(box.close)
        layout = QVBoxLayout(box)
        for widget in (summary, advice, details, buttons):
            layout.addWidget(widget)
        box.resize(640, 420)
        box.show()
        self.box = box

    def details(self) -> str:
        return self.box.findChild(QPlainTextEdit, "errorDetails").toPlainText() if self.box else ""

    def copy(self, text: str) -> str:
        try:
            extra = self.diagnostics()
        except Exception as exc:  # the diagnostics themselves must not raise into the hook
            extra = f"(diagnostics unavailable: {exc})"
        report = f"## unexpected exception\n{text.rstrip()}\n\n{extra}".rstrip() + "\n"
        QApplication.clipboard().setText(report)
        return report
