"""An unexpected exception in a Qt slot or a worker thread is logged and shown with "Copy diagnostics"; the app
goes on running."""

from __future__ import annotations

import logging
import threading

import pytest
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QPushButton

from app.crash_dialog import ExceptionDialogs


@pytest.fixture
def dialogs():
    hook = ExceptionDialogs(lambda: "## node stderr (last lines)\nround 3 finished").install()
    yield hook
    hook.uninstall()
    if hook.box is not None:
        hook.box.close()


@pytest.mark.qt_no_exception_capture
def test_an_exception_in_a_slot_is_logged_and_shown_with_copy_diagnostics(qtbot, dialogs, caplog):
    caplog.set_level(logging.ERROR, logger="app.crash")

    def broken_slot() -> None:
        raise ZeroDivisionError("the dashboard divided by zero")

    QTimer.singleShot(0, broken_slot)
    qtbot.waitUntil(lambda: dialogs.box is not None and dialogs.box.isVisible(), timeout=10_000)
    box = dialogs.box
    assert box.objectName() == "unexpectedErrorBox"
    assert "ZeroDivisionError: the dashboard divided by zero" in dialogs.details()
    assert any("the dashboard divided by zero" in record.getMessage() for record in caplog.records)
    copy = box.findChild(QPushButton, "copyDiagnostics")
    assert copy.text() == "Copy diagnostics"
    copy.click()
    clipboard = QApplication.clipboard().text()
    assert "ZeroDivisionError" in clipboard and "round 3 finished" in clipboard
    assert box.isVisible()  # copying does not close the dialog

    QTimer.singleShot(0, broken_slot)  # a second failure while the dialog is open does not stack another
    qtbot.waitUntil(lambda: dialogs.suppressed == 1, timeout=10_000)


@pytest.mark.qt_no_exception_capture
def test_an_exception_in_a_worker_thread_reaches_the_dialog(qtbot, dialogs):
    def work() -> None:
        raise RuntimeError("the upload worker failed")

    thread = threading.Thread(target=work, name="worker")
    thread.start()
    thread.join()
    qtbot.waitUntil(lambda: dialogs.box is not None and dialogs.box.isVisible(), timeout=10_000)
    assert "in thread worker" in dialogs.details() and "the upload worker failed" in dialogs.details()
