"""``rl-swarm --demo``: the app's node plus headless peers on loopback, so a first run shows a live swarm offline.

The peers live and die with the app's node: they start once it has started and published its invite, and they
are stopped whenever it stops, crashes or restarts (a stopped app must not keep a peer using a core and gigabytes
of memory). When the node comes back, the peers start again with its new invite, after the old ones have exited
(they share run folders with their successors).
"""

from __future__ import annotations

import logging
from pathlib import Path

from PySide6.QtCore import QObject, Signal, Slot

from node.cli.demo import demo_config
from node.events import Event, NodeStarted
from node.process_client import NodeProcess, stop_all

log = logging.getLogger(__name__)

# Supervisor states in which the app's node is not (or no longer) serving the swarm the peers joined.
NODE_DOWN_STATES = frozenset({"stopping", "stopped", "restarting", "crashed", "failed", "finished"})
PEER_STOP_TIMEOUT_S = 60.0


class DemoPeers(QObject):
    _peerExited = Signal()  # from a peer's client thread to the GUI thread

    def __init__(self, data_dir: Path, *, count: int, model: str, threads: int, max_new_tokens: int,
                 changes: dict | None = None) -> None:
        """``changes`` are applied to each peer's demo config (tests shrink the round with them)."""
        super().__init__()
        self.changes = changes or {}
        self.data_dir = data_dir
        self.count = count
        self.model, self.threads, self.max_new_tokens = model, threads, max_new_tokens
        self.processes: list[NodeProcess] = []
        self._pending_invite: list[str] | None = None
        self._peerExited.connect(self._start_pending)

    def attach(self, supervisor) -> None:
        """Follow the app's node: peers start with it and stop with it."""
        supervisor.event.connect(self.on_event)
        supervisor.stateChanged.connect(self.on_state)

    @property
    def running(self) -> list[NodeProcess]:
        return [process for process in self.processes if process.running]

    @Slot(object)
    def on_event(self, event: Event) -> None:
        """Peers join once the app's node has started and published its invite."""
        if isinstance(event, NodeStarted):
            self._pending_invite = list(event.invite)
            self._start_pending()

    @Slot(str, str)
    def on_state(self, state: str, detail: str = "") -> None:
        if state in NODE_DOWN_STATES:
            self.release()

    def release(self) -> None:
        """Ask every peer to stop (without blocking the GUI); each is killed if still up after a minute."""
        self._pending_invite = None
        for process in self.running:
            process.request_stop(PEER_STOP_TIMEOUT_S)

    @Slot()
    def _start_pending(self) -> None:
        if self._pending_invite is None:
            return
        if self.running:  # the previous generation is still shutting down; its exits call us again
            for process in self.running:
                process.request_stop(PEER_STOP_TIMEOUT_S)
            return
        invite, self._pending_invite = self._pending_invite, None
        self.spawn(invite)

    def spawn(self, addresses: list[str]) -> None:
        self.processes = []
        for index in range(1, self.count + 1):
            config = demo_config(self.data_dir, index, model=self.model, threads=self.threads,
                                 max_new_tokens=self.max_new_tokens, join=addresses).update(self.changes)
            path = self.data_dir / f"node-{index + 1}.toml"
            config.save(path)
            self.processes.append(NodeProcess(
                ["run", "--config", str(path)], log_path=self.data_dir / f"node-{index + 1}.stderr.log",
                on_exit=lambda code: self._peerExited.emit(), name=f"demo-peer-{index}",
            ).start())
            log.info("demo peer %d started (pid %d)", index, self.processes[-1].pid)

    def stop(self, timeout_s: float = PEER_STOP_TIMEOUT_S) -> None:
        """Blocking stop of every peer (when the app quits)."""
        self._pending_invite = None
        stop_all(self.processes, timeout_s)
        self.processes = []
