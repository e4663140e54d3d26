"""Webhook notifications, against a real local HTTP server: what is sent, when, that secrets never leave, that
retries are bounded and that a dead or slow endpoint never holds anyone up. The URL itself is a secret: it lives in
the secret store (set in Settings, by the CLI, moved out of old config files) and never reaches a file, log or event."""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import queue
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QDialogButtonBox

from node.cli.main import main as node_cli
from node.config import NodeConfig
from node.errors import NodeError
from node.events import ErrorReported, EventBus, StateChanged, UploadFinished
from node.logs import LOG_FILE
from node.notify import (
    Notification, NotificationRules, Webhook, describe_endpoint, load_webhook, remember_webhook, webhook_stored,
)
from node.runner import SwarmNode
from node.secret_store import PASSPHRASE_ENV
from tests.conftest import STORE_PASSPHRASE
from tests.nodes import NodeProcess, tiny_config
from tests.test_events_and_store import metrics

HF_TOKEN = "hf_AbCdEfGhIjKlMnOpQrStUvWx"
PRIVATE_KEY = "0x" + "ab" * 32
PASSPHRASE = STORE_PASSPHRASE  # the conftest fixture `unlocked` sets it
URL_SECRET = "secret-path-token"  # the part of every test URL that is the credential


class Endpoint:
    """A local webhook receiver: answers each POST with the next status of ``statuses`` (then 200), records bodies."""

    def __init__(self, statuses=(), hold: threading.Event | None = None) -> None:
        self.statuses = list(statuses)
        self.hold = hold
        self.bodies: queue.Queue[dict] = queue.Queue()
        self.attempts = 0
        endpoint = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                endpoint.attempts += 1
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if endpoint.hold is not None:
                    endpoint.hold.wait(30)
                status = endpoint.statuses.pop(0) if endpoint.statuses else 200
                if status == 200:
                    endpoint.bodies.put(body)
                self.send_response(status)
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/{URL_SECRET}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def next(self, timeout: float = 10) -> dict:
        return self.bodies.get(timeout=timeout)

    def close(self) -> None:
        if self.hold is not None:
            self.hold.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def endpoint():
    server = Endpoint()
    yield server
    server.close()


def assert_nowhere(folder, *texts: str) -> None:
    for path in folder.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            for text in texts:
                assert text.encode() not in data, f"{text!r} in {path}"


def test_a_notification_is_a_json_post_that_chat_services_show(endpoint):
    hook = Webhook(endpoint.url)
    hook.send(Notification(kind="upload_finished", title="Upload finished", message="round 7 is on the Hub",
                           peer_name="quick-red-fox"))
    body = endpoint.next()
    assert body["version"] == 1 and body["source"] == "rl-swarm" and body["kind"] == "upload_finished"
    assert body["peer_name"] == "quick-red-fox"
    assert body["text"] == body["content"] == "Upload finished: round 7 is on the Hub"
    hook.close()
    assert hook.delivered == 1 and hook.failed == 0


def test_secrets_never_leave_in_a_payload(endpoint):
    hook = Webhook(endpoint.url)
    rules = NotificationRules(hook.send)
    rules.observe(ErrorReported(message=f"upload failed with token {HF_TOKEN}, key {PRIVATE_KEY}, "
                                        "rpc https://alice:hunter2@rpc.example.org/x password=hunter2", fatal=True))
    rules.observe(StateChanged(state="error", detail="crashed"))
    body = endpoint.next()
    assert body["kind"] == "node_stopped" and "error" in body["title"]
    sent = json.dumps(body)
    for secret in (HF_TOKEN, PRIVATE_KEY, "ab" * 32, "hunter2"):
        assert secret not in sent
    assert "[redacted]" in body["message"]
    hook.close()


def test_failures_are_retried_a_bounded_number_of_times():
    flaky = Endpoint(statuses=[500, 503])
    waits: list[float] = []
    try:
        hook = Webhook(flaky.url, retries=3, backoff_s=(1.0, 2.0), sleep=waits.append)
        hook.send(Notification(kind="test", title="t", message="m"))
        assert flaky.next()["kind"] == "test"
        hook.close()
        assert flaky.attempts == 3 and waits == [1.0, 2.0] and hook.delivered == 1
    finally:
        flaky.close()

    dead = Endpoint(statuses=[500] * 10)
    try:
        hook = Webhook(dead.url, retries=2, sleep=lambda s: None)
        hook.send(Notification(kind="test", title="t", message="m"))
        hook.close()
        assert dead.attempts == 3 and hook.failed == 1  # the first try and two retries, then it gives up
    finally:
        dead.close()

    wrong = Endpoint(statuses=[404] * 10)
    try:
        hook = Webhook(wrong.url, retries=3, sleep=lambda s: None)
        hook.send(Notification(kind="test", title="t", message="m"))
        hook.close()
        assert wrong.attempts == 1 and hook.failed == 1  # a wrong URL does not get better by asking again
    finally:
        wrong.close()


def test_a_hanging_endpoint_never_blocks_the_sender():
    hanging = Endpoint(hold=threading.Event())
    try:
        hook = Webhook(hanging.url, timeout_s=30)
        started = time.monotonic()
        for _ in range(100):  # far more than the queue holds: the oldest are dropped, nothing waits
            hook.send(Notification(kind="test", title="t", message="m"))
        assert time.monotonic() - started < 1.0
        # Let the endpoint answer what is queued, so the webhook's thread ends here and does not retry (and log) into
        # the tests that run after this one in the same worker
        hanging.hold.set()
        hook.close(timeout_s=20)
        assert not hook._thread.is_alive()
    finally:
        hanging.close()


def test_unreachable_endpoint_fails_quietly_without_the_url_in_the_log(caplog):
    hook = Webhook("http://127.0.0.1:9/hooks/T0KEN-in-path", retries=1, timeout_s=2, sleep=lambda s: None)
    hook.send(Notification(kind="test", title="t", message="m"))
    hook.close()
    assert hook.failed == 1
    assert "T0KEN" not in caplog.text and "http://127.0.0.1" in caplog.text
    assert describe_endpoint("https://discord.com/api/webhooks/1/abc") == "https://discord.com"


def test_rules_no_peers_once_per_dry_spell_stops_and_uploads():
    sent: list[Notification] = []
    rules = NotificationRules(sent.append, peer_name="calm-blue-owl", no_peers_rounds=3)

    def round_(number, peers):
        rules.observe(dataclasses.replace(metrics(number), peers_seen=peers))

    for number in range(8):  # five rounds alone: one notification at the third
        round_(number, 0)
    round_(8, 2)
    for number in range(9, 12):
        round_(number, 0)
    rules.observe(UploadFinished(repo_id="a/b", url="https://hf.co/a/b", commit="c", round=11, files_uploaded=3,
                                 bytes_sent=10))
    rules.observe(StateChanged(state="stopped"))
    assert [n.kind for n in sent] == ["no_peers", "no_peers", "upload_finished", "node_stopped"]
    assert "3 rounds" in sent[0].message and sent[0].peer_name == "calm-blue-owl"

    quiet: list[Notification] = []
    off = NotificationRules(quiet.append, no_peers_rounds=0)
    for number in range(50):
        off.observe(dataclasses.replace(metrics(number), peers_seen=0))
    assert quiet == []


@pytest.mark.slow
def test_a_node_with_a_webhook_says_it_saw_no_peers_and_that_it_stopped(tiny_model_dir, tmp_path, endpoint, unlocked):
    config = tiny_config(tiny_model_dir, tmp_path, run={"rounds": 3}, evaluation={"every_rounds": 0},
                         notify={"no_peers_rounds": 2})
    remember_webhook(tmp_path, endpoint.url)  # where Settings and `rl-swarm-node webhook set` put it
    SwarmNode(config, bus=EventBus()).run()  # returns once the run is over; notifications are already out
    bodies = [endpoint.next(timeout=0)]
    while not endpoint.bodies.empty():
        bodies.append(endpoint.next(timeout=0))
    assert [b["kind"] for b in bodies] == ["no_peers", "node_stopped"]
    assert bodies[0]["peer_name"]  # the node's public name, from node_started


@pytest.mark.slow
def test_a_node_run_posting_to_a_failing_endpoint_never_writes_or_says_the_url(tiny_model_dir, tmp_path, unlocked):
    """The node child reads the URL from the store at start; the endpoint refuses every post (a revoked Discord
    webhook answers 403): the node log names the endpoint by its host only, and nothing the run wrote, no event and
    no line of its stderr holds the URL."""
    refusing = Endpoint(statuses=[403] * 10)
    try:
        remember_webhook(tmp_path, refusing.url)
        config = tiny_config(tiny_model_dir, tmp_path, run={"rounds": 1}, evaluation={"every_rounds": 0},
                             notify={"no_peers_rounds": 1})
        node = NodeProcess(config, name="webhook")
        try:
            node.wait_for(lambda e: e.kind == "round_finished")
            assert node.finish() == 0
        finally:
            node.kill_tree()
        assert refusing.attempts == 2  # "no peers" and "stopped", each refused once (a 4xx is not retried)
    finally:
        refusing.close()
    log = (config.run_dir / LOG_FILE).read_text(encoding="utf-8")
    assert "webhook http://127.0.0.1 did not take the no_peers notification (HTTP 403)" in log
    assert_nowhere(tmp_path, URL_SECRET, refusing.url.split("//", 1)[1])
    assert URL_SECRET not in json.dumps([dataclasses.asdict(e) for e in node.seen])


def test_a_locked_store_runs_the_node_without_the_webhook_and_says_so(tmp_path, locked):
    remember_webhook(tmp_path, f"https://ntfy.sh/{URL_SECRET}", PASSPHRASE)
    config = NodeConfig.build({"run": {"data_dir": str(tmp_path)}})
    seen = []
    bus = EventBus()
    bus.subscribe(seen.append)
    assert SwarmNode(config, bus=bus)._webhook_url() is None
    assert [e.fatal for e in seen] == [False] and "webhook URL cannot be read" in seen[0].message
    assert PASSPHRASE_ENV in seen[0].hint and URL_SECRET not in json.dumps(dataclasses.asdict(seen[0]))


OLD_CONFIG = f"""# my node
[notify]
webhook_url = "https://discord.com/api/webhooks/1/{URL_SECRET}"  # the team channel
no_peers_rounds = 4

[run]
data_dir = "{{data_dir}}"
"""


def test_an_old_config_with_the_webhook_url_is_moved_into_the_store(tmp_path, unlocked, caplog):
    caplog.set_level(logging.DEBUG)
    path = tmp_path / "config.toml"
    path.write_text(OLD_CONFIG.format(data_dir=tmp_path), encoding="utf-8")
    config = NodeConfig.load(path)
    assert config.notify.no_peers_rounds == 4
    assert load_webhook(tmp_path) == f"https://discord.com/api/webhooks/1/{URL_SECRET}"
    text = path.read_text(encoding="utf-8")
    assert text.startswith("# my node") and "no_peers_rounds = 4" in text and "webhook_url" not in text
    assert "moved the webhook URL" in caplog.text
    assert_nowhere(tmp_path, URL_SECRET)
    assert URL_SECRET not in caplog.text
    assert NodeConfig.load(path) == config


def test_an_old_config_is_left_as_it_is_when_the_store_is_locked_or_the_url_is_bad(tmp_path, locked, monkeypatch):
    path = tmp_path / "config.toml"
    path.write_text(OLD_CONFIG.format(data_dir=tmp_path), encoding="utf-8")
    with pytest.raises(NodeError) as e:
        NodeConfig.load(path)
    assert e.value.code == "locked" and PASSPHRASE_ENV in e.value.hint and URL_SECRET not in str(e.value)
    assert path.read_text(encoding="utf-8") == OLD_CONFIG.format(data_dir=tmp_path)

    monkeypatch.setenv(PASSPHRASE_ENV, PASSPHRASE)
    path.write_text(OLD_CONFIG.format(data_dir=tmp_path).replace("https://", "ftp://"), encoding="utf-8")
    with pytest.raises(NodeError) as e:
        NodeConfig.load(path)
    assert e.value.code == "bad_webhook_url" and "webhook set" in e.value.hint and URL_SECRET not in str(e.value)
    assert not webhook_stored(tmp_path)


def test_the_cli_sets_shows_tests_and_clears_the_webhook_headless(tmp_path, endpoint, unlocked, monkeypatch, capsys):
    def cli(*args: str, stdin: str = "") -> int:
        monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
        return node_cli(["webhook", *args, "--data-dir", str(tmp_path)])

    assert cli("set", "--url-stdin", stdin="ftp://example.org/x\n") == 2
    assert cli("set", "--url-stdin", stdin=endpoint.url + "\n") == 0
    assert load_webhook(tmp_path) == endpoint.url
    assert cli("show") == 0 and cli("test") == 0
    assert endpoint.next()["kind"] == "test"
    assert cli("clear") == 0 and not webhook_stored(tmp_path)
    assert cli("show") == 2
    out = capsys.readouterr()
    assert "stored in the encrypted file store" in out.out and "http://127.0.0.1 (the whole URL" in out.out
    assert "not valid" in out.err and "No webhook is set" in out.err
    assert URL_SECRET not in out.out + out.err
    assert_nowhere(tmp_path, URL_SECRET)


def test_the_app_tells_the_webhook_about_a_crash_loop(qtbot, tmp_path, endpoint, locked):
    from tests.apphelpers import make_window
    from tests.test_app_widgets import config_in

    config = config_in(tmp_path)
    remember_webhook(config.run.data_dir, endpoint.url, PASSPHRASE)
    window = make_window(qtbot, config)
    window.supervisor.environment[PASSPHRASE_ENV] = PASSPHRASE  # the passphrase the app asked for at start
    window.on_gave_up("The node crashed 4 times within 10 minutes, so it is not restarted again.\n\nLast lines: "
                      f"token={HF_TOKEN}")
    body = endpoint.next()
    assert body["kind"] == "crash_loop" and "crashed 4 times" in body["message"] and HF_TOKEN not in json.dumps(body)


def test_the_app_asks_for_the_stores_passphrase_at_start_for_the_webhook(qtbot, tmp_path, locked, monkeypatch):
    from app import gui
    from tests.test_app_widgets import config_in

    answers, prompts = ["not the passphrase", PASSPHRASE], []

    def ask(parent, title, prompt, echo):
        prompts.append(title)
        return answers.pop(0), True

    monkeypatch.setattr(gui.QInputDialog, "getText", ask)
    config = config_in(tmp_path)
    remember_webhook(config.run.data_dir, f"https://ntfy.sh/{URL_SECRET}", PASSPHRASE)
    desktop = gui.DesktopApp(QApplication.instance(), tmp_path / "config.toml")
    desktop.unlock_secrets(config)
    assert prompts == ["Unlock notifications"] * 2 and desktop.supervisor.environment[PASSPHRASE_ENV] == PASSPHRASE


def _ok(dialog):
    return dialog.findChild(QDialogButtonBox).button(QDialogButtonBox.StandardButton.Ok)


def test_settings_send_a_test_notification_and_store_the_webhook(qtbot, tmp_path, endpoint, locked):
    from app.settings_dialog import SettingsDialog
    from tests.test_app_widgets import config_in

    config = config_in(tmp_path)
    data_dir = config.run.data_dir
    dialog = SettingsDialog(config, idle_supported=False, hardware={})
    qtbot.addWidget(dialog)
    dialog.show()
    assert dialog.webhook_passphrase.isVisible() and not dialog.webhook_remove.isEnabled()  # no keyring here
    assert "No webhook is set" in dialog.webhook_note.text() and "never in a file" in dialog.webhook_note.text()
    qtbot.mouseClick(dialog.webhook_test, Qt.MouseButton.LeftButton)
    assert "Paste a webhook URL" in dialog.webhook_status.text()
    qtbot.keyClicks(dialog.webhook_url, endpoint.url)
    qtbot.mouseClick(dialog.webhook_test, Qt.MouseButton.LeftButton)
    assert endpoint.next()["kind"] == "test"
    qtbot.waitUntil(lambda: dialog.webhook_status.text() == "Delivered.", timeout=10_000)
    dialog.no_peers.setValue(0)
    qtbot.mouseClick(_ok(dialog), Qt.MouseButton.LeftButton)  # the file store needs its passphrase: not stored yet
    assert dialog.result_config is None and "passphrase" in dialog.error.problem.text()
    assert not webhook_stored(data_dir)
    qtbot.keyClicks(dialog.webhook_passphrase, PASSPHRASE)
    qtbot.mouseClick(_ok(dialog), Qt.MouseButton.LeftButton)
    assert dialog.result_config.notify.no_peers_rounds == 0 and dialog.webhook_changed
    assert dialog.passphrase == PASSPHRASE  # for the node, which reads the URL at start
    assert load_webhook(data_dir, PASSPHRASE) == endpoint.url
    dialog.result_config.save(data_dir / "config.toml")
    assert_nowhere(tmp_path, URL_SECRET)

    # Opened again (the app holds the passphrase now): the host only, a test of the stored URL, then Remove
    dialog = SettingsDialog(config, idle_supported=False, hardware={}, passphrase=PASSPHRASE)
    qtbot.addWidget(dialog)
    dialog.show()
    assert not dialog.webhook_passphrase.isVisible() and dialog.webhook_url.text() == ""
    assert "A webhook is set (http://127.0.0.1)" in dialog.webhook_note.text()
    assert URL_SECRET not in dialog.webhook_note.text() + dialog.webhook_url.placeholderText()
    qtbot.mouseClick(dialog.webhook_test, Qt.MouseButton.LeftButton)
    assert endpoint.next()["kind"] == "test"
    qtbot.mouseClick(dialog.webhook_remove, Qt.MouseButton.LeftButton)
    assert webhook_stored(data_dir)  # only OK changes the store
    qtbot.mouseClick(_ok(dialog), Qt.MouseButton.LeftButton)
    assert dialog.webhook_changed and not webhook_stored(data_dir)

    dialog = SettingsDialog(config, idle_supported=False, hardware={}, passphrase=PASSPHRASE)
    qtbot.addWidget(dialog)
    qtbot.keyClicks(dialog.webhook_url, "ftp://example.org/hook")
    qtbot.mouseClick(_ok(dialog), Qt.MouseButton.LeftButton)
    assert dialog.result_config is None and "webhook URL is not valid" in dialog.error.problem.text()
    assert "example.org" not in dialog.error.problem.text() and not webhook_stored(data_dir)
