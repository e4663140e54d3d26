"""A headless node on the far side of a real SSH server (OpenSSH's sshd on loopback, the tiny model): started, watched
through `attach` (history first, then live), paused, left and re-attached without it noticing, stopped."""

from __future__ import annotations

import queue
import re
import time

import psutil
import pytest

from node.events import Event, RoundFinished, StateChanged
from node.process_client import NodeProcess
from node.remote import run_command, ssh_argv
from node.runstore import RunStore
from tests.nodes import tiny_config
from tests.test_control_socket import node_over_ssh, ssh_server  # noqa: F401 (fixture)

pytestmark = pytest.mark.slow


class Attached:
    """`ssh ... rl-swarm-node attach` through the one node-process client, its events on a queue."""

    def __init__(self, remote) -> None:
        self.events: queue.Queue[Event] = queue.Queue()
        self.seen: list[Event] = []
        self.process = NodeProcess(argv=ssh_argv(remote, "attach"), use_fd=False, on_event=self.events.put,
                                   name="attach").start()

    def wait_for(self, predicate, timeout_s: float = 300) -> Event:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                event = self.events.get(timeout=1)
            except queue.Empty:
                assert self.process.running, f"attach ended: {self.process.output_tail(20)}"
                continue
            self.seen.append(event)
            if predicate(event):
                return event
        raise AssertionError(f"timed out; last events {[e.kind for e in self.seen[-8:]]}")


def test_a_headless_node_is_started_watched_steered_and_left_running_over_ssh(ssh_server, tiny_model_dir, tmp_path):  # noqa: F811
    config = tiny_config(tiny_model_dir, tmp_path / "far")
    config.save(config.run_dir / "config.toml")  # what a first `rl-swarm-node run` leaves in the run folder
    remote = node_over_ssh(ssh_server, tmp_path / "far")

    started = run_command(remote, "start")
    pid = int(re.search(r"pid (\d+)", started).group(1))
    node = psutil.Process(pid)
    try:
        first = Attached(remote)
        live = first.wait_for(lambda e: isinstance(e, RoundFinished) and e.round >= 1)
        first.process.send("pause")
        first.wait_for(lambda e: isinstance(e, StateChanged) and e.state == "paused")

        first.process.kill()  # the connection drops (the local ssh dies)
        first.process.wait(30)
        assert node.is_running() and node.status() != psutil.STATUS_ZOMBIE, "a lost connection never stops the node"

        second = Attached(remote)
        history = RunStore(config.run_dir).metrics()
        assert [m.round for m in history][: live.round + 1] == list(range(live.round + 1))
        state = second.wait_for(lambda e: isinstance(e, StateChanged))
        rounds = [e.round for e in second.seen if isinstance(e, RoundFinished)]
        assert rounds == [m.round for m in history][: len(rounds)] and len(rounds) >= live.round + 1, \
            "attach sends the run's history before anything live, so the charts start full"
        assert state.state == "paused", "and then where the node stands"
        second.process.send("resume")
        second.wait_for(lambda e: isinstance(e, RoundFinished) and e.round > live.round + 1)

        assert "control socket" in run_command(remote, "logs", "--lines", "5000"), "its node.log, read over SSH"
        second.process.send("stop")
        second.wait_for(lambda e: isinstance(e, StateChanged) and e.state == "stopped")
        node.wait(120)
        assert second.process.running, "attach outlives the node and waits for the next start"
        second.process.kill()
    finally:
        if node.is_running():
            node.kill()
