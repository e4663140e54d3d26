"""Asynchronous SAPO, measured: does a node ever wait for its peers, and does sharing cost it rounds?

Every scenario runs two real node processes (``python -m node run``, one thread each, their own p2p daemons) on a
loopback swarm for the same wall time, released together; per-round numbers come from their events:

* ``solo`` / ``shared``: two equal nodes, J = 0 (they publish but take nothing: the same machine load) and J = 2.
* ``hetero_solo`` / ``hetero_shared``: a fast node and a slow one (longer completions: about 4x its round time),
  J = 0 and J = 2.
* ``--baseline-code DIR``: the shared scenarios again with the code in DIR (e.g. the commit before asynchronous
  SAPO, exported with ``git archive``), side by side in the same run.
* ``--internet`` (root): ``internet``, three equal nodes on the simulated internet of ``tests/netbed.py``, one with
  a public address and two at homes behind NAT routers that drop inbound connections (the issue's setting), J = 2.

Measured per node: rounds per hour over the window, the share of its wall time spent waiting for peer groups
(``seconds_gather`` over ``seconds_total``), the share of rounds whose J slots were all filled, the share of rounds
that trained on at least one peer group, and the age of the peer groups trained on. Several repetitions; the summary
gives the median and range of each. The tiny random model keeps rounds short; it never answers right, so
``drop_zero_advantage`` is off (otherwise no peer group would ever be usable and J could never fill)::

    nice -n 5 python bench/async.py --repeats 3 --seconds 90 --baseline-code /tmp/sync-code

Results: bench/results/async.json (rewritten after every scenario).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import shutil
import signal
import statistics
from collections import Counter
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import tomli_w

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from node.events import RoundFinished, event_from_json  # noqa: E402
from node.launch import kill_tree, node_command, popen_options  # noqa: E402
from tests.netbed import INTERNET, Netbed, check_available  # noqa: E402

RESULTS = REPO / "bench" / "results" / "async.json"
FAMILIES = ("basic_arithmetic", "base_conversion", "fraction_simplification")
# A fast round of ~2 s (unloaded): rounds much shorter than a swarm round / MAX_GROUPS (10 s / 32 per 2 groups)
# meet the cap on groups a node may publish per swarm round, and its peers could not fill J from it.
FAST_TOKENS, SLOW_TOKENS = 96, 320
J = 2


@dataclass
class _Node:
    name: str
    process: subprocess.Popen
    started: threading.Event = field(default_factory=threading.Event)
    invite: list[str] = field(default_factory=list)
    rounds: list[RoundFinished] = field(default_factory=list)
    error: str = ""


def _config(work: Path, name: str, *, tokens: int, external: int, join: list[str], model: str,
            internet: bool = False) -> Path:
    """A config file with only settings every version knows (the baseline code refuses unknown ones); on the
    simulated internet, also the address settings a node needs there."""
    data = {
        "training": {"model": model, "device": "cpu", "local_questions": 2, "external_groups": external,
                     "num_generations": 4, "max_new_tokens": tokens, "max_prompt_tokens": 256,
                     "learning_rate": 1e-4, "drop_zero_advantage": False},
        # The peer-text cap compares a peer's text outside <answer> with our own: a random model's 96-token
        # completions beside our 16-token ones would all be refused as payloads, and the slow peer never used.
        "swarm": {"swarm_name": "async-bench", "host": "127.0.0.1", "initial_peers": join, "gather_timeout_s": 30.0,
                  "peer_text_ratio": 100.0},
        "tasks": {"weights": {family: 1.0 for family in FAMILIES}},
        "evaluation": {"every_rounds": 0},
        "run": {"data_dir": str(work / name), "threads": 1, "checkpoint_every_rounds": 1000},
    }
    if internet:
        data["swarm"].update(host="0.0.0.0", reachable_networks=[str(INTERNET)])
    path = work / f"{name}.toml"
    path.write_text(tomli_w.dumps(data), encoding="utf-8")
    return path


def _spawn(work: Path, name: str, config: Path, code: Path, launch=None) -> _Node:
    """A node child, started by ``launch(argv, **popen)`` (e.g. inside a network namespace) or directly."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false", "PYTHONPATH": str(code), "PYTHONDONTWRITEBYTECODE": "1"}
    argv = node_command("run", "--config", str(config), "--events-jsonl", "--control-stdin")
    popen = dict(stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(work / f"{name}.log", "wb"), text=True,
                 bufsize=1, env=env, cwd=code)
    process = launch(argv, **popen) if launch else subprocess.Popen(argv, **popen, **popen_options())
    node = _Node(name, process)

    def follow() -> None:
        for line in process.stdout:
            try:
                event = event_from_json(line)
            except (ValueError, TypeError):
                continue
            if event.kind == "node_started":
                node.invite = list(event.invite)
                _send(process, "pause")
                node.started.set()
            elif event.kind == "round_finished":
                node.rounds.append(event)
            elif event.kind == "error":
                node.error = event.message
        node.started.set()

    threading.Thread(target=follow, daemon=True).start()
    return node


def _send(process: subprocess.Popen, line: str) -> None:
    try:
        process.stdin.write(line + "\n")
        process.stdin.flush()
    except (BrokenPipeError, OSError, ValueError):
        pass


def run_scenario(name: str, tokens: tuple[int, ...], external: int, *, seconds: float, model: str,
                 code: Path) -> dict:
    """One node per entry of ``tokens`` (its new tokens a completion), released together for ``seconds``; per-node
    numbers over that window."""
    work = Path(tempfile.mkdtemp(prefix=f"async-bench-{name}-"))
    nodes: list[_Node] = []
    bed = Netbed() if name == "internet" else None
    try:
        for index, tok in enumerate(tokens):
            join = nodes[0].invite if nodes else []
            launch = None
            if bed is not None:  # the first node has a public address, the others are at homes behind NAT
                host = bed.public(f"p{index}") if index == 0 else bed.home(f"h{index}")
                launch = lambda argv, netns=host.netns, **popen: bed.spawn(netns, argv, **popen)  # noqa: E731
            node = _spawn(work, f"n{index}", _config(work, f"n{index}", tokens=tok, external=external, join=join,
                                                    model=model, internet=bed is not None), code, launch)
            nodes.append(node)
            if not node.started.wait(600) or not node.invite:
                raise RuntimeError(f"{name}: node {index} did not start: {(work / f'n{index}.log').read_text()[-2000:]}")
        time.sleep(2.0)  # all paused and connected
        for node in nodes:
            _send(node.process, "resume")
        released = time.time()
        time.sleep(seconds)
        stopped = time.time()
        for node in nodes:
            _send(node.process, "stop")
        for node in nodes:
            try:
                node.process.wait(120)
            except subprocess.TimeoutExpired:
                kill_tree(node.process.pid)
        numbers = [_node_numbers(node, released, stopped, external) for node in nodes]
        for me in numbers:
            # of the groups its peers published in the window, the share this node trained on (at most one each)
            published = sum(other["groups_shared"] for other in numbers if other is not me)
            me["peer_groups_used_share"] = me["groups_used"] / published if published and external else None
        return {"scenario": name, "code": str(code), "tokens": list(tokens), "external_groups": external,
                "seconds": stopped - released, "nodes": numbers}
    finally:
        for node in nodes:
            if node.process.poll() is None:
                kill_tree(node.process.pid)
        if bed is not None:
            bed.close()
        shutil.rmtree(work, ignore_errors=True)


def _node_numbers(node: _Node, released: float, stopped: float, external: int) -> dict:
    rounds = [r for r in node.rounds if released <= r.time <= stopped]
    window = stopped - released
    total = sum(r.seconds_total for r in rounds)
    ages = [r.peer_group_age_s_mean for r in rounds if getattr(r, "peer_group_age_s_mean", None) is not None]
    oldest = [r.peer_group_age_s_max for r in rounds if getattr(r, "peer_group_age_s_max", None) is not None]
    return {
        "rounds": len(rounds),
        "rounds_per_hour": len(rounds) / window * 3600 if window > 0 else 0.0,
        "median_round_s": statistics.median(r.seconds_total for r in rounds) if rounds else None,
        "waiting_share": sum(r.seconds_gather for r in rounds) / total if total else None,
        "share_seconds": sum(r.seconds_share for r in rounds) / total if total else None,
        "j_filled_share": sum(r.groups_used >= external for r in rounds) / len(rounds) if rounds and external else None,
        "peer_groups_share": sum(r.groups_used > 0 for r in rounds) / len(rounds) if rounds and external else None,
        "groups_shared": sum(r.groups_shared for r in rounds),
        "groups_used": sum(r.groups_used for r in rounds),
        "rejected": dict(sum((Counter(r.rejected_reasons) for r in rounds), Counter())),
        "train_share": sum(r.seconds_train for r in rounds) / total if total else None,
        "peer_group_age_s_mean": statistics.fmean(ages) if ages else None,
        "peer_group_age_s_max": max(oldest) if oldest else None,
        "error": node.error,
    }


def summarize(runs: list[dict]) -> dict:
    """Median and range over repetitions of every number, per (scenario, code, node); and the ratios asked for."""
    out: dict = {}
    for run in runs:
        key = f"{run['scenario']}@{'baseline' if run['code'] != str(REPO) else 'async'}"
        for index, numbers in enumerate(run["nodes"]):
            slot = out.setdefault(key, {}).setdefault(f"node{index}", {})
            for metric, value in numbers.items():
                if isinstance(value, (int, float)) and value is not None:
                    slot.setdefault(metric, []).append(value)
    summary = {key: {node: {m: _spread(v) for m, v in metrics.items()} for node, metrics in nodes.items()}
               for key, nodes in out.items()}
    ratios: dict = {}
    for shared, solo in (("shared", "solo"), ("hetero_shared", "hetero_solo")):
        for code in ("async", "baseline"):
            a, b = out.get(f"{shared}@{code}"), out.get(f"{solo}@async")
            if not a or not b:
                continue
            for node in a:
                pairs = list(zip(a[node].get("rounds_per_hour", []), b[node].get("rounds_per_hour", [])))
                if pairs:
                    ratios[f"{shared}@{code}/{solo} {node}"] = _spread([x / y for x, y in pairs if y])
    return {"by_scenario": summary, "rounds_per_hour_ratio_shared_vs_solo": ratios}


def _spread(values: list[float]) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


def _machine(load: str) -> dict:
    return {"cpu": platform.processor() or platform.machine(), "cores": psutil.cpu_count(),
            "load_average_1_5_15": [round(x, 2) for x in os.getloadavg()], "load": load,
            "note": "the ratios compare scenarios measured in turn within each repetition"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=90.0, help="wall time of each scenario")
    parser.add_argument("--model", default="tiny", help="'tiny' (a tiny random model) or a model folder")
    parser.add_argument("--baseline-code", type=Path, help="a source tree to run the shared scenarios with too")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--scenarios", nargs="+",
                        help="run only these (solo, shared, hetero_solo, hetero_shared, internet)")
    parser.add_argument("--fast-tokens", type=int, default=FAST_TOKENS, help="new tokens a completion, equal nodes")
    parser.add_argument("--slow-tokens", type=int, default=SLOW_TOKENS, help="new tokens a completion, the slow node")
    parser.add_argument("--load", default="", help="what else ran on the machine, recorded with the results")
    parser.add_argument("--internet", action="store_true",
                        help="also three nodes on the simulated internet, two of them behind NAT (root only)")
    parser.add_argument("--keep-from", type=Path,
                        help="a results file whose runs of the other scenarios are kept in the summary")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # a stop runs the scenario's cleanup: no orphan nodes
    model = args.model
    if model == "tiny":
        from node.learning import models
        from tests.tiny_model import tiny_random

        target = Path(tempfile.gettempdir()) / "async-bench-tiny-model"
        if not (target / "config.json").exists():
            tiny_random(models.resolve(models.BUNDLED), target)
        model = str(target)
    fast, slow = args.fast_tokens, args.slow_tokens
    scenarios = [("solo", (fast, fast), 0, REPO), ("shared", (fast, fast), J, REPO),
                 ("hetero_solo", (fast, slow), 0, REPO),
                 ("hetero_shared", (fast, slow), J, REPO)]
    if args.internet:
        check_available()
        scenarios.append(("internet", (fast, fast, fast), J, REPO))
    if args.baseline_code:
        scenarios += [("shared", (fast, fast), J, args.baseline_code.resolve()),
                      ("hetero_shared", (fast, slow), J, args.baseline_code.resolve())]
    if args.scenarios:
        scenarios = [s for s in scenarios if s[0] in args.scenarios]
    runs: list[dict] = []
    if args.keep_from:
        runs = [run for run in json.loads(args.keep_from.read_text())["runs"]
                if run["scenario"] not in {s[0] for s in scenarios}]
    command = " ".join(["python", "bench/async.py", *(argv if argv is not None else sys.argv[1:])])
    for repeat in range(args.repeats):
        for name, tokens, external, code in scenarios:
            started = time.time()
            run = run_scenario(name, tokens, external, seconds=args.seconds, model=model, code=code)
            run["repeat"] = repeat
            runs.append(run)
            print(f"[{dt.datetime.now(dt.timezone.utc):%H:%M:%S}] {name} ({'baseline' if code != REPO else 'async'}) "
                  f"repeat {repeat}: " + "; ".join(
                      f"{n['rounds']} rounds, waiting {n['waiting_share'] or 0:.1%}, J filled "
                      f"{n['j_filled_share'] if n['j_filled_share'] is not None else '-'}" for n in run["nodes"])
                  + f" ({time.time() - started:.0f} s)", flush=True)
            result = {"command": command, "machine": _machine(args.load), "seconds_per_scenario": args.seconds,
                      "fast_tokens": fast, "slow_tokens": slow, "external_groups": J,
                      "summary": summarize(runs), "runs": runs}
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
    print(json.dumps(summarize(runs), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
