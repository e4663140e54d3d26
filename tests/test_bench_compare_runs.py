"""bench/compare_runs.py: the table and curves drawn from swarm_vs_solo results files."""

from __future__ import annotations

import json
from pathlib import Path

from bench import compare_runs

REPO = Path(__file__).resolve().parents[1]


def _run(greedy: dict, sampled: dict | None, seed: int = 0, config: str = "I=2,J=2", reward: float = 12.0) -> dict:
    return {"config": config, "seed": seed, "heldout_by_round": greedy, "heldout_sampled_by_round": sampled,
            "minutes": 30.5, "cumulative_reward": reward, "outcome": "complete"}


def _results(folder: Path, greedy: dict, sampled: dict | None) -> Path:
    folder.mkdir(parents=True)
    (folder / "learning.json").write_text(json.dumps({"runs": [_run(greedy, sampled)]}))
    return folder


def test_each_result_is_a_row_of_greedy_and_sampled_accuracy_and_a_pair_of_curves(tmp_path):
    full = _results(tmp_path / "full", {"0": 0.25, "5": 0.5}, {"0": 0.125, "5": 0.375})
    greedy_only = _results(tmp_path / "lora", {"0": 0.25, "5": 0.3125}, None)
    rows = [("full", compare_runs.curves(full)[0]), ("lora", compare_runs.curves(greedy_only)[0])]
    lines = compare_runs.table(rows).splitlines()
    assert lines[0] == "| run | round 0 | round 5 | cumulative reward | minutes |"
    assert lines[2] == "| full | 0.250 / 0.125 | 0.500 / 0.375 | 12.0 | 30.5 |"
    assert lines[3] == "| lora | 0.250 | 0.312 | 12.0 | 30.5 |"
    compare_runs.draw(rows, tmp_path / "curves.png")
    assert (tmp_path / "curves.png").stat().st_size > 10_000


def test_the_mean_over_seeds_keeps_configurations_apart_and_only_rounds_every_seed_reached():
    runs = [compare_runs.curve(run) for run in (
        _run({"0": 0.25, "5": 0.5, "10": 0.75}, {"0": 0.125}, seed=0, reward=10.0),
        _run({"0": 0.25, "5": 0.25}, {"0": 0.375}, seed=1, reward=14.0),
        _run({"0": 0.5}, None, seed=0, config="I=4,J=0"),
    )]
    shared, solo = compare_runs.mean_over_seeds(runs)
    assert (shared["config"], shared["seed"]) == ("I=2,J=2", "0+1")
    assert shared["greedy"] == {"0": 0.25, "5": 0.375}
    assert shared["sampled"] == {"0": 0.25}
    assert shared["cumulative_reward"] == 12.0
    assert (solo["seed"], solo["greedy"], solo["sampled"]) == ("0", {"0": 0.5}, {})
