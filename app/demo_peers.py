"""``rl-swarm --demo``: the app's node plus headless peers on loopback, so a first run shows a live swarm offline."""

from __future__ import annotations

import logging
import subprocess
from pathlib import Path

from PySide6.QtCore import QObject

from node.demo import demo_config
from node.events import Event, NodeStarted
from node.launch import node_command, node_environment, popen_options, stop_processes

log = logging.getLogger(__name__)


class DemoPeers(QObject):
    def __init__(self, data_dir: Path, *, count: int, model: str, threads: int, max_new_tokens: int) -> None:
        super().__init__()
        self.data_dir = data_dir
        self.count = count
        self.model, self.threads, self.max_new_tokens = model, threads, max_new_tokens
        self.processes: list[subprocess.Popen] = []

    def on_event(self, event: Event) -> None:
        """Peers join once the app's node has started and published its invite."""
        if isinstance(event, NodeStarted) and not any(p.poll() is None for p in self.processes):
            self.spawn(event.invite)

    def spawn(self, addresses: list[str]) -> None:
        self.processes = []
        for index in range(1, self.count + 1):
            config = demo_config(self.data_dir, index, model=self.model, threads=self.threads,
                                 max_new_tokens=self.max_new_tokens, join=addresses)
            path = self.data_dir / f"node-{index + 1}.toml"
            config.save(path)
            stderr = open(self.data_dir / f"node-{index + 1}.stderr.log", "wb")
            self.processes.append(subprocess.Popen(
                node_command("run", "--config", str(path), "--control-stdin"),
                stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=stderr, text=True, env=node_environment(),
                **popen_options(),
            ))
            log.info("demo peer %d started (pid %d)", index, self.processes[-1].pid)

    def stop(self, timeout_s: float = 60.0) -> None:
        stop_processes(self.processes, timeout_s)
        self.processes = []
