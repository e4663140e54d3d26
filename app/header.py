"""Who and where this node is, what it is doing, and the swarm counters."""

from __future__ import annotations

from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QFrame, QGridLayout, QHBoxLayout, QLabel, QPushButton, QToolButton, QWidget

from app import status
from app.history import RunHistory
from node.events import NodeStarted


class StatusHeader(QFrame):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setFrameShape(QFrame.Shape.StyledPanel)
        self.invite: list[str] = []
        self.peer_id = ""

        self.name = QLabel("—")
        self.name.setObjectName("peerName")
        font = self.name.font()
        font.setPointSizeF(font.pointSizeF() * 1.4)
        font.setBold(True)
        self.name.setFont(font)
        self.peer = QLabel("peer id appears when the node starts")
        self.peer.setObjectName("peerId")
        self.copy_id = QToolButton(text="Copy id", toolTip="Copy the full peer id")
        self.copy_id.clicked.connect(lambda: QGuiApplication.clipboard().setText(self.peer_id))
        self.swarm = QLabel("")
        self.round = QLabel("Round —")
        self.state = QLabel(status.label("stopped"))
        self.state.setObjectName("stateBadge")
        self.copy_invite = QPushButton("Copy invite")
        self.copy_invite.setToolTip("Copy the addresses others paste to join this swarm")
        self.copy_invite.setEnabled(False)
        self.copy_invite.clicked.connect(self._copy_invite)
        self.counters = QLabel("")
        self.counters.setObjectName("counters")

        who = QHBoxLayout()
        who.addWidget(self.name)
        who.addWidget(self.peer, 1)
        who.addWidget(self.copy_id)
        grid = QGridLayout(self)
        grid.addLayout(who, 0, 0, 1, 3)
        grid.addWidget(self.state, 0, 3)
        grid.addWidget(self.swarm, 1, 0)
        grid.addWidget(self.round, 1, 1)
        grid.addWidget(self.counters, 1, 2)
        grid.addWidget(self.copy_invite, 1, 3)
        grid.setColumnStretch(2, 1)
        self.set_state("stopped")
        self.set_totals(RunHistory())

    def set_node(self, started: NodeStarted) -> None:
        self.peer_id = started.peer_id
        self.name.setText(started.peer_name)
        self.peer.setText(f"{started.peer_id[:10]}…{started.peer_id[-6:]}")
        self.peer.setToolTip(started.peer_id)
        self.swarm.setText(f"Swarm <b>{started.swarm_name}</b> · {started.model} on {started.device}")
        self.invite = list(started.invite)
        self.copy_invite.setEnabled(bool(self.invite))

    def set_state(self, state: str, detail: str = "") -> None:
        color = status.COLORS.get(state, "#7f7f7f")
        self.state.setText(status.label(state))
        self.state.setToolTip(detail)
        self.state.setStyleSheet(
            f"QLabel#stateBadge {{ background: {color}; color: white; border-radius: 9px; padding: 2px 10px;"
            " font-weight: bold; }"
        )

    def set_round(self, round_: int) -> None:
        self.round.setText(f"Round <b>{round_}</b>")

    def set_totals(self, history: RunHistory) -> None:
        t = history.totals
        self.counters.setText(
            f"Rounds trained {t['rounds']} · groups shared {t['shared']} · received {t['received']} · "
            f"used {t['used']} · rejected {t['rejected']}"
        )

    def _copy_invite(self) -> None:
        QGuiApplication.clipboard().setText("\n".join(self.invite))
