"""Quitting while the node works: say what the app waits for, and after a few seconds offer to stop at once."""

from __future__ import annotations

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QProgressBar, QPushButton, QVBoxLayout, QWidget

STOP_NOW_AFTER_MS = 4000


class QuitDialog(QDialog):
    stopNow = Signal()

    def __init__(self, parent: QWidget | None = None, *, stop_now_after_ms: int = STOP_NOW_AFTER_MS) -> None:
        super().__init__(parent)
        self.setObjectName("quitDialog")
        self.setWindowTitle("Quitting RL Swarm")
        self.setModal(False)
        self.text = QLabel("")
        self.text.setWordWrap(True)
        self.text.setTextFormat(Qt.TextFormat.PlainText)
        self.text.setMinimumWidth(460)
        busy = QProgressBar()
        busy.setRange(0, 0)
        busy.setTextVisible(False)
        self.hint = QLabel("Stopping now loses the round in progress; the last checkpoint stays.")
        self.hint.setWordWrap(True)
        self.hint.setMinimumWidth(460)
        self.hint.hide()
        self.stop_now = QPushButton("Stop now")
        self.stop_now.setObjectName("stopNow")
        self.stop_now.clicked.connect(self._stop_now)
        buttons = QDialogButtonBox()
        buttons.addButton(self.stop_now, QDialogButtonBox.ButtonRole.DestructiveRole)
        self.stop_now.hide()  # offered after a few seconds: most stops take less
        layout = QVBoxLayout(self)
        layout.addWidget(self.text)
        layout.addWidget(busy)
        layout.addWidget(self.hint)
        layout.addWidget(buttons)
        self.set_waiting_for("")
        QTimer.singleShot(stop_now_after_ms, self, self._offer_stop_now)

    def set_waiting_for(self, step: str) -> None:
        doing = f" It is at: {step}." if step else ""
        self.text.setText("Waiting for the node to finish its current step and save a checkpoint, then the app "
                          f"closes.{doing}")
        self._fit()

    def _offer_stop_now(self) -> None:
        self.stop_now.show()
        self.hint.show()
        self._fit()

    def _fit(self) -> None:
        """Word-wrapped labels get the height their text needs (Qt sizes a dialog before it knows the text)."""
        for label in (self.text, self.hint):
            label.setMinimumHeight(label.heightForWidth(label.minimumWidth()))
        self.adjustSize()

    def _stop_now(self) -> None:
        self.stop_now.setEnabled(False)
        self.text.setText("Stopping the node now…")
        self._fit()
        self.stopNow.emit()

    def reject(self) -> None:  # Escape or the close button: quitting goes on, only the window is hidden
        self.hide()
