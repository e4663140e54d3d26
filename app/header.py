"""Who and where this node is, what it is doing, and the swarm counters."""

from __future__ import annotations


from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QFrame, QGridLayout, QHBoxLayout, QLabel, QPushButton, QToolButton, QWidget

from app import status
from app.history import RunHistory
from app.progress import RoundProgressView
from node.events import NodeStarted
from node.invite import format_invite

COPIED_MS = 2000
DEVICES = {"cpu": "CPU", "cuda": "NVIDIA GPU", "mps": "Apple GPU"}


class StatusHeader(QFrame):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.invite = ""
        self.peer_id = ""

        self.name = QLabel("—")
        self.name.setObjectName("peerName")
        self.name.setTextFormat(Qt.TextFormat.PlainText)
        font = self.name.font()
        font.setPointSizeF(font.pointSizeF() * 1.4)
        font.setBold(True)
        self.name.setFont(font)
        self.peer = QLabel("peer id appears when the node starts")
        self.peer.setObjectName("peerId")
        self.copy_id = QToolButton(text="Copy id", toolTip="Copy the full peer id")
        self.copy_id.setEnabled(False)
        self.copy_id.clicked.connect(lambda: self._copy(self.copy_id, self.peer_id))
        self.swarm = QLabel("")
        self.swarm.setTextFormat(Qt.TextFormat.PlainText)
        self.swarm.setWordWrap(True)
        self.progress = RoundProgressView()
        self.state = QLabel(status.label("stopped"))
        self.state.setObjectName("stateBadge")
        self.copy_invite = QPushButton("Copy invite")
        self.copy_invite.setToolTip("Copy the invite others paste into their setup wizard to join this swarm")
        self.copy_invite.setEnabled(False)
        self.copy_invite.clicked.connect(lambda: self._copy(self.copy_invite, self.invite))
        self.counters = QLabel("")
        self.counters.setObjectName("counters")
        self.counters.setTextFormat(Qt.TextFormat.PlainText)
        self.counters.setWordWrap(True)
        self.counters.setToolTip(
            "Rounds trained: rounds this node finished (round numbers count from 0). Peer groups received add up: "
            "trained on + dropped because every completion scored the same + not needed (enough were taken) + "
            "rejected by this node's checks.")

        who = QHBoxLayout()
        who.addWidget(self.name)
        who.addWidget(self.peer, 1)
        who.addWidget(self.copy_id)
        who.addWidget(self.state)  # in this row, not the grid: a long badge must not widen the row below
        grid = QGridLayout(self)
        grid.addLayout(who, 0, 0, 1, 3)
        grid.addWidget(self.swarm, 1, 0)
        grid.addWidget(self.progress, 1, 1)
        grid.addWidget(self.copy_invite, 1, 2, Qt.AlignmentFlag.AlignRight)
        grid.addWidget(self.counters, 2, 0, 1, 3)
        grid.setColumnStretch(1, 1)
        self.set_state("stopped")
        self.set_totals(RunHistory())

    def set_node(self, started: NodeStarted) -> None:
        self.peer_id = started.peer_id
        self.name.setText(started.peer_name)
        self.peer.setText(f"{started.peer_id[:10]}…{started.peer_id[-6:]}")
        self.peer.setToolTip(started.peer_id)
        self.copy_id.setEnabled(bool(self.peer_id))
        model = "SmolLM2-135M (bundled)" if started.model == "bundled" else started.model
        device = DEVICES.get(started.device, started.device)
        self.swarm.setText(f"Swarm {started.swarm_name} · {model} on {device}")
        # The wizard's form: with the swarm name, or a joiner would gather under its own swarm and see nobody.
        self.invite = format_invite(started.swarm_name, list(started.invite)) if started.invite else ""
        self.copy_invite.setEnabled(bool(self.invite))

    def set_state(self, state: str, detail: str = "") -> None:
        color = status.COLORS.get(state, "#7f7f7f")
        self.state.setText(status.label(state))
        self.state.setToolTip(detail)
        self.state.setStyleSheet(
            f"QLabel#stateBadge {{ background: {color}; color: white; border-radius: 9px; padding: 2px 10px;"
            " font-weight: bold; }"
        )

    def set_totals(self, history: RunHistory) -> None:
        t = history.totals
        trained = history.last.rounds_trained if history.last is not None else 0
        self.counters.setText(
            f"Rounds trained {trained} · groups shared {t['shared']} · peer groups received {t['received']} = "
            f"{t['used']} trained on + {t['dropped']} dropped (all rewards equal) + {t['not_needed']} not needed + "
            f"{t['rejected']} rejected"
        )

    def _copy(self, button: QPushButton | QToolButton, text: str) -> None:
        QGuiApplication.clipboard().setText(text)
        label = button.text()
        if label == "Copied":
            return
        button.setText("Copied")
        QTimer.singleShot(COPIED_MS, button, lambda: button.setText(label))
