"""Typed events survive the JSON-lines stream; the run history is append-only and resumes without duplicates."""

from __future__ import annotations

import dataclasses
import json

import pytest

from node.events import (
    EvalFinished, EventBus, JsonLinesWriter, ErrorReported, RolloutSample, RoundFinished, StateChanged, event_from_json,
)
from node.runstore import RunStore


def metrics(round_: int, reward: float = 0.5) -> RoundFinished:
    return RoundFinished(
        round=round_, rounds_trained=round_ + 1, reward_local=reward, reward_external=None, reward_train=reward,
        loss=0.1, kl=None, completion_length=12.0, tokens_generated=96, generation_tokens_per_s=40.0,
        seconds_generate=2.0, seconds_share=0.1, seconds_gather=0.2, seconds_train=1.0, seconds_total=3.3,
        peers_seen=2, groups_shared=2, groups_received=4, groups_used=2, groups_zero_advantage=1,
        groups_rejected=1, rejected_reasons={"question_mismatch": 1},
    )


def sample(round_: int) -> RolloutSample:
    return RolloutSample(round=round_, source_peer="QmPeer", source_name="calm-red-fox", local=False,
                         family="bf", question="q?", completion="<answer>x</answer>", reward=1.0)


def test_every_event_roundtrips_through_json_lines():
    for event in (metrics(3), sample(3), StateChanged(state="paused", detail="by user"),
                  ErrorReported(message="boom", hint="fix it", fatal=True)):
        line = event.to_json()
        assert json.loads(line)["kind"] == event.kind
        assert event_from_json(line) == event


@pytest.mark.parametrize("line", ["[]", '{"kind": "nope"}', "not json", '{"kind": "state_changed"}'])
def test_unknown_or_broken_lines_are_refused(line):
    with pytest.raises((ValueError, TypeError)):
        event_from_json(line)


def test_bus_isolates_failing_subscribers(capsys):
    bus, seen = EventBus(), []
    bus.subscribe(lambda e: 1 / 0)
    unsubscribe = bus.subscribe(seen.append)
    import io

    stream = io.StringIO()
    bus.subscribe(JsonLinesWriter(stream))
    bus.emit(StateChanged(state="training"))
    unsubscribe()
    bus.emit(StateChanged(state="paused"))
    assert [e.state for e in seen] == ["training"]
    assert [event_from_json(line).state for line in stream.getvalue().splitlines()] == ["training", "paused"]


def test_store_appends_reads_skips_torn_lines_and_truncates(tmp_path):
    store = RunStore(tmp_path / "run")
    for r in range(5):
        store.append_round(metrics(r, reward=r / 10), [sample(r), sample(r)])
    with open(store.metrics_path, "a") as f:
        f.write('{"kind": "round_finished", "round": 5, "rew')  # a crash mid-write
    assert [m.round for m in store.metrics()] == [0, 1, 2, 3, 4]
    assert len(store.samples()) == 10 and len(store.samples(last=3)) == 3
    store.truncate_after(2)
    assert [m.round for m in RunStore(tmp_path / "run").metrics()] == [0, 1, 2]
    assert {s.round for s in store.samples()} == {0, 1, 2}
    store.truncate_after(None)
    assert store.metrics() == [] and store.samples() == []


SWARM_FIGURES = ("local_groups_with_spread", "peer_groups_with_spread", "peer_groups_spread_we_lacked")


def test_a_run_folder_written_before_the_swarm_figures_still_loads(tmp_path):
    store = RunStore(tmp_path / "run")
    new = dataclasses.replace(metrics(1), local_groups_with_spread=1, peer_groups_with_spread=2,
                              peer_groups_spread_we_lacked=1)
    old_round = {key: value for key, value in json.loads(metrics(0).to_json()).items() if key not in SWARM_FIGURES}
    evaluation = EvalFinished(round=0, rounds_trained=0, questions=4, accuracy_greedy=0.5, exact_mean=0.5,
                              score_mean=0.5, wellformed_rate=1.0, per_family={"products": 0.5},
                              per_family_questions={"products": 4})
    old_evaluation = {k: v for k, v in json.loads(evaluation.to_json()).items() if k != "per_family_questions"}
    store.metrics_path.write_text(json.dumps(old_round) + "\n" + new.to_json() + "\n")
    store.evaluations_path.write_text(json.dumps(old_evaluation) + "\n")
    old, loaded = store.metrics()
    assert all(getattr(old, name) is None for name in SWARM_FIGURES)  # not measured, never a false zero
    assert loaded == new
    (evaluation_read,) = store.evaluations()
    assert evaluation_read.per_family == {"products": 0.5} and evaluation_read.per_family_questions == {}
