"""bench/attack.py's summary: a run's metrics.jsonl, written by the node's own RunStore, into the reported figures."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from node.events import RoundFinished
from node.runstore import RunStore

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("attack_bench", REPO / "bench" / "attack.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # imports hivemind through the adversary: once for the module
    return module


def _round(round_: int, gather: float, *, used: int, rejected: dict[str, int]) -> RoundFinished:
    return RoundFinished(
        round=round_, rounds_trained=round_ + 1, reward_local=0.5, reward_external=None, reward_train=0.5,
        loss=0.0, kl=None, completion_length=9.0, tokens_generated=100, generation_tokens_per_s=10.0,
        seconds_generate=1.0, seconds_share=0.1, seconds_gather=gather, seconds_train=1.0, seconds_total=gather + 2.0,
        peers_seen=2, groups_shared=2, groups_received=used + sum(rejected.values()), groups_used=used,
        groups_zero_advantage=0, groups_rejected=sum(rejected.values()), rejected_reasons=rejected,
    )


def test_rounds_lost_gather_spread_groups_and_rejections_come_from_the_metrics_file(bench, tmp_path):
    store = RunStore(tmp_path / "run")
    gathers = [0.5, 1.0, 2.0, 20.0]
    for round_, gather in enumerate(gathers):
        store.append_round(_round(round_ + 3, gather, used=1, rejected={"payload_outside_answer": round_}), [])
    store.append_round(_round(7, 4.0, used=2, rejected={"question_mismatch": 1}), [])

    summary = bench.summarize(store.metrics(), asked=6)

    assert (summary["rounds_finished"], summary["rounds_lost"]) == (5, 1)
    assert summary["gather_s"] == {"p50": 2.0, "p95": 20.0, "max": 20.0}
    assert summary["round_s"]["max"] == 22.0
    assert summary["groups_used"] == 6
    assert summary["rejected"] == {"payload_outside_answer": 6, "question_mismatch": 1}
    assert summary["max_round"] == 7
    row = bench.table([{"attack": True, "restart": {"started": True, "rounds_played": 1},
                        "nodes": {"a": summary | {"peak_rss": {"node_mb": 500.0, "p2pd_mb": 40.0}}}}])
    assert "| attack | a | 5/6 (1) | 2.0 / 20.0 / 20.0 |" in row and "payload_outside_answer 6" in row
    assert row.rstrip().endswith("| 7 | yes, 1 |")


def test_no_rounds_is_reported_as_all_lost(bench):
    summary = bench.summarize([], asked=4)
    assert summary["rounds_lost"] == 4 and summary["gather_s"]["max"] is None and summary["max_round"] is None
