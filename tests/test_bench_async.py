"""bench/async.py's own arithmetic on made-up runs: per-node numbers over the window and the paired ratios."""

import importlib
from types import SimpleNamespace

bench = importlib.import_module("bench.async")  # "async" is a keyword: no plain import


def round_event(at: float, *, total: float, gather: float = 0.0, used: int = 0, shared: int = 2, age=None):
    return SimpleNamespace(time=at, seconds_total=total, seconds_gather=gather, seconds_share=0.001,
                           seconds_train=total / 2, groups_used=used, groups_shared=shared, rejected_reasons={},
                           peer_group_age_s_mean=age, peer_group_age_s_max=age)


def test_a_node_counts_only_its_rounds_inside_the_window_and_its_waiting_share():
    rounds = [round_event(5.0, total=9.0), round_event(12.0, total=2.0, gather=0.5, used=2, age=3.0),
              round_event(14.0, total=2.0, used=1, age=1.0), round_event(30.0, total=2.0, used=2)]
    node = bench._Node("n0", process=None)
    node.rounds = rounds
    got = bench._node_numbers(node, released=10.0, stopped=20.0, external=2)
    assert got["rounds"] == 2 and got["rounds_per_hour"] == 720.0  # 2 rounds in 10 s; the first and last are outside
    assert got["waiting_share"] == 0.125 and got["j_filled_share"] == 0.5 and got["peer_groups_share"] == 1.0
    assert got["groups_used"] == 3 and got["peer_group_age_s_mean"] == 2.0 and got["peer_group_age_s_max"] == 3.0


def test_ratios_pair_shared_and_solo_runs_of_the_same_repetition():
    def run(scenario, repeat, *rates):
        return {"scenario": scenario, "code": str(bench.REPO), "repeat": repeat,
                "nodes": [{"rounds_per_hour": r} for r in rates]}

    runs = [run("solo", 0, 100.0, 200.0), run("shared", 0, 90.0, 220.0),
            run("solo", 1, 50.0, 100.0), run("shared", 1, 60.0, 100.0),
            run("solo", 2, 100.0, 100.0), run("shared", 2, 100.0, 80.0)]
    ratios = bench.summarize(runs)["rounds_per_hour_ratio_shared_vs_solo"]
    assert ratios["shared@async/solo node0"] == {"median": 1.0, "min": 0.9, "max": 1.2, "n": 3}
    assert ratios["shared@async/solo node1"] == {"median": 1.0, "min": 0.8, "max": 1.1, "n": 3}
