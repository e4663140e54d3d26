"""The fleet view: this computer's node and the saved remote ones in one table, and the full dashboard of the one
picked, with its controls and its log.

Remote nodes are reached over SSH (:mod:`app.remote_link`); they are saved by name in the typed configuration
(``[fleet] remotes``). A lost connection is shown in the node's row and retried with backoff; it never stops the
node over there. Each node's history comes with its events (``attach`` sends the run's metrics first), so the
dashboard of a node picked starts full.
"""

from __future__ import annotations

import datetime
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtWidgets import (
    QAbstractItemView, QDialog, QDialogButtonBox, QFormLayout, QHBoxLayout, QHeaderView, QLabel, QLineEdit,
    QPlainTextEdit, QPushButton, QSpinBox, QSplitter, QTableWidget, QTableWidgetItem, QVBoxLayout, QWidget,
)

from app import status
from app.dashboard import Dashboard
from app.errors import ErrorLabel, Problem
from app.remote_link import RemoteLink
from app.worker import Worker
from node.config import NodeConfig, RemoteNodeSettings
from node.errors import NodeError
from node.events import EvalFinished, Event, NodeStarted, RoundFinished, StateChanged
from node.remote import run_command

log = logging.getLogger(__name__)

COLUMNS = ("Node", "Where", "Connection", "State", "Round", "Reward", "Held-out accuracy", "Peers", "Last event")
LOG_LINES = 300
REFRESH_MS = 150  # events arrive in bursts (a connection starts with the whole history): redraw once per burst


@dataclass
class FleetNode:
    """One row: what the fleet knows of a node, from its events alone."""

    name: str
    where: str
    remote: RemoteNodeSettings | None = None
    link: RemoteLink | None = None
    state: str = "unknown"
    detail: str = ""
    peer_name: str = ""
    round: int | None = None
    reward: float | None = None
    accuracy: float | None = None
    peers: int | None = None
    last_event: float | None = None
    metrics: list[RoundFinished] = field(default_factory=list)
    evaluations: list[EvalFinished] = field(default_factory=list)
    dirty: bool = False  # its row is to be redrawn

    def forget_history(self) -> None:
        self.metrics, self.evaluations = [], []

    def on_event(self, event: Event) -> None:
        self.last_event = max(self.last_event or 0.0, event.time)
        if isinstance(event, NodeStarted):
            self.peer_name = event.peer_name
            if event.resumed_from_round is not None:  # the node cut its history back to its checkpoint
                self.metrics = [m for m in self.metrics if m.round <= event.resumed_from_round]
        elif isinstance(event, StateChanged):
            self.state, self.detail = event.state, event.detail
        elif isinstance(event, RoundFinished):
            if not self.metrics or event.round > self.metrics[-1].round:
                self.metrics.append(event)
            self.round, self.reward, self.peers = event.round, event.reward_local, event.peers_seen
        elif isinstance(event, EvalFinished):
            if not self.evaluations or event.round > self.evaluations[-1].round:
                self.evaluations.append(event)
            self.accuracy = event.accuracy_greedy

    def load(self, metrics: list[RoundFinished], evaluations: list[EvalFinished]) -> None:
        self.forget_history()
        for event in [*metrics, *evaluations]:
            self.on_event(event)

    @property
    def connection(self) -> str:
        if self.link is None:
            return "Local"
        text = {"connecting": "Connecting…", "connected": "Connected", "closed": "Closed"}.get(self.link.state)
        return text or f"Lost: {self.link.detail}"

    @property
    def reachable(self) -> bool:
        return self.link is None or self.link.state == "connected"


@dataclass
class LocalControls:
    """How the fleet steers this computer's node: the main window's own actions."""

    start: Callable[[], None]
    pause: Callable[[], None]
    resume: Callable[[], None]
    stop: Callable[[], None]
    log_path: Callable[[], Path]


class FleetView(QWidget):
    configChanged = Signal(object)  # a NodeConfig with the saved remotes changed

    def __init__(self, config: NodeConfig, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.config = config
        self.nodes: list[FleetNode] = []
        self.local: LocalControls | None = None
        self.table = QTableWidget(0, len(COLUMNS))
        self.table.setObjectName("fleetTable")
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(COLUMNS.index("Connection"), QHeaderView.ResizeMode.Stretch)
        self.table.itemSelectionChanged.connect(self._selected)
        # Room for four rows even on a small screen; the picked node's dashboard takes the rest.
        rows = self.table.verticalHeader().defaultSectionSize()
        self.table.setMinimumHeight(header.sizeHint().height() + 4 * rows + 2 * self.table.frameWidth() + 4)

        self.add_button = QPushButton("Add remote node…")
        self.remove_button = QPushButton("Remove")
        self.start_button = QPushButton("Start")
        self.pause_button = QPushButton("Pause")
        self.resume_button = QPushButton("Resume")
        self.stop_button = QPushButton("Stop")
        self.logs_button = QPushButton("Logs")
        self.add_button.clicked.connect(self.add_remote)
        self.remove_button.clicked.connect(self.remove_selected)
        self.start_button.clicked.connect(lambda: self._control("start"))
        self.pause_button.clicked.connect(lambda: self._control("pause"))
        self.resume_button.clicked.connect(lambda: self._control("resume"))
        self.stop_button.clicked.connect(lambda: self._control("stop"))
        self.logs_button.clicked.connect(self.show_logs)
        buttons = QHBoxLayout()
        for button in (self.start_button, self.pause_button, self.resume_button, self.stop_button, self.logs_button):
            buttons.addWidget(button)
        buttons.addStretch(1)
        buttons.addWidget(self.add_button)
        buttons.addWidget(self.remove_button)
        self.problem = ErrorLabel()
        self.problem.setObjectName("fleetProblem")
        self.title = QLabel()
        self.title.setObjectName("fleetTitle")
        self.dashboard = Dashboard()

        top = QWidget()
        top_layout = QVBoxLayout(top)
        top_layout.setContentsMargins(0, 0, 0, 0)
        top_layout.addWidget(self.table)
        top_layout.addLayout(buttons)
        top_layout.addWidget(self.problem)
        bottom = QWidget()
        bottom_layout = QVBoxLayout(bottom)
        bottom_layout.setContentsMargins(0, 0, 0, 0)
        bottom_layout.addWidget(self.title)
        bottom_layout.addWidget(self.dashboard, 1)
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(top)
        splitter.addWidget(bottom)
        splitter.setStretchFactor(0, 0)
        splitter.setStretchFactor(1, 1)
        layout = QVBoxLayout(self)
        layout.addWidget(splitter)

        self.log_dialog: QDialog | None = None
        self.log_text: QPlainTextEdit | None = None
        self._workers: list[Worker] = []
        self._shown: FleetNode | None = None
        self._history_dirty = False
        self._refresh = QTimer(self, singleShot=True, interval=REFRESH_MS)
        self._refresh.timeout.connect(self._redraw)
        self.set_config(config)
        self._update_buttons()

    # -- nodes -----------------------------------------------------------------------------------------------

    def add_local(self, name: str, controls: LocalControls, state: str, metrics, evaluations) -> FleetNode:
        """This computer's node (always the first row); the window feeds it with :meth:`local_event`."""
        self.local = controls
        node = FleetNode(name, "this computer", state=state)
        node.load(metrics, evaluations)
        node.state = state
        self.nodes.insert(0, node)
        self._rebuild_table()
        return node

    def local_event(self, event: Event) -> None:
        self._on_event(self.nodes[0], event)

    def local_state(self, state: str, detail: str) -> None:
        node = self.nodes[0]
        node.state, node.detail = state, detail
        self._changed(node)

    def local_history(self, metrics, evaluations) -> None:
        self.nodes[0].load(metrics, evaluations)
        self._changed(self.nodes[0], history=True)

    def set_config(self, config: NodeConfig) -> None:
        """Follow the saved remotes: connect to new ones, drop removed ones, reconnect changed ones."""
        self.config = config
        wanted = {remote.name: remote for remote in config.fleet.remotes}
        for node in [n for n in self.nodes if n.remote is not None]:
            if wanted.get(node.name) != node.remote:
                node.link.close()
                self.nodes.remove(node)
        have = {node.name for node in self.nodes if node.remote is not None}
        for remote in config.fleet.remotes:
            if remote.name not in have:
                self._add_remote_node(remote)
        self._rebuild_table()

    def _add_remote_node(self, remote: RemoteNodeSettings) -> FleetNode:
        link = RemoteLink(remote)
        node = FleetNode(remote.name, remote.host + (f":{remote.port}" if remote.port else ""), remote, link)
        link.connecting.connect(lambda: (node.forget_history(), self._changed(node, history=True)))
        link.event.connect(lambda event: self._on_event(node, event))
        link.linkChanged.connect(lambda *_: self._link_changed(node))
        self.nodes.append(node)
        link.open()
        return node

    def _link_changed(self, node: FleetNode) -> None:
        self._changed(node)

    def close_links(self) -> None:
        """The app quits: end every SSH connection (the remote nodes keep training)."""
        for node in self.nodes:
            if node.link is not None:
                node.link.close()

    def node(self, name: str) -> FleetNode:
        return next(node for node in self.nodes if node.name == name)

    def row_of(self, name: str) -> int:
        return next(i for i, node in enumerate(self.nodes) if node.name == name)

    @property
    def selected(self) -> FleetNode | None:
        rows = self.table.selectionModel().selectedRows()
        return self.nodes[rows[0].row()] if rows and rows[0].row() < len(self.nodes) else None

    # -- events ----------------------------------------------------------------------------------------------

    def _on_event(self, node: FleetNode, event: Event) -> None:
        node.on_event(event)
        self._changed(node, history=isinstance(event, (RoundFinished, EvalFinished)))

    def _changed(self, node: FleetNode, history: bool = False) -> None:
        node.dirty = True
        if history and node is self._shown:
            self._history_dirty = True
        if not self._refresh.isActive():
            self._refresh.start()

    def _redraw(self) -> None:
        for row, node in enumerate(self.nodes):
            if node.dirty and row < self.table.rowCount():
                self._fill_row(row, node)
                node.dirty = False
        if self._history_dirty and self._shown is not None:
            self._history_dirty = False
            self.dashboard.load_history(self._shown.metrics, self._shown.evaluations)
        self._show_title()
        self._update_buttons()

    def _rebuild_table(self) -> None:
        selected = self.selected
        self.table.setRowCount(len(self.nodes))
        for row, node in enumerate(self.nodes):
            self._fill_row(row, node)
        if selected in self.nodes:
            self.table.selectRow(self.nodes.index(selected))
        elif self.nodes and self.selected is None:
            self.table.selectRow(0)
        self._update_buttons()

    def _fill_row(self, row: int, node: FleetNode) -> None:
        when = "-"
        if node.last_event:
            moment = datetime.datetime.fromtimestamp(node.last_event)
            when = moment.strftime("%H:%M:%S" if moment.date() == datetime.date.today() else "%Y-%m-%d %H:%M")
        cells = (
            node.name + (f" ({node.peer_name})" if node.peer_name else ""),
            node.where,
            node.connection,
            "-" if node.state == "unknown" else status.label(node.state) + ("" if node.reachable else " (last known)"),
            "-" if node.round is None else str(node.round),
            "-" if node.reward is None else f"{node.reward:.2f}",
            "-" if node.accuracy is None else f"{node.accuracy:.0%}",
            "-" if node.peers is None else str(node.peers),
            when,
        )
        for column, text in enumerate(cells):
            item = self.table.item(row, column)
            if item is None:
                item = QTableWidgetItem()
                self.table.setItem(row, column, item)
            item.setText(text)
            tips = {COLUMNS.index("State"): node.detail,
                    COLUMNS.index("Connection"): f"{text}. {node.link.hint}" if node.link and node.link.hint else text}
            item.setToolTip(tips.get(column, text))

    def _selected(self) -> None:
        node = self.selected
        self._shown = node
        if node is not None:
            self.dashboard.load_history(node.metrics, node.evaluations)
        self._show_title()
        self._update_buttons()

    def _show_title(self) -> None:
        node = self._shown
        if node is None:
            self.title.setText("Pick a node to see its dashboard")
            return
        state = status.label(node.state, node.detail) if node.state != "unknown" else "state not known yet"
        self.title.setText(f"<b>{node.name}</b> on {node.where}: {state}")

    def _update_buttons(self) -> None:
        node = self.selected
        state = node.state if node else "unknown"
        reachable = node is not None and node.reachable
        self.start_button.setEnabled(reachable and state in status.ENDED)
        self.pause_button.setEnabled(reachable and state in ("starting", "training", "waiting_for_peers"))
        self.resume_button.setEnabled(reachable and state == "paused")
        self.stop_button.setEnabled(reachable and state in status.ACTIVE)
        self.logs_button.setEnabled(node is not None)
        self.remove_button.setEnabled(node is not None and node.remote is not None)

    # -- controls --------------------------------------------------------------------------------------------

    def _control(self, command: str) -> None:
        node = self.selected
        if node is None:
            return
        self.problem.clear()
        if node.link is None:
            assert self.local is not None
            getattr(self.local, command)()
            return
        if command == "start":
            node.state, node.detail = "starting", f"starting the node on {node.where}"
            self._changed(node)
            self._run(lambda: run_command(node.remote, "start"), f"start-{node.name}", lambda _: None,
                      on_failed=lambda _: setattr(node, "state", "stopped"))
        elif not node.link.send(command):
            self.problem.show_problem(Problem(f"{command.capitalize()} did not reach {node.name}: the connection is "
                                              "down", "wait until it is back (it is retried by itself)"))
        elif command == "stop":
            node.detail = "finishing the current step and saving a checkpoint"
            self._changed(node)

    def show_logs(self) -> None:
        node = self.selected
        if node is None:
            return
        self._log_window(node.name)
        if node.link is None:
            assert self.local is not None
            self._set_log(_tail(self.local.log_path()))
            return
        self.log_text.setPlainText(f"Reading the log of {node.name} over SSH…")
        self._run(lambda: run_command(node.remote, "logs", "--lines", str(LOG_LINES), timeout_s=60),
                  f"logs-{node.name}", self._set_log)

    def _log_window(self, name: str) -> None:
        if self.log_dialog is None:
            self.log_dialog = QDialog(self)
            self.log_dialog.setObjectName("fleetLogs")
            self.log_dialog.resize(900, 500)
            self.log_text = QPlainTextEdit(readOnly=True)
            self.log_text.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
            layout = QVBoxLayout(self.log_dialog)
            layout.addWidget(self.log_text)
        self.log_dialog.setWindowTitle(f"Log of {name}")
        self.log_dialog.show()
        self.log_dialog.raise_()

    def _set_log(self, text: str) -> None:
        if self.log_text is not None:
            self.log_text.setPlainText(text or "(the log is empty)")
            self.log_text.verticalScrollBar().setValue(self.log_text.verticalScrollBar().maximum())

    def _run(self, call, name: str, on_done, on_failed=None) -> None:
        worker = Worker()
        self._workers.append(worker)

        def finished() -> None:
            if worker in self._workers:
                self._workers.remove(worker)

        def failed(exc: BaseException) -> None:
            finished()
            if on_failed is not None:
                on_failed(exc)
            self.problem.show_problem(Problem.of(exc))
            self._update_buttons()

        worker.done.connect(lambda result: (finished(), on_done(result)))
        worker.failed.connect(failed)
        worker.run(call, name)

    # -- saved remotes ---------------------------------------------------------------------------------------

    def add_remote(self) -> None:
        dialog = RemoteDialog(self.config, self)
        if dialog.exec() == QDialog.DialogCode.Accepted and dialog.result_config is not None:
            self.configChanged.emit(dialog.result_config)

    def remove_selected(self) -> None:
        node = self.selected
        if node is None or node.remote is None:
            return
        remotes = [r.model_dump(mode="json") for r in self.config.fleet.remotes if r.name != node.name]
        self.configChanged.emit(self.config.update({"fleet": {"remotes": remotes}}, source="the fleet view"))


class RemoteDialog(QDialog):
    """Name, SSH destination and where the node lives there; validated by the one configuration."""

    def __init__(self, config: NodeConfig, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("addRemote")
        self.setWindowTitle("Add a remote node")
        self.config = config
        self.result_config: NodeConfig | None = None
        self.name = QLineEdit(placeholderText="gpu-box")
        self.host = QLineEdit(placeholderText="a Host of ~/.ssh/config, a host name, or user@host")
        self.port = QSpinBox(minimum=0, maximum=65535, specialValueText="as your SSH setup says")
        self.run_name = QLineEdit("default")
        self.data_dir = QLineEdit(placeholderText="the node's default")
        self.node_command = QLineEdit("rl-swarm-node")
        form = QFormLayout()
        form.addRow("Name", self.name)
        form.addRow("SSH destination", self.host)
        form.addRow("SSH port", self.port)
        form.addRow("Run name there", self.run_name)
        form.addRow("Data folder there", self.data_dir)
        form.addRow("Node command there", self.node_command)
        note = QLabel("The app connects with your SSH keys and agent, and checks the host key as ssh does: connect "
                      "once with ssh in a terminal to accept it. It runs only rl-swarm-node there.")
        note.setWordWrap(True)
        self.error = ErrorLabel()
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Save | QDialogButtonBox.StandardButton.Cancel)
        buttons.accepted.connect(self._save)
        buttons.rejected.connect(self.reject)
        self.save_button = buttons.button(QDialogButtonBox.StandardButton.Save)
        layout = QVBoxLayout(self)
        layout.addLayout(form)
        layout.addWidget(note)
        layout.addWidget(self.error)
        layout.addWidget(buttons)

    def _save(self) -> None:
        remote = {"name": self.name.text().strip(), "host": self.host.text().strip(),
                  "port": self.port.value() or None, "run_name": self.run_name.text().strip() or "default",
                  "data_dir": self.data_dir.text().strip() or None,
                  "node_command": self.node_command.text().strip() or "rl-swarm-node"}
        remotes = [r.model_dump(mode="json") for r in self.config.fleet.remotes] + [remote]
        try:
            self.result_config = self.config.update({"fleet": {"remotes": remotes}}, source="the new remote node")
        except NodeError as exc:
            self.error.show_problem(Problem.of(exc))
            return
        self.accept()


def _tail(path: Path, lines: int = LOG_LINES) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return ""

