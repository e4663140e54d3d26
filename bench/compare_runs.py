"""Held-out accuracy of several ``bench/swarm_vs_solo.py`` results side by side: one chart, one table.

``swarm_vs_solo.py`` compares SAPO configurations within one invocation. Other training settings (``--set``: an
adapter, a learning rate) run as separate invocations, ideally at the same time so they share the machine's load;
this draws their results together::

    python bench/compare_runs.py bench/results/adapter/full bench/results/adapter/lora-lr1e-4 \
        --labels "all weights, lr 1e-5" "LoRA r16, lr 1e-4" --out bench/results/adapter/heldout.png

Each folder holds a ``learning.json``; every run in it becomes a greedy (solid) and, where the evaluation sampled
answers, a sampled (dashed) curve of the mean over its nodes.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def curves(folder: Path) -> list[dict]:
    result = json.loads((folder / "learning.json").read_text())
    return [{"config": run["config"], "seed": run["seed"], "greedy": run["heldout_by_round"],
             "sampled": run.get("heldout_sampled_by_round") or {}, "minutes": run["minutes"],
             "cumulative_reward": run["cumulative_reward"], "outcome": run["outcome"]} for run in result["runs"]]


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
    parser.add_argument("--labels", nargs="+", help="one per folder (default: the folder's name)")
    parser.add_argument("--out", type=Path, help="PNG of the curves")
    args = parser.parse_args()
    labels = args.labels or [folder.name for folder in args.folders]
    if len(labels) != len(args.folders):
        parser.error("give one label per folder")
    rows = []
    for label, folder in zip(labels, args.folders, strict=True):
        runs = curves(folder)
        for run in runs:
            suffix = f" ({run['config']}, seed {run['seed']})" if len(runs) > 1 else ""
            rows.append((label + suffix, run))
    print("held-out exact accuracy, greedy / sampled answers:")
    print(table(rows))
    if args.out:
        draw(rows, args.out)
        print(f"curves: {args.out}")


if __name__ == "__main__":
    main()
