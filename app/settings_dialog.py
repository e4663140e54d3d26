"""Settings: how much of the computer the node may use, when it trains, and where its data lives."""

from __future__ import annotations

from pathlib import Path

import psutil
from PySide6.QtWidgets import (
    QCheckBox, QDialog, QDialogButtonBox, QFileDialog, QFormLayout, QHBoxLayout, QLabel, QLineEdit, QPushButton,
    QSpinBox, QVBoxLayout, QWidget,
)

from node.config import NodeConfig
from node.errors import NodeError


class SettingsDialog(QDialog):
    """Edits a copy of the config; ``result_config`` is the validated new one after OK."""

    def __init__(self, config: NodeConfig, *, idle_supported: bool, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Settings")
        self.config = config
        self.result_config: NodeConfig | None = None
        self.wizard_requested = False
        cores = psutil.cpu_count(logical=False) or psutil.cpu_count() or 1

        self.threads = QSpinBox(minimum=0, maximum=max(1, psutil.cpu_count() or 1))
        self.threads.setSpecialValueText(f"automatic ({max(1, cores - 1)}: all cores but one)")
        self.threads.setValue(config.run.threads or 0)
        self.gpu_cap = QSpinBox(minimum=0, maximum=100, suffix=" %")
        self.gpu_cap.setSpecialValueText("no cap")
        self.gpu_cap.setValue(round((config.run.gpu_memory_fraction or 0) * 100))
        self.battery = QCheckBox("Pause while the computer runs on battery")
        self.battery.setChecked(config.desktop.pause_on_battery)
        self.active = QCheckBox("Pause while I use the computer; train when it has been idle for")
        self.active.setChecked(config.desktop.pause_when_user_active)
        self.idle = QSpinBox(minimum=1, maximum=240, suffix=" min")
        self.idle.setValue(config.desktop.idle_minutes)
        if not idle_supported:
            self.active.setEnabled(False)
            self.idle.setEnabled(False)
            self.active.setToolTip("This desktop does not report idle time to applications (e.g. Wayland)")
        self.login = QCheckBox("Start RL Swarm when I log in (in the tray)")
        self.login.setChecked(config.desktop.start_at_login)
        self.on_launch = QCheckBox("Start training when the app opens")
        self.on_launch.setChecked(config.desktop.start_training_on_launch)
        self.data_dir = QLineEdit(str(config.run.data_dir))
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        wizard = QPushButton("Run the setup wizard again…")
        wizard.setToolTip("Change identity, model or swarm")
        wizard.clicked.connect(self._wizard)
        self.error = QLabel("")
        self.error.setObjectName("settingsError")
        self.error.setWordWrap(True)
        self.error.setStyleSheet("color: #D55E00")

        form = QFormLayout()
        form.addRow("CPU threads", self.threads)
        form.addRow("GPU memory cap", self.gpu_cap)
        active_row = QHBoxLayout()
        active_row.addWidget(self.active)
        active_row.addWidget(self.idle)
        active_row.addStretch(1)
        form.addRow("When to train", self.battery)
        form.addRow("", _wrap(active_row))
        form.addRow("", self.on_launch)
        form.addRow("", self.login)
        data_row = QHBoxLayout()
        data_row.addWidget(self.data_dir, 1)
        data_row.addWidget(browse)
        form.addRow("Data folder", _wrap(data_row))
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(wizard)
        layout.addWidget(self.error)
        layout.addWidget(buttons)

    def _browse(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Data folder", self.data_dir.text())
        if folder:
            self.data_dir.setText(folder)

    def _wizard(self) -> None:
        self.wizard_requested = True
        self.reject()

    def accept(self) -> None:
        overrides = {
            "run": {"threads": self.threads.value() or None, "data_dir": Path(self.data_dir.text()).expanduser(),
                    "gpu_memory_fraction": self.gpu_cap.value() / 100 or None},
            "desktop": {"pause_on_battery": self.battery.isChecked(), "pause_when_user_active": self.active.isChecked(),
                        "idle_minutes": self.idle.value(), "start_at_login": self.login.isChecked(),
                        "start_training_on_launch": self.on_launch.isChecked()},
        }
        try:
            self.result_config = self.config.update(overrides)
        except NodeError as exc:
            self.error.setText(f"{exc.message}\n{exc.hint}")
            return
        super().accept()


def _wrap(layout) -> QWidget:
    widget = QWidget()
    layout.setContentsMargins(0, 0, 0, 0)
    widget.setLayout(layout)
    return widget
