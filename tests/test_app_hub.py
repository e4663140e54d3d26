"""The app's Hugging Face tab against the loopback Hub: a read-only token refused, login, one-click upload."""

from __future__ import annotations

import pytest

from node.hub.auth import PASSPHRASE_ENV
from tests.apphelpers import make_window
from tests.hubserver import HubServer, Token
from tests.test_hub_upload import READ, WRITE, make_run

UPLOAD_MS = 240_000  # the upload runs in a node CLI process that imports torch


@pytest.fixture
def hub(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # the token check runs in this process
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # the upload runs in a child process
    with HubServer(tmp_path / "hub", {WRITE: Token("alice", "write"), READ: Token("alice", "read")}) as server:
        yield server


def test_log_in_and_publish_from_the_app(qtbot, tmp_path, tiny_model_dir, hub):
    config = make_run(tmp_path, tiny_model_dir, rounds=3, upload={"endpoint": hub.url})
    window = make_window(qtbot, config)
    panel = window.hub
    assert panel.file_store  # no keyring on this machine: the token is sealed with a passphrase
    assert not panel.upload_button.isEnabled()
    panel.passphrase.setText("correct horse battery")

    panel.token.setText(READ)
    panel.login_button.click()
    qtbot.waitUntil(lambda: "write" in panel.account_error.text() and panel.login_button.isEnabled(), timeout=30_000)
    assert panel.account is None and not panel.upload_button.isEnabled()

    panel.token.setText(WRITE)
    panel.login_button.click()
    qtbot.waitUntil(lambda: panel.account is not None, timeout=30_000)
    assert "alice" in panel.account_label.text() and panel.token.text() == ""
    assert window.supervisor.environment[PASSPHRASE_ENV] == "correct horse battery"  # for automatic uploads
    assert WRITE.encode() not in b"".join(p.read_bytes() for p in config.run.data_dir.rglob("*") if p.is_file())
    panel.set_peer_name("brave-amber-otter")
    assert panel.repo.text() == "alice/SmolLM2-135M-Instruct-swarm-brave-amber-otter"

    finished = []
    panel.uploadFinished.connect(finished.append)
    panel.upload_button.click()
    assert panel.cancel_button.isEnabled() and not panel.upload_button.isEnabled()
    qtbot.waitUntil(lambda: bool(finished) or "not uploaded" in panel.progress.format(), timeout=UPLOAD_MS)
    assert finished, panel.result.text()
    assert finished[0].repo_id == panel.repo.text() and finished[0].files_uploaded >= 3
    assert "Published the checkpoint of round 2" in panel.result.text()
    assert panel.progress.format() == "done"
    qtbot.waitUntil(panel.upload_button.isEnabled, timeout=30_000)  # when the upload process has exited

    finished.clear()
    panel.upload_button.click()  # nothing changed: nothing is sent again
    qtbot.waitUntil(lambda: bool(finished), timeout=UPLOAD_MS)
    assert finished[0].commit is None and "already up to date" in panel.result.text()


def test_upload_settings_are_saved_with_the_node_config(qtbot, tmp_path):
    from node.config import NodeConfig

    window = make_window(qtbot, NodeConfig.build({"run": {"data_dir": str(tmp_path / "data")}}))
    window.hub.every.setValue(10)
    window.hub.private.setChecked(False)
    window.hub.repo.setText("alice/my-swarm-model")
    window.hub._save_settings()
    saved = NodeConfig.load(window.config_path)
    assert saved.upload.every_rounds == 10 and not saved.upload.private and saved.upload.repo_id == "alice/my-swarm-model"
