"""The tray icon: training goes on with the window closed; open, pause/resume and quit from its menu."""

from __future__ import annotations

from PySide6.QtGui import QAction, QIcon
from PySide6.QtWidgets import QMenu, QSystemTrayIcon, QWidget

from app import status


class Tray(QSystemTrayIcon):
    def __init__(self, icon: QIcon, parent: QWidget) -> None:
        super().__init__(icon, parent)
        self.menu = QMenu(parent)
        self.open_action = QAction("Open RL Swarm", self.menu)
        self.pause_action = QAction("Pause training", self.menu)
        self.resume_action = QAction("Resume training", self.menu)
        self.quit_action = QAction("Quit (stops training)", self.menu)
        for action in (self.open_action, self.pause_action, self.resume_action):
            self.menu.addAction(action)
        self.menu.addSeparator()
        self.menu.addAction(self.quit_action)
        self.setContextMenu(self.menu)
        self.state, self.detail, self.round, self.reward = "stopped", "", None, None
        self._update()

    def set_state(self, state: str, detail: str, can_pause: bool, can_resume: bool) -> None:
        self.state, self.detail = state, detail
        self.pause_action.setEnabled(can_pause)
        self.resume_action.setEnabled(can_resume)
        self._update()

    def set_round(self, round_: int, reward: float) -> None:
        self.round, self.reward = round_, reward
        self._update()

    def _update(self) -> None:
        parts = ["RL Swarm", status.label(self.state)]
        if self.round is not None:
            parts.append(f"round {self.round}, reward {self.reward:.3f}")
        self.setToolTip(" · ".join(parts))

    def notify(self, title: str, message: str, critical: bool = False) -> None:
        if self.isVisible() and self.supportsMessages():
            icon = QSystemTrayIcon.MessageIcon.Critical if critical else QSystemTrayIcon.MessageIcon.Information
            self.showMessage(title, message, icon, 8000)
