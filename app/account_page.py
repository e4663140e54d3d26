"""The account page: wallet address and balance, network status, registration, on-chain totals, transactions."""

from __future__ import annotations

import html
import time

from PySide6.QtCore import Qt, QTimer
from PySide6.QtWidgets import (
    QAbstractItemView, QFormLayout, QGroupBox, QHeaderView, QLabel, QPushButton, QTableWidget, QTableWidgetItem,
    QVBoxLayout, QWidget,
)

from app.errors import Problem
from app.worker import Worker
from node.chain.account import AccountSummary, account_summary
from node.chain.wallet import WalletStore
from node.config import NodeConfig
from node.events import ChainStatus, ChainTransaction

REFRESH_MS = 60_000


def coordinator_text(version: str, round_: int | None, stage: int | None, stages: int | None) -> str:
    """“SwarmCoordinator 0.5.1 · round 4, stage 2 of 3”: the detected interface version and the chain's position."""
    where = "—" if round_ is None else f"round {round_}"
    if round_ is not None and stages is not None and stages > 1 and stage is not None:
        where += f", stage {stage + 1} of {stages}"
    return f"SwarmCoordinator {version} · {where}" if version else where


def waiting_text(waiting: dict[tuple[int, int], str]) -> str:
    """The rewards that wait for the chain's stage window, oldest first, in plain words."""
    if not waiting:
        return "—"
    lines = [f"reward of round {round_}, stage {stage + 1}: {html.escape(message, quote=False)}"
             for (round_, stage), message in sorted(waiting.items())]
    return "<br>".join(lines)


def _link(url: str | None, text: str) -> str:
    return f"<a href='{url}'>{text}</a>" if url else text


class AccountPage(QWidget):
    def __init__(self, config: NodeConfig, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.config = config
        self.peer_id: str | None = None
        self.summary: AccountSummary | None = None
        self.waiting: dict[tuple[int, int], str] = {}  # (round, stage) of rewards waiting for a stage window
        self.worker = Worker()
        self.worker.done.connect(self._show)
        self.worker.failed.connect(lambda exc: self.status.setText(Problem.of(exc).text()))
        self.status = QLabel("")
        self.status.setObjectName("accountStatus")
        self.status.setWordWrap(True)
        self.fields: dict[str, QLabel] = {}
        box = QGroupBox("Account")
        form = QFormLayout(box)
        for key, label in (("address", "Wallet"), ("balance", "Balance"), ("network", "Network"),
                           ("registration", "Peer registration"), ("round", "Coordinator"),
                           ("rewards", "Total rewards"), ("wins", "Total wins"), ("votes", "Participation"),
                           ("waiting", "Waiting for a stage")):
            self.fields[key] = QLabel("—")
            self.fields[key].setOpenExternalLinks(True)
            self.fields[key].setWordWrap(True)
            form.addRow(label, self.fields[key])
        self.fields["waiting"].setTextFormat(Qt.TextFormat.RichText)  # one line per reward, escaped
        self.refresh_button = QPushButton("Refresh")
        self.refresh_button.clicked.connect(self.refresh)
        self.transactions = QTableWidget(0, 4)
        self.transactions.setHorizontalHeaderLabels(["When", "What", "Status", "Transaction"])
        self.transactions.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.transactions.verticalHeader().hide()
        self.transactions.horizontalHeader().setSectionResizeMode(3, QHeaderView.ResizeMode.Stretch)
        layout = QVBoxLayout(self)
        layout.addWidget(self.status)
        layout.addWidget(box)
        layout.addWidget(self.refresh_button)
        layout.addWidget(QLabel("Recent transactions"))
        layout.addWidget(self.transactions, 1)
        self.timer = QTimer(self, interval=REFRESH_MS)
        self.timer.timeout.connect(self.refresh)
        self.set_config(config)

    def set_config(self, config: NodeConfig) -> None:
        self.config = config
        on_chain = config.chain.network != "none"
        self.refresh_button.setEnabled(on_chain)
        if on_chain:
            self.timer.start()
            self.refresh()
        else:
            self.timer.stop()
            self.status.setText("Local only: no wallet, nothing is recorded on chain. Choose “Wallet login” in the "
                                "setup wizard (Settings) to join an on-chain swarm.")

    def set_peer(self, peer_id: str) -> None:
        self.peer_id = peer_id
        self.refresh()

    def refresh(self) -> None:
        if self.config.chain.network == "none":
            return
        info = WalletStore(self.config.run.data_dir, self.config.chain.wallet).info()
        if info is None:
            self.status.setText("No wallet is set up yet: run the setup wizard from Settings.")
            return
        config, peer_id = self.config, self.peer_id
        self.status.setText("Reading the chain…")
        self.worker.run(lambda: account_summary(config, info.address, peer_id), "account-summary")

    def on_event(self, event: object) -> None:
        """Live updates from the node: its view of the chain, and each submission as it lands."""
        if isinstance(event, ChainStatus):
            state = "connected" if event.connected else "not reachable"
            self.fields["network"].setText(f"{event.network} ({state}; block {event.block_number}) {event.message}")
            if event.chain_round is not None:
                self.fields["round"].setText(coordinator_text(
                    event.coordinator_version, event.chain_round, event.chain_stage, event.stage_count))
        elif isinstance(event, ChainTransaction):
            if event.action == "reward" and event.round is not None and event.stage is not None:
                key = (event.round, event.stage)
                if event.status == "waiting_for_stage":
                    self.waiting[key] = event.message
                else:  # sent, or waiting for something else now (the RPC)
                    self.waiting.pop(key, None)
                self.fields["waiting"].setText(waiting_text(self.waiting))
            self.refresh()

    def _show(self, s: AccountSummary) -> None:
        self.summary = s
        self.status.setText("; ".join(s.problems) if s.problems else f"Updated {time.strftime('%H:%M:%S')}.")
        self.fields["address"].setText(_link(s.address_url, s.address))
        self.fields["balance"].setText("unknown" if s.balance_eth is None else f"{s.balance_eth} ETH")
        rpc = f"chain {s.rpc.chain_id}, block {s.rpc.block_number}" if s.rpc.ok else s.rpc.message
        self.fields["network"].setText(f"{s.network_label}: {rpc}")
        if s.owned_by_other:
            registration = (f"<span style='color:#D55E00'>this peer identity belongs to another wallet "
                            f"({s.owner}); restore your own identity file or start a new one</span>")
        else:
            registration = {True: "registered to this wallet", False: "not registered yet (the node registers at "
                            "start)", None: "unknown"}[s.registered]
        self.fields["registration"].setText(registration)
        self.fields["round"].setText(coordinator_text(s.coordinator_version, s.chain_round, s.chain_stage,
                                                      s.stage_count))
        for key, value in (("rewards", s.total_rewards), ("wins", s.total_wins),
                           ("votes", s.votes_cast)):
            self.fields[key].setText("—" if value is None else str(value))
        self.transactions.setRowCount(len(s.transactions))
        for row, tx in enumerate(s.transactions):
            what = tx.action + (f" (round {tx.round})" if tx.round is not None else "")
            for column, text in enumerate((time.strftime("%Y-%m-%d %H:%M", time.localtime(tx.time)), what,
                                           tx.status, tx.tx_hash or tx.message)):
                item = QTableWidgetItem(text)
                if column == 3 and tx.explorer_url:
                    item.setToolTip(tx.explorer_url)
                self.transactions.setItem(row, column, item)
