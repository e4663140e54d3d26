"""Who and where this node is, what it is doing, and the swarm counters."""

from __future__ import annotations


from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QFrame, QGridLayout, QHBoxLayout, QLabel, QPushButton, QToolButton, QWidget

from app import status
from app.elided_label import ElidedLabel
from app.history import RunHistory
from app.progress import RoundProgressView
from node.events import NodeStarted, ReachabilityChanged, ResourceLimitChanged, TemperaturesRead
from node.swarm.invite import format_invite

COPIED_MS = 2000
PUBLIC_TIP = "Copy the invite others paste into their setup wizard to join this swarm"
PRIVATE_TIP = ("Copy the invite others paste into their setup wizard to join this private swarm; it carries the "
               "swarm's secret")
PRIVATE_NOTE = "Private swarm: Copy invite includes the swarm's secret. Share it only with people you want in the swarm."
LOOPBACK_NOTE = "The invite works on this computer only: this node listens on 127.0.0.1 (as the demo does)."
LOOPBACK_PREFIXES = ("/ip4/127.", "/ip6/::1/")
DEVICES = {"cpu": "CPU", "cuda": "NVIDIA GPU", "mps": "Apple GPU"}
REACH_MORE, REACH_HIDE = "What friends can do \u25b8", "Hide \u25be"
LIMIT_COLOR = "#b26a00"
HOT_COLOR = "#c62828"
REACH_COLORS = {"reachable": "#2e7d32", "relayed": "#b26a00", "unreachable": "#c62828", "unknown": "#7f7f7f"}


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
        self.swarm = ElidedLabel("")  # one line: the swarm, the model and the device are read together
        self.swarm.setObjectName("swarmLine")
        self.progress = RoundProgressView()
        self.state = QLabel(status.label("stopped"))
        self.state.setObjectName("stateBadge")
        self.copy_invite = QPushButton("Copy invite")
        self.copy_invite.setToolTip(PUBLIC_TIP)
        self.copy_invite.setEnabled(False)
        self.copy_invite.clicked.connect(lambda: self._copy(self.copy_invite, self.invite))
        # A private swarm's invite admits whoever holds it: say so next to the button (never show the secret itself).
        self.invite_note = QLabel("")
        self.invite_note.setObjectName("inviteNote")
        self.invite_note.setTextFormat(Qt.TextFormat.PlainText)
        self.invite_note.setWordWrap(True)
        self.invite_note.hide()
        # Whether friends outside this network can reach the node (node.swarm.reachability), and what they can do
        self.reach = QLabel("")
        self.reach.setObjectName("reachability")
        self.reach.setTextFormat(Qt.TextFormat.PlainText)
        self.reach.hide()
        self.reach_note = QLabel("")
        self.reach_note.setObjectName("reachabilityNote")
        self.reach_note.setTextFormat(Qt.TextFormat.PlainText)
        self.reach_note.setWordWrap(True)
        self.reach_note.hide()
        # The advice takes three lines at 1024 px: behind a button, so that the charts keep their room
        self.reach_more = QToolButton()
        self.reach_more.setObjectName("reachabilityMore")
        self.reach_more.setAutoRaise(True)
        self.reach_more.setCheckable(True)
        self.reach_more.toggled.connect(self._show_reach_note)
        self.reach_more.hide()
        # What slows training down now (node.governor: the schedule, heat), and the temperatures the node can read
        self.limit = QLabel("")
        self.limit.setObjectName("resourceLimit")
        self.limit.setTextFormat(Qt.TextFormat.PlainText)
        self.limit.setStyleSheet(f"QLabel#resourceLimit {{ color: {LIMIT_COLOR}; font-weight: bold; }}")
        self.limit.hide()
        self.temperatures = QLabel("")
        self.temperatures.setObjectName("temperatures")
        self.temperatures.setTextFormat(Qt.TextFormat.PlainText)
        self.temperatures.hide()
        self.counters = QLabel("")
        self.counters.setObjectName("counters")
        self.counters.setTextFormat(Qt.TextFormat.PlainText)
        self.counters.setWordWrap(True)
        self.counters.setToolTip(
            "Rounds trained: rounds this node finished (round numbers count from 0). Peer groups received add up: "
            "trained on + dropped because every completion scored the same + not needed (enough were taken) + "
            "rejected by this node's checks.")

        # Each line has its own row and every text that varies is elided or wrapped: the header never asks for
        # more width than the window has, so the window never widens itself and the tabs below never move sideways.
        who = QHBoxLayout()
        who.addWidget(self.name)
        who.addWidget(self.peer)
        who.addWidget(self.copy_id)
        who.addStretch(1)
        who.addWidget(self.state)
        where = QHBoxLayout()
        where.addWidget(self.swarm, 1)
        where.addWidget(self.copy_invite)
        grid = QGridLayout(self)
        grid.addLayout(who, 0, 0)
        grid.addLayout(where, 1, 0)
        grid.addWidget(self.progress, 2, 0)
        grid.addWidget(self.counters, 3, 0)
        grid.addWidget(self.invite_note, 4, 0)
        reach_row = QHBoxLayout()
        reach_row.addWidget(self.reach)
        reach_row.addWidget(self.reach_more)
        reach_row.addStretch(1)
        grid.addLayout(reach_row, 5, 0)
        grid.addWidget(self.reach_note, 6, 0)
        machine = QHBoxLayout()
        machine.addWidget(self.limit)
        machine.addStretch(1)
        machine.addWidget(self.temperatures)
        grid.addLayout(machine, 7, 0)
        self.set_state("stopped")
        self.set_totals(RunHistory())

    def set_node(self, started: NodeStarted, admission_secret: str | None = None, secret_problem: str = "") -> None:
        """``admission_secret``: the private swarm's secret, which its invite must carry or nobody can join;
        ``secret_problem``: why a private swarm's secret could not be read (then there is no invite to copy)."""
        self.peer_id = started.peer_id
        self.name.setText(started.peer_name)
        self.peer.setText(f"{started.peer_id[:10]}…{started.peer_id[-6:]}")
        self.peer.setToolTip(started.peer_id)
        self.copy_id.setEnabled(bool(self.peer_id))
        model = "SmolLM2-135M (bundled)" if started.model == "bundled" else started.model
        device = DEVICES.get(started.device, started.device)
        self.swarm.setText(f"Swarm {started.swarm_name} · {model} on {device}")
        # The wizard's form: with the swarm name, or a joiner would gather under its own swarm and see nobody; with
        # the game, or a joiner would play the default one; with a private swarm's secret, or nobody would be admitted.
        self.invite = format_invite(started.swarm_name, list(started.invite), started.game, admission_secret,
                                    started.swarm_epoch, started.round_seconds) \
            if started.invite and not secret_problem else ""
        self.copy_invite.setEnabled(bool(self.invite))
        self.copy_invite.setToolTip(PRIVATE_TIP if admission_secret else PUBLIC_TIP)
        loopback = bool(started.invite) and all(a.startswith(LOOPBACK_PREFIXES) for a in started.invite)
        note = " ".join(filter(None, (secret_problem or (PRIVATE_NOTE if admission_secret else ""),
                                      LOOPBACK_NOTE if self.invite and loopback else "")))
        self.invite_note.setText(note)
        self.invite_note.setVisible(bool(note))

    def set_reachability(self, event: ReachabilityChanged, *, new_swarm: bool) -> None:
        """Show whether peers outside this network can reach the node; the advice in full where friends outside
        cannot join directly, or where this node started the swarm (its invite is the one friends get)."""
        self.reach.setText(event.summary)
        self.reach.setToolTip(event.advice)
        color = REACH_COLORS.get(event.status, REACH_COLORS["unknown"])
        self.reach.setStyleSheet(f"QLabel#reachability {{ color: {color}; font-weight: bold; }}")
        self.reach.show()
        self.reach_note.setText(event.advice)
        self.reach_more.setVisible(new_swarm or event.status != "reachable")
        self._show_reach_note(self.reach_more.isChecked())

    def _show_reach_note(self, shown: bool) -> None:
        self.reach_more.setText(REACH_HIDE if shown else REACH_MORE)
        self.reach_note.setVisible(shown and self.reach_more.isVisibleTo(self))

    def set_resource_limit(self, event: ResourceLimitChanged | None) -> None:
        """"Slowed down by schedule until 18:00 (1 thread)"; hidden at full speed or without a node."""
        summary = event.summary if event is not None else ""
        self.limit.setText(summary[:1].upper() + summary[1:])
        self.limit.setVisible(bool(summary))

    def set_temperatures(self, event: TemperaturesRead | None) -> None:
        if event is None:
            self.temperatures.hide()
            return
        if event.celsius:
            text = " · ".join(f"{name.upper()} {value:.0f} °C" for name, value in sorted(event.celsius.items()))
            tip = "Temperatures the node reads before every round"
        else:
            text, tip = "Temperatures: not readable here", event.note
        self.temperatures.setText(text)
        self.temperatures.setToolTip(tip)
        color = HOT_COLOR if event.hot else "palette(window-text)"
        self.temperatures.setStyleSheet(f"QLabel#temperatures {{ color: {color}; }}")
        self.temperatures.show()

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
