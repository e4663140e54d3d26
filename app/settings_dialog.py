"""Settings: the model and round size (with the memory fit shown live), how much of the computer the node may use,
when it trains, and where its data lives."""

from __future__ import annotations

from pathlib import Path

import psutil
from PySide6.QtCore import Qt, QTime, Signal
from PySide6.QtWidgets import (
    QCheckBox, QComboBox, QDialog, QDialogButtonBox, QFileDialog, QFormLayout, QGroupBox, QHBoxLayout, QLabel,
    QLineEdit, QPushButton, QSpinBox, QTimeEdit, QVBoxLayout, QWidget,
)

from app import fit
from app.errors import ErrorLabel, Problem
from app.node_query import NodeQuery
from node.api import HardwareReport, default_threads
from node.config import NodeConfig
from node.errors import NodeError
from node.notify import (
    Notification, Webhook, check_webhook_url, describe_endpoint, forget_webhook, load_webhook, remember_webhook,
    webhook_stored,
)
from node.secret_store import node_store

HEAT_NEVER = 39  # the spin box's lowest value reads "never"; the lowest limit the config takes is 40 °C
SCHEDULE_DAYS = (("on weekdays", "mon-fri"), ("every day", "daily"), ("at weekends", "sat-sun"))
FIT_COLORS = {"fits": "#009E73", "tight": "#E69F00", "won't fit": "#D55E00", "unknown": "#7f7f7f"}


class SettingsDialog(QDialog):
    """Edits a copy of the config; ``result_config`` is the validated new one after OK. The webhook URL is a secret:
    OK writes it to the secret store, never to the config; ``webhook_changed`` says it was set or removed, and
    ``passphrase`` is the encrypted store's passphrase (the one given, or the one typed here) for the node to read it.
    """

    _webhookResult = Signal(bool)  # from the test notification's thread to the GUI thread

    def __init__(self, config: NodeConfig, *, idle_supported: bool, hardware: HardwareReport | dict | None = None,
                 passphrase: str | None = None, parent: QWidget | None = None) -> None:
        """``hardware`` is the node's ``hardware --json`` answer; without it the dialog asks the node itself.
        ``passphrase``: the encrypted secret store's, where the app holds it for the node."""
        super().__init__(parent)
        self.setWindowTitle("Settings")
        self.config = config
        self.result_config: NodeConfig | None = None
        self.passphrase = passphrase
        self.webhook_changed = False
        self.wizard_requested = False
        self.hardware: HardwareReport | None = None
        t = config.training

        self.model = QComboBox()
        self.model.setObjectName("settingsModel")
        self.model.addItem(t.model, t.model)
        self.questions = QSpinBox(minimum=1, maximum=64, value=t.local_questions)
        self.questions.setToolTip("I: questions this node asks its model each round")
        self.generations = QSpinBox(minimum=2, maximum=64, value=t.num_generations)
        self.generations.setToolTip("G: completions per question; more give more groups with reward spread, and "
                                    "cost memory and time")
        self.peer_groups = QSpinBox(minimum=0, maximum=64, value=t.external_groups)
        self.peer_groups.setToolTip("J: peers' groups trained on each round (0 trains alone)")
        self.max_tokens = QSpinBox(minimum=8, maximum=4096, value=t.max_new_tokens, singleStep=16)
        self.max_tokens.setToolTip("Longest completion in tokens; answers cut here score nothing")
        self.fit = QLabel("Checking this computer's memory…")
        self.fit.setObjectName("settingsFit")
        self.fit.setWordWrap(True)
        self.fit.setTextFormat(Qt.TextFormat.PlainText)
        for widget in (self.questions, self.generations, self.peer_groups, self.max_tokens):
            widget.valueChanged.connect(self.update_fit)
        self.model.currentIndexChanged.connect(self.update_fit)

        self.threads = QSpinBox(minimum=0, maximum=max(1, psutil.cpu_count() or 1))
        self.threads.setSpecialValueText(f"automatic ({default_threads()}: all cores but one)")
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
        # The schedule: the dialog edits the first profile; further ones (config file) are kept as they are
        profiles = config.schedule.profiles
        first = profiles[0] if profiles else None
        self.schedule_on = QCheckBox("Slow down or pause")
        self.schedule_on.setObjectName("settingsScheduleOn")
        self.schedule_on.setChecked(first is not None)
        self.schedule_days = QComboBox()
        for label, days in SCHEDULE_DAYS:
            self.schedule_days.addItem(label, days)
        if first is not None and self.schedule_days.findData(first.days) < 0:
            self.schedule_days.addItem(f"on {first.days}", first.days)
        self.schedule_days.setCurrentIndex(max(0, self.schedule_days.findData(first.days if first else "mon-fri")))
        self.schedule_start = QTimeEdit(_qtime(first.start if first else "09:00"), displayFormat="HH:mm")
        self.schedule_end = QTimeEdit(_qtime(first.end if first else "18:00"), displayFormat="HH:mm")
        self.schedule_threads = QSpinBox(minimum=0, maximum=max(1, psutil.cpu_count() or 1), suffix=" threads")
        self.schedule_threads.setSpecialValueText("paused")
        self.schedule_threads.valueChanged.connect(
            lambda n: self.schedule_threads.setSuffix(" thread" if n == 1 else " threads"))
        self.schedule_threads.setValue(2)  # a value other than the one set next, so the suffix follows it
        self.schedule_threads.setValue(0 if first is not None and first.paused else (first.threads if first else 1))
        self.schedule_note = QLabel(f"{len(profiles) - 1} more profile(s) from the config file are kept as they are"
                                    if len(profiles) > 1 else "")
        self.schedule_note.setObjectName("settingsScheduleNote")
        self.schedule_note.setVisible(len(profiles) > 1)
        for widget in (self.schedule_days, self.schedule_start, self.schedule_end, self.schedule_threads):
            widget.setEnabled(self.schedule_on.isChecked())
            self.schedule_on.toggled.connect(widget.setEnabled)
        self.heat_max = QSpinBox(minimum=HEAT_NEVER, maximum=120, suffix=" °C")
        self.heat_max.setObjectName("settingsHeatMax")
        self.heat_max.setSpecialValueText("never")
        self.heat_max.setValue(round(config.heat.max_celsius or HEAT_NEVER))
        self.heat_max.setToolTip("Above it the node uses one thread and pauses between rounds, until the computer "
                                 f"is {config.heat.max_celsius - config.heat.resume_celsius if config.heat.max_celsius else 10:g}"
                                 " °C cooler; only where the system lets programs read temperatures")
        self.webhook_url = QLineEdit()
        self.webhook_url.setObjectName("settingsWebhook")
        self.webhook_url.setEchoMode(QLineEdit.EchoMode.PasswordEchoOnEdit)  # such a URL often is the password
        self.webhook_remove = QPushButton("Remove")
        self.webhook_remove.setObjectName("settingsWebhookRemove")
        self.webhook_remove.clicked.connect(self._remove_webhook)
        self._webhook_removed = False
        self.webhook_passphrase = QLineEdit(placeholderText="passphrase of the encrypted secret store")
        self.webhook_passphrase.setObjectName("settingsWebhookPassphrase")
        self.webhook_passphrase.setEchoMode(QLineEdit.EchoMode.Password)
        self.webhook_note = QLabel()
        self.webhook_note.setObjectName("settingsWebhookNote")
        self.webhook_note.setWordWrap(True)
        self._show_webhook()
        self.no_peers = QSpinBox(minimum=0, maximum=100_000, suffix=" rounds", value=config.notify.no_peers_rounds)
        self.no_peers.setSpecialValueText("never")
        self.webhook_test = QPushButton("Send a test notification")
        self.webhook_test.setObjectName("settingsWebhookTest")
        self.webhook_test.clicked.connect(self._test_webhook)
        self.webhook_status = QLabel("")
        self.webhook_status.setObjectName("settingsWebhookStatus")
        self._webhookResult.connect(self._webhook_tested)
        self.error = ErrorLabel()
        self.error.setObjectName("settingsError")

        model_box = QGroupBox("Model and round size (apply when the node starts again)")
        model_form = QFormLayout(model_box)
        model_form.addRow("Model", self.model)
        shape = QHBoxLayout()
        for label, spin in (("questions", self.questions), ("× completions", self.generations),
                            ("+ peer groups", self.peer_groups), ("max tokens", self.max_tokens)):
            shape.addWidget(spin)
            shape.addWidget(QLabel(label))
        shape.addStretch(1)
        model_form.addRow("Each round", _wrap(shape))
        model_form.addRow("Memory", self.fit)
        form = QFormLayout()
        form.addRow("CPU threads", self.threads)
        form.addRow("GPU memory cap", self.gpu_cap)
        self.gpu_cap_label = form.labelForField(self.gpu_cap)
        self._show_gpu_cap(False)  # until the node says there is a GPU
        active_row = QHBoxLayout()
        active_row.addWidget(self.active)
        active_row.addWidget(self.idle)
        active_row.addStretch(1)
        form.addRow("When to train", self.battery)
        form.addRow("", _wrap(active_row))
        form.addRow("", self.on_launch)
        form.addRow("", self.login)
        schedule_row = QHBoxLayout()
        for widget in (self.schedule_on, self.schedule_days, QLabel("from"), self.schedule_start, QLabel("to"),
                       self.schedule_end, QLabel("use"), self.schedule_threads):
            schedule_row.addWidget(widget)
        schedule_row.addStretch(1)
        form.addRow("Schedule", _wrap(schedule_row))
        form.addRow("", self.schedule_note)
        form.addRow("Slow down above", self.heat_max)
        data_row = QHBoxLayout()
        data_row.addWidget(self.data_dir, 1)
        data_row.addWidget(browse)
        form.addRow("Data folder", _wrap(data_row))
        notify_box = QGroupBox("Notifications on your phone or chat, when the node stops, keeps crashing, sees no "
                               "peers, or finished an upload")
        notify_form = QFormLayout(notify_box)
        webhook_row = QHBoxLayout()
        webhook_row.addWidget(self.webhook_url, 1)
        webhook_row.addWidget(self.webhook_remove)
        notify_form.addRow("Webhook URL", _wrap(webhook_row))
        notify_form.addRow("Passphrase", self.webhook_passphrase)
        # Without an OS keyring the URL is sealed with the store's passphrase: asked here unless the app holds it
        notify_form.setRowVisible(self.webhook_passphrase, self._file_store and not passphrase)
        notify_form.addRow("", self.webhook_note)
        notify_form.addRow("No peers for", self.no_peers)
        test_row = QHBoxLayout()
        test_row.addWidget(self.webhook_test)
        test_row.addWidget(self.webhook_status, 1)
        notify_form.addRow("", _wrap(test_row))
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(model_box)
        layout.addLayout(form)
        layout.addWidget(notify_box)
        layout.addWidget(wizard)
        layout.addWidget(self.error)
        layout.addWidget(buttons)

        if hardware is not None:
            self.set_hardware(hardware)
        else:
            self.query = NodeQuery(["hardware"], self.set_hardware, self._hardware_failed, self)

    def set_hardware(self, data: HardwareReport | dict) -> None:
        if isinstance(data, dict):
            try:
                data = HardwareReport.from_json(data)
            except NodeError as exc:
                self._hardware_failed(Problem.of(exc).text())
                return
        self.hardware = data
        current = self.model.currentData()
        self.model.blockSignals(True)
        self.model.clear()
        for model in data.models:
            self.model.addItem(model.name, model.id)
        if self.model.findData(current) < 0:
            self.model.addItem(current, current)  # a Hub id or local folder of the user's own
        self.model.setCurrentIndex(self.model.findData(current))
        self.model.blockSignals(False)
        self._show_gpu_cap(data.kind == "cuda")
        self.update_fit()

    def _hardware_failed(self, message: str) -> None:
        self.fit.setText("The memory check is not available; the node checks again when it starts.")
        self.fit.setToolTip(message)

    def _show_gpu_cap(self, shown: bool) -> None:
        self.gpu_cap.setVisible(shown)
        if self.gpu_cap_label is not None:
            self.gpu_cap_label.setVisible(shown)

    def sequences_per_pass(self) -> int:
        micro = self.config.training.micro_batch_groups
        groups = micro or self.questions.value() + self.peer_groups.value()
        return groups * self.generations.value()

    def update_fit(self) -> str:
        """Show whether the chosen model and round size fit this computer; returns the label."""
        model = self.hardware.model(self.model.currentData()) if self.hardware else None
        if model is None:
            if self.hardware is not None:
                self.fit.setText("Not in the catalog: the node checks the memory when it loads the model.")
            return "unknown"
        verdict, text = fit.describe(model, self.hardware.hardware, sequences_per_pass=self.sequences_per_pass(),
                                     max_new_tokens=self.max_tokens.value(), reference=self.starting_copy())
        if verdict == "won't fit":
            text += " " + self._what_fits(model)
        elif self.error.problem is not None and self.error.problem.details.startswith("Needs about"):
            self.error.clear()  # the setup OK refused fits now
        self.fit.setText(text)
        # Amber while free RAM is short right now, even where the computer's total memory is enough.
        color = FIT_COLORS["tight"] if verdict == "fits" and "close other programs" in text else FIT_COLORS[verdict]
        self.fit.setStyleSheet(f"QLabel#settingsFit {{ color: {color}; }}")
        return verdict

    def _what_fits(self, model) -> str:
        return fit.what_fits(model, self.hardware.models, self.hardware.hardware,
                             groups_per_pass=self.sequences_per_pass() // self.generations.value(),
                             generations=self.generations.value(), max_new_tokens=self.max_tokens.value(),
                             reference=self.starting_copy())

    def starting_copy(self) -> bool:
        """Whether the run keeps a copy of its starting weights (node.config.TrainingSettings.starting_copy)."""
        return bool(self.config.training.starting_copy)

    def _browse(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Data folder", self.data_dir.text())
        if folder:
            self.data_dir.setText(folder)

    def _show_webhook(self) -> None:
        """Say whether a webhook is set (its host only, where the store can be read without asking) and where its URL
        is kept; the URL itself is never shown."""
        data_dir = self.config.run.data_dir
        self._file_store = node_store(data_dir).backend == "file"
        stored = webhook_stored(data_dir) and not self._webhook_removed
        self.webhook_remove.setEnabled(stored)
        where = ("This computer has no OS keyring: the URL is kept encrypted with the secret store's passphrase"
                 if self._file_store else "The URL is kept in the OS keyring") + ", never in a file in plain text."
        host = ""
        if stored and (not self._file_store or self.passphrase):
            try:
                host = f" ({describe_endpoint(load_webhook(data_dir, self.passphrase) or '')})"
            except NodeError:
                pass
        if stored:
            state = f"A webhook is set{host}."
        elif self._webhook_removed:
            state = "The webhook is removed when you press OK."
        else:
            state = "No webhook is set."
        self.webhook_url.setPlaceholderText(f"a webhook is set{host}: paste a URL to replace it" if stored else
                                            "https://ntfy.sh/your-topic, a Discord or Slack webhook URL… (optional)")
        self.webhook_note.setText(f"{state} {where}")

    def _remove_webhook(self) -> None:
        self._webhook_removed = True
        self.webhook_url.clear()
        self._show_webhook()

    def _store_passphrase(self) -> str | None:
        return self.passphrase or self.webhook_passphrase.text() or None

    def _save_webhook(self, data_dir: Path) -> None:
        """Write what the user did to the webhook into the secret store: a URL pasted, or Remove pressed."""
        url = self.webhook_url.text().strip()
        if url:
            remember_webhook(data_dir, url, self._store_passphrase())
        elif self._webhook_removed:
            forget_webhook(data_dir)
        else:
            return
        self.webhook_changed = True
        if self._file_store:
            self.passphrase = self._store_passphrase()

    def _test_webhook(self) -> None:
        self.error.clear()
        try:
            if self.webhook_url.text().strip():
                url = check_webhook_url(self.webhook_url.text())
            elif self._webhook_removed:
                url = None
            else:
                url = load_webhook(self.config.run.data_dir, self._store_passphrase())
        except NodeError as exc:
            self.error.show_problem(_problem(exc))
            return
        if url is None:
            self.webhook_status.setText("Paste a webhook URL first.")
            return
        self.webhook_test.setEnabled(False)
        self.webhook_status.setText("Sending…")
        hook = Webhook(url, retries=0, on_result=lambda _n, delivered: self._webhookResult.emit(delivered))
        hook.send(Notification(kind="test", title="RL Swarm test notification",
                               message="notifications from this computer arrive here"))
        hook.close(timeout_s=0)  # the thread ends after this one; the dialog never waits for it

    def _webhook_tested(self, delivered: bool) -> None:
        self.webhook_test.setEnabled(True)
        self.webhook_status.setText("Delivered." if delivered else
                                    "Not delivered: check the URL (the Logs tab says what the endpoint answered).")

    def _profiles(self) -> list[dict]:
        kept = [p.model_dump() for p in self.config.schedule.profiles[1:]]
        if not self.schedule_on.isChecked():
            return kept
        threads = self.schedule_threads.value()
        edited = {"days": self.schedule_days.currentData(), "start": self.schedule_start.time().toString("HH:mm"),
                  "end": self.schedule_end.time().toString("HH:mm"), "threads": threads or None,
                  "paused": threads == 0}
        return [edited, *kept]

    def _heat(self) -> dict:
        heat = self.config.heat
        if self.heat_max.value() == HEAT_NEVER:
            return {"max_celsius": None}
        gap = heat.max_celsius - heat.resume_celsius if heat.max_celsius is not None else 10.0
        return {"max_celsius": float(self.heat_max.value()),
                "resume_celsius": max(30.0, self.heat_max.value() - gap)}

    def _wizard(self) -> None:
        self.wizard_requested = True
        self.reject()

    def accept(self) -> None:
        if self.update_fit() == "won't fit":  # the node would refuse it at start: saved, it only fails later
            model = self.hardware.model(self.model.currentData())
            self.error.show_problem(Problem(
                "This model and round size do not fit in this computer's memory, so the node would not start.",
                self._what_fits(model), self.fit.text()))
            return
        overrides = {
            "training": {"model": self.model.currentData(), "local_questions": self.questions.value(),
                         "num_generations": self.generations.value(), "external_groups": self.peer_groups.value(),
                         "max_new_tokens": self.max_tokens.value()},
            "run": {"threads": self.threads.value() or None, "data_dir": Path(self.data_dir.text()).expanduser(),
                    "gpu_memory_fraction": self.gpu_cap.value() / 100 or None},
            "desktop": {"pause_on_battery": self.battery.isChecked(), "pause_when_user_active": self.active.isChecked(),
                        "idle_minutes": self.idle.value(), "start_at_login": self.login.isChecked(),
                        "start_training_on_launch": self.on_launch.isChecked()},
            "notify": {"no_peers_rounds": self.no_peers.value()},
            "schedule": {"profiles": self._profiles()},
            "heat": self._heat(),
        }
        try:
            config = self.config.update(overrides)
            self._save_webhook(config.run.data_dir)  # where the node of the new config reads it
        except NodeError as exc:
            self.error.show_problem(_problem(exc))
            return
        self.result_config = config
        super().accept()


def _problem(exc: NodeError) -> Problem:
    if exc.code == "locked":  # the dialog has its own field for the passphrase
        return Problem("The webhook URL is kept in the encrypted secret store, which needs its passphrase.",
                       "Enter the secret store's passphrase next to Passphrase, then try again.", exc.message)
    return Problem.of(exc)


def _qtime(text: str) -> QTime:
    hours, minutes = (int(part) for part in text.split(":"))
    return QTime(hours % 24, minutes)  # 24:00, the end of the day, shows as 00:00 (the same moment)


def _wrap(layout) -> QWidget:
    widget = QWidget()
    layout.setContentsMargins(0, 0, 0, 0)
    widget.setLayout(layout)
    return widget
