"""Notifications off the machine: a webhook (a URL the user pastes: ntfy, Discord, Slack, any endpoint that takes a
JSON POST) told when the node stops, crashes in a loop, has seen no peer for N rounds, or finished an upload.

:class:`NotificationRules` turns the node's events into :class:`Notification` records (the node process observes its
own events, so a headless node notifies too; the desktop app adds the crash loop, which only its supervisor sees).
:class:`Webhook` posts them from a thread of its own with a bounded queue and bounded retries, so a slow or dead
endpoint never holds up training. A payload carries the notification's words and the peer's public name only, with
anything shaped like a token, key or credential cut out of them, and the URL itself (which often is the credential:
a Discord or Slack webhook) is never logged.
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
from typing import Literal
from urllib.parse import urlsplit

from node.events import Event, ErrorReported, RoundFinished, StateChanged, UploadFinished

log = logging.getLogger(__name__)

PAYLOAD_VERSION = 1
NotificationKind = Literal["node_stopped", "crash_loop", "no_peers", "upload_finished", "test"]
QUEUE_SIZE = 32  # notifications waiting while the endpoint is slow; beyond it the oldest is dropped
MAX_TEXT = 1000  # characters of a message; Discord takes 2,000 in all, Slack more

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
            except (OSError, ValueError) as exc:  # refused, unreachable, timed out, malformed URL
                status, problem = None, type(exc).__name__
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
