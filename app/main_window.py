"""The main window: header, dashboard, gossip and logs, the controls, and the tray that outlives the window."""

from __future__ import annotations

import json
import logging
import platform
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QSettings, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QCloseEvent, QIcon, QKeySequence
from PySide6.QtWidgets import (
    QApplication, QLabel, QMainWindow, QMessageBox, QPushButton, QSystemTrayIcon, QTabWidget, QToolBar, QVBoxLayout,
    QWidget,
)

from app import autostart, status
from app.account_page import AccountPage
from app.dashboard import Dashboard
from app.elided_label import ElidedLabel
from app.errors import Problem, error_dialog, sentence
from app.fleet import FleetView, LocalControls
from app.gossip import GossipView
from app.header import StatusHeader
from app.hub_panel import HubPanel
from app.logs_panel import LogsPanel, environment_report
from app.policies import PausePolicies
from app.quit_dialog import QuitDialog
from app.settings_dialog import SettingsDialog
from app.supervisor import NodeSupervisor
from app.tray import Tray
from app.worker import Worker
from node.api import HardwareReport
from node.config import NodeConfig
from node.errors import NodeError
from node.events import (
    CheckpointSaved, EvalFinished, Event, ErrorReported, NodeStarted, PeerJoined, PeerLeft, ReachabilityChanged,
    RolloutSample, RoundFinished,
    RoundProgress, UploadFailed, UploadFinished, ResourceLimitChanged, TemperaturesRead,
)
from node.hub.auth import PASSPHRASE_ENV
from node.logs import LOG_FILE
from node.notify import NotificationRules, Webhook, load_webhook
from node.platform_support import check_platform, install_wsl_node
from node.runstore import RunStore
from node.swarm import admission as swarm_secret

log = logging.getLogger(__name__)
GOSSIP_HISTORY = 300


class MainWindow(QMainWindow):
    wizardRequested = Signal()
    quitFinished = Signal()

    def __init__(self, config: NodeConfig, config_path: Path, supervisor: NodeSupervisor, icon: QIcon,
                 app_log: Path, policies: PausePolicies | None = None, tray: bool | None = None) -> None:
        super().__init__()
        self.config = config
        self.config_path = config_path
        self.supervisor = supervisor
        self.app_log = app_log
        self.started: NodeStarted | None = None
        self.quitting = False
        self._quit_done = False
        self.prefs = QSettings()
        self.setWindowTitle("RL Swarm")
        self.setWindowIcon(icon)
        self.resize(1180, 820)

        self.header = StatusHeader()
        self.dashboard = Dashboard()
        self.gossip = GossipView()
        self.logs = LogsPanel(self.diagnostics)
        self.hub = HubPanel(config, config_path)
        self.hub.settingsChanged.connect(self.apply_config)
        self.hub.uploadFinished.connect(self._upload_finished)
        self.hub.uploadFailed.connect(self._upload_failed)
        self.hub.before_upload = self._checkpoint_before_upload
        self._after_checkpoint: Callable[[], None] | None = None
        # Automatic uploads run in the node: it needs the passphrase too (environment only, never a file).
        self.hub.unlocked.connect(lambda passphrase: supervisor.environment.update({PASSPHRASE_ENV: passphrase}))
        self.tabs = QTabWidget()
        self.tabs.addTab(self.dashboard, "Dashboard")
        self.tabs.addTab(self.gossip, "Gossip")
        self.account = AccountPage(config)
        self.tabs.addTab(self.account, "Account")
        self.tabs.addTab(self.hub, "Hugging Face")
        self.tabs.addTab(self.logs, "Logs")
        self.fleet = FleetView(config)  # this computer's node and the remote ones, over SSH
        self.fleet.configChanged.connect(self.apply_config)
        self.tabs.addTab(self.fleet, "Fleet")
        central = QWidget()
        layout = QVBoxLayout(central)
        self.platform_banner = QLabel()
        self.platform_banner.setObjectName("platformBanner")
        self.platform_banner.setWordWrap(True)
        self.platform_banner.setStyleSheet("QLabel#platformBanner { background: #D55E00; color: white; padding: 8px; }")
        self.install_node_button = QPushButton("Install the node in WSL")
        self.install_node_button.clicked.connect(self.install_wsl_node)
        self._show_platform()
        self.installer = Worker()
        self.installer.done.connect(lambda _: self.recheck_platform())
        self.installer.failed.connect(lambda exc: self.platform_banner.setText(Problem.of(exc).text()))
        layout.addWidget(self.platform_banner)
        layout.addWidget(self.install_node_button)
        layout.addWidget(self.header)
        layout.addWidget(self.tabs, 1)
        self.setCentralWidget(central)

        toolbar = QToolBar("Controls")
        toolbar.setObjectName("controls")
        toolbar.setMovable(False)
        toolbar.setToolButtonStyle(Qt.ToolButtonStyle.ToolButtonTextBesideIcon)
        self.start_action = QAction("Start", self, toolTip="Start the node and join the swarm")
        self.pause_action = QAction("Pause", self, toolTip="Finish the current round, then hold")
        self.resume_action = QAction("Resume", self)
        self.stop_action = QAction("Stop", self, toolTip="Finish the current step, save a checkpoint and leave the swarm")
        self.settings_action = QAction("Settings", self, shortcut=QKeySequence.StandardKey.Preferences)
        self.quit_action = QAction("Quit", self, shortcut=QKeySequence.StandardKey.Quit)
        for action in (self.start_action, self.pause_action, self.resume_action, self.stop_action):
            toolbar.addAction(action)
        toolbar.addSeparator()
        toolbar.addAction(self.settings_action)
        self.addToolBar(toolbar)
        menu = self.menuBar().addMenu("&File")
        for action in (self.start_action, self.pause_action, self.resume_action, self.stop_action):
            menu.addAction(action)
        menu.addSeparator()
        menu.addAction(self.settings_action)
        menu.addSeparator()
        menu.addAction(self.quit_action)
        self.quit_dialog: QuitDialog | None = None
        self.hardware_data: HardwareReport | None = None  # the node's `hardware --json` answer, once Settings asked for it
        self.start_action.triggered.connect(self.start_node)
        self.pause_action.triggered.connect(supervisor.pause)
        self.resume_action.triggered.connect(supervisor.resume)
        self.stop_action.triggered.connect(supervisor.stop)
        self.settings_action.triggered.connect(self.open_settings)
        self.quit_action.triggered.connect(self.quit)
        self.status_label = ElidedLabel()  # the node's state in full can be long: cut, never widens the window
        self.statusBar().addWidget(self.status_label, 1)

        self.tray: Tray | None = None
        if QSystemTrayIcon.isSystemTrayAvailable() if tray is None else tray:
            self.tray = Tray(icon, self)
            self.tray.open_action.triggered.connect(self.show_window)
            self.tray.pause_action.triggered.connect(supervisor.pause)
            self.tray.resume_action.triggered.connect(supervisor.resume)
            self.tray.quit_action.triggered.connect(self.quit)
            self.tray.activated.connect(
                lambda reason: self.show_window() if reason == QSystemTrayIcon.ActivationReason.Trigger else None)
            self.tray.show()

        self.policies = policies or PausePolicies(config.desktop)
        self.policies.hold.connect(supervisor.hold)
        supervisor.event.connect(self.on_event)
        supervisor.stateChanged.connect(self.on_state)
        supervisor.crashed.connect(self.on_crash)
        supervisor.gaveUp.connect(self.on_gave_up)
        self.fleet.add_local(platform.node() or "this computer", LocalControls(
            self.start_node, supervisor.pause, supervisor.resume, supervisor.stop,
            lambda: self.config.run_dir / LOG_FILE), supervisor.state, [], [])
        supervisor.event.connect(self.fleet.local_event)
        supervisor.stateChanged.connect(self.fleet.local_state)
        self.load_run_history()
        self.on_state(supervisor.state, supervisor.detail)

    # -- node ----------------------------------------------------------------------------------------------

    def install_wsl_node(self) -> None:
        """Windows: unpack the Linux node shipped with the app into WSL2 (about a minute, once per version)."""
        self.install_node_button.setEnabled(False)
        self.platform_banner.setText("Installing the node in WSL (about a minute)…")
        self.installer.run(install_wsl_node, "wsl-install")

    def recheck_platform(self) -> None:
        self._show_platform()
        self.on_state(self.supervisor.state, self.supervisor.detail)

    def _show_platform(self) -> None:
        self.platform = check_platform()
        self.platform_banner.setText(f"The node cannot run yet: {sentence(self.platform.message)} "
                                     f"{sentence(self.platform.hint)}")
        self.platform_banner.setVisible(not self.platform.ok)
        self.install_node_button.setVisible(self.platform.code == "wsl_node_missing")
        self.install_node_button.setEnabled(True)

    def start_node(self) -> None:
        self.supervisor.start()

    def load_run_history(self) -> None:
        """Plots and gossip start from what is on disk, so a restarted app shows the whole run."""
        store = RunStore(self.config.run_dir)
        metrics = store.metrics()
        self.dashboard.load_history(metrics, store.evaluations())
        self.header.set_totals(self.dashboard.history)
        self.header.progress.load(metrics)
        self.gossip.clear()
        self.gossip.add_samples(store.samples(last=GOSSIP_HISTORY))
        self.logs.follow(self.config.run_dir / LOG_FILE, self.app_log)
        self.fleet.local_history(metrics, self.dashboard.history.evaluations)

    def on_event(self, event: Event) -> None:
        self.account.on_event(event)
        if isinstance(event, NodeStarted):
            self.started = event
            self.header.set_node(event, *self._admission_secret(event.swarm_name))
            self.hub.set_peer_name(event.peer_name)
            self.account.set_peer(event.peer_id)
            if event.resumed_from_round is not None:
                self.load_run_history()  # the node cut its history back to the checkpoint
        elif isinstance(event, RoundFinished):
            self.dashboard.add_round(event)
            self.header.progress.on_round(event)
            self.header.set_totals(self.dashboard.history)
            if self.tray:
                self.tray.set_round(event.round, event.reward_local)
        elif isinstance(event, RoundProgress):
            self.header.progress.on_progress(event)
            if self.quit_dialog is not None:
                self.quit_dialog.set_waiting_for(self.header.progress.label.text())
        elif isinstance(event, EvalFinished):
            self.dashboard.add_evaluation(event)
        elif isinstance(event, RolloutSample):
            self.gossip.add_samples([event])
        elif isinstance(event, ErrorReported):
            problem = Problem(event.message, event.hint)
            self.statusBar().showMessage(problem.text(), 15000)
            self.notify("RL Swarm: problem", problem.text(), critical=event.fatal)
        elif isinstance(event, (PeerJoined, PeerLeft)):
            verb = "joined" if isinstance(event, PeerJoined) else "left"
            self.statusBar().showMessage(f"{event.peer_name} {verb} the swarm", 8000)
        elif isinstance(event, UploadFinished):
            self._upload_finished(event)
        elif isinstance(event, UploadFailed):
            self._upload_failed(event)
        elif isinstance(event, CheckpointSaved):
            self.statusBar().showMessage(f"Checkpoint saved after round {event.round}", 5000)
            self._checkpoint_ready()
        elif isinstance(event, ReachabilityChanged):
            self.header.set_reachability(event, new_swarm=not self.config.swarm.initial_peers)
        elif isinstance(event, ResourceLimitChanged):
            self.header.set_resource_limit(event)
        elif isinstance(event, TemperaturesRead):
            self.header.set_temperatures(event)

    def _admission_secret(self, swarm_name: str) -> tuple[str | None, str]:
        """A private swarm's secret for the header's invite, read from the secret store as the node reads it (with the
        passphrase the app holds for the node, else the environment's), or why it cannot be read."""
        try:
            passphrase = self.supervisor.environment.get(PASSPHRASE_ENV)
            return swarm_secret.load(self.config.run.data_dir, swarm_name, passphrase), ""
        except NodeError as exc:  # a stored secret that cannot be read: an invite without it would admit nobody
            return None, f"{exc.message} No invite to copy: without the secret it would admit nobody."

    def on_state(self, state: str, detail: str) -> None:
        held = bool(self.supervisor.holds)
        active = state in status.ACTIVE
        self.start_action.setEnabled(state in status.ENDED and self.platform.ok)
        self.pause_action.setEnabled(active and "user" not in self.supervisor.holds and state != "restarting")
        # Resume only once the node really holds: until the round ends there is nothing to resume.
        self.resume_action.setEnabled(state == "paused" and "user" in self.supervisor.holds)
        self.stop_action.setEnabled(active)
        if state == "paused" and held and not detail:
            detail = ", ".join(_HOLD_TEXT.get(h, h) for h in sorted(self.supervisor.holds))
        shown = "pausing" if held and state in ("starting", "training", "waiting_for_peers") else state
        self.header.set_state(shown, detail)
        self.status_label.setText(status.label(shown, "" if shown == "pausing" else detail))
        if state in status.ENDED or state == "paused":  # a paused or ended node has saved its last rounds
            self._checkpoint_ready()
        if state in status.ENDED:
            self.header.progress.idle()
            self.header.set_resource_limit(None)  # a stopped node is not slowed down by anything
        elif state == "paused":
            self.header.progress.idle("Paused between rounds")
        if self.tray:
            self.tray.set_state(state, detail, self.pause_action.isEnabled(), self.resume_action.isEnabled())
        previous, self.state = getattr(self, "state", "stopped"), state
        if state == "stopped":
            if previous in status.ACTIVE or previous == "stopping":
                self.notify("RL Swarm stopped", "Training stopped; a checkpoint was saved.")
            if self.quitting:
                self._finish_quit()
        elif state == "finished":
            self.notify("RL Swarm finished", detail)
            if self.quitting:
                self._finish_quit()

    def on_crash(self, report: str) -> None:
        log.error("node crashed: %s", report)
        error = self.supervisor.last_error
        if self.supervisor.state == "failed" and error is not None:
            # The node refused to run (exit 2: a setting to fix); restarting cannot help, so say it in a dialog.
            problem = Problem(error.message, error.hint or "change it in Settings, then press Start", report)
            self.notify("RL Swarm: the node cannot start", problem.text(), critical=True)
            self._show_box("refusalBox", "The node cannot start", problem)
            return
        summary = "The node stopped unexpectedly; it restarts by itself."
        self.notify("RL Swarm: the node stopped unexpectedly", summary, critical=True)
        self.statusBar().showMessage(summary + " Details are in the Logs tab.", 20000)

    def on_gave_up(self, message: str) -> None:
        log.error("%s", message)
        problem = Problem(
            "The node keeps crashing, so it is not restarted again.",
            "If it ran out of memory, choose a smaller model or fewer completions per question in Settings; "
            "the Logs tab shows the last lines. Then press Start.",
            message)
        self.notify("RL Swarm: the node keeps crashing", problem.summary, critical=True)
        url = self._webhook_url()
        if url:  # only the supervisor sees a crash loop: the node cannot tell it
            hook = Webhook(url)
            NotificationRules(hook.send).crash_loop(message.split("\n", 1)[0])
            hook.close(timeout_s=0)  # delivered by its own thread; the window never waits for it
        self.crash_box = self._show_box("crashLoopBox", "The node keeps crashing", problem)

    def _webhook_url(self) -> str | None:
        """The webhook, read from the secret store as the node reads it (with the passphrase the app holds for it)."""
        try:
            return load_webhook(self.config.run.data_dir, self.supervisor.environment.get(PASSPHRASE_ENV))
        except NodeError as exc:
            log.warning("the webhook is not told: %s", exc.message)
            return None

    def _show_box(self, name: str, title: str, problem: Problem) -> QMessageBox:
        box = error_dialog(self, title, problem)
        box.setObjectName(name)
        box.setModal(False)
        box.show()
        self.problem_box = box
        return box

    def _checkpoint_before_upload(self, upload: Callable[[], None]) -> None:
        """A manual upload reads the latest checkpoint: a training node saves its rounds since the last one first."""
        if getattr(self, "state", "stopped") in ("training", "waiting_for_peers") and self.supervisor.request_checkpoint():
            self._after_checkpoint = upload
        else:
            upload()

    def _checkpoint_ready(self) -> None:
        upload, self._after_checkpoint = self._after_checkpoint, None
        if upload is not None:
            upload()

    def _upload_finished(self, event: UploadFinished) -> None:
        self.notify("Upload finished", f"Round {event.round} is on the Hub: {event.url}")

    def _upload_failed(self, event: UploadFailed) -> None:
        if event.code != "upload_cancelled":
            self.notify("Upload failed", f"{event.message}\n{event.hint}".strip(), critical=True)

    def notify(self, title: str, message: str, critical: bool = False) -> None:
        if self.tray:
            self.tray.notify(title, message, critical)

    # -- settings ------------------------------------------------------------------------------------------

    def open_settings(self) -> None:
        dialog = SettingsDialog(self.config, idle_supported=self.policies.idle_supported(),
                                hardware=self.hardware_data, passphrase=self.supervisor.environment.get(PASSPHRASE_ENV),
                                parent=self)
        accepted = dialog.exec()
        if accepted and dialog.passphrase:  # the node reads the webhook with it (environment only, never a file)
            self.supervisor.environment[PASSPHRASE_ENV] = dialog.passphrase
        self.hardware_data = dialog.hardware or self.hardware_data  # asked once per session: it imports torch
        if dialog.wizard_requested:
            self.wizardRequested.emit()
            return
        if accepted and dialog.result_config is not None:
            self.apply_config(dialog.result_config, secrets_changed=dialog.webhook_changed)

    def apply_config(self, config: NodeConfig, *, secrets_changed: bool = False) -> None:
        """Save the new config; the node reads it (and the secrets, e.g. the webhook) at start, so offer a restart
        when it runs."""
        app_only = {"desktop", "fleet"}  # settings of the app itself: the node needs no restart for them
        node_changed = secrets_changed or \
            config.model_dump(exclude=app_only) != self.config.model_dump(exclude=app_only)
        run_moved = config.run_dir != self.config.run_dir
        config.save(self.config_path)
        if config.desktop.start_at_login != autostart.is_enabled():
            autostart.set_enabled(config.desktop.start_at_login)
        self.config = config
        self.hub.set_config(config)
        self.account.set_config(config)
        self.policies.apply(config.desktop)
        self.fleet.set_config(config)
        if run_moved:  # another data folder: another run's history and logs
            self.load_run_history()
        if node_changed and self.supervisor.running:
            answer = QMessageBox.question(self, "Restart the node?",
                                          "The new settings apply when the node starts again. Restart it now? "
                                          "It finishes its current step and saves a checkpoint first.")
            if answer == QMessageBox.StandardButton.Yes:
                self.supervisor.stateChanged.connect(self._start_after_stop)
                self.supervisor.stop()

    def _start_after_stop(self, state: str, _detail: str) -> None:
        if state in status.ENDED:
            self.supervisor.stateChanged.disconnect(self._start_after_stop)
            self.supervisor.start()

    def diagnostics(self) -> str:
        config = self.config.to_dict()
        hardware = self.started.hardware.get("description", "") if self.started else "node not started yet"
        return (
            "# RL Swarm diagnostics\n"
            f"{environment_report()}\nhardware: {hardware}\n"
            f"state: {status.label(self.supervisor.state, self.supervisor.detail)}\n"
            f"peer: {self.started.peer_name + ' ' + self.started.peer_id if self.started else '-'}\n"
            f"config ({self.config_path}):\n{json.dumps(config, indent=2, default=str)}\n"
            "## node stderr (last lines)\n" + "\n".join(self.supervisor.stderr_tail)
        )

    # -- window and quitting -------------------------------------------------------------------------------

    def show_window(self) -> None:
        self.showNormal()
        self.raise_()
        self.activateWindow()

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802
        if self.quitting:
            event.accept()
            return
        if self.tray is not None and self.tray.isVisible():
            event.ignore()
            self.hide()
            if not self.prefs.value("told_about_tray", False, type=bool):
                self.prefs.setValue("told_about_tray", True)
                self.tray.notify("RL Swarm keeps training",
                                 "The window is closed, training goes on. Use the tray icon to open it or quit.")
            return
        if not self.supervisor.running:
            event.accept()
            self.quit()
            return
        # No tray on this desktop: closing the window is the only way out, so ask.
        box = QMessageBox(QMessageBox.Icon.Question, "Quit RL Swarm?",
                          "Closing the window stops training (after the current step and a checkpoint).", parent=self)
        box.setObjectName("confirmQuit")
        quit_button = box.addButton("Stop training and quit", QMessageBox.ButtonRole.AcceptRole)
        minimize = box.addButton("Keep training (minimize)", QMessageBox.ButtonRole.RejectRole)
        box.addButton(QMessageBox.StandardButton.Cancel)
        box.exec()
        event.ignore()
        if box.clickedButton() is quit_button:
            self.quit()
        elif box.clickedButton() is minimize:
            self.showMinimized()

    def quit(self) -> None:
        """Stop the node cleanly (checkpoint), then leave; the supervisor kills it if it hangs, the user sooner."""
        self.quitting = True
        if self.supervisor.running and self.quit_dialog is None:
            self.quit_dialog = QuitDialog(self)
            self.quit_dialog.stopNow.connect(self.supervisor.kill)
            self.quit_dialog.set_waiting_for(self.header.progress.label.text())
            self.quit_dialog.show()
        self.supervisor.stop()  # also cancels a restart that is waiting for its backoff
        if not self.supervisor.running:
            self._finish_quit()

    def _finish_quit(self) -> None:
        if self._quit_done:
            return
        self._quit_done = True
        self.fleet.close_links()  # only the SSH connections: remote nodes keep training
        if self.quit_dialog is not None:
            self.quit_dialog.close()
        if self.tray:
            self.tray.hide()
        self.quitFinished.emit()
        QTimer.singleShot(0, QApplication.instance().quit)


_HOLD_TEXT = {"user": "paused by you", "battery": "on battery", "user_active": "you are using the computer"}
