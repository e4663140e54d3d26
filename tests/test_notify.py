"""Webhook notifications, against a real local HTTP server: what is sent, when, that secrets never leave, that
retries are bounded and that a dead or slow endpoint never holds anyone up."""

from __future__ import annotations

import dataclasses
import json
import queue
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from PySide6.QtWidgets import QDialogButtonBox

from node.events import ErrorReported, EventBus, StateChanged, UploadFinished
from node.notify import Notification, NotificationRules, Webhook, describe_endpoint
from node.runner import SwarmNode
from tests.nodes import tiny_config
from tests.test_events_and_store import metrics

HF_TOKEN = "hf_AbCdEfGhIjKlMnOpQrStUvWx"
PRIVATE_KEY = "0x" + "ab" * 32


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
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/secret-path-token"
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
def test_a_node_with_a_webhook_says_it_saw_no_peers_and_that_it_stopped(tiny_model_dir, tmp_path, endpoint):
    config = tiny_config(tiny_model_dir, tmp_path, run={"rounds": 3}, evaluation={"every_rounds": 0})
    config = config.update({"notify": {"webhook_url": endpoint.url, "no_peers_rounds": 2}})
    SwarmNode(config, bus=EventBus()).run()  # returns once the run is over; notifications are already out
    bodies = [endpoint.next(timeout=0)]
    while not endpoint.bodies.empty():
        bodies.append(endpoint.next(timeout=0))
    assert [b["kind"] for b in bodies] == ["no_peers", "node_stopped"]
    assert bodies[0]["peer_name"]  # the node's public name, from node_started


def test_the_app_tells_the_webhook_about_a_crash_loop(qtbot, tmp_path, endpoint):
    from tests.apphelpers import make_window
    from tests.test_app_widgets import config_in

    window = make_window(qtbot, config_in(tmp_path, notify={"webhook_url": endpoint.url}))
    window.on_gave_up("The node crashed 4 times within 10 minutes, so it is not restarted again.\n\nLast lines: "
                      f"token={HF_TOKEN}")
    body = endpoint.next()
    assert body["kind"] == "crash_loop" and "crashed 4 times" in body["message"] and HF_TOKEN not in json.dumps(body)


def test_settings_send_a_test_notification_and_save_the_webhook(qtbot, tmp_path, endpoint):
    from PySide6.QtCore import Qt

    from app.settings_dialog import SettingsDialog
    from tests.test_app_widgets import config_in

    dialog = SettingsDialog(config_in(tmp_path), idle_supported=False, hardware={})
    qtbot.addWidget(dialog)
    qtbot.mouseClick(dialog.webhook_test, Qt.MouseButton.LeftButton)
    assert "Paste a webhook URL" in dialog.webhook_status.text()
    dialog.webhook_url.setText(endpoint.url)
    qtbot.mouseClick(dialog.webhook_test, Qt.MouseButton.LeftButton)
    assert endpoint.next()["kind"] == "test"
    qtbot.waitUntil(lambda: dialog.webhook_status.text() == "Delivered.", timeout=10_000)
    dialog.no_peers.setValue(0)
    ok = dialog.findChild(QDialogButtonBox).button(QDialogButtonBox.StandardButton.Ok)
    qtbot.mouseClick(ok, Qt.MouseButton.LeftButton)
    assert dialog.result_config.notify.webhook_url == endpoint.url and dialog.result_config.notify.no_peers_rounds == 0

    dialog = SettingsDialog(config_in(tmp_path), idle_supported=False, hardware={})
    qtbot.addWidget(dialog)
    dialog.webhook_url.setText("ftp://example.org/hook")
    qtbot.mouseClick(dialog.findChild(QDialogButtonBox).button(QDialogButtonBox.StandardButton.Ok),
                     Qt.MouseButton.LeftButton)
    assert dialog.result_config is None and "webhook_url" in dialog.error.problem.text()
