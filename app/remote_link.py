"""One remote node's live connection: ``ssh HOST rl-swarm-node attach`` through the one node-process client,
its events turned into Qt signals, and a dropped connection retried with backoff.

Closing the link, or losing it, ends only the local ``ssh``: the node over there keeps training (``attach`` never
stops it). Each new connection starts with the run's whole history again, so :attr:`RemoteLink.connecting` tells
the fleet to forget what it had.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from PySide6.QtCore import QObject, QTimer, Signal, Slot

from node.config import RemoteNodeSettings
from node.events import Event
from node.process_client import NodeProcess
from node.remote import explain_ssh_failure, ssh_argv

log = logging.getLogger(__name__)

BACKOFF_S = (2.0, 5.0, 15.0, 30.0, 60.0)

LinkState = str  # "connecting" | "connected" | "lost" | "closed"


class RemoteLink(QObject):
    event = Signal(object)  # every node Event, in order (history first)
    linkChanged = Signal(str, str)  # link state, detail in plain words
    connecting = Signal()  # a new connection: its history follows

    _arrived = Signal(object, object)  # event, the NodeProcess it came from
    _exited = Signal(int, object)

    def __init__(self, remote: RemoteNodeSettings, *, backoff_s: Sequence[float] = BACKOFF_S) -> None:
        super().__init__()
        self.remote = remote
        self.backoff_s = tuple(backoff_s)
        self.state: LinkState = "closed"
        self.detail = ""
        self.hint = ""  # what to do about a lost connection
        self.failures = 0
        self.attempts = 0
        self._process: NodeProcess | None = None
        self._retry = QTimer(self, singleShot=True)
        self._retry.timeout.connect(self._attempt)
        self._arrived.connect(self._on_event)
        self._exited.connect(self._on_exit)

    def open(self) -> None:
        if self.state == "closed":
            self._attempt()

    def close(self) -> None:
        """End the connection (the local ssh only) and stop retrying."""
        self._retry.stop()
        process, self._process = self._process, None
        self._set("closed")
        if process is not None:
            process.kill()

    def send(self, command: str) -> bool:
        """pause / resume / stop to the node; False when there is no connection to carry it."""
        return self.state == "connected" and self._process is not None and self._process.send(command)

    @property
    def ssh_pid(self) -> int | None:
        return self._process.pid if self._process else None

    def _attempt(self) -> None:
        self.attempts += 1
        process = NodeProcess(argv=ssh_argv(self.remote, "attach"), use_fd=False, name=f"ssh-{self.remote.name}")
        process.on_event = lambda event: self._arrived.emit(event, process)
        process.on_exit = lambda code: self._exited.emit(code, process)
        self._process = process
        self.connecting.emit()
        self._set("connecting", f"ssh {self.remote.host}")
        try:
            process.start()
        except OSError as exc:  # no ssh client at all
            self._process = None
            self._set("lost", f"ssh could not be started ({exc}); install OpenSSH's client")
            return

    @Slot(object, object)
    def _on_event(self, event: Event, process: NodeProcess) -> None:
        if process is not self._process:
            return
        if self.state != "connected":
            self.failures = 0
            self._set("connected")
        self.event.emit(event)

    @Slot(int, object)
    def _on_exit(self, code: int, process: NodeProcess) -> None:
        if process is not self._process or self.state == "closed":
            return
        self._process = None
        error = explain_ssh_failure(self.remote, code, process.output_tail(20))
        delay = self.backoff_s[min(self.failures, len(self.backoff_s) - 1)]
        self.failures += 1
        log.warning("%s: connection ended (%s); retrying in %g s", self.remote.name, error.message, delay)
        self.hint = error.hint
        self._set("lost", f"{error.message}; retrying in {delay:g} s")
        self._retry.start(int(delay * 1000))

    def _set(self, state: LinkState, detail: str = "") -> None:
        self.state, self.detail = state, detail
        self.linkChanged.emit(state, detail)
