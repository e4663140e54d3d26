"""What the multi-stage game's stage barriers cost: two players, equal or one of them slower, in one process.

SAPO rounds never wait (docs/async.md). The game keeps a barrier where a stage needs peers' work: before critiquing
it waits for peers' answers, before revising for their critiques, each wait bounded by ``gather_timeout_s``
(node/game/driver.py ``_gather``). This bench measures the share of each player's round time spent waiting there,
with the tiny random model (so that the time measured is the barrier's, not the model's) and a planted readable
completion per group (tests/test_game_swarm.py's ``GatedPolicy``), in an in-memory swarm:

- ``equal``: two players of the same speed;
- ``slow peer``: the second player's generation takes ``--slowdown`` times as long (a slower computer), so the fast
  one waits for it at every barrier, and the slow one for nobody.

    PYTHONPATH=. python bench/game_barrier.py --rounds 4 --runs 3   # writes bench/results/game_barrier.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import torch  # noqa: E402

from node.game.exchange import InMemoryGameHub  # noqa: E402
from node.learning import models  # noqa: E402
from tests.test_game_swarm import tiny_player  # noqa: E402
from tests.tiny_model import tiny_random  # noqa: E402

RESULTS = REPO / "bench" / "results" / "game_barrier.json"


class Slower:
    """A policy whose generation takes ``factor`` times as long: it sleeps the difference after each call."""

    def __init__(self, policy, factor: float) -> None:
        self._policy, self._factor = policy, factor

    def __getattr__(self, name):
        return getattr(self._policy, name)

    def generate(self, prompts, **kwargs):
        started = time.perf_counter()
        groups = self._policy.generate(prompts, **kwargs)
        time.sleep((self._factor - 1.0) * (time.perf_counter() - started))
        return groups


def play(model_dir: Path, work: Path, *, rounds: int, slowdown: float) -> dict:
    """Two players, ``rounds`` rounds each, the second ``slowdown`` times slower; per player its rounds' seconds."""
    hub = InMemoryGameHub()
    players = {name: tiny_player(model_dir, work, hub, name)[0] for name in ("fast", "other")}
    if slowdown != 1.0:
        players["other"].policy = Slower(players["other"].policy, slowdown)
    metrics: dict[str, list] = {name: [] for name in players}
    start = threading.Barrier(len(players))

    def run(name, driver):
        start.wait()
        last = None
        for number in range(rounds):
            outcome = driver.play_round(last, number)
            metrics[name].append(outcome.metrics)
            last = outcome.metrics.round

    threads = [threading.Thread(target=run, args=item) for item in players.items()]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    result = {}
    for name, rows in metrics.items():
        total = sum(r.seconds_total for r in rows)
        gather = sum(r.seconds_gather for r in rows)
        result[name] = {"rounds": len(rows), "seconds_total": round(total, 2), "seconds_waiting": round(gather, 2),
                        "waiting_share": round(gather / total, 3) if total else None,
                        "stages_played": [list(r.stage_rewards) for r in rows],
                        "round_s": [round(r.seconds_total, 2) for r in rows]}
    return result


def spread(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 3), "min": round(min(values), 3), "max": round(max(values), 3)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--slowdown", type=float, default=4.0, help="how much slower the slow peer generates")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    torch.set_num_threads(1)
    conditions = {"equal": 1.0, "slow peer": args.slowdown}
    runs: list[dict] = []
    loads = [round(os.getloadavg()[0], 1)]
    with tempfile.TemporaryDirectory(prefix="game-barrier-") as tmp:
        work = Path(tmp)
        model_dir = tiny_random(models.resolve(models.BUNDLED), work / "tiny-model")
        for run in range(args.runs):
            results = {}
            for condition, slowdown in conditions.items():
                print(f"run {run + 1}/{args.runs}: {condition}", flush=True)
                results[condition] = play(model_dir, work / f"{run}-{condition}", rounds=args.rounds, slowdown=slowdown)
            runs.append(results)
            loads.append(round(os.getloadavg()[0], 1))
    summary = {condition: {name: {"waiting_share": spread([run[condition][name]["waiting_share"] for run in runs]),
                                  "round_s_median": spread([statistics.median(run[condition][name]["round_s"])
                                                            for run in runs])}
                           for name in ("fast", "other")}
               for condition in conditions}
    report = {"bench": "game_barrier", "model": "tiny random (2 layers, hidden 64), 1 torch thread",
              "rounds": args.rounds, "slowdown": args.slowdown,
              "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "load_average_1min": loads,
                          "note": "shared with other engineers' runs while measured: times are noisy"},
              "summary": summary, "runs": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print("| condition | player | waiting share of round time | round s (median) |")
    print("|---|---|---|---|")
    for condition, players in summary.items():
        for name, figures in players.items():
            w, r = figures["waiting_share"], figures["round_s_median"]
            print(f"| {condition} | {name} | {w['median']:.1%} ({w['min']:.1%}-{w['max']:.1%}) "
                  f"| {r['median']} ({r['min']}-{r['max']}) |")


if __name__ == "__main__":
    main()
