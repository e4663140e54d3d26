"""Held-out accuracy of several ``bench/swarm_vs_solo.py`` results side by side: one chart, one table.

``swarm_vs_solo.py`` compares SAPO configurations within one invocation. Other training settings (``--set``: an
adapter, a learning rate) run as separate invocations, ideally at the same time so they share the machine's load;
this draws their results together::

    python bench/compare_runs.py bench/results/adapter/full bench/results/adapter/lora-lr1e-4 \
        --labels "all weights, lr 1e-5" "LoRA r16, lr 1e-4" --out bench/results/adapter/heldout.png

Each folder holds a ``learning.json``; every run in it becomes a greedy (solid) and, where the evaluation sampled
answers, a sampled (dashed) curve of the mean over its nodes. ``--config`` and ``--seeds`` pick runs out of a sweep;
``--mean`` draws one curve per label and configuration, the mean over its seeds (folders given the same label are
one setting, e.g. one folder per seed)::

    python bench/compare_runs.py bench/results bench/results/decay/s0 bench/results/decay/s1 \
        --labels constant decay decay --config I=2,J=2 --seeds 0 1 --mean
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def curve(run: dict) -> dict:
    """What the table and the chart use of one run of a results file."""
    return {"config": run["config"], "seed": run["seed"], "greedy": run["heldout_by_round"],
            "sampled": run.get("heldout_sampled_by_round") or {}, "minutes": run["minutes"],
            "cumulative_reward": run["cumulative_reward"], "outcome": run["outcome"]}


def curves(folder: Path) -> list[dict]:
    return [curve(run) for run in json.loads((folder / "learning.json").read_text())["runs"]]


def mean_over_seeds(runs: list[dict]) -> list[dict]:
    """One run per configuration: accuracies averaged over its seeds at the rounds every seed evaluated."""
    merged = []
    for config in dict.fromkeys(run["config"] for run in runs):
        same = [run for run in runs if run["config"] == config]
        row = {"config": config, "seed": "+".join(str(run["seed"]) for run in same),
               "outcome": "mean of " + ", ".join(run["outcome"] for run in same)}
        for kind in ("greedy", "sampled"):
            rounds = set.intersection(*(set(run[kind]) for run in same))
            row[kind] = {n: round(sum(run[kind][n] for run in same) / len(same), 4)
                         for n in sorted(rounds, key=int)}
        for key in ("cumulative_reward", "minutes"):
            row[key] = round(sum(run[key] for run in same) / len(same), 1)
        merged.append(row)
    return merged


def table(rows: list[tuple[str, dict]]) -> str:
    rounds = sorted({int(n) for _, run in rows for n in run["greedy"]})
    lines = ["| run | " + " | ".join(f"round {n}" for n in rounds) + " | cumulative reward | minutes |",
             "|---" * (len(rounds) + 3) + "|"]
    for label, run in rows:
        cells = []
        for n in rounds:
            greedy, sampled = run["greedy"].get(str(n)), run["sampled"].get(str(n))
            cell = "-" if greedy is None else f"{greedy:.3f}"
            cells.append(cell + (f" / {sampled:.3f}" if sampled is not None else ""))
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {run['cumulative_reward']} | {run['minutes']} |")
    return "\n".join(lines)


def draw(rows: list[tuple[str, dict]], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10.5, 4.5), dpi=110)
    ax.set_xticks(sorted({int(n) for _, run in rows for n in run["greedy"]}))
    for i, (label, run) in enumerate(rows):
        color = f"C{i}"
        for kind, style, marker in (("greedy", "-", "o"), ("sampled", "--", "^")):
            points = sorted((int(n), v) for n, v in run[kind].items() if v is not None)
            if points:
                xs, ys = zip(*points, strict=True)
                ax.plot(xs, ys, style, marker=marker, color=color, label=f"{label}, {kind}")
    ax.set_xlabel("rounds trained")
    ax.set_ylabel("held-out exact accuracy (mean of nodes)")
    ax.set_title("Held-out accuracy on unseen tasks: greedy (solid) and sampled answers (dashed)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folders", nargs="+", type=Path, help="folders with a learning.json")
    parser.add_argument("--labels", nargs="+",
                        help="one per folder (default: the folder's name); folders with the same label are one setting")
    parser.add_argument("--out", type=Path, help="PNG of the curves")
    parser.add_argument("--config", help="only runs of this configuration (e.g. I=2,J=2)")
    parser.add_argument("--seeds", nargs="+", type=int, help="only runs of these seeds")
    parser.add_argument("--mean", action="store_true",
                        help="one row per label and configuration: the mean over its seeds")
    args = parser.parse_args()
    labels = args.labels or [folder.name for folder in args.folders]
    if len(labels) != len(args.folders):
        parser.error("give one label per folder")
    picked: dict[str, list[dict]] = {}  # by label: folders may share one, e.g. one folder per seed of a setting
    for label, folder in zip(labels, args.folders, strict=True):
        picked.setdefault(label, []).extend(
            run for run in curves(folder) if (args.config is None or run["config"] == args.config)
            and (args.seeds is None or run["seed"] in args.seeds))
    rows = []
    for label, runs in picked.items():
        if args.mean:
            runs = mean_over_seeds(runs)
        for run in runs:
            seeds = "seeds" if args.mean else "seed"
            suffix = f" ({run['config']}, {seeds} {run['seed']})" if len(runs) > 1 else ""
            rows.append((label + suffix, run))
    print("held-out exact accuracy, greedy / sampled answers:")
    print(table(rows))
    if args.out:
        draw(rows, args.out)
        print(f"curves: {args.out}")


if __name__ == "__main__":
    main()
