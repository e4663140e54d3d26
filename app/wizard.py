"""First-run setup: identity, hardware, model and swarm. Re-opened from Settings to change any of them."""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QBrush, QColor, QGuiApplication
from PySide6.QtWidgets import (
    QAbstractItemView, QButtonGroup, QCheckBox, QComboBox, QFileDialog, QFormLayout, QGroupBox, QHBoxLayout,
    QHeaderView, QLabel, QLineEdit, QPlainTextEdit, QPushButton, QRadioButton, QSpinBox, QTableWidget,
    QTableWidgetItem, QVBoxLayout, QWidget, QWizard, QWizardPage,
)

from app import fit
from app.saved_swarms import Network, load_networks, save_network
from app.scroll import scroll_area
from app.node_query import NodeQuery
from app.wallet_page import WalletPage
from app.wizard_flow import NUMBERS, START, STEP_COUNT, Choices, Step, next_step
from node.api import LORA_RANK, HardwareReport, ModelFit
from node.config import NodeConfig
from node.errors import NodeError
from node.secret_store import PASSPHRASE_ENV, keyring_available
from node.swarm import admission as swarm_secret
from node.swarm.invite import format_invite, local_addresses, parse_invite
from node.units import format_bytes

GIB = 2**30
FIT_COLORS = {"fits": "#009E73", "tight": "#E69F00", "won't fit": "#D55E00", "unknown": "#7f7f7f"}
LORA_TIP = ("A LoRA adapter trains a few million extra weights beside the frozen model: a fraction of the memory, "
            "the same GRPO. The trained model is uploaded with the adapter merged into it, unless you choose to "
            "upload the adapter alone (Settings).")
# An adapter's few weights want a learning rate about 10x a full fine-tune's (training.lora_rank's description).
LORA_LEARNING_RATE_FACTOR = 10


class WelcomePage(QWizardPage):
    def __init__(self) -> None:
        super().__init__()
        self.setTitle("Welcome to RL Swarm")
        text = QLabel(
            "RL Swarm trains a small language model on this computer together with other people's computers: "
            "every round your model answers a few reasoning questions, shares its answers with the swarm, and "
            "learns from the answers that scored best, yours and your peers'.<br><br>"
            "Setup takes four short steps: <b>1.</b> your identity in the swarm, <b>2.</b> what this computer "
            "has, <b>3.</b> the model to train, <b>4.</b> the swarm to join. Nothing is saved until you press "
            "Finish, and you can change everything later in Settings.")
        text.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.addWidget(text)
        layout.addStretch(1)


# The games a swarm can play (node.config.GAMES): a title and one line on each, for the swarm page.
GAMES = {
    "sapo": ("SAPO rollout sharing",
             "Each node answers its own questions and also trains on the answers its peers share; one update per round."),
    "multistage": ("Answer, critique, revise",
                   "Everyone answers the same questions, judges the peers' answers, then revises its own; "
                   "three updates per round, and it needs peers."),
}

def _size(num_bytes: int) -> str:
    return "none (offline)" if num_bytes == 0 else format_bytes(num_bytes)


def _need(num_bytes: int, label: str) -> str:
    return f"{num_bytes / GIB:.1f} GiB, {label}"


def _indented_note(text: str) -> QLabel:
    """An explanation under a radio button, aligned with its text."""
    label = QLabel(text)
    label.setWordWrap(True)
    label.setContentsMargins(24, 0, 0, 4)
    return label


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


class IdentityPage(QWizardPage):
    def __init__(self, config: NodeConfig) -> None:
        super().__init__()
        self.config = config
        self.peer: dict | None = None
        self.setTitle("Who are you in the swarm?")
        self.setSubTitle("Your node has a peer identity (a key file on this computer). A wallet can additionally "
                         "record your participation on chain.")
        self.local_only = QRadioButton("Local only")
        self.local_only.setChecked(True)
        self.wallet = QRadioButton("Wallet login")
        self.wallet.setChecked(config.chain.network != "none")
        self.peer_label = QLabel("Loading your peer identity…")
        self.peer_label.setObjectName("wizardPeer")
        self.peer_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.peer_label.setWordWrap(True)
        backup = QPushButton("Back up identity…")
        backup.clicked.connect(self._backup)
        restore = QPushButton("Restore from backup…")
        restore.clicked.connect(self._restore)
        box = QGroupBox("Peer identity")
        box_layout = QVBoxLayout(box)
        box_layout.addWidget(self.peer_label)
        buttons = QHBoxLayout()
        buttons.addWidget(backup)
        buttons.addWidget(restore)
        buttons.addStretch(1)
        box_layout.addLayout(buttons)
        layout = QVBoxLayout(self)
        # A radio button's text never wraps: the explanations are labels below, so the page keeps the wizard's width.
        for button, explanation in (
                (self.local_only, "Train and share with peers; nothing is recorded on chain."),
                (self.wallet, "Register this peer on the swarm's coordinator contract and record rewards on chain "
                              "(Gensyn Testnet, a local chain or a custom RPC).")):
            layout.addWidget(button)
            layout.addWidget(_indented_note(explanation))
        layout.addSpacing(12)
        layout.addWidget(box)
        layout.addStretch(1)
        self._query()

    def _identity_args(self) -> list[str]:
        return ["identity", "--data-dir", str(self.config.run.data_dir), "--identity-file", str(self.config.identity_path)]

    def _query(self, *extra: str) -> None:
        self.query = NodeQuery([*self._identity_args(), *extra], self._loaded, self._failed, self)

    def _loaded(self, data: dict) -> None:
        self.peer = data
        self.peer_label.setText(f"<b>{data['name']}</b><br>{data['peer_id']}<br><small>key file: {data['path']}</small>")
        self.completeChanged.emit()

    def _failed(self, message: str) -> None:
        self.peer_label.setText(f"Could not read the peer identity: {message}")

    def _backup(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Back up peer identity", str(Path.home() / "rl-swarm-identity.key"))
        if path:
            self._query("--backup", path)

    def _restore(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Restore peer identity", str(Path.home()))
        if path:
            self._query("--restore", path)

    def isComplete(self) -> bool:  # noqa: N802
        return self.peer is not None


class HardwarePage(QWizardPage):
    def __init__(self) -> None:
        super().__init__()
        self.data: HardwareReport | None = None  # None until the node answered (an empty report if it failed)
        self.setTitle("Your hardware")
        self.setSubTitle("What the node found on this computer, and the settings it recommends.")
        self.found = QLabel("Detecting GPUs and memory…")
        self.found.setObjectName("hardwareFound")
        self.advice = QLabel("")
        self.advice.setObjectName("hardwareAdvice")
        for label in (self.found, self.advice):
            label.setWordWrap(True)
            label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout = QVBoxLayout(self)
        layout.addWidget(self.found)
        layout.addSpacing(8)
        layout.addWidget(self.advice)
        layout.addStretch(1)
        self.query = NodeQuery(["hardware"], self._loaded, self._failed, self)

    def _loaded(self, data: dict) -> None:
        try:
            report = HardwareReport.from_json(data)
        except NodeError as exc:
            self._failed(f"{exc.message}; {exc.hint}")
            return
        self.data = report
        rec = report.recommendation
        kind = {"cuda": "NVIDIA GPU (CUDA)", "mps": "Apple GPU (Metal)", "cpu": "CPU only"}[report.kind]
        self.found.setText(f"<b>{kind}</b><br>{report.hardware.description if report.hardware else ''}")
        recommended = report.model(rec.model)
        threads = f"{rec.threads} CPU thread" + ("s" if rec.threads != 1 else "")
        self.advice.setText(
            f"<b>Recommended:</b> {recommended.name if recommended else rec.model} on {rec.device}, "
            f"training in {rec.train_dtype}, "
            f"{rec.num_generations} completions for each of {rec.local_questions} questions plus "
            f"{rec.external_groups} groups from peers per round, up to {rec.max_new_tokens} new tokens, "
            f"{threads}.<br><br>{rec.reason}"
        )
        self.completeChanged.emit()

    def _failed(self, message: str) -> None:
        self.found.setText(f"Hardware detection failed: {message}. The node will fall back to the CPU.")
        self.data = HardwareReport(None, None, [])  # no advice: the node decides at start
        self.completeChanged.emit()

    def isComplete(self) -> bool:  # noqa: N802
        return self.data is not None


class ModelPage(QWizardPage):
    def __init__(self, config: NodeConfig, hardware: HardwarePage) -> None:
        super().__init__()
        self.config = config
        self.hardware = hardware
        self.setTitle("Which model do you train?")
        self.setSubTitle("Every peer trains its own copy. Memory needed is for one training step with the "
                         "recommended round size, training all weights or a small adapter.")
        self.table = QTableWidget(0, 4)
        self.table.setObjectName("modelTable")
        self.table.setHorizontalHeaderLabels(["Model", "Download", "All weights", "LoRA adapter"])
        self.table.horizontalHeaderItem(2).setToolTip("Full fine-tuning: every weight of the model is trained")
        self.table.horizontalHeaderItem(3).setToolTip(LORA_TIP)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().hide()
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self.table.itemSelectionChanged.connect(self._selected)
        self.full = QRadioButton("Train all weights (full fine-tune)")
        self.full.setObjectName("trainFull")
        self.lora = QRadioButton("Train a LoRA adapter (less memory)")
        self.lora.setObjectName("trainLora")
        self.lora.setToolTip(LORA_TIP)
        self.mode = QButtonGroup(self)
        self.mode.addButton(self.full)
        self.mode.addButton(self.lora)
        self.lora_chosen = config.training.lora_rank > 0  # what the user picked, kept while they browse models
        self.lora.clicked.connect(lambda: self._choose(lora=True))
        self.full.clicked.connect(lambda: self._choose(lora=False))
        modes = QHBoxLayout()
        modes.addWidget(self.full)
        modes.addWidget(self.lora)
        modes.addStretch(1)
        self.note = QLabel("")
        self.note.setWordWrap(True)
        layout = QVBoxLayout(self)
        layout.addWidget(self.table)
        layout.addLayout(modes)
        layout.addWidget(self.note)
        self.models: list[ModelFit] = []

    def initializePage(self) -> None:  # noqa: N802
        report = self.hardware.data
        self.hardware_info = report.hardware if report else None
        # Labels follow total memory, so they do not change between runs with what happens to be free.
        total = fit.budget(self.hardware_info)
        self.models = [dataclasses.replace(m, label=fit.label(m.required_bytes, total),
                                           label_lora=fit.label(m.required_bytes_lora, total)) if total else m
                       for m in (report.models if report else [])]
        recommended = report.recommendation.model if report and report.recommendation else None
        wanted = self.config.training.model if self.config.training.model in {m.id for m in self.models} else recommended
        self.table.setRowCount(len(self.models))
        for row, model in enumerate(self.models):
            name = model.name + ("  ★ recommended" if model.id == recommended else "")
            cells = [(name, None), (_size(model.download_bytes), None),
                     (_need(model.required_bytes, model.label), model.label),
                     (_need(model.required_bytes_lora, model.label_lora) if model.required_bytes_lora else "-",
                      model.label_lora if model.required_bytes_lora else None)]
            for column, (text, label) in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(model.description)
                if label is not None:
                    item.setForeground(QBrush(QColor(FIT_COLORS[label])))
                self.table.setItem(row, column, item)
            if model.id == wanted:
                self.table.selectRow(row)
        self.table.resizeColumnsToContents()
        self.table.horizontalHeader().setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        self._selected()

    def selected(self) -> ModelFit | None:
        rows = self.table.selectionModel().selectedRows()
        return self.models[rows[0].row()] if rows else None

    def trains_lora(self) -> bool:
        return self.lora.isChecked()

    def _choose(self, *, lora: bool) -> None:
        self.lora_chosen = lora
        self._selected()

    def _selected(self) -> None:
        model = self.selected()
        fits_full = model is not None and model.label != "won't fit"
        fits_lora = model is not None and bool(model.required_bytes_lora) and model.label_lora != "won't fit"
        # Keep the user's choice where it fits; otherwise the mode that does.
        lora = (self.lora_chosen and fits_lora) or (not fits_full and fits_lora)
        for button, checked in ((self.lora, lora), (self.full, not lora)):
            button.blockSignals(True)
            button.setChecked(checked)
            button.blockSignals(False)
        self.lora.setEnabled(fits_lora)
        self.full.setEnabled(fits_full or not fits_lora)
        if model is None:
            self.note.setText("")
        elif not fits_full and not fits_lora:
            self.note.setText(f"<b>{model.name} won't fit</b> in this computer's memory, not even as an adapter; "
                              f"pick a smaller model.")
        else:
            download = "nothing to download" if not model.download_bytes else \
                f"downloads {_size(model.download_bytes)} from Hugging Face the first time"
            need = model.required_bytes_lora if lora else model.required_bytes
            how = (f"trains a LoRA adapter in about {format_bytes(need)}" if lora
                   else f"trains all weights in about {format_bytes(need)}")
            if lora and not fits_full:
                how += " (all weights won't fit here)"
            short = fit.free_ram_note(self.hardware_info, need)
            self.note.setText(f"{model.description}; {download}; {how}." + (f"<br><b>{short}</b>" if short else ""))
        self.completeChanged.emit()

    def isComplete(self) -> bool:  # noqa: N802
        model = self.selected()
        if model is None:
            return False
        return (model.label_lora if self.trains_lora() else model.label) != "won't fit"


class SwarmPage(QWizardPage):
    def __init__(self, config: NodeConfig, identity: IdentityPage, networks_file: Path) -> None:
        super().__init__()
        self.config = config
        self.identity = identity
        self.networks_file = networks_file
        self.setTitle("Which swarm?")
        self.setSubTitle("Start a new swarm and invite others, join one with an invite, or use a saved network.")
        self.new = QRadioButton("Start a new swarm")
        self.join = QRadioButton("Join a swarm with an invite")
        self.preset = QRadioButton("Use a saved network")
        self.mode = QButtonGroup(self)
        for index, button in enumerate((self.new, self.join, self.preset)):
            self.mode.addButton(button, index)
        self.mode.idToggled.connect(self._mode_changed)

        self.swarm_name = QLineEdit(config.swarm.swarm_name)
        self.port = QSpinBox(minimum=1024, maximum=65535)
        self.port.setValue(config.swarm.port or free_port())
        self.port.setToolTip("A fixed port keeps your invite the same across restarts; open it in your firewall "
                             "for peers outside this computer")
        self.invite_preview = QLineEdit(readOnly=True)
        self.invite_preview.setObjectName("invitePreview")
        self.copy = QPushButton("Copy invite")
        self.copy.clicked.connect(lambda: QGuiApplication.clipboard().setText(self.invite_preview.text()))
        # The secret is made at Finish (nothing is saved before): the window's header copies the invite that carries it.
        self.private = QCheckBox("Private swarm (only people with the invite can join)")
        self.private.setObjectName("privateSwarm")
        self.private.setChecked(swarm_secret.exists(config.run.data_dir, config.swarm.swarm_name))
        self.private_info = QLabel("Answers shared in the swarm count only when signed with the swarm's secret, which "
                                   "its invite carries: share the invite like a password.")
        self.private_info.setWordWrap(True)
        self.private.toggled.connect(self._update_invite)
        self.private.toggled.connect(self.private_info.setVisible)  # a public swarm has no secret to speak of
        self.private_info.setVisible(self.private.isChecked())
        self.game = QComboBox()
        self.game.setObjectName("gameChoice")
        for game, (title, _) in GAMES.items():
            self.game.addItem(title, game)
        self.game.setCurrentIndex(max(0, self.game.findData(config.swarm.game)))
        self.game_info = QLabel("")
        self.game_info.setWordWrap(True)
        self.game.currentIndexChanged.connect(self._game_changed)
        self.new_box = QWidget()
        new_form = QFormLayout(self.new_box)
        new_form.addRow("Swarm name", self.swarm_name)
        new_form.addRow("Game", self.game)
        new_form.addRow("", self.game_info)
        new_form.addRow("Port", self.port)
        new_form.addRow("", self.private)
        new_form.addRow("", self.private_info)
        invite_row = QHBoxLayout()
        invite_row.addWidget(self.invite_preview, 1)
        invite_row.addWidget(self.copy)
        new_form.addRow("Invite to share", invite_row)
        self.swarm_name.textChanged.connect(self._update_invite)
        self.port.valueChanged.connect(self._update_invite)

        self.invite_text = QPlainTextEdit(placeholderText="Paste the invite here (rl-swarm:join?...)")
        self.invite_text.setObjectName("inviteInput")
        self.invite_text.setMaximumHeight(80)
        self.invite_status = QLabel("")
        self.invite_status.setWordWrap(True)
        self.save_as = QCheckBox("Save as a network named")
        self.save_name = QLineEdit(placeholderText="e.g. Study group swarm")
        self.join_box = QWidget()
        join_layout = QVBoxLayout(self.join_box)
        join_layout.addWidget(self.invite_text)
        join_layout.addWidget(self.invite_status)
        save_row = QHBoxLayout()
        save_row.addWidget(self.save_as)
        save_row.addWidget(self.save_name, 1)
        join_layout.addLayout(save_row)
        self.invite_text.textChanged.connect(self._check_invite)
        self.save_as.toggled.connect(self.completeChanged)
        self.save_name.textChanged.connect(self.completeChanged)

        self.networks = load_networks(networks_file)
        self.preset_combo = QComboBox()
        for network in self.networks:
            self.preset_combo.addItem(network.name)
        self.preset_info = QLabel("")
        self.preset_info.setWordWrap(True)
        self.preset_combo.currentIndexChanged.connect(self._preset_changed)
        self.preset_box = QWidget()
        preset_layout = QVBoxLayout(self.preset_box)
        preset_layout.addWidget(self.preset_combo)
        preset_layout.addWidget(self.preset_info)

        # Without an OS keyring a private swarm's secret is sealed with the secret store's passphrase; the wizard asks
        # for it only when a secret is to be stored and no passphrase is known yet (the wallet page's, the environment).
        self.known_passphrase: Callable[[], str | None] = lambda: None
        self.passphrase = QLineEdit(placeholderText="the same passphrase as your wallet key's or Hugging Face token's")
        self.passphrase.setObjectName("swarmSecretPassphrase")
        self.passphrase.setEchoMode(QLineEdit.EchoMode.Password)
        self.repeat = QLineEdit(placeholderText="type it again")
        self.repeat.setEchoMode(QLineEdit.EchoMode.Password)
        self.passphrase_box = QWidget()
        passphrase_form = QFormLayout(self.passphrase_box)
        passphrase_note = QLabel("There is no OS keyring on this computer: the swarm's secret is stored encrypted with "
                                 "a passphrase, which the app asks for when it starts.")
        passphrase_note.setWordWrap(True)
        passphrase_form.addRow(passphrase_note)
        passphrase_form.addRow("Passphrase", self.passphrase)
        passphrase_form.addRow("Repeat", self.repeat)
        for field in (self.passphrase, self.repeat):
            field.textChanged.connect(self.completeChanged)
        self.secret_status = QLabel("")
        self.secret_status.setObjectName("secretStatus")
        self.secret_status.setWordWrap(True)

        content = QWidget()
        layout = QVBoxLayout(content)
        layout.setContentsMargins(0, 0, 0, 0)
        for button, box in ((self.new, self.new_box), (self.join, self.join_box), (self.preset, self.preset_box)):
            layout.addWidget(button)
            layout.addWidget(box)
        layout.addWidget(self.passphrase_box)
        layout.addStretch(1)
        # A private swarm's passphrase makes the page taller than a laptop screen leaves: it scrolls, and Finish's
        # error stays in view below.
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(scroll_area(content), 1)
        outer.addWidget(self.secret_status)
        (self.join if config.swarm.initial_peers else self.new).setChecked(True)
        if config.swarm.initial_peers:
            self.invite_text.setPlainText(
                format_invite(config.swarm.swarm_name, config.swarm.initial_peers, config.swarm.game))
        self._game_changed()
        self._preset_changed(0)
        self._mode_changed()

    def initializePage(self) -> None:  # noqa: N802
        self._update_invite()

    def _mode_changed(self, *_: object) -> None:
        self.new_box.setEnabled(self.new.isChecked())
        self.join_box.setEnabled(self.join.isChecked())
        self.preset_box.setEnabled(self.preset.isChecked())
        self._update_passphrase()

    def _update_invite(self) -> None:
        peer = self.identity.peer
        private = self.private.isChecked()
        self.copy.setEnabled(peer is not None and not private)
        self.invite_preview.setPlaceholderText(
            "made with the swarm's secret when you press Finish: copy it from the main window (Copy invite)"
            if private else "")
        if peer is None or private:
            self.invite_preview.setText("")
        else:
            self.invite_preview.setText(format_invite(self.swarm_name.text().strip(),
                                                      local_addresses(peer["peer_id"], self.port.value()),
                                                      self.game.currentData()))
            self.invite_preview.setCursorPosition(0)
        self._update_passphrase()

    def admission_secret(self) -> str | None:
        """The secret of the invite being joined, if it carries one."""
        if not self.join.isChecked():
            return None
        try:
            return parse_invite(self.invite_text.toPlainText()).admission_secret
        except NodeError:
            return None

    def stores_secret(self) -> bool:
        """Whether Finish puts a swarm secret into the secret store (a new private swarm, or a private invite)."""
        return (self.new.isChecked() and self.private.isChecked()) or self.admission_secret() is not None

    def needs_passphrase(self) -> bool:
        return (self.stores_secret() and not keyring_available() and not os.environ.get(PASSPHRASE_ENV)
                and not self.known_passphrase())

    def secret_passphrase(self) -> str | None:
        """The secret store's passphrase typed on this page, when it asked for one."""
        return self.passphrase.text() or None if self.needs_passphrase() else None

    def _update_passphrase(self) -> None:
        self.passphrase_box.setVisible(self.needs_passphrase())
        self.secret_status.setText("")
        self.completeChanged.emit()

    def _check_invite(self) -> None:
        text = self.invite_text.toPlainText()
        try:
            invite = parse_invite(text)
        except NodeError as exc:
            self.invite_status.setText(f"<span style='color:#D55E00'>{exc.message}</span> {exc.hint}" if text.strip() else "")
        else:
            swarm = invite.swarm_name or self.config.swarm.swarm_name
            game = GAMES[invite.game or self.config.swarm.game][0]
            private = " It is private: its secret is kept in the secret store." if invite.admission_secret else ""
            self.invite_status.setText(
                f"Joining swarm <b>{swarm}</b> through {len(invite.peers)} address(es); it plays {game}.{private}")
        self._update_passphrase()

    def _game_changed(self, *_: object) -> None:
        self.game_info.setText(GAMES[self.game.currentData()][1])
        self._update_invite()

    def _preset_changed(self, index: int) -> None:
        if 0 <= index < len(self.networks):
            network = self.networks[index]
            peers = f"{len(network.initial_peers)} bootstrap address(es)" if network.initial_peers else "starts its own swarm"
            self.preset_info.setText(f"{network.description} (swarm {network.swarm_name}; {peers})")

    def isComplete(self) -> bool:  # noqa: N802
        if self.needs_passphrase() and (not self.passphrase.text() or self.passphrase.text() != self.repeat.text()):
            return False
        if self.join.isChecked():
            try:
                parse_invite(self.invite_text.toPlainText())
            except NodeError:
                return False
            return not self.save_as.isChecked() or bool(self.save_name.text().strip())
        if self.preset.isChecked():
            return bool(self.networks)
        return bool(self.swarm_name.text().strip())

    def store_secret(self, data_dir: Path, swarm_name: str, passphrase: str | None) -> None:
        """At Finish: a private invite's secret goes into the secret store (never the config), a new private swarm
        gets one (an existing one is kept, so invites already shared stay valid), and a swarm started public forgets
        any it had. An invite without a secret and a saved network leave the store as it is."""
        secret = self.admission_secret()
        if secret:
            swarm_secret.remember(data_dir, swarm_name, secret, passphrase=passphrase)
        elif self.new.isChecked() and self.private.isChecked():
            swarm_secret.create(data_dir, swarm_name, passphrase=passphrase)
        elif self.new.isChecked():
            swarm_secret.forget(data_dir, swarm_name)

    def swarm_settings(self) -> dict:
        if self.join.isChecked():
            invite = parse_invite(self.invite_text.toPlainText())
            settings = {"swarm_name": invite.swarm_name or self.config.swarm.swarm_name,
                        "initial_peers": list(invite.peers), "host": "0.0.0.0", "port": 0,
                        "game": invite.game or self.config.swarm.game}
            if self.save_as.isChecked():
                save_network(self.networks_file, Network(name=self.save_name.text().strip(), **{
                    k: settings[k] for k in ("swarm_name", "initial_peers", "host")}))
            return settings
        if self.preset.isChecked():
            network = self.networks[self.preset_combo.currentIndex()]
            return {"swarm_name": network.swarm_name, "initial_peers": network.initial_peers, "host": network.host,
                    "port": 0}
        return {"swarm_name": self.swarm_name.text().strip(), "initial_peers": [], "host": "0.0.0.0",
                "port": self.port.value(), "game": self.game.currentData()}


WIZARD_SIZE = QSize(860, 720)


def fitted_size(widget: QWidget) -> QSize:
    """The wizard's size: one size for every page (it never grows as pages change), within the screen it opens on
    (a 1024x700 laptop screen leaves less than 720 pixels of height)."""
    screen = widget.screen() or QGuiApplication.primaryScreen()
    if screen is None:
        return WIZARD_SIZE
    room = screen.availableGeometry().size() - QSize(40, 60)  # the window frame and a margin
    return WIZARD_SIZE.boundedTo(room).expandedTo(widget.minimumSizeHint())


class SetupWizard(QWizard):
    """Produces a validated NodeConfig from the current one; nothing is saved until Finish."""

    def __init__(self, config: NodeConfig, networks_file: Path, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("RL Swarm setup")
        self.setWizardStyle(QWizard.WizardStyle.ModernStyle)
        self.setOption(QWizard.WizardOption.NoBackButtonOnStartPage)
        self.config = config
        self.identity_page = IdentityPage(config)
        self.wallet_page = WalletPage(config)
        self.welcome_page = WelcomePage()
        self.hardware_page = HardwarePage()
        self.model_page = ModelPage(config, self.hardware_page)
        self.swarm_page = SwarmPage(config, self.identity_page, networks_file)
        self.swarm_page.known_passphrase = self._wallet_passphrase
        self.pages: dict[Step, QWizardPage] = {
            Step.WELCOME: self.welcome_page, Step.IDENTITY: self.identity_page, Step.WALLET: self.wallet_page,
            Step.HARDWARE: self.hardware_page, Step.MODEL: self.model_page, Step.SWARM: self.swarm_page}
        for step, page in self.pages.items():
            self.setPage(step, page)
            if step in NUMBERS:
                page.setTitle(f"Step {NUMBERS[step]} of {STEP_COUNT}: {page.title()}")
        self.setStartId(START)
        self.resize(fitted_size(self))
        self.result_config: NodeConfig | None = None

    def choices(self) -> Choices:
        return Choices(wallet=self.identity_page.wallet.isChecked())

    def nextId(self) -> int:  # noqa: N802
        """The page after the current one, from the flow table; -1 makes the current page the last (Finish)."""
        if self.currentPage() is None:
            return -1
        step = next_step(Step(self.currentId()), self.choices())
        return -1 if step is None else step

    @property
    def passphrase(self) -> str | None:
        """The secret-store passphrase the wallet page unlocked with, or the one the swarm page asked for to store a
        private swarm's secret (the node needs it too; never saved)."""
        return self._wallet_passphrase() or self.swarm_page.secret_passphrase()

    def _wallet_passphrase(self) -> str | None:
        return self.wallet_page.passphrase_used if self.identity_page.wallet.isChecked() else None

    def _training_mode(self) -> dict:
        """lora_rank and the learning rate for the chosen mode; a learning rate the user set is kept."""
        current = self.config.training
        default = type(current).model_fields["learning_rate"].default
        lora = self.model_page.trains_lora()
        ours = {default, default * LORA_LEARNING_RATE_FACTOR}  # the rates this page sets; any other is the user's
        rate = current.learning_rate
        if rate in ours:
            rate = default * LORA_LEARNING_RATE_FACTOR if lora else default
        return {"lora_rank": LORA_RANK if lora else 0, "learning_rate": rate}

    def accept(self) -> None:
        report = self.hardware_page.data
        rec = report.recommendation if report else None
        model = self.model_page.selected()
        training = {"model": model.id if model else self.config.training.model, **self._training_mode()}
        if rec:
            training.update(device="auto", local_questions=rec.local_questions, external_groups=rec.external_groups,
                            num_generations=rec.num_generations, max_new_tokens=rec.max_new_tokens,
                            micro_batch_groups=rec.micro_batch_groups)
        try:
            chain = self.wallet_page.chain_settings() if self.identity_page.wallet.isChecked() else \
                {"network": "none", "rpc_url": None, "chain_id": None, "coordinator": None}
            self.result_config = self.config.update(
                {"training": training, "swarm": self.swarm_page.swarm_settings(), "chain": chain})
            self.swarm_page.store_secret(self.result_config.run.data_dir, self.result_config.swarm.swarm_name,
                                         self.passphrase)
        except NodeError as exc:
            self.result_config = None
            self.swarm_page.secret_status.setText(f"<span style='color:#D55E00'>{exc.message}</span> {exc.hint}")
            return
        super().accept()
