"""bench/paired_codes.py: two versions' runs of one sweep, paired by seed at equal rounds and equal wall time."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import paired_codes

REPO = Path(__file__).resolve().parents[1]


def _node(seconds_per_round: float, rounds: int, heldout: dict[int, float]) -> dict:
    return {"heldout": [[n, a, 1.0, None] for n, a in heldout.items()],
            "rounds": [[n, 0.5, 1.0, 0.25, 1.0, 2, 0, seconds_per_round] for n in range(1, rounds + 1)]}


def _run(seed: int, seconds_per_round: float, rounds: int, heldout: dict[int, float], waited: float = 0.0) -> dict:
    nodes = [_node(seconds_per_round, rounds, heldout), _node(seconds_per_round, rounds, heldout)]
    return {"config": "I=2,J=2", "seed": seed, "complete": True,
            "heldout_by_round": {str(n): a for n, a in heldout.items()}, "curves": nodes,
            "diagnostics": {"seconds_per_round": seconds_per_round, "seconds_waiting_for_peers": waited,
                            "rounds": 2 * rounds, "peer_groups_trained": 3 * rounds, "rounds_j_filled": None}}


def test_heldout_at_seconds_interpolates_between_evaluations():
    node = _node(10.0, 20, {0: 0.2, 10: 0.3, 20: 0.5})
    assert paired_codes.training_seconds(node)[20] == pytest.approx(200.0)
    assert paired_codes.heldout_at_seconds(node, 0.0) == pytest.approx(0.2)
    assert paired_codes.heldout_at_seconds(node, 150.0) == pytest.approx(0.4)
    assert paired_codes.heldout_at_seconds(node, 999.0) == pytest.approx(0.5)  # past its last round: its last evaluation


def test_compare_pairs_by_seed_at_equal_rounds_and_at_the_slower_runs_seconds():
    # the first version: 8 s rounds, 25 of them; the second: 10 s rounds (2 s of it waiting), 20 of them
    first = [_run(0, 8.0, 25, {0: 0.2, 20: 0.4, 25: 0.5}), _run(1, 8.0, 25, {0: 0.2, 20: 0.3, 25: 0.3})]
    second = [_run(1, 10.0, 20, {0: 0.2, 20: 0.35}, waited=2.0), _run(0, 10.0, 20, {0: 0.2, 20: 0.3}, waited=2.0),
              _run(7, 10.0, 20, {0: 0.2, 20: 0.9})]  # no partner: left out
    result = paired_codes.compare(first, second, lambda deltas: [min(deltas), max(deltas)])
    assert result["seeds"] == [0, 1]
    assert result["equal_rounds"]["rounds"] == [20, 20]
    assert result["equal_rounds"]["delta"] == [pytest.approx(0.1), pytest.approx(-0.05)]
    # 200 s: the first version's round 25 (0.5 at 200 s), against the second's round 20
    assert result["equal_wall_time"]["training_seconds"] == [200.0, 200.0]
    assert result["equal_wall_time"]["delta"] == [pytest.approx(0.2), pytest.approx(-0.05)]
    assert result["time_second"]["waiting_share"] == pytest.approx(0.2)
    assert result["time_first"]["rounds_per_hour"] == pytest.approx(450.0)


def test_the_command_writes_the_comparison(tmp_path):
    for name, runs in (("a", [_run(0, 8.0, 25, {0: 0.2, 20: 0.4, 25: 0.5}), _run(1, 8.0, 25, {0: 0.2, 20: 0.3})]),
                       ("b", [_run(0, 10.0, 20, {0: 0.2, 20: 0.3}), _run(1, 10.0, 20, {0: 0.2, 20: 0.3})])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "learning.json").write_text(json.dumps(
            {"command": f"sweep {name}", "model": "tiny", "machine": "here", "settings": {}, "runs": runs}))
    out = tmp_path / "paired.json"
    subprocess.run([sys.executable, str(REPO / "bench" / "paired_codes.py"), str(tmp_path / "a"), str(tmp_path / "b"),
                    "--labels", "async", "sync", "--codes", "abc", "c936939", "--out", str(out)], check=True,
                   capture_output=True, cwd=tmp_path)
    result = json.loads(out.read_text())
    assert result["first"] == {"label": "async", "code": "abc", "command": "sweep a"}
    assert result["equal_rounds"]["delta"] == [pytest.approx(0.1), pytest.approx(0.0)]
    assert len(result["equal_rounds"]["ci95"]) == 2


def _with_flips(run: dict, flips: list[list[int]], *, complete: bool = True) -> dict:
    for node in run["curves"]:
        node["heldout_flips"] = flips
    return {**run, "complete": complete}


def test_incomplete_runs_pair_at_the_last_common_evaluation_with_their_answer_flows():
    # flips: [from round, to round, gained, lost] per node; the run cut short reached round 20 only
    first = [_with_flips(_run(0, 8.0, 25, {0: 0.2, 20: 0.4, 25: 0.5}), [[0, 20, 10, 2], [20, 25, 5, 9]])]
    second = [_with_flips(_run(0, 10.0, 20, {0: 0.2, 20: 0.3}), [[0, 20, 8, 6]], complete=False)]
    with pytest.raises(SystemExit):
        paired_codes.compare(first, second)  # complete runs only by default
    result = paired_codes.compare(first, second, lambda deltas: [min(deltas), max(deltas)], incomplete=True)
    assert result["equal_rounds"]["rounds"] == [20]
    flows = result["answer_flows"]
    # up to round 20, two nodes each: gained 20 against 16, lost 4 against 12 (round 25's flips left out)
    assert (flows["answers_gained"]["first"], flows["answers_gained"]["second"]) == ([20], [16])
    assert (flows["answers_lost"]["first"], flows["answers_lost"]["second"], flows["answers_lost"]["delta"]) == (
        [4], [12], [-8])
    assert flows["answers_gained_per_node"]["first"] == [10.0]


def test_runs_of_other_sizes_compare_their_answer_flows_per_node_only():
    # a 4-node swarm against 2 solo nodes: each swarm node gained 10 and lost 2, each solo node gained 8 and lost 6
    swarm = _with_flips(_run(0, 8.0, 20, {0: 0.2, 20: 0.4}), [[0, 20, 10, 2]])
    swarm["curves"] = swarm["curves"] * 2
    solo = _with_flips(_run(0, 8.0, 20, {0: 0.2, 20: 0.3}), [[0, 20, 8, 6]])
    flows = paired_codes.compare([swarm], [solo], lambda deltas: [min(deltas), max(deltas)])["answer_flows"]
    assert "answers_gained" not in flows  # sums over 4 and over 2 nodes say nothing about each other
    assert flows["answers_gained_per_node"]["delta"] == [2.0]
    assert flows["answers_lost_per_node"]["delta"] == [-4.0]


def test_specialized_runs_also_pair_each_nodes_own_family_and_the_others_at_the_compared_rounds():
    # rounds trained, held-out on the node's own family, on the others; the solo run cut short reached round 20
    swarm = _run(0, 8.0, 25, {0: 0.2, 20: 0.4, 25: 0.5})
    swarm["curves"][0]["heldout_own_other"] = [[0, 0.2, 0.2], [20, 0.5, 0.4], [25, 0.6, 0.5]]
    swarm["curves"][1]["heldout_own_other"] = [[0, 0.2, 0.2], [20, 0.3, 0.2], [25, 0.6, 0.5]]
    solo = _run(0, 10.0, 20, {0: 0.2, 20: 0.3})
    solo["complete"] = False
    for node in solo["curves"]:
        node["heldout_own_other"] = [[0, 0.2, 0.2], [20, 0.5, 0.1]]
    rounds = paired_codes.compare([swarm], [solo], lambda deltas: [min(deltas), max(deltas)],
                                  incomplete=True)["equal_rounds"]
    assert rounds["heldout_own_family"]["first"] == [0.4] and rounds["heldout_own_family"]["delta"] == [-0.1]
    assert rounds["heldout_other_families"]["delta"] == [pytest.approx(0.2)]
    plain = paired_codes.compare([_run(0, 8.0, 20, {0: 0.2, 20: 0.4})], [_run(0, 8.0, 20, {0: 0.2, 20: 0.3})])
    assert "heldout_own_family" not in plain["equal_rounds"]


def test_the_command_pairs_one_configuration_of_the_first_folder_with_another_of_the_second(tmp_path):
    shared = {**_run(0, 8.0, 20, {0: 0.2, 20: 0.4}), "config": "I=2,J=2"}
    solo = {**_run(0, 8.0, 20, {0: 0.2, 20: 0.3}), "config": "I=4,J=0"}
    for name, run in (("shared", shared), ("solo", solo)):
        (tmp_path / name).mkdir()
        (tmp_path / name / "learning.json").write_text(json.dumps(
            {"command": name, "model": "tiny", "machine": "here", "settings": {}, "runs": [run]}))
    out = tmp_path / "paired.json"
    command = [sys.executable, str(REPO / "bench" / "paired_codes.py"), str(tmp_path / "shared"),
               str(tmp_path / "solo"), "--out", str(out)]
    assert subprocess.run(command, capture_output=True, cwd=tmp_path).returncode != 0  # no I=2,J=2 run in solo
    subprocess.run(command + ["--config", "I=2,J=2", "I=4,J=0"], check=True, capture_output=True, cwd=tmp_path)
    result = json.loads(out.read_text())
    assert result["config"] == ["I=2,J=2", "I=4,J=0"]
    assert result["equal_rounds"]["delta"] == [pytest.approx(0.1)]


def test_a_folder_of_per_seed_folders_is_one_sweep(tmp_path):
    for seed in (0, 1):
        folder = tmp_path / "anchor" / f"s{seed}"
        folder.mkdir(parents=True)
        (folder / "learning.json").write_text(json.dumps(
            {"command": f"sweep seed {seed}", "model": "tiny", "machine": "here", "settings": {},
             "runs": [_run(seed, 8.0, 20, {0: 0.2, 20: 0.3})]}))
    merged = paired_codes.load_results(tmp_path / "anchor")
    assert [run["seed"] for run in merged["runs"]] == [0, 1]
    assert merged["command"] == ["sweep seed 0", "sweep seed 1"]
    with pytest.raises(SystemExit):
        paired_codes.load_results(tmp_path)  # neither a learning.json nor subfolders with one


def test_sweeps_with_cpu_seconds_also_pair_at_the_cpu_both_runs_reached():
    # a swarm of 20 rounds that reached 400 CPU s, against solo nodes trained on to round 30 at 300 CPU s
    swarm = _run(0, 8.0, 20, {0: 0.2, 10: 0.3, 20: 0.4})
    swarm["heldout_by_cpu_per_node"] = [[[0.0, 0.2], [200.0, 0.3], [400.0, 0.4]]] * 2
    solo = _run(0, 8.0, 30, {0: 0.2, 10: 0.25, 20: 0.3, 30: 0.35})
    solo["heldout_by_cpu_per_node"] = [[[0.0, 0.2], [100.0, 0.25], [200.0, 0.3], [300.0, 0.35]]] * 2
    result = paired_codes.compare([swarm], [solo], lambda deltas: [min(deltas), max(deltas)])
    assert result["equal_rounds"]["delta"] == [pytest.approx(0.1)]  # both at round 20
    # at 300 s: the swarm between its 200 s (0.3) and 400 s (0.4) evaluations, solo at its last
    assert result["equal_cpu"]["cpu_seconds"] == [300.0]
    assert result["equal_cpu"]["delta"] == [pytest.approx(0.0)]
    assert "equal_cpu" not in paired_codes.compare([_run(0, 8.0, 20, {0: 0.2, 20: 0.4})], [solo])
