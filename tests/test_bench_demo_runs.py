"""bench/demo_runs.py: issue 29's point-1 verdict per node, and the demo table as median and range over runs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench import demo_runs

REPO = Path(__file__).resolve().parents[1]


def _curve(node: int, heldout: dict[int, float]) -> dict:
    return {"node": node, "heldout": [[n, a, 1.0, None] for n, a in heldout.items()]}


def _run(seed: int, *curves: dict, outcome: str = "out_of_time") -> dict:
    return {"config": "I=2,J=2", "seed": seed, "outcome": outcome, "complete": outcome == "complete",
            "curves": list(curves)}


RISING = {0: 0.195, 10: 0.25, 20: 0.30, 30: 0.315}  # + 0.12 exactly at the end, never under 0.245 after round 20
FELL_BACK = {0: 0.195, 10: 0.33, 20: 0.24, 30: 0.40}  # ends high, but round 20 is under round 0 + 0.05
SLOW = {0: 0.195, 10: 0.22, 20: 0.25, 30: 0.31}  # holds, gains only 0.115


def test_a_node_meets_point_1_only_by_gaining_and_never_falling_back():
    kwargs = {"gain": 0.12, "floor": 0.05, "after": 20}
    rising = demo_runs.node_verdict(_curve(1, RISING), **kwargs)
    assert (rising["gained"], rising["held"], rising["met"]) == (True, True, True)
    assert (rising["last_round"], rising["lowest_from_round_20"]) == (30, 0.30)
    fell_back = demo_runs.node_verdict(_curve(1, FELL_BACK), **kwargs)
    assert (fell_back["gained"], fell_back["held"], fell_back["met"]) == (True, False, False)
    slow = demo_runs.node_verdict(_curve(1, SLOW), **kwargs)
    assert (slow["gained"], slow["held"], slow["met"]) == (False, True, False)
    exactly = demo_runs.node_verdict(_curve(1, {0: 0.085, 20: 0.135, 30: 0.205}), **kwargs)  # 0.085 + 0.12 > 0.205
    assert (exactly["gained"], exactly["held"]) == (True, True)
    short = demo_runs.node_verdict(_curve(1, {0: 0.195, 10: 0.4}), **kwargs)  # never reached round 20: not shown
    assert short["lowest_from_round_20"] is None and not short["met"]


def test_a_run_meets_point_1_when_every_node_does():
    runs = [_run(0, _curve(1, RISING), _curve(2, RISING)), _run(1, _curve(1, RISING), _curve(2, FELL_BACK))]
    summary = demo_runs.summarize(runs, gain=0.12, floor=0.05, after=20)
    assert (summary["runs_meeting_point_1"], summary["runs"]) == (1, 2)
    assert [n["met"] for n in summary["per_run"][1]["nodes"]] == [True, False]


def test_the_table_takes_median_and_range_of_run_means_at_rounds_every_node_of_a_run_reached():
    runs = [_run(0, _curve(1, {0: 0.2, 10: 0.3}), _curve(2, {0: 0.2, 10: 0.5})),          # mean 0.4 at 10
            _run(1, _curve(1, {0: 0.2, 10: 0.2}), _curve(2, {0: 0.2, 10: 0.3})),          # 0.25
            _run(2, _curve(1, {0: 0.2, 10: 0.3, 20: 0.6}), _curve(2, {0: 0.2, 10: 0.3}))]  # 0.3; round 20: node 1 only
    rows = {row["rounds"]: row for row in demo_runs.by_round(runs)}
    assert rows[10] == {"rounds": 10, "runs": 3, "median": 0.3, "range": [0.25, 0.4], "lowest_node": 0.2}
    assert 20 not in rows  # a run counts at a round only when all of its nodes evaluated there
    assert rows[0]["median"] == pytest.approx(0.2)


def test_the_command_reads_per_seed_folders_and_writes_the_summary(tmp_path):
    for seed, curves in ((0, (_curve(1, RISING), _curve(2, RISING))), (1, (_curve(1, SLOW), _curve(2, RISING)))):
        folder = tmp_path / "runs" / f"s{seed}"
        folder.mkdir(parents=True)
        solo = {**_run(seed, _curve(1, RISING)), "config": "I=4,J=0"}  # another configuration: left out
        (folder / "learning.json").write_text(json.dumps({
            "command": f"sweep {seed}", "model": "bundled", "machine": {}, "settings": {},
            "runs": [_run(seed, *curves), solo]}))
    out = tmp_path / "summary.json"
    printed = subprocess.run([sys.executable, str(REPO / "bench" / "demo_runs.py"), str(tmp_path / "runs"),
                              "--out", str(out), "--plot", str(tmp_path / "curves.png")],
                             check=True, capture_output=True, text=True, cwd=tmp_path).stdout
    assert printed.startswith("1 of 2 runs")
    assert "seed 1 node 1: 0.195 -> 0.310 at round 30, lowest from round 20 0.25  (not met)" in printed
    summary = json.loads(out.read_text())
    assert [v["seed"] for v in summary["per_run"]] == [0, 1]
    assert (tmp_path / "curves.png").read_bytes().startswith(b"\x89PNG")
    assert summary["by_round"][-1] == {"rounds": 30, "runs": 2, "median": pytest.approx(0.3137, abs=1e-4),
                                      "range": [pytest.approx(0.3125), pytest.approx(0.315)], "lowest_node": 0.31}
