"""Two versions of the code, one sweep: held-out accuracy paired by seed, at equal rounds, wall time and CPU.

``swarm_vs_solo.py`` compares SAPO configurations within one version of the code. This compares one configuration
across two versions: each version's own ``swarm_vs_solo.py`` runs the same sweep (same nodes, configuration, seeds,
evaluation set and settings) from its own checkout, at the same time on the same machine so both share its load, and
this pairs their runs by seed. Issue 36 measures the asynchronous round against the synchronous gather of c936939
this way::

    git worktree add --detach /tmp/sync c936939
    export RL_SWARM_ALLOCATOR=glibc MALLOC_ARENA_MAX=2 MALLOC_MMAP_THRESHOLD_=131072 MALLOC_TRIM_THRESHOLD_=134217728
    SWEEP="--nodes 2 --configs I=2,J=2 --seeds 0 1 2 3 4 --eval-every 5 --eval-questions 64 --eval-samples 0"
    (cd /tmp/sync && python bench/swarm_vs_solo.py $SWEEP --rounds 20 --out /tmp/sweep/sync) &
    python bench/swarm_vs_solo.py $SWEEP --rounds 25 --out /tmp/sweep/async
    python bench/paired_codes.py /tmp/sweep/async /tmp/sweep/sync --labels async sync \\
        --codes "$(git rev-parse --short HEAD)" c936939 --out bench/results/async_learning.json

At **equal rounds** the runs are compared at the last evaluation both reached. At **equal wall time** each node's
held-out accuracy is read at the training seconds the slower run of the pair spent in all (the sum of its rounds'
wall times, evaluations left out because both versions evaluate the same way), interpolated linearly between that
node's evaluations; the faster version runs more rounds (``--rounds 25`` above) so its curve reaches that time.
Where both sweeps recorded each node's training CPU seconds (``swarm_vs_solo.py`` does), it also pairs them at
**equal CPU**: each run read at the CPU seconds both runs reached, between its evaluations, as ``swarm_vs_solo.py``
compares its own configurations.
Each difference (first folder minus second) comes with its mean over seeds and a bootstrap 95 % interval
(``swarm_vs_solo._paired_ci95``). Per version it also reports where the round's time went: seconds per round,
the share spent waiting for peers, rounds per hour of training time.

Where the nodes' evaluations recorded their answers question by question (``heldout_flips`` in each node's curve),
it also pairs the **answer flows** up to the compared round: the questions the two nodes of a run gained (wrong,
then right) and lost (right, then wrong) between consecutive evaluations, first minus second per seed: per node,
and summed over a run's nodes where both runs have as many.

Runs of ``swarm_vs_solo.py --specialize`` (a heterogeneous swarm) also pair, at the same rounds, the held-out on
each node's own family and on the others.

``--config A B`` pairs configuration A of the first folder with B of the second: issue 29's swarm against solo
nodes run apart (``bench/gpu_swarm_vs_solo.sh``, where the solo arm runs fewer nodes).

Two settings of one version compare the same way (``--set`` in both sweeps, e.g. issue 29's pull toward the
starting weights). A folder without a ``learning.json`` of its own stands for the ``learning.json`` files of its
subfolders (one invocation per seed, run side by side); ``--incomplete`` also pairs runs a wall budget cut short,
at the last evaluation both reached::

    python bench/paired_codes.py bench/results/anchor_gpu/3000 bench/results/anchor_gpu/0 --incomplete \
        --labels "anchor_decay 3000" "anchor_decay 0" --out bench/results/anchor_gpu/paired.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench.swarm_vs_solo import _cpu_reached, _heldout_at_cpu, _paired_ci95  # noqa: E402


def training_seconds(node_curve: dict) -> dict[int, float]:
    """Rounds trained -> the node's wall seconds spent in rounds up to then (0 at round 0)."""
    elapsed, total = {0: 0.0}, 0.0
    for row in node_curve["rounds"]:
        total += row[-1]
        elapsed[row[0]] = total
    return elapsed


def heldout_at_seconds(node_curve: dict, budget: float) -> float:
    """The node's held-out accuracy after ``budget`` seconds of rounds, linear between its evaluations."""
    elapsed = training_seconds(node_curve)
    points = sorted((elapsed[n], accuracy) for n, accuracy, *_ in node_curve["heldout"] if n in elapsed)
    if budget >= points[-1][0]:
        return points[-1][1]
    for (t0, a0), (t1, a1) in zip(points, points[1:]):
        if t0 <= budget <= t1:
            return a0 if t1 == t0 else a0 + (a1 - a0) * (budget - t0) / (t1 - t0)
    return points[0][1]


def run_seconds(run: dict) -> float:
    """Mean over a run's nodes of the seconds its rounds took in all."""
    return statistics.fmean(max(training_seconds(node).values()) for node in run["curves"])


def time_split(runs: list[dict]) -> dict:
    """Where one version's rounds spent their time, mean over its runs (from each run's diagnostics)."""
    per_round = [r["diagnostics"]["seconds_per_round"] for r in runs]
    waiting = [r["diagnostics"]["seconds_waiting_for_peers"] for r in runs]
    j_filled = [r["diagnostics"].get("rounds_j_filled") for r in runs]
    return {
        "seconds_per_round": round(statistics.fmean(per_round), 2),
        "waiting_share": round(statistics.fmean(w / s for w, s in zip(waiting, per_round, strict=True)), 4),
        "rounds_per_hour": round(3600 / statistics.fmean(per_round), 1),
        "rounds_j_filled": round(statistics.fmean(j_filled), 4) if None not in j_filled else None,
        "peer_groups_trained_per_round": round(statistics.fmean(
            r["diagnostics"]["peer_groups_trained"] / r["diagnostics"]["rounds"] for r in runs), 3),
    }


def answer_flows(run: dict, last_round: int) -> tuple[int, int] | None:
    """Questions a run's nodes gained and lost between consecutive evaluations up to ``last_round``, summed over its
    nodes; None where a node recorded no answers."""
    gained = lost = 0
    for node in run["curves"]:
        if not node.get("heldout_flips"):
            return None
        for _, to_round, node_gained, node_lost in node["heldout_flips"]:
            if to_round <= last_round:
                gained, lost = gained + node_gained, lost + node_lost
    return gained, lost


def own_and_others(run: dict, rounds: int) -> tuple[float, float] | None:
    """A specialized run's mean over nodes of the held-out on each node's own family and on the others at ``rounds``
    (``swarm_vs_solo.py --specialize``); None where a node has no such figure there."""
    points = [{n: (own, other) for n, own, other in node.get("heldout_own_other", [])} for node in run["curves"]]
    if not all(rounds in node for node in points):
        return None
    return (statistics.fmean(node[rounds][0] for node in points), statistics.fmean(node[rounds][1] for node in points))


def compare(first: list[dict], second: list[dict], ci95=_paired_ci95, *, incomplete: bool = False) -> dict:
    """Runs of the same configuration by two versions, paired by seed (complete runs only, unless ``incomplete``)."""
    usable = (lambda r: len(r["heldout_by_round"]) > 1) if incomplete else (lambda r: r["complete"])
    by_seed = {r["seed"]: r for r in second if usable(r)}
    pairs = [(a, by_seed[a["seed"]]) for a in first if usable(a) and a["seed"] in by_seed]
    if not pairs:
        raise SystemExit("no seed has a " + ("" if incomplete else "complete ") + "run in both folders")
    equal_rounds, rounds_compared, equal_time, budgets = [], [], [], []
    for a, b in pairs:
        common = set(a["heldout_by_round"]) & set(b["heldout_by_round"])
        last = max(common, key=int)
        rounds_compared.append(int(last))
        equal_rounds.append(a["heldout_by_round"][last] - b["heldout_by_round"][last])
        budget = min(run_seconds(a), run_seconds(b))
        budgets.append(budget)
        equal_time.append(statistics.fmean(heldout_at_seconds(n, budget) for n in a["curves"])
                          - statistics.fmean(heldout_at_seconds(n, budget) for n in b["curves"]))
    firsts, seconds = [a for a, _ in pairs], [b for _, b in pairs]
    cpu_figures = {}
    if all(run.get("heldout_by_cpu_per_node") for pair in pairs for run in pair):
        cpu_budgets = [min(_cpu_reached(a), _cpu_reached(b)) for a, b in pairs]
        equal_cpu = [_heldout_at_cpu(a, budget) - _heldout_at_cpu(b, budget)
                     for (a, b), budget in zip(pairs, cpu_budgets, strict=True)]
        cpu_figures = {"equal_cpu": {
            "cpu_seconds": [round(b, 1) for b in cpu_budgets], "delta": [round(d, 4) for d in equal_cpu],
            "delta_mean": round(statistics.fmean(equal_cpu), 4), "ci95": ci95(equal_cpu)}}
    flows = [(answer_flows(a, n), answer_flows(b, n)) for a, b, n in zip(firsts, seconds, rounds_compared, strict=True)]
    flow_figures = {}
    if all(a and b for a, b in flows):
        nodes = [(len(a["curves"]), len(b["curves"])) for a, b in pairs]
        # Summed over a run's nodes, two runs compare only when they have as many nodes; per node they always do
        # (solo nodes are independent draws, so a solo arm may run fewer of them).
        for index, name in ((0, "gained"), (1, "lost")):
            per_node = [(a[index] / n_a, b[index] / n_b) for (a, b), (n_a, n_b) in zip(flows, nodes, strict=True)]
            deltas = [a - b for a, b in per_node]
            flow_figures[f"answers_{name}_per_node"] = {
                "first": [round(a, 2) for a, _ in per_node], "second": [round(b, 2) for _, b in per_node],
                "delta": [round(d, 2) for d in deltas], "delta_mean": round(statistics.fmean(deltas), 2),
                "ci95": ci95(deltas)}
            if all(n_a == n_b for n_a, n_b in nodes):
                deltas = [a[index] - b[index] for a, b in flows]
                flow_figures[f"answers_{name}"] = {
                    "first": [a[index] for a, _ in flows], "second": [b[index] for _, b in flows],
                    "delta": deltas, "delta_mean": round(statistics.fmean(deltas), 2), "ci95": ci95(deltas)}
    specialized = [(own_and_others(a, n), own_and_others(b, n))
                   for a, b, n in zip(firsts, seconds, rounds_compared, strict=True)]
    family_figures = {}
    if all(a and b for a, b in specialized):
        for index, name in ((0, "own_family"), (1, "other_families")):
            deltas = [a[index] - b[index] for a, b in specialized]
            family_figures[f"heldout_{name}"] = {
                "first": [round(a[index], 4) for a, _ in specialized],
                "second": [round(b[index], 4) for _, b in specialized],
                "delta": [round(d, 4) for d in deltas], "delta_mean": round(statistics.fmean(deltas), 4),
                "ci95": ci95(deltas)}
    return {
        "seeds": [a["seed"] for a, _ in pairs],
        "equal_rounds": {
            "rounds": rounds_compared,
            "heldout_first": [a["heldout_by_round"][str(n)] for a, n in zip(firsts, rounds_compared, strict=True)],
            "heldout_second": [b["heldout_by_round"][str(n)] for b, n in zip(seconds, rounds_compared, strict=True)],
            "delta": [round(d, 4) for d in equal_rounds],
            "delta_mean": round(statistics.fmean(equal_rounds), 4),
            "ci95": ci95(equal_rounds),
            # with --specialize: the same rounds on each node's own family and on the others
            **family_figures,
        },
        "equal_wall_time": {
            "training_seconds": [round(b, 1) for b in budgets],
            "delta": [round(d, 4) for d in equal_time],
            "delta_mean": round(statistics.fmean(equal_time), 4),
            "ci95": ci95(equal_time),
        },
        # at equal training CPU seconds per node, where both sweeps recorded them (swarm_vs_solo's reading)
        **cpu_figures,
        **({"answer_flows": flow_figures} if flow_figures else {}),
        "time_first": time_split(firsts),
        "time_second": time_split(seconds),
    }


def load_results(folder: Path) -> dict:
    """A folder's learning.json, or the runs of its subfolders' learning.json files as one (their commands listed,
    the first one's model, machine and settings)."""
    if (folder / "learning.json").is_file():
        return json.loads((folder / "learning.json").read_text())
    parts = [json.loads(path.read_text()) for path in sorted(folder.glob("*/learning.json"))]
    if not parts:
        raise SystemExit(f"{folder} has no learning.json, nor subfolders with one")
    return {**parts[0], "command": [part["command"] for part in parts],
            "runs": [run for part in parts for run in part["runs"]]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("first", type=Path, help="folder with the learning.json of the version under test (or with "
                        "subfolders that have one each)")
    parser.add_argument("second", type=Path, help="folder with the learning.json of the version it is compared with")
    parser.add_argument("--labels", nargs=2, default=["first", "second"])
    parser.add_argument("--codes", nargs=2, default=[None, None], help="the two versions' commits, for the record")
    parser.add_argument("--config", nargs="+", default=["I=2,J=2"], metavar="CONFIG",
                        help="the configuration paired; two to pair one configuration of the first folder with "
                        "another of the second (a swarm against solo runs made apart, say)")
    parser.add_argument("--incomplete", action="store_true",
                        help="also pair runs a wall budget cut short, at the last evaluation both reached")
    parser.add_argument("--out", type=Path, help="results JSON")
    args = parser.parse_args()
    results = [load_results(folder) for folder in (args.first, args.second)]
    if len(args.config) > 2:
        parser.error("--config takes one configuration, or two: the first folder's and the second's")
    configs = args.config * 2 if len(args.config) == 1 else args.config
    runs = [[r for r in result["runs"] if r["config"] == config] for result, config in zip(results, configs)]
    comparison = compare(*runs, incomplete=args.incomplete)
    summary = {
        "schema": 1, "config": configs[0] if configs[0] == configs[1] else configs,
        "first": {"label": args.labels[0], "code": args.codes[0], "command": results[0]["command"]},
        "second": {"label": args.labels[1], "code": args.codes[1], "command": results[1]["command"]},
        "model": results[0]["model"], "machine": results[0]["machine"],
        "settings": {"first": results[0]["settings"], "second": results[1]["settings"]},
        **comparison,
        "runs": {"first": runs[0], "second": runs[1]},
    }
    first, second = args.labels
    rounds, wall = comparison["equal_rounds"], comparison["equal_wall_time"]
    print(f"{' vs '.join(dict.fromkeys(configs))}, seeds {comparison['seeds']}: held-out {first} minus {second}")
    print(f"  at equal rounds {rounds['rounds']}: {rounds['delta']}, mean {rounds['delta_mean']}, "
          f"95 % interval {rounds['ci95']}")
    print(f"  at equal wall time {wall['training_seconds']} s: {wall['delta']}, mean {wall['delta_mean']}, "
          f"95 % interval {wall['ci95']}")
    if "equal_cpu" in comparison:
        cpu = comparison["equal_cpu"]
        print(f"  at equal training CPU {cpu['cpu_seconds']} s: {cpu['delta']}, mean {cpu['delta_mean']}, "
              f"95 % interval {cpu['ci95']}")
    for name in ("heldout_own_family", "heldout_other_families"):
        if name in rounds:
            print(f"    {name.replace('_', ' ')}: {rounds[name]['delta']}, mean {rounds[name]['delta_mean']}, "
                  f"95 % interval {rounds[name]['ci95']}")
    for name, flow in comparison.get("answer_flows", {}).items():
        print(f"  {name.replace('_', ' ')} up to those rounds: {first} {flow['first']}, {second} {flow['second']}; "
              f"difference mean {flow['delta_mean']}, 95 % interval {flow['ci95']}")
    for label, key in ((first, "time_first"), (second, "time_second")):
        print(f"  {label}: {comparison[key]}")
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1) + "\n")
        print(f"results: {args.out}")


if __name__ == "__main__":
    main()
