"""Do aha moments propagate? A node's held-out gain on one task family beside a stronger peer, against its gain alone.

Issue 29, point 3: the bundled 135M beside a stronger peer, on a family where the 135M's own groups rarely have
reward spread (so alone it gets little gradient there); the target is a gain with the peer of at least twice the gain
alone, paired over 3 seeds or more, and the reverse direction too (does the stronger model gain from the small one?).
A ``swarm_vs_solo.py`` sweep of two nodes with ``--node-models`` measures both directions at once: in the solo
configuration each node trains alone, in the shared one the two train together, with the same task seeds, sampling
seeds and held-out set::

    python bench/swarm_vs_solo.py --out bench/results/stronger_peer --work ~/.cache/rl-swarm-bench/peer \\
        --nodes 2 --node-models bundled <stronger model> --configs I=4,J=0 I=2,J=2 --seeds 0 1 2 \\
        --rounds 30 --eval-every 10 --eval-questions 200 --eval-samples 0 --parallel
    python bench/stronger_peer.py bench/results/stronger_peer --out bench/results/stronger_peer/propagation.json \\
        --plot bench/results/stronger_peer/propagation.png

For each node it picks the family (unless ``--family`` names one) on which that node's own groups had reward spread
least often when it trained alone, and pairs by seed its held-out gain there (the last compared round less round 0)
with the peer and alone: per seed, the mean of each, the ratio of the means, and a bootstrap 95 % interval of the
paired difference. It does the same for every family and for the whole held-out set.
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

from bench.swarm_vs_solo import _paired_ci95  # noqa: E402

ALL = "all families"


def per_family_at(curve: dict, rounds: int) -> dict[str, float] | None:
    """A node's held-out accuracy per family after ``rounds`` (None where it was not evaluated there)."""
    return next((families for n, families in curve["heldout_per_family"] if n == rounds), None)


def heldout_at(curve: dict, rounds: int) -> float | None:
    return next((accuracy for n, accuracy, *_ in curve["heldout"] if n == rounds), None)


def gains(run: dict, node: int, rounds: int) -> dict[str, float]:
    """Node ``node``'s held-out gain from round 0 to ``rounds``, per family and over the whole set."""
    curve = run["curves"][node]
    start, end = per_family_at(curve, 0), per_family_at(curve, rounds)
    if start is None or end is None:
        raise SystemExit(f"{run['config']} seed {run['seed']} node {node + 1} has no per-family held-out at rounds "
                         f"0 and {rounds}: rerun it with today's swarm_vs_solo.py")
    return {family: end[family] - start[family] for family in start} | {
        ALL: heldout_at(curve, rounds) - heldout_at(curve, 0)}


def spread_share(runs: list[dict], node: int) -> dict[str, float]:
    """Per family, the share of node ``node``'s own groups with reward spread, pooled over ``runs``."""
    own, with_spread = {}, {}
    for run in runs:
        for family, counts in run["curves"][node]["groups_by_family"].items():
            own[family] = own.get(family, 0) + counts["own"]
            with_spread[family] = with_spread.get(family, 0) + counts["own_with_spread"]
    return {family: with_spread[family] / own[family] for family in own if own[family]}


def compare(alone: list[float], together: list[float], ci95=_paired_ci95) -> dict:
    """Gains of one node on one family, alone and with the peer, paired by seed."""
    deltas = [t - a for a, t in zip(alone, together, strict=True)]
    mean_alone, mean_together = statistics.fmean(alone), statistics.fmean(together)
    return {
        "gain_alone": [round(g, 4) for g in alone], "gain_with_peer": [round(g, 4) for g in together],
        "gain_alone_mean": round(mean_alone, 4), "gain_with_peer_mean": round(mean_together, 4),
        # the target reads: with the peer at least twice alone (undefined where alone gained nothing on average)
        "ratio_of_means": round(mean_together / mean_alone, 2) if mean_alone > 0 else None,
        "delta": [round(d, 4) for d in deltas], "delta_mean": round(statistics.fmean(deltas), 4),
        "ci95": ci95(deltas),
        "seeds_with_peer_at_least_twice_alone": sum(t >= 2 * a for a, t in zip(alone, together, strict=True)),
    }


def propagation(result: dict, *, family: str | None = None, ci95=_paired_ci95) -> dict:
    """Both directions of a two-node ``--node-models`` sweep: each node's gains with its peer against alone."""
    settings = result["settings"]
    models = settings.get("node_models")
    if settings["nodes"] != 2 or not models:
        raise SystemExit("this reads a sweep of two nodes with --node-models (the small model and a stronger one)")
    rounds = settings["rounds"]
    complete = [r for r in result["runs"] if r["complete"]]
    alone = {r["seed"]: r for r in complete if r["J"] == 0}
    together = {r["seed"]: r for r in complete if r["J"] > 0}
    seeds = sorted(set(alone) & set(together))
    if not seeds:
        raise SystemExit("no seed has a complete run alone and one together")
    directions = []
    for node, model in enumerate(models):
        spread = spread_share([alone[s] for s in seeds], node)
        target = family or min(spread, key=spread.get)
        alone_gains = [gains(alone[s], node, rounds) for s in seeds]
        together_gains = [gains(together[s], node, rounds) for s in seeds]
        peers_groups = {f: sum(together[s]["curves"][node]["groups_by_family"].get(f, {}).get("peer_with_spread", 0)
                               for s in seeds) for f in spread}
        directions.append({
            "node": node + 1, "model": model, "peer": models[1 - node], "family": target,
            "own_groups_with_spread_alone": {f: round(v, 3) for f, v in spread.items()},
            "peer_groups_with_spread_trained": peers_groups,
            "by_family": {f: compare([g[f] for g in alone_gains], [g[f] for g in together_gains], ci95)
                          for f in alone_gains[0]},
        })
    return {"schema": 1, "command": result["command"], "rounds": rounds, "seeds": seeds, "directions": directions}


def draw(summary: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(summary["directions"]), figsize=(5.5 * len(summary["directions"]), 4),
                             squeeze=False)
    for axis, direction in zip(axes[0], summary["directions"], strict=True):
        families = list(direction["by_family"])
        for offset, key, label, color in ((-0.2, "gain_alone", "alone", "#888888"),
                                          (0.2, "gain_with_peer", "with the peer", "#1f77b4")):
            means = [statistics.fmean(direction["by_family"][f][key]) for f in families]
            axis.bar([i + offset for i in range(len(families))], means, width=0.38, color=color, label=label)
            for i, f in enumerate(families):
                axis.scatter([i + offset] * len(direction["by_family"][f][key]), direction["by_family"][f][key],
                             color="black", s=8, zorder=3)
        axis.set_xticks(range(len(families)),
                        [f + (" *" if f == direction["family"] else "") for f in families], rotation=15)
        axis.axhline(0, color="black", linewidth=0.6)
        axis.set_title(f"node {direction['node']}: {Path(direction['model']).name}", fontsize=9)
        axis.set_ylabel(f"held-out gain, round 0 to {summary['rounds']}")
        axis.legend(fontsize=8)
    fig.suptitle(f"Gain beside the other model vs alone ({len(summary['seeds'])} seeds; dots: seeds; "
                 "*: the family its own groups had spread least often)", fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, help="the sweep's --out folder (its learning.json)")
    parser.add_argument("--family", help="the family compared (default: per node, where its own groups had reward "
                        "spread least often alone)")
    parser.add_argument("--out", type=Path, help="results JSON")
    parser.add_argument("--plot", type=Path, help="bar chart of the gains, PNG")
    args = parser.parse_args(argv)
    summary = propagation(json.loads((args.folder / "learning.json").read_text()), family=args.family)
    summary["reported_by"] = "python bench/stronger_peer.py " + " ".join(sys.argv[1:] if argv is None else argv)
    for d in summary["directions"]:
        print(f"node {d['node']} ({d['model']}) beside {d['peer']}, seeds {summary['seeds']}, "
              f"rounds 0 -> {summary['rounds']}; own groups with spread alone: {d['own_groups_with_spread_alone']}")
        for family, c in d["by_family"].items():
            mark = " <- compared" if family == d["family"] else ""
            print(f"  {family}: alone {c['gain_alone']} (mean {c['gain_alone_mean']}), with the peer "
                  f"{c['gain_with_peer']} (mean {c['gain_with_peer_mean']}); ratio {c['ratio_of_means']}, "
                  f"difference {c['delta_mean']} {c['ci95']}{mark}")
    if args.out:
        args.out.write_text(json.dumps(summary, indent=1) + "\n")
    if args.plot:
        draw(summary, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
