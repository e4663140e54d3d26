"""A real node in-process (tiny model, real DHT, solo): events, history, pause / resume / stop."""

from __future__ import annotations

import dataclasses
import json
import logging
import threading

import pytest

from node.config import NodeConfig
from node.events import EventBus, RoundProgress, StateChanged
from node.learning.checkpoint import Checkpointer
from node.runner import SwarmNode
from node.runstore import RunStore
from node.swarm.records import MAX_ROUND
from tests.nodes import tiny_config

pytestmark = pytest.mark.slow


def test_solo_node_trains_pauses_resumes_and_stops(tiny_model_dir, tmp_path, caplog):
    caplog.set_level(logging.WARNING)
    config = tiny_config(tiny_model_dir, tmp_path, run={"rounds": 50, "checkpoint_every_rounds": 2})
    bus, events = EventBus(), []
    node = SwarmNode(config, bus=bus)
    two_rounds, paused, third_round = threading.Event(), threading.Event(), threading.Event()

    def watch(event):
        events.append(event)
        if event.kind == "round_finished" and event.rounds_trained == 2:
            node.pause()
            two_rounds.set()
        if event.kind == "state_changed" and event.state == "paused":
            paused.set()
        if event.kind == "round_finished" and event.rounds_trained == 3:
            third_round.set()

    bus.subscribe(watch)
    thread = threading.Thread(target=node.run)
    thread.start()
    assert paused.wait(300), [e.kind for e in events]
    rounds_while_paused = len([e for e in events if e.kind == "round_finished"])
    assert rounds_while_paused == 2
    assert not third_round.wait(2), "a paused node trained a round"  # a negative check needs a window
    node.resume()
    assert third_round.wait(300)
    node.stop()
    thread.join(120)
    assert not thread.is_alive()

    kinds = [e.kind for e in events]
    assert kinds[0] == "state_changed" and "node_started" in kinds and kinds[-1] == "state_changed"
    states = [e.state for e in events if e.kind == "state_changed"]
    assert states[0] == "starting" and "paused" in states and states[-1] == "stopped"
    started = next(e for e in events if e.kind == "node_started")
    assert started.invite and started.invite[0].startswith("/ip4/127.0.0.1/tcp/")
    rounds = [e for e in events if e.kind == "round_finished"]
    assert [r.round for r in rounds] == list(range(len(rounds)))
    for r in rounds:
        assert r.groups_used == 0 and r.reward_external is None  # J = 0: solo training
        assert r.tokens_generated > 0 and r.seconds_generate > 0
        # A random model never answers: no group has reward spread, so no update is run.
        assert r.reward_local == 0.0 and r.update_skipped and r.seconds_train == 0.0
    samples = [e for e in events if e.kind == "rollout_sample"]
    assert len(samples) == 2 * len(rounds) and all(s.local for s in samples)
    assert any(e.kind == "checkpoint_saved" for e in events)

    evaluations = [e for e in events if e.kind == "eval_finished"]
    assert evaluations and evaluations[0].rounds_trained == 0  # the round-0 baseline comes before any training
    assert kinds.index("eval_finished") < kinds.index("round_finished")
    assert evaluations[0].questions == config.evaluation.questions and evaluations[0].accuracy_greedy == 0.0

    history = RunStore(config.run_dir)
    assert history.evaluations() == evaluations
    assert [m.round for m in history.metrics()] == [r.round for r in rounds]
    assert len(history.samples()) == len(samples)
    # In-process there is no node.log (the CLI sets that up): what the node logged went through caplog instead.
    failures = [record for record in caplog.records if record.exc_info or record.levelno >= logging.ERROR]
    assert not failures, [record.getMessage() for record in failures]


def test_a_checkpoint_with_an_out_of_bounds_round_is_repaired_at_start(tiny_model_dir, tmp_path, caplog):
    # what a node that followed a hostile round clock (or a damaged file) could have left behind
    caplog.set_level(logging.INFO)
    config = tiny_config(tiny_model_dir, tmp_path, run={"rounds": 1}, evaluation={"every_rounds": 0})
    SwarmNode(config).run()
    for bad_round, rounds_trained in ((MAX_ROUND + 1, 1), (-1, 2)):
        folder, state = Checkpointer(config.run_dir / "checkpoints").latest()
        (folder / "state.json").write_text(json.dumps({**dataclasses.asdict(state), "round": bad_round}))
        store = RunStore(config.run_dir)
        rows = [json.loads(line) for line in store.metrics_path.read_text().splitlines()]
        store.metrics_path.write_text("".join(json.dumps({**row, "round": bad_round}) + "\n" for row in rows))
        assert [m.round for m in store.metrics()] == [bad_round]

        bus, events = EventBus(), []
        bus.subscribe(events.append)
        caplog.clear()
        SwarmNode(config.update({"run": {"rounds": rounds_trained + 1}}), bus=bus).run()
        (warning,) = [e for e in events if e.kind == "error"]
        assert not warning.fatal and f"round {bad_round}" in warning.message and "Repaired" in warning.message
        assert any(r.levelno == logging.WARNING and f"round {bad_round}" in r.getMessage() for r in caplog.records)
        (played,) = [e for e in events if e.kind == "round_finished"]
        assert played.round == 0 and played.rounds_trained == rounds_trained + 1  # the weights' history goes on
        assert [m.round for m in store.metrics()] == [0]  # the out-of-bounds rows are gone
        assert Checkpointer(config.run_dir / "checkpoints").latest()[1].round == 0


def test_the_state_leaves_waiting_for_peers_when_the_round_trains(tmp_path):
    """The header's badge follows the node's state: it must not say "Waiting for peers" beside "Round 22: Training"."""
    bus = EventBus()
    states = []
    bus.subscribe(lambda event: states.append(event.state) if isinstance(event, StateChanged) else None)
    node = SwarmNode(NodeConfig.build({"run": {"data_dir": str(tmp_path)}}), bus=bus)
    node._set_state("training")
    node._set_state("waiting_for_peers", "0/2 usable peer groups")
    node._report_progress(RoundProgress(round=22, phase="waiting_for_peers", done=1, total=2))
    assert states[-1] == "waiting_for_peers"
    node._report_progress(RoundProgress(round=22, phase="training", done=0, total=4))
    assert states == ["training", "waiting_for_peers", "training"]
