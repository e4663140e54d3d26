"""``rl-swarm --demo`` with real nodes: the demo peers start with the app's node, stop with it, and after Stop then
Start the node is back on the same address and the peers train with it again (issue 13 item 4)."""

from __future__ import annotations

import json
import re

import pytest

from app.demo_peers import DemoPeers
from app.supervisor import NodeSupervisor
from node.events import NodeStarted
from tests.nodes import tiny_config

pytestmark = pytest.mark.slow
START_MS = 240_000  # a node process imports torch, loads the model and starts p2pd


def peer_rows(demo_dir) -> list[dict]:
    metrics = demo_dir / "runs" / "node-2" / "metrics.jsonl"
    return [json.loads(line) for line in metrics.read_text().splitlines()] if metrics.exists() else []


def ports(invite: list[str]) -> set[str]:
    return {re.search(r"/tcp/(\d+)", address).group(1) for address in invite}


def test_demo_peers_follow_the_apps_node_through_stop_and_start(qtbot, tiny_model_dir, tmp_path):
    config = tiny_config(tiny_model_dir, tmp_path / "host", swarm={"swarm_name": "demo"})
    path = tmp_path / "host.toml"
    config.save(path)
    supervisor = NodeSupervisor(path, stop_timeout_s=60)
    demo_dir = tmp_path / "demo"
    small_round = {"training": {"local_questions": 2, "num_generations": 2, "max_prompt_tokens": 256}}
    peers = DemoPeers(demo_dir, count=1, model=str(tiny_model_dir), threads=1, max_new_tokens=16, changes=small_round)
    peers.attach(supervisor)
    started: list[NodeStarted] = []
    supervisor.event.connect(lambda event: started.append(event) if isinstance(event, NodeStarted) else None)
    try:
        supervisor.start()
        qtbot.waitUntil(lambda: bool(started) and bool(peers.running), timeout=START_MS)
        qtbot.waitUntil(lambda: any(row["peers_seen"] >= 1 for row in peer_rows(demo_dir)), timeout=START_MS)
        first_peer = peers.processes[0]

        supervisor.stop()
        qtbot.waitUntil(lambda: supervisor.state == "stopped", timeout=START_MS)
        qtbot.waitUntil(lambda: not peers.running, timeout=120_000)  # the peer does not outlive the node
        assert first_peer.returncode == 0, first_peer.output_tail()
        rows_before = len(peer_rows(demo_dir))

        supervisor.start()
        qtbot.waitUntil(lambda: len(started) == 2, timeout=START_MS)
        assert ports(started[1].invite) == ports(started[0].invite)  # same address: known peers find it again
        assert started[1].peer_id == started[0].peer_id
        qtbot.waitUntil(lambda: bool(peers.running) and peers.processes[0] is not first_peer, timeout=60_000)
        qtbot.waitUntil(lambda: any(row["peers_seen"] >= 1 for row in peer_rows(demo_dir)[rows_before:]),
                        timeout=START_MS)
    finally:
        supervisor.stop()
        qtbot.waitUntil(lambda: not supervisor.running, timeout=START_MS)
        peers.stop(timeout_s=60)
    assert not peers.processes
