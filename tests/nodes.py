"""Helpers to run real nodes (in-process or as `rl-swarm-node run` processes) with the tiny model."""

from __future__ import annotations

import json
import queue
import subprocess
import time
from pathlib import Path

from node import process_client
from node.config import NodeConfig
from node.events import Event

FAST_FAMILIES = "basic_arithmetic,base_conversion,fraction_simplification"


def tiny_config(model_dir: Path, data_dir: Path, **overrides) -> NodeConfig:
    data = {
        "training": {"model": str(model_dir), "device": "cpu", "local_questions": 2, "external_groups": 0,
                     "num_generations": 4, "max_new_tokens": 16, "max_prompt_tokens": 256, "learning_rate": 1e-4},
        "swarm": {"host": "127.0.0.1", "gather_timeout_s": 5.0, "call_timeout_s": 5.0},
        "tasks": {"weights": {f: 1.0 for f in FAST_FAMILIES.split(",")}},
        "evaluation": {"questions": 8},
        "run": {"data_dir": str(data_dir), "threads": 1, "checkpoint_every_rounds": 1},
    }
    for section, fields in overrides.items():
        data.setdefault(section, {}).update(fields)
    return NodeConfig.build(data)


class NodeProcess(process_client.NodeProcess):
    """`python -m node run` in a child process through the app's process client, with its events on a queue."""

    def __init__(self, config: NodeConfig, *, name: str) -> None:
        path = config.run.data_dir / f"{name}.toml"
        config.save(path)
        self.stderr_path = config.run.data_dir / f"{name}.stderr"
        self.events: queue.Queue[Event] = queue.Queue()
        self.seen: list[Event] = []
        super().__init__(["run", "--config", str(path)], on_event=self.events.put, env={"OMP_NUM_THREADS": "1"},
                         log_path=self.stderr_path, name=name)
        self.start()

    def wait_for(self, predicate, timeout: float = 300) -> Event:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                event = self.events.get(timeout=1)
            except queue.Empty:
                if self.returncode is not None and self.events.empty():
                    raise AssertionError(f"node exited with {self.returncode}: {self.stderr()}")
                continue
            self.seen.append(event)
            if predicate(event):
                return event
        raise AssertionError(f"timed out waiting; last events {[e.kind for e in self.seen[-5:]]}: {self.stderr()}")

    def collect(self, timeout: float) -> None:
        """Moves the events that arrive within ``timeout`` s to ``seen``; fails if the node has exited."""
        try:
            self.seen.append(self.events.get(timeout=timeout))
        except queue.Empty:
            if self.returncode is not None:
                raise AssertionError(f"{self.name} exited with {self.returncode}: {self.stderr()}") from None
        while not self.events.empty():
            self.seen.append(self.events.get())

    def finish(self, timeout: float = 120) -> int:
        code = self.wait(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout)
        while not self.events.empty():
            self.seen.append(self.events.get())
        return code

    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")[-3000:]

    def kill_tree(self) -> None:
        """SIGKILL the node and its p2p daemon (a killed parent cannot take its children down)."""
        self.kill()
        self.wait(30)

    def events_of(self, kind: str) -> list[Event]:
        return [e for e in self.seen if e.kind == kind]


def run_until(nodes: list[NodeProcess], condition, *, timeout: float, what: str) -> None:
    """Collects the running nodes' events until ``condition()`` holds over them; fails after ``timeout`` s.

    Nodes never wait for peers, so how many rounds pass before a peer's groups arrive depends on the machine's load:
    a swarm test runs until what it checks has happened, then stops its nodes, instead of a fixed round count."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            rounds = {n.name: len(n.events_of("round_finished")) for n in nodes}
            raise AssertionError(f"after {timeout:.0f} s and rounds {rounds}: never {what}")
        for node in nodes:
            node.collect(timeout=0.5 / len(nodes))


def dump(obj) -> str:
    return json.dumps(obj, default=str)
