"""bench/attack.py's summary: a run's metrics.jsonl, written by the node's own RunStore, into the reported figures."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from node.events import RolloutSample, RoundFinished
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
    row = bench.table([{"attack": "payload", "restart": {"started": True, "rounds_played": 1},
                        "nodes": {"a": summary | {"peak_rss": {"node_mb": 500.0, "p2pd_mb": 40.0}}}}])
    assert "| payload | a | 5/6 (1) | 2.0 / 20.0 / 20.0 |" in row and "payload_outside_answer 6" in row
    assert "| 7 |" in row and row.rstrip().endswith("| yes, 1 |")


def _sample(round_, peer, *, local=False, fate="trained"):
    return RolloutSample(round=round_, source_peer=peer, source_name=peer, local=local, family="f", question="q",
                         completion="c", reward=1.0, fate=fate)


def test_whose_groups_a_node_received_and_trained_on_come_from_the_samples(bench):
    samples = [_sample(r, "me", local=True) for r in range(4)]
    samples += [_sample(1, "other"), _sample(1, "sybil1", fate="update_skipped"),
                _sample(2, "sybil2", fate="rejected:payload_outside_answer"),
                _sample(2, "sybil3", fate="no_signal"), _sample(3, "other", fate="dropped_equal_rewards")]
    swap = bench.exchange(samples, "me", "other", {"sybil1", "sybil2", "sybil3"}, slots=8)
    assert (swap["rounds_receiving_other"], swap["rounds_played"]) == (2, 4)
    # round 0 came before any peer group arrived: rounds never wait, so it is left out of the second measure
    assert (swap["rounds_receiving_other_since_first_peer_group"], swap["rounds_since_first_peer_group"]) == (2, 3)
    assert swap["groups_received"] == {"other": 2, "adversary": 3}
    assert swap["slots_taken"] == {"other": 1, "adversary": 2} and swap["adversary_slot_share"] == 0.25


def test_storage_and_refusals_come_from_the_nodes_log(bench):
    log = ('x Swarm storage: 1000 bytes held for the swarm, at most 600 from one address group and 300 from one '
           'signer; refused {}, from {}; evicted 0\nRound 4: 1 of 3 entries not stored\n'
           'Swarm storage: 5000 bytes held for the swarm, at most 4000 from one address group and 200 from one signer; '
           'refused {"quota": 7}, from {"127.0.9.0/24": 7}; evicted 3\n')
    held = bench.storage(log, {"b": "127.0.2.0/24", "attacker": "127.0.9.0/24"})
    assert held == {"max_bytes": 5000, "max_from_one_address_group": 4000, "max_from_one_signer": 300,
                    "refused": {"quota": 7}, "refused_from": {"b": 0, "attacker": 7},
                    "rounds_with_own_entry_unconfirmed": 1}
    assert bench.storage("", {})["max_bytes"] is None


def test_the_summary_gives_median_and_range_over_runs(bench):
    def run(received, taken, refused):
        node = {"exchange": {"rounds_receiving_other": received, "rounds_played": 6, "adversary_slot_share": taken,
                             "rounds_since_first_peer_group": 6, "rounds_receiving_other_since_first_peer_group": received},
                "storage": {"max_bytes": 2**20, "max_from_one_address_group": 2**19,
                            "refused_from": {"a": 0, "b": refused, "attacker": 9}},
                "gather_s": {"p50": 1.0}, "max_round": 5}
        return [{"attack": "replay", "nodes": {"a": node}}]

    (row,) = bench.summary([run(6, 0.5, 0), run(3, 0.25, 1), run(5, 0.0, 0)])
    assert row["attack"] == "replay" and row["node"] == "a"
    assert row["rounds_receiving_other_share"] == {"median": 0.833, "min": 0.5, "max": 1.0}
    assert row["rounds_receiving_other_share_once_fed"] == row["rounds_receiving_other_share"]
    assert row["adversary_slot_share"] == {"median": 0.25, "min": 0.0, "max": 0.5}
    assert row["entries_refused_from_honest_networks"] == {"median": 0, "min": 0, "max": 1}
    assert row["stored_mb"]["median"] == 1.0


def test_no_rounds_is_reported_as_all_lost(bench):
    summary = bench.summarize([], asked=4)
    assert summary["rounds_lost"] == 4 and summary["gather_s"]["max"] is None and summary["max_round"] is None
