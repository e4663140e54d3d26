"""The wizard's wallet login: network, then a wallet created (phrase shown once, confirmed) or imported."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtWidgets import (
    QButtonGroup, QComboBox, QFileDialog, QFormLayout, QGroupBox, QHBoxLayout, QLabel, QLineEdit, QPlainTextEdit,
    QPushButton, QRadioButton, QStackedWidget, QVBoxLayout, QWidget, QWizardPage,
)

from app.errors import ErrorLabel, Problem
from app.scroll import scroll_area
from app.worker import Worker
from node.chain.networks import PRESETS, rpc_health
from node.chain.wallet import PendingWallet, WalletStore, new_wallet
from node.config import NodeConfig
from node.errors import NodeError
from node.secret_store import keyring_available

CREATE, PHRASE, KEY, KEYSTORE = range(4)


COORDINATOR_NOTES = {
    "gensyn-testnet": "Gensyn's official swarm is paused: paste the coordinator address your swarm's organiser gives "
                      "you, or go back and choose Local only.",
    "local": "Deploy one with `rl-swarm-node chain devnet` and paste the address it prints.",
    "custom": "Paste the SwarmCoordinator address of the swarm you join (0x followed by 40 hex digits).",
}


class WalletPage(QWizardPage):
    def __init__(self, config: NodeConfig) -> None:
        super().__init__()
        self.config = config
        self.pending: PendingWallet | None = None
        self.passphrase_used: str | None = None
        self.setTitle("Wallet login")
        self.setSubTitle("Your wallet registers your peer identity with the swarm's coordinator contract and "
                         "signs your reward submissions. Its key never leaves this computer.")
        self.worker = Worker()
        self.worker.done.connect(self._health)
        self.worker.failed.connect(lambda exc: self.network_status.show_problem(Problem.of(exc)))

        self.network = QComboBox()
        for preset in PRESETS.values():
            self.network.addItem(preset.label, preset.key)
        self.rpc = QLineEdit()
        self.chain_id = QLineEdit()
        self.chain_id.setPlaceholderText("any (development chain)")
        self.coordinator = QLineEdit(config.chain.coordinator or "")
        self.coordinator.setPlaceholderText("0x… (40 hex digits) the SwarmCoordinator contract of your swarm")
        check = QPushButton("Check network")
        check.clicked.connect(self.check_network)
        self.network_status = ErrorLabel()
        self.network_status.setObjectName("networkStatus")
        self.coordinator_note = QLabel("")
        self.coordinator_note.setObjectName("coordinatorNote")
        self.coordinator_note.setWordWrap(True)
        self.network.currentIndexChanged.connect(self._preset_changed)
        current = config.chain.network if config.chain.network != "none" else "gensyn-testnet"
        self.network.setCurrentIndex(max(0, self.network.findData(current)))
        self._preset_changed()
        if config.chain.rpc_url:
            self.rpc.setText(config.chain.rpc_url)
        network_box = QGroupBox("Network")
        network_form = QFormLayout(network_box)
        network_form.addRow("Network", self.network)
        network_form.addRow("RPC URL", self.rpc)
        network_form.addRow("Chain id", self.chain_id)
        network_form.addRow("Coordinator", self.coordinator)
        network_form.addRow("", self.coordinator_note)
        row = QHBoxLayout()
        row.addWidget(check)
        row.addWidget(self.network_status, 1)
        network_form.addRow(row)

        self.store = WalletStore(config.run.data_dir, config.chain.wallet)
        self.existing = self.store.info()
        self.existing_label = QLabel(f"Use the wallet <b>{self.existing.address}</b> already on this computer."
                                     if self.existing else "")
        self.mode = QButtonGroup(self)
        mode_row = QHBoxLayout()
        for index, text in enumerate(("Create a new wallet", "Import a recovery phrase", "Import a private key",
                                      "Import a keystore file")):
            button = QRadioButton(text)
            self.mode.addButton(button, index)
            mode_row.addWidget(button)
        self.mode.button(CREATE).setChecked(True)
        self.pages = QStackedWidget()
        self.mode.idToggled.connect(lambda index, on: on and self.pages.setCurrentIndex(index))

        create = QWidget()
        create_layout = QVBoxLayout(create)
        generate = QPushButton("Generate recovery phrase")
        generate.clicked.connect(self.generate)
        self.words = QLabel("")
        self.words.setObjectName("recoveryPhrase")
        self.words.setWordWrap(True)
        self.words.setMinimumHeight(125)
        self.quiz_form = QFormLayout()
        self.quiz: dict[int, QLineEdit] = {}
        create_layout.addWidget(generate)
        create_layout.addWidget(self.words)
        create_layout.addLayout(self.quiz_form)
        create_layout.addStretch(1)
        self.phrase = QPlainTextEdit(placeholderText="the 12 or 24 words, in order")
        self.phrase.setMaximumHeight(70)
        self.private_key = QLineEdit(placeholderText="0x… (64 hex digits)")
        self.private_key.setEchoMode(QLineEdit.EchoMode.Password)
        keystore = QWidget()
        keystore_form = QFormLayout(keystore)
        self.keystore_path = QLineEdit()
        browse = QPushButton("Browse…")
        browse.clicked.connect(self._browse)
        path_row = QHBoxLayout()
        path_row.addWidget(self.keystore_path, 1)
        path_row.addWidget(browse)
        self.keystore_password = QLineEdit()
        self.keystore_password.setEchoMode(QLineEdit.EchoMode.Password)
        keystore_form.addRow("Keystore file", path_row)
        keystore_form.addRow("Its password", self.keystore_password)
        for widget in (create, self.phrase, self.private_key, keystore):
            self.pages.addWidget(widget)

        self.passphrase = QLineEdit()
        self.passphrase.setEchoMode(QLineEdit.EchoMode.Password)
        self.passphrase.setPlaceholderText("at least 8 characters")
        self.repeat = QLineEdit()
        self.repeat.setEchoMode(QLineEdit.EchoMode.Password)
        self.file_store = not keyring_available()
        wallet_box = QGroupBox("Wallet")
        wallet_layout = QVBoxLayout(wallet_box)
        if self.existing:
            wallet_layout.addWidget(self.existing_label)
        else:
            wallet_layout.addLayout(mode_row)
            wallet_layout.addWidget(self.pages)
        if self.file_store:
            note = QLabel("There is no OS keyring on this computer: the key is stored encrypted with this passphrase.")
            note.setWordWrap(True)
            wallet_layout.addWidget(note)
            secret_form = QFormLayout()
            secret_form.addRow("Passphrase", self.passphrase)
            if not self.existing:
                secret_form.addRow("Repeat", self.repeat)
            wallet_layout.addLayout(secret_form)
        self.error = QLabel("")
        self.error.setObjectName("walletError")
        self.error.setWordWrap(True)
        self.error.setStyleSheet("color: #D55E00")
        content = QWidget()
        layout = QVBoxLayout(content)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(network_box)
        layout.addWidget(wallet_box)
        layout.addStretch(1)
        # The phrase, its quiz and the passphrase need more height than a 700-pixel screen leaves: scroll. Next's
        # error stays below the scrolled part, always in view, or Next would seem to do nothing.
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        outer.addWidget(scroll_area(content), 1)
        outer.addWidget(self.error)

    # -- network -------------------------------------------------------------------------------------------

    def _preset_changed(self, *_: object) -> None:
        preset = PRESETS[self.network.currentData()]
        self.rpc.setText(preset.rpc_url or "")
        self.chain_id.setText(str(preset.chain_id) if preset.chain_id else "")
        self.chain_id.setReadOnly(preset.key == "gensyn-testnet")
        self.coordinator_note.setText(COORDINATOR_NOTES.get(preset.key, ""))

    def check_network(self) -> None:
        url, expected = self.rpc.text().strip(), self._chain_id()
        self.network_status.show_info("Asking the RPC for its chain id and latest block…")
        self.worker.run(lambda: rpc_health(url, expected, timeout_s=self.config.chain.rpc_timeout_s), "rpc-health")

    def _health(self, health) -> None:
        if health.ok:
            self.network_status.show_info(f"Connected: chain {health.chain_id}, block {health.block_number}, "
                                          f"{health.latency_ms:.0f} ms.")
        elif health.chain_id is not None:
            self.network_status.show_problem(Problem(
                f"This RPC serves chain {health.chain_id}, not the chosen network.",
                "Pick the network that matches, or correct the RPC URL.", health.message))
        else:
            self.network_status.show_problem(Problem(
                "The network's RPC does not answer.",
                "Check the internet connection and the RPC URL, then press Check network again.", health.message))

    def _chain_id(self) -> int | None:
        text = self.chain_id.text().strip()
        return int(text) if text.isdigit() else None

    # -- wallet --------------------------------------------------------------------------------------------

    def generate(self) -> None:
        self.pending = new_wallet()
        numbered = "  ".join(f"{i}. {w}" for i, w in enumerate(self.pending.words, 1))
        self.words.setText(f"<b>Write these words down, in order. They are shown only once and are the only way "
                           f"to recover this wallet.</b><br><br>{numbered}<br><br>Address: {self.pending.address}")
        while self.quiz_form.rowCount():
            self.quiz_form.removeRow(0)
        self.quiz = {}
        for position in self.pending.quiz:
            self.quiz[position] = QLineEdit()
            self.quiz_form.addRow(f"Word #{position}", self.quiz[position])

    def _browse(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Keystore file", str(Path.home()), "Keystore (*.json);;All files (*)")
        if path:
            self.keystore_path.setText(path)

    def validatePage(self) -> bool:  # noqa: N802
        try:
            self._save()
        except NodeError as exc:
            self.error.setText(Problem.of(exc).text())
            return False
        self.error.setText("")
        return True

    def _save(self) -> None:
        passphrase = None
        if self.file_store:
            passphrase = self.passphrase.text()
            if not self.existing and passphrase != self.repeat.text():
                raise NodeError("The passphrases differ", hint="type the same passphrase twice", code="passphrase_mismatch")
        store = WalletStore(self.config.run.data_dir, self.config.chain.wallet, passphrase=passphrase)
        if self.existing:
            store.unlock()  # proves the passphrase now rather than when the node starts
        else:
            mode = self.mode.checkedId()
            if mode == CREATE:
                if self.pending is None:
                    raise NodeError("No wallet generated yet", hint="press Generate recovery phrase", code="no_wallet")
                store.save_new(self.pending, {i: edit.text() for i, edit in self.quiz.items()})
                self.words.setText("Wallet saved. The recovery phrase is not shown again.")
                self.pending = None
            elif mode == PHRASE:
                store.import_mnemonic(self.phrase.toPlainText())
            elif mode == KEY:
                store.import_private_key(self.private_key.text().strip())
            else:
                store.import_keystore(Path(self.keystore_path.text()), self.keystore_password.text())
            self.existing = store.info()
        self.passphrase_used = passphrase

    def chain_settings(self) -> dict:
        return {"network": self.network.currentData(), "rpc_url": self.rpc.text().strip() or None,
                "chain_id": self._chain_id(), "coordinator": self.coordinator.text().strip() or None}
