"""Real swarms on loopback: separate node processes, real hivemind DHT, the tiny model.

- three nodes train until each of the two survivors has trained on peer groups (never waiting for them); killing one
  mid-run does not stop the others, which then stop cleanly when told;
- a node SIGKILLed between rounds resumes from its checkpoint: identity, round counter and metrics continue
  without loss or duplication.
"""

from __future__ import annotations

import psutil
import pytest

from node.runstore import RunStore
from node.swarm import known_peers
from tests.nodes import NodeProcess, run_until, tiny_config

pytestmark = pytest.mark.slow


MAX_ROUNDS = 400  # a bound never reached: the swarm test stops its nodes once what it checks has happened


def _swarm_config(tiny_model_dir, data_dir, *, rounds, join=()):
    return tiny_config(
        tiny_model_dir, data_dir,
        # A random tiny model scores 0 everywhere: keep zero-advantage groups so peer groups are actually used.
        training={"external_groups": 2, "drop_zero_advantage": False},
        swarm={"swarm_name": "test", "initial_peers": list(join), "gather_timeout_s": 60.0},
        run={"rounds": rounds, "checkpoint_every_rounds": 5},
    )


def test_three_node_swarm_shares_rollouts_and_survives_a_killed_peer(tiny_model_dir, tmp_path):
    # Paused until all three are up: a node alone would rightly train solo without waiting for anybody.
    # A node never waits for peers' groups: its first rounds (before any peer has published) train on its own only,
    # and how many those are depends on the machine's load. So the survivors run until both have trained on a peer's
    # groups, then stop.
    first = NodeProcess(_swarm_config(tiny_model_dir, tmp_path / "a", rounds=MAX_ROUNDS), name="a")
    first.send("pause")
    nodes = [first]
    try:
        invite = first.wait_for(lambda e: e.kind == "node_started").invite
        for name in ("b", "c"):
            node = NodeProcess(_swarm_config(tiny_model_dir, tmp_path / name, rounds=MAX_ROUNDS, join=invite),
                               name=name)
            node.send("pause")
            nodes.append(node)
        for node in nodes:
            node.wait_for(lambda e: e.kind == "state_changed" and e.state == "paused")
        for node in nodes:
            node.send("resume")
        victim = nodes[2]
        victim.wait_for(lambda e: e.kind == "round_finished")
        victim.kill_tree()

        survivors = nodes[:2]
        run_until(survivors, lambda: all(any(r.reward_external is not None for r in n.events_of("round_finished"))
                                         for n in survivors),
                  timeout=400, what="did both survivors train on a peer's groups")
        for node in survivors:
            node.send("stop")
        for node in survivors:
            assert node.finish(timeout=300) == 0, node.stderr()
        peer_ids = set()
        for node in nodes[:2]:
            started = node.events_of("node_started")[0]
            peer_ids.add(started.peer_id)
            rounds = node.events_of("round_finished")
            assert [r.round for r in rounds] == list(range(len(rounds)))  # no round lost or repeated
            assert sum(r.groups_used for r in rounds) >= 1, [(r.round, r.groups_received, r.rejected_reasons) for r in rounds]
            assert all(r.groups_rejected == 0 for r in rounds), [r.rejected_reasons for r in rounds]
            assert any(r.reward_external is not None for r in rounds)
            external = [s for s in node.events_of("rollout_sample") if not s.local]
            assert external and all(s.source_peer != started.peer_id for s in external)
            assert node.events_of("peer_joined")
            assert node.events_of("state_changed")[-1].state == "stopped"
        assert len(peer_ids) == 2
        # each node said at start whether others can reach it; the joiner was checked by the node it joined
        # (the host from its own addresses: nobody had joined yet to check it)
        host_views, joiner_view = nodes[0].events_of("reachability"), nodes[1].events_of("reachability")[-1]
        assert host_views[0].advice and host_views[0].local_addresses and not host_views[0].checked
        assert joiner_view.status == "reachable" and joiner_view.checked and not joiner_view.client_mode
        # the joiner remembers the members it met, to rejoin through them
        assert any(peer in address for address in known_peers.load(tmp_path / "b", "test") for peer in peer_ids)
        # Clean exit: no p2p daemon is left behind by the nodes that stopped normally.
        for node in nodes[:2]:
            assert not psutil.pid_exists(node.process.pid) or psutil.Process(node.process.pid).status() == "zombie"
        leftovers = [p for p in psutil.process_iter(["name", "cmdline"]) if p.info["name"] == "p2pd"
                     and any(str(tmp_path / d) in " ".join(p.info["cmdline"] or []) for d in ("a", "b"))]
        assert not leftovers
    finally:
        for node in nodes:
            if node.process.poll() is None:
                node.kill_tree()


def test_resume_after_sigkill_continues_rounds_and_metrics(tiny_model_dir, tmp_path):
    config = tiny_config(tiny_model_dir, tmp_path, run={"rounds": 4, "checkpoint_every_rounds": 1})
    node = NodeProcess(config, name="first")
    try:
        peer_id = node.wait_for(lambda e: e.kind == "node_started").peer_id
        node.wait_for(lambda e: e.kind == "checkpoint_saved" and e.round == 1)
        node.kill_tree()  # between rounds: round 1 is checkpointed, round 2 has not finished
    finally:
        if node.process.poll() is None:
            node.kill_tree()
    before = RunStore(config.run_dir).metrics()
    assert [m.round for m in before][:2] == [0, 1]

    again = NodeProcess(config, name="second")
    try:
        started = again.wait_for(lambda e: e.kind == "node_started")
        assert started.peer_id == peer_id and started.resumed_from_round == 1
        assert again.finish(timeout=600) == 0, again.stderr()
    finally:
        if again.process.poll() is None:
            again.kill_tree()
    rounds = again.events_of("round_finished")
    assert [r.round for r in rounds] == [2, 3]
    assert [r.rounds_trained for r in rounds] == [3, 4]
    history = RunStore(config.run_dir).metrics()
    assert [m.round for m in history] == [0, 1, 2, 3]
    assert [m.rounds_trained for m in history] == [1, 2, 3, 4]
    assert history[:2] == before[:2]


def _named(processes: list[psutil.Process], name: str) -> list[psutil.Process]:
    """The processes of ``processes`` called ``name``; one that ended since it was listed (a node starts short-lived
    helpers too) is not among them."""
    found = []
    for process in processes:
        try:
            if process.name() == name:
                found.append(process)
        except psutil.NoSuchProcess:
            pass
    return found


def test_ctrl_c_stops_cleanly_with_a_checkpoint_and_no_daemon_left(tiny_model_dir, tmp_path):
    import signal

    config = tiny_config(tiny_model_dir, tmp_path, run={"checkpoint_every_rounds": 100})  # runs until stopped
    node = NodeProcess(config, name="ctrl-c")
    try:
        node.wait_for(lambda e: e.kind == "round_finished")
        daemons = _named(psutil.Process(node.process.pid).children(recursive=True), "p2pd")
        assert daemons
        node.process.send_signal(signal.SIGINT)
        assert node.finish(timeout=120) == 0, node.stderr()
    finally:
        if node.process.poll() is None:
            node.kill_tree()
    assert node.events_of("state_changed")[-1].state == "stopped"
    saved = node.events_of("checkpoint_saved")
    assert saved and saved[-1].round == node.events_of("round_finished")[-1].round
    assert not any(p.is_running() and p.status() != psutil.STATUS_ZOMBIE for p in daemons)
