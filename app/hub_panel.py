"""Publish the trained model to the Hugging Face Hub: token, repo, one button, a progress bar in bytes.

The token check runs in a worker thread (a network call); the upload itself runs as ``rl-swarm-node upload
--events-jsonl`` in a child process, so the GUI never imports torch and training goes on in the node process.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Signal, Slot
from PySide6.QtWidgets import (
    QCheckBox, QFormLayout, QGroupBox, QHBoxLayout, QLabel, QLineEdit, QProgressBar, QPushButton, QSpinBox,
    QVBoxLayout, QWidget,
)

from app.errors import ErrorLabel, Problem
from app.worker import Worker
from node.config import NodeConfig
from node.errors import NodeError
from node.events import Event, UploadFailed, UploadFinished, UploadProgress
from node.hub.auth import PASSPHRASE_ENV, TOKEN_SECRET, HubAccount, login, logout, token_store, validate_token
from node.hub.upload import default_repo_id
from node.process_client import NodeProcess
from node.units import format_bytes


class HubPanel(QWidget):
    uploadFinished = Signal(object)  # UploadFinished
    uploadFailed = Signal(object)  # UploadFailed
    unlocked = Signal(str)  # the secret-store passphrase that opened the token, for the node's automatic uploads
    settingsChanged = Signal(object)  # a new NodeConfig (auto-upload interval, privacy, repo)
    _uploadEvent = Signal(object)  # from the upload process's reader thread to the GUI thread
    _uploadExited = Signal(int, object)  # exit code, the NodeProcess

    def __init__(self, config: NodeConfig, config_path: Path, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.config = config
        self.config_path = config_path
        self.account: HubAccount | None = None
        self.peer_name = ""
        self.process: NodeProcess | None = None
        # Set by the window while a node trains: asks it for a checkpoint, then calls back (the upload reads the latest)
        self.before_upload: Callable[[Callable[[], None]], None] | None = None
        self._uploadEvent.connect(self._on_upload_event)
        self._uploadExited.connect(self._finished)
        self.worker = Worker()
        self.worker.done.connect(self._account_ready)
        self.worker.failed.connect(self._account_failed)

        self.store_note = QLabel("")
        self.store_note.setWordWrap(True)
        self.account_label = QLabel("Not logged in.")
        self.account_label.setObjectName("hubAccount")
        self.account_label.setWordWrap(True)
        self.token = QLineEdit(placeholderText="hf_… (a token with write access)")
        self.token.setEchoMode(QLineEdit.EchoMode.Password)
        self.passphrase = QLineEdit(placeholderText="passphrase of the encrypted secret store")
        self.passphrase.setEchoMode(QLineEdit.EchoMode.Password)
        self.login_button = QPushButton("Log in")
        self.login_button.clicked.connect(self.log_in)
        self.logout_button = QPushButton("Log out")
        self.logout_button.clicked.connect(self.log_out)
        account_box = QGroupBox("Hugging Face account")
        account_form = QFormLayout(account_box)
        account_form.addRow(self.account_label)
        self.account_error = ErrorLabel()
        self.account_error.setObjectName("hubAccountError")
        account_form.addRow(self.account_error)
        account_form.addRow("Token", self.token)
        account_form.addRow("Passphrase", self.passphrase)
        buttons = QHBoxLayout()
        buttons.addWidget(self.login_button)
        buttons.addWidget(self.logout_button)
        buttons.addStretch(1)
        account_form.addRow(buttons)
        account_form.addRow(self.store_note)

        self.repo = QLineEdit(config.upload.repo_id or "")
        self.repo.setObjectName("hubRepo")
        self.repo.setPlaceholderText("<user>/<model>-swarm-<peer name>")
        self.private = QCheckBox("Private repository (only you can see it)")
        self.private.setChecked(config.upload.private)
        self.every = QSpinBox(minimum=0, maximum=100_000, suffix=" rounds")
        self.every.setSpecialValueText("off")
        self.every.setValue(config.upload.every_rounds)
        self.every.setToolTip("Upload the newest checkpoint automatically; only changed files are sent. "
                              "Takes effect when the node starts again.")
        save = QPushButton("Save upload settings")
        save.clicked.connect(self._save_settings)
        self.upload_button = QPushButton("Upload the latest checkpoint")
        self.upload_button.setObjectName("uploadButton")
        self.upload_button.clicked.connect(self.upload)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(self.cancel)
        self.progress = QProgressBar()
        self.progress.setFormat("")
        self.progress.setTextVisible(True)
        self.result = QLabel("")
        self.result.setObjectName("uploadResult")
        self.result.setWordWrap(True)
        self.result.setOpenExternalLinks(True)
        upload_box = QGroupBox("Publish")
        upload_form = QFormLayout(upload_box)
        upload_form.addRow("Repository", self.repo)
        upload_form.addRow("", self.private)
        self.every.setMaximumWidth(180)
        upload_form.addRow("Automatic upload every", self.every)
        save_row = QHBoxLayout()
        save_row.addWidget(save)
        save_row.addStretch(1)
        upload_form.addRow("", save_row)
        row = QHBoxLayout()
        row.addWidget(self.upload_button)
        row.addWidget(self.cancel_button)
        row.addStretch(1)
        upload_form.addRow(row)
        upload_form.addRow(self.progress)
        upload_form.addRow(self.result)

        layout = QVBoxLayout(self)
        layout.addWidget(account_box)
        layout.addWidget(upload_box)
        layout.addStretch(1)
        self.refresh_store()

    # -- account -------------------------------------------------------------------------------------------

    def refresh_store(self) -> None:
        store = token_store(self.config.run.data_dir)
        self.file_store = file_store = store.backend == "file"
        self.passphrase.setVisible(file_store)
        self.store_note.setText(
            "There is no OS keyring on this computer: the token is stored encrypted with your passphrase, "
            "never in plain text." if file_store else "The token is kept in the OS keyring, never in a file.")
        if store.has(TOKEN_SECRET) and self.account is None:
            self.account_label.setText("A token is stored. Enter the passphrase and log in to check it."
                                       if file_store else "A token is stored; checking it…")
            if not file_store:
                self._check_stored()
        self._update_buttons()

    def _check_stored(self) -> None:
        data_dir, endpoint = self.config.run.data_dir, self.config.upload.endpoint
        passphrase = self.passphrase.text() or None

        def check() -> HubAccount:
            token = token_store(data_dir, passphrase).get(TOKEN_SECRET)
            if not token:
                raise NodeError("No token is stored.", hint="paste a write token and log in", code="hub_no_token")
            return validate_token(token, endpoint)

        self.worker.run(check, "hub-account")

    def log_in(self) -> None:
        token = self.token.text().strip()
        if not token:
            self._check_stored()
            return
        data_dir, endpoint = self.config.run.data_dir, self.config.upload.endpoint
        passphrase = self.passphrase.text() or None
        self.account_label.setText("Checking the token with the Hub…")
        self.account_error.clear()
        self.login_button.setEnabled(False)
        self.worker.run(lambda: login(data_dir, token, endpoint=endpoint, passphrase=passphrase))

    def log_out(self) -> None:
        logout(self.config.run.data_dir)
        self.account = None
        self.account_label.setText("Logged out; the token was removed.")
        self._update_buttons()

    def _account_ready(self, account: HubAccount) -> None:
        self.account = account
        if self.file_store and self.passphrase.text():
            self.unlocked.emit(self.passphrase.text())
        self.token.clear()
        self.account_label.setText(f"Logged in as <b>{account.name}</b> (token {account.token_name!r}, "
                                   f"{account.role}).")
        self._suggest_repo()
        self._update_buttons()

    def _account_failed(self, exc: Exception) -> None:
        self.account_error.show_problem(Problem.of(exc))
        self.account_label.setText("Not logged in.")
        self._update_buttons()

    def set_peer_name(self, name: str) -> None:
        self.peer_name = name
        self._suggest_repo()

    def _suggest_repo(self) -> None:
        if self.account and self.peer_name and not self.repo.text().strip():
            self.repo.setText(default_repo_id(self.account.name, self.config.training.model, self.peer_name))

    def _update_buttons(self) -> None:
        uploading = self.process is not None
        self.login_button.setEnabled(not uploading)
        self.logout_button.setEnabled(not uploading and token_store(self.config.run.data_dir).has(TOKEN_SECRET))
        self.upload_button.setEnabled(not uploading and self.account is not None)
        self.cancel_button.setEnabled(uploading)

    def _save_settings(self) -> None:
        try:
            config = self.config.update({"upload": {"private": self.private.isChecked(),
                                                         "every_rounds": self.every.value(),
                                                         "repo_id": self.repo.text().strip() or None}})
        except NodeError as exc:
            self.result.setText(Problem.of(exc).text())
            return
        self.settingsChanged.emit(config)

    def set_config(self, config: NodeConfig) -> None:
        self.config = config
        self.refresh_store()

    # -- upload --------------------------------------------------------------------------------------------

    def upload(self) -> None:
        """Upload the latest checkpoint; with ``before_upload`` set (a running node), it saves one first."""
        if self.before_upload is None:
            self._start_upload()
            return
        self.upload_button.setEnabled(False)
        self.progress.setRange(0, 0)
        self.progress.setFormat("saving a checkpoint of the latest rounds first…")
        self.result.setText("")
        self.before_upload(self._start_upload)

    def _start_upload(self) -> None:
        args = ["upload", "--config", str(self.config_path), "--private" if self.private.isChecked() else "--public"]
        if self.repo.text().strip():
            args += ["--repo", self.repo.text().strip()]
        environment = {}
        if self.file_store and self.passphrase.text():
            environment[PASSPHRASE_ENV] = self.passphrase.text()  # environment only, never a file
        process = NodeProcess(args, env=environment, on_event=self._uploadEvent.emit, name="upload")
        process.on_exit = lambda code: self._uploadExited.emit(code, process)
        self.progress.setRange(0, 0)
        self.progress.setFormat("preparing (hashing files, comparing with the repo)…")
        self.result.setText("")
        try:
            process.start()
        except OSError as exc:
            self.result.setText(f"The upload could not start: {exc}")
            return
        self.process = process
        self._update_buttons()

    def cancel(self) -> None:
        if self.process is not None:
            self.process.send("cancel")

    @Slot(object)
    def _on_upload_event(self, event: Event) -> None:
        if isinstance(event, UploadProgress) and event.bytes_total:
            scale = max(1, event.bytes_total // 2**30 + 1)  # QProgressBar counts in int32
            self.progress.setRange(0, event.bytes_total // scale)
            self.progress.setValue(event.bytes_done // scale)
            self.progress.setFormat(f"{format_bytes(event.bytes_done)} of {format_bytes(event.bytes_total)}")
        elif isinstance(event, UploadFinished):
            self.progress.setRange(0, 1)
            self.progress.setValue(1)
            self.progress.setFormat("done")
            what = "already up to date" if event.commit is None else \
                f"{event.files_uploaded} files, {format_bytes(event.bytes_sent)} sent"
            self.result.setText(f"Published the checkpoint of round {event.round} to "
                                f"<a href='{event.url}'>{event.repo_id}</a> ({what}).")
            self.uploadFinished.emit(event)
        elif isinstance(event, UploadFailed):
            self.progress.setRange(0, 1)
            self.progress.setValue(0)
            self.progress.setFormat("not uploaded")
            self.result.setText(html.escape(Problem(event.message, event.hint).text()))
            self.uploadFailed.emit(event)

    @Slot(int, object)
    def _finished(self, code: int, process: NodeProcess) -> None:
        if process is not self.process:
            return
        self.process = None
        if code != 0 and not self.result.text():
            error = process.output_tail(1) or process.exit_reason().description
            self.result.setText(f"The upload stopped: {error}")
        self._update_buttons()

