"""bench/stronger_peer.py: a node's held-out gain on a family beside a stronger peer against alone, both directions."""

from __future__ import annotations

import json

import pytest

from bench import stronger_peer


def _curve(start: dict[str, float], end: dict[str, float], groups: dict[str, tuple[int, int, int]]) -> dict:
    """A node's curve at rounds 0 and 4: held-out per family (the whole set: their mean) and its groups by family
    (own, own with spread, peers' with spread)."""
    return {"heldout": [[0, sum(start.values()) / len(start), 1.0, None], [4, sum(end.values()) / len(end), 1.0, None]],
            "heldout_per_family": [[0, start], [4, end]],
            "groups_by_family": {f: {"own": own, "own_with_spread": spread, "peer_with_spread": peer}
                                 for f, (own, spread, peer) in groups.items()}}


def _result(small_gain_alone: list[float], small_gain_together: list[float]) -> dict:
    """Two nodes, one seed per entry: the small model (node 1) seldom has spread on products and gains there as
    given; the strong one (node 2) gains 0.1 on products alone and 0.05 beside the small one."""
    runs = []
    for seed, (alone, together) in enumerate(zip(small_gain_alone, small_gain_together, strict=True)):
        for j, gain, strong_gain in ((0, alone, 0.1), (2, together, 0.05)):
            small = _curve({"chain_sum": 0.2, "products": 0.1}, {"chain_sum": 0.3, "products": 0.1 + gain},
                           {"chain_sum": (8, 4, 3 if j else 0), "products": (8, 1, 5 if j else 0)})
            strong = _curve({"chain_sum": 0.5, "products": 0.5}, {"chain_sum": 0.5, "products": 0.5 + strong_gain},
                            {"chain_sum": (8, 2, 0), "products": (8, 6, 0)})
            runs.append({"config": f"I={4 - j},J={j}", "J": j, "seed": seed, "complete": True,
                         "curves": [small, strong]})
    runs.append({**runs[0], "seed": 9, "complete": False})  # cut short: not paired
    return {"command": "python bench/swarm_vs_solo.py ...", "runs": runs,
            "settings": {"nodes": 2, "rounds": 4, "node_models": ["bundled", "/models/stronger"]}}


def test_each_direction_compares_the_family_where_its_own_groups_had_spread_least_often_alone():
    summary = stronger_peer.propagation(_result([0.05, 0.1, 0.0], [0.2, 0.2, 0.1]),
                                        ci95=lambda deltas: [min(deltas), max(deltas)])
    assert summary["seeds"] == [0, 1, 2] and summary["rounds"] == 4
    small, strong = summary["directions"]
    assert (small["model"], small["peer"]) == ("bundled", "/models/stronger")
    assert small["family"] == "products"  # 1 of 8 own groups with spread, against 4 of 8 on chain_sum
    assert small["own_groups_with_spread_alone"] == {"chain_sum": 0.5, "products": 0.125}
    assert small["peer_groups_with_spread_trained"] == {"chain_sum": 9, "products": 15}
    products = small["by_family"]["products"]
    assert products["gain_alone_mean"] == pytest.approx(0.05) and products["gain_with_peer_mean"] == pytest.approx(
        0.1667, abs=1e-4)
    assert products["ratio_of_means"] == pytest.approx(3.33, abs=0.01)
    assert products["delta"] == [pytest.approx(0.15), pytest.approx(0.1), pytest.approx(0.1)]
    assert products["ci95"] == [pytest.approx(0.1), pytest.approx(0.15)]
    assert products["seeds_with_peer_at_least_twice_alone"] == 3  # 0.2 >= 0.1, 0.2 >= 0.2, 0.1 >= 0
    assert small["by_family"]["all families"]["delta_mean"] == pytest.approx(0.0583, abs=1e-4)  # half the products gain
    # the reverse: the strong model on its own least-spread family (chain_sum, 2 of 8) gained nothing either way
    assert strong["family"] == "chain_sum"
    assert strong["by_family"]["chain_sum"]["ratio_of_means"] is None  # no gain alone: no ratio
    assert strong["by_family"]["products"]["delta_mean"] == pytest.approx(-0.05)


def test_a_named_family_is_compared_for_both_nodes():
    summary = stronger_peer.propagation(_result([0.05, 0.1], [0.2, 0.2]), family="chain_sum")
    assert [d["family"] for d in summary["directions"]] == ["chain_sum", "chain_sum"]


def test_it_refuses_a_sweep_of_one_model_and_runs_without_per_family_figures():
    result = _result([0.05], [0.2])
    with pytest.raises(SystemExit, match="--node-models"):
        stronger_peer.propagation({**result, "settings": {"nodes": 2, "rounds": 4}})
    for run in result["runs"]:
        run["curves"][0]["heldout_per_family"] = []
    with pytest.raises(SystemExit, match="per-family"):
        stronger_peer.propagation(result)


def test_the_command_writes_the_comparison_and_its_chart(tmp_path):
    pytest.importorskip("matplotlib")
    (tmp_path / "learning.json").write_text(json.dumps(_result([0.05, 0.1], [0.2, 0.2])))
    out, plot = tmp_path / "propagation.json", tmp_path / "propagation.png"
    assert stronger_peer.main([str(tmp_path), "--out", str(out), "--plot", str(plot)]) == 0
    saved = json.loads(out.read_text())
    assert saved["directions"][0]["by_family"]["products"]["gain_with_peer"] == [0.2, 0.2]
    assert saved["reported_by"].startswith("python bench/stronger_peer.py")
    assert plot.stat().st_size > 10_000
