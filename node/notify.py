"""Notifications off the machine: a webhook (a URL the user pastes: ntfy, Discord, Slack, any endpoint that takes a
JSON POST) told when the node stops, crashes in a loop, has seen no peer for N rounds, or finished an upload.

:class:`NotificationRules` turns the node's events into :class:`Notification` records (the node process observes its
own events, so a headless node notifies too; the desktop app adds the crash loop, which only its supervisor sees).
:class:`Webhook` posts them from a thread of its own with a bounded queue and bounded retries, so a slow or dead
endpoint never holds up training. A payload carries the notification's words and the peer's public name only, with
anything shaped like a token, key or credential cut out of them, and the URL itself (which often is the credential:
a Discord or Slack webhook, an ntfy topic) is never logged or shown, only its scheme and host
(:func:`describe_endpoint`).

The URL is a secret, so it lives where the Hugging Face token lives: in :mod:`node.secret_store` (the OS keyring, else
the passphrase-encrypted file store) under :data:`WEBHOOK_SECRET`, per data folder; set in Settings or with
``rl-swarm-node webhook set``, read by the node when it starts. Configs of earlier versions held it in plaintext as
``[notify] webhook_url``: loading such a file moves the URL into the store and removes it from the file.
"""

from __future__ import annotations

import json
import logging
import queue
import re
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from node.errors import NodeError
from node.events import Event, ErrorReported, RoundFinished, StateChanged, UploadFinished
from node.secret_store import drop_plaintext, explain_locked, node_store

log = logging.getLogger(__name__)

PAYLOAD_VERSION = 1
NotificationKind = Literal["node_stopped", "crash_loop", "no_peers", "upload_finished", "test"]
QUEUE_SIZE = 32  # notifications waiting while the endpoint is slow; beyond it the oldest is dropped
MAX_TEXT = 1000  # characters of a message; Discord takes 2,000 in all, Slack more
WEBHOOK_SECRET = "webhook-url"  # its name in the secret store
LEGACY_FIELD = "webhook_url"  # its name under [notify] in earlier configs
_URL = re.compile(r"^https?://[^\s/?#]+([/?#]\S*)?$", re.IGNORECASE)
MAX_URL = 2048

# What must never leave the machine in a payload, even inside an error's words
_SECRETS = [
    re.compile(r"hf_[A-Za-z0-9]{8,}"),  # Hugging Face tokens
    re.compile(r"\b(?:0x)?[0-9a-fA-F]{64}\b"),  # private keys, HMAC secrets
    re.compile(r"(?i)\b(?:https?|wss?)://[^\s/@]+:[^\s/@]+@\S+"),  # URLs with credentials
    re.compile(r"(?i)(?:token|secret|password|passphrase|api[_-]?key|authorization)\s*[=:]\s*\S+"),
    re.compile(r"(?i)bearer\s+\S+"),
]


def redact(text: str) -> str:
    for pattern in _SECRETS:
        text = pattern.sub("[redacted]", text)
    return text[:MAX_TEXT]


@dataclass(frozen=True)
class Notification:
    kind: NotificationKind
    title: str
    message: str
    peer_name: str = ""
    time: float = field(default_factory=time.time)

    def payload(self) -> dict:
        title, message = redact(self.title), redact(self.message)
        text = f"{title}: {message}" if message else title
        return {
            "version": PAYLOAD_VERSION, "source": "rl-swarm", **asdict(self), "title": title, "message": message,
            "text": text,  # what Slack and Mattermost show
            "content": text,  # what Discord shows
        }


def describe_endpoint(url: str) -> str:
    """The URL's scheme and host only: what logs and error messages may show of a webhook."""
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or '?'}"


def check_webhook_url(url: str) -> str:
    """The URL, stripped, when it is one a webhook can be posted to; the error never repeats it (it is a secret)."""
    url = url.strip()
    if not _URL.match(url) or len(url) > MAX_URL:
        raise NodeError(
            "The webhook URL is not valid: it must start with http:// or https:// and have no spaces.",
            hint="copy the whole URL your ntfy topic, Discord or Slack webhook or own endpoint gives you",
            code="bad_webhook_url",
        )
    return url


def load_webhook(data_dir: Path, passphrase: str | None = None) -> str | None:
    """The stored webhook URL, or None when notifications off the machine are off."""
    try:
        return node_store(data_dir, passphrase).get(WEBHOOK_SECRET)
    except NodeError as exc:
        raise explain_locked(exc, "the webhook URL cannot be read") from None


def remember_webhook(data_dir: Path, url: str, passphrase: str | None = None) -> None:
    url = check_webhook_url(url)
    try:
        node_store(data_dir, passphrase).set(WEBHOOK_SECRET, url)
    except NodeError as exc:
        raise explain_locked(exc, "the webhook URL cannot be stored") from None


def webhook_stored(data_dir: Path) -> bool:
    """Whether a webhook is set; needs no passphrase, so a caller can ask for one only when it will be needed."""
    return node_store(data_dir).has(WEBHOOK_SECRET)


def forget_webhook(data_dir: Path) -> None:
    node_store(data_dir).delete(WEBHOOK_SECRET)


def move_out_of_config(path: Path, data_dir: Path, url: object) -> None:
    """Store the plaintext webhook URL of an earlier version's config file, then rewrite the file without it."""
    if isinstance(url, str) and url.strip():  # an empty one meant "off": only the line goes
        try:
            remember_webhook(data_dir, url)
        except NodeError as exc:
            if exc.code != "bad_webhook_url":
                raise
            raise NodeError(f"[notify] {LEGACY_FIELD} in {path} is not a valid webhook URL.",
                            hint="delete that line, then set the URL in Settings or with `rl-swarm-node webhook "
                            "set` (it is kept in the secret store now, never in the config file)",
                            code="bad_webhook_url") from None
    drop_plaintext(path, "notify", LEGACY_FIELD)
    log.warning("moved the webhook URL out of %s into the secret store", path)


Poster = Callable[[str, bytes, float], int]  # url, body, timeout -> HTTP status


def _post(url: str, body: bytes, timeout: float) -> int:
    request = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/json", "User-Agent": "rl-swarm-desktop",
    })
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - the user's own URL
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


class Webhook:
    """Posts notifications as JSON to one URL, in a daemon thread; :meth:`send` never blocks."""

    def __init__(self, url: str, *, retries: int = 3, timeout_s: float = 10.0,
                 backoff_s: Sequence[float] = (2.0, 10.0, 30.0), post: Poster = _post,
                 sleep: Callable[[float], None] = time.sleep,
                 on_result: Callable[[Notification, bool], None] | None = None) -> None:
        """``on_result(notification, delivered)`` is called from the webhook's thread after each notification."""
        self.url = url
        self.on_result = on_result
        self.retries = retries
        self.timeout_s = timeout_s
        self.backoff_s = tuple(backoff_s)
        self._post = post
        self._sleep = sleep
        self._queue: queue.Queue[Notification | None] = queue.Queue(QUEUE_SIZE)
        self.delivered = 0
        self.failed = 0
        self._thread = threading.Thread(target=self._work, name="webhook", daemon=True)
        self._thread.start()

    def send(self, notification: Notification) -> None:
        while True:
            try:
                self._queue.put_nowait(notification)
                return
            except queue.Full:
                try:
                    dropped = self._queue.get_nowait()
                    log.warning("webhook queue full: dropped the %s notification", getattr(dropped, "kind", "?"))
                except queue.Empty:
                    pass

    def close(self, timeout_s: float = 5.0) -> None:
        """Deliver what is queued within ``timeout_s`` (a node that stops says so), then stop the thread."""
        try:
            self._queue.put(None, timeout=timeout_s)
        except queue.Full:
            return
        self._thread.join(timeout_s)

    def _work(self) -> None:
        while (notification := self._queue.get()) is not None:
            self._deliver(notification)

    def _deliver(self, notification: Notification) -> None:
        body = json.dumps(notification.payload()).encode()
        for attempt in range(self.retries + 1):
            try:
                status = self._post(self.url, body, self.timeout_s)
                problem = None if 200 <= status < 300 else f"HTTP {status}"
            except Exception as exc:  # noqa: BLE001 - refused, unreachable, timed out, malformed URL: its words may
                status, problem = None, type(exc).__name__  # hold the URL, and the thread must go on
            if problem is None:
                self.delivered += 1
                self._report(notification, True)
                return
            # A client error other than rate limiting will not change by retrying
            if status is not None and 400 <= status < 500 and status != 429:
                break
            if attempt < self.retries:
                self._sleep(self.backoff_s[min(attempt, len(self.backoff_s) - 1)])
        self.failed += 1
        self._report(notification, False)
        log.warning("webhook %s did not take the %s notification (%s)", describe_endpoint(self.url),
                    notification.kind, problem)


    def _report(self, notification: Notification, delivered: bool) -> None:
        if self.on_result is not None:
            try:
                self.on_result(notification, delivered)
            except Exception:  # noqa: BLE001 - a listener's bug must not end the webhook's thread
                log.exception("webhook result listener failed")


class NotificationRules:
    """Which of the node's events are worth a notification, in words a phone's lock screen can show."""

    def __init__(self, notify: Callable[[Notification], None], *, peer_name: str = "",
                 no_peers_rounds: int = 10) -> None:
        self.notify = notify
        self.peer_name = peer_name
        self.no_peers_rounds = no_peers_rounds
        self._rounds_without_peers = 0
        self._last_error = ""

    def observe(self, event: Event) -> None:
        if isinstance(event, ErrorReported) and event.fatal:
            self._last_error = event.message
        elif isinstance(event, StateChanged) and event.state in ("stopped", "error"):
            self._stopped(event)
        elif isinstance(event, RoundFinished):
            self._round(event)
        elif isinstance(event, UploadFinished):
            self._send("upload_finished", "Upload finished",
                       f"round {event.round} is on the Hugging Face Hub: {event.url}")
        elif getattr(event, "kind", "") == "node_started":
            self.peer_name = getattr(event, "peer_name", self.peer_name)

    def crash_loop(self, message: str) -> None:
        self._send("crash_loop", "The node keeps crashing", f"{message} It is not restarted again.")

    def _stopped(self, event: StateChanged) -> None:
        if event.state == "error":
            self._send("node_stopped", "The node stopped with an error", self._last_error or event.detail)
        else:
            self._send("node_stopped", "The node stopped", "training stopped; its last checkpoint is saved")

    def _round(self, event: RoundFinished) -> None:
        if event.peers_seen:
            self._rounds_without_peers = 0
            return
        self._rounds_without_peers += 1
        if self.no_peers_rounds and self._rounds_without_peers == self.no_peers_rounds:  # once per dry spell
            self._send("no_peers", "No peers", f"no peer seen for {self.no_peers_rounds} rounds (up to round "
                       f"{event.round}); training goes on alone")

    def _send(self, kind: NotificationKind, title: str, message: str) -> None:
        self.notify(Notification(kind=kind, title=title, message=message, peer_name=self.peer_name))
