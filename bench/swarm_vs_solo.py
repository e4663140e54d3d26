"""Swarm vs solo, measured: K real node processes on a loopback swarm, SAPO configurations side by side.

For every seed, each configuration (``I=4,J=0`` solo; ``I=2,J=2`` and ``I=1,J=3`` shared) runs K nodes of the same
model for the same number of rounds, with the same task seeds, sampling seeds and evaluation set: the only
difference is how many of the groups a node trains on come from its peers. Every node is a separate
``python -m node run`` process (one thread, its own p2p daemon); the first starts the swarm, the others join it,
exactly as ``rl-swarm-node demo`` does. Solo nodes run in the swarm too (they publish but take nothing), so every
configuration shares the machine the same way.

Held-out accuracy is the node's own evaluation (``EvalFinished``: greedy exact-match on a fixed set of unseen tasks,
identical on every node) at round 0, every ``--eval-every`` rounds and after the last round. Per-round signals come
from each run's ``metrics.jsonl``. The results file is rewritten after every finished (configuration, seed) run, so
a sweep cut short by its wall budget, a crash or Ctrl-C still leaves a valid file, and running the same command again
skips the runs already in it::

    nice -n 5 python bench/swarm_vs_solo.py --nodes 2 --configs I=4,J=0 I=2,J=2 --seeds 0 1 2 --rounds 20 \
        --deadline 11:55

Each comparison pairs runs by seed: the held-out difference per seed, its mean and a bootstrap 95 % interval, at
equal rounds and at equal CPU seconds per node spent training (the runner reads each node's CPU time, its p2p
daemon included, at the end of every round and of every evaluation; start-up and evaluations are left out, see
training_cpu). With ``--solo-rounds`` the solo configuration trains on past ``--rounds``, so that its curve reaches
the CPU seconds a shared node spent; each curve is read between its evaluations at the pair's budget.

``--specialize W`` makes the swarm heterogeneous, as in SAPO's experiments: node k mostly samples one of the demo's
families (k mod 3; the others weigh W), in every configuration alike, so a shared node trains on peers' groups of the
families it rarely samples itself. Its held-out set stays every family's, and each run also reports the held-out on
each node's own family and on the others.

``--node-models`` gives each node a model of its own (issue 29's stronger peer beside the bundled model): node k
runs the k-th in every configuration, so each node is compared with itself alone (``bench/stronger_peer.py`` reads
both directions). Every run records each node's held-out per family and, per family, its own groups with reward
spread and the peers' groups with spread it trained on.

``--model tiny`` runs the same harness on a tiny random model in seconds (plumbing check); ``--report-only``
redraws the curves and the summary from the results file.
"""

from __future__ import annotations

import argparse
import bisect
import datetime as dt
import json
import math
import os
import platform
import random
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

import psutil

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from node.cli.demo import DEMO_EVAL_SAMPLES, DEMO_MAX_NEW_TOKENS, demo_config  # noqa: E402
from node.config import NodeConfig  # noqa: E402
from node.events import EvalFinished, RoundFinished, event_from_json  # noqa: E402
from node.launch import kill_tree, node_command, node_environment, popen_options  # noqa: E402
from node.runstore import RunStore  # noqa: E402
from node.tasks.curriculum import SMALL_MODEL_DEFAULT_FAMILIES  # noqa: E402
from bench.heldout_flips import totals as flip_totals  # noqa: E402

RESULTS_DIR = REPO / "bench" / "results"
START_TIMEOUT_S = 900  # the first node of a sweep converts the bundled model
STOP_TIMEOUT_S = 180
SCHEMA = 1


# ------------------------------------------------------------------------------------------------- settings
@dataclass(frozen=True)
class Sapo:
    local: int  # I
    external: int  # J

    @classmethod
    def parse(cls, text: str) -> Sapo:
        try:
            parts = dict(part.split("=") for part in text.replace(" ", "").split(","))
            return cls(int(parts["I"]), int(parts["J"]))
        except (ValueError, KeyError):
            raise SystemExit(f"bad configuration {text!r}: write it as I=2,J=2") from None

    @property
    def name(self) -> str:
        return f"I={self.local},J={self.external}"

    @property
    def slug(self) -> str:
        return f"i{self.local}j{self.external}"


def settings_of(args: argparse.Namespace) -> dict:
    """What must match for two runs to be compared (and for a saved run to be reused on resume)."""
    return {
        "model": args.model, "nodes": args.nodes, "rounds": args.rounds, "num_generations": args.generations,
        "max_new_tokens": args.max_new_tokens, "eval_every": args.eval_every, "eval_questions": args.eval_questions,
        "eval_samples": args.eval_samples, "eval_seed": args.eval_seed, "gather_timeout_s": args.gather_timeout,
        "threads_per_node": 1, "overrides": sorted(args.set or []),
    } | ({"game": args.game} if args.game != "sapo" else {}) \
        | ({"node_models": args.node_models} if args.node_models else {}) \
        | ({"solo_rounds": args.solo_rounds} if args.solo_rounds else {}) \
        | ({"specialize": args.specialize} if args.specialize is not None else {})


def rounds_of(args: argparse.Namespace, sapo: Sapo) -> int:
    """Rounds a run of ``sapo`` trains: ``--solo-rounds`` for the solo configuration (its curve goes on to the CPU
    seconds a shared node spends in ``--rounds``), ``--rounds`` for every other."""
    return args.solo_rounds if sapo.external == 0 and args.solo_rounds else args.rounds


def node_config(args: argparse.Namespace, work: Path, sapo: Sapo, seed: int, index: int, model: str,
                join: list[str]) -> NodeConfig:
    """The demo's node settings (the product's default path), with only I, J, seeds and evaluation changed."""
    base = demo_config(work, index, model=model, threads=1, join=join)
    name = run_name(sapo, seed, index)
    swarm_name = f"bench-{sapo.slug}-s{seed}" + (f"-n{index + 1}" if plays_alone(args, sapo) else "")
    changes: dict = {
        "training": {"local_questions": sapo.local, "external_groups": sapo.external,
                     "num_generations": args.generations, "max_new_tokens": args.max_new_tokens, "device": "cpu"},
        "swarm": {"swarm_name": swarm_name, "gather_timeout_s": args.gather_timeout, "game": args.game},
        # Node k of seed s samples the same training tasks in every configuration, and other tasks than node k+1;
        # in the game every member answers the swarm's questions, drawn from one seed (a member with another one
        # would find no peer answer to its questions).
        "tasks": {"seed": seed * 1000 + (0 if args.game == "multistage" else index)}
        | ({"weights": specialized_weights(index, args.specialize)} if args.specialize is not None else {}),
        "evaluation": {"every_rounds": args.eval_every, "questions": args.eval_questions,
                       "samples": args.eval_samples, "seed": args.eval_seed},
        # The bench stops each node after the evaluation that follows its last round (see _Run._follow).
        "run": {"run_name": name, "threads": 1, "seed": seed, "rounds": rounds_of(args, sapo) + 1, "checkpoint_every_rounds": 10**6,
                "identity_file": str(work / "identities" / f"{name}.key")},
    }
    for item in args.set or []:
        key, _, value = item.partition("=")
        section, _, field_name = key.partition(".")
        try:
            parsed = tomllib.loads(f"v = {value}")["v"]
        except tomllib.TOMLDecodeError:
            parsed = value  # a bare string
        changes.setdefault(section, {})[field_name] = parsed
    return base.update(changes, source="bench settings")


def specialized_weights(index: int, others: float) -> dict[str, float]:
    """Node ``index`` mostly samples one of the demo's families (they take turns by index): weight 1 for it, ``others``
    for the rest. Every family keeps a weight above 0, so every node still takes peers' tasks of each, and its held-out
    set (drawn from the families in this order, whatever their weights) stays every node's."""
    own = _own_family(index)
    return {family: 1.0 if family == own else others for family in SMALL_MODEL_DEFAULT_FAMILIES}


def _own_family(index: int) -> str:
    return SMALL_MODEL_DEFAULT_FAMILIES[index % len(SMALL_MODEL_DEFAULT_FAMILIES)]


def plays_alone(args: argparse.Namespace, sapo: Sapo) -> bool:
    """The game's solo baseline: the game has no "take no peer work" setting (a member reads every peer's answers
    in the critique stage), so with J=0 each node plays in a swarm of its own: the answer stage only."""
    return args.game == "multistage" and sapo.external == 0


def run_name(sapo: Sapo, seed: int, index: int) -> str:
    return f"{sapo.slug}-s{seed}-n{index + 1}"


# ---------------------------------------------------------------------------------------------- one run
@dataclass
class _Node:
    index: int
    process: subprocess.Popen
    stderr_path: Path
    invite: list[str] = field(default_factory=list)
    started: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)  # the evaluation after the last round is in
    rounds: int = 0
    last_eval: float | None = None
    error: str = ""
    # rounds trained -> CPU seconds of the node so far, split by _cpu_parts: at each evaluation, and at the end of
    # each round (before its evaluation)
    parts_at_eval: dict[int, dict[str, float]] = field(default_factory=dict)
    parts_at_round: dict[int, dict[str, float]] = field(default_factory=dict)


class _Run:
    """K nodes of one (configuration, seed), started in order, each stopped after its final evaluation."""

    def __init__(self, args: argparse.Namespace, work: Path, sapo: Sapo, seed: int, models: list[str],
                 stop_at: float) -> None:
        self.args, self.work, self.sapo, self.seed, self.models, self.stop_at = args, work, sapo, seed, models, stop_at
        self.nodes: list[_Node] = []
        self.outcome = "complete"
        self.cancelled = threading.Event()

    def play(self) -> str:
        for index in range(self.args.nodes):
            shutil.rmtree(self.work / "runs" / run_name(self.sapo, self.seed, index), ignore_errors=True)
        try:
            self.nodes.append(self._spawn(0, join=[]))
            if not self._wait(lambda: self.nodes[0].started.is_set(), START_TIMEOUT_S):
                return self.outcome
            if not self.nodes[0].invite:
                self._fail("the first node did not start")
                return self.outcome
            join = [] if plays_alone(self.args, self.sapo) else self.nodes[0].invite
            for index in range(1, self.args.nodes):
                self.nodes.append(self._spawn(index, join=join))
            # Every node holds after its round-0 evaluation until all have loaded the model and joined, so no node
            # trains its first rounds alone while the others still start.
            if not self._wait(lambda: all(n.started.is_set() for n in self.nodes), START_TIMEOUT_S):
                return self.outcome
            if not all(n.invite for n in self.nodes):
                self._fail("a node did not start")
                return self.outcome
            for node in self.nodes:
                _send(node.process, "resume")
            if not self._wait(lambda: all(n.done.is_set() for n in self.nodes), None):
                return self.outcome
            return "complete"
        finally:
            stop_processes([n.process for n in self.nodes], STOP_TIMEOUT_S)

    def config_of(self, index: int, *, join: list[str]) -> NodeConfig:
        return node_config(self.args, self.work, self.sapo, self.seed, index, self.models[index], join)

    def _spawn(self, index: int, *, join: list[str]) -> _Node:
        config = self.config_of(index, join=join)
        path = self.work / "configs" / f"{run_name(self.sapo, self.seed, index)}.toml"
        config.save(path)
        stderr_path = self.work / "logs" / f"{run_name(self.sapo, self.seed, index)}.log"
        stderr_path.parent.mkdir(parents=True, exist_ok=True)
        # the allocator a node of the app gets (node.allocator: jemalloc where installed, else glibc trimmed after
        # every round); malloc variables set for the bench command itself still win, as for any node
        env = {**node_environment(), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false",
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
        process = subprocess.Popen(
            node_command("run", "--config", str(path), "--events-jsonl", "--control-stdin"),
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=open(stderr_path, "wb"), text=True, bufsize=1,
            env=env, cwd=REPO, **popen_options(),
        )
        node = _Node(index=index, process=process, stderr_path=stderr_path)
        threading.Thread(target=self._follow, args=(node,), daemon=True).start()
        return node

    def _follow(self, node: _Node) -> None:
        assert node.process.stdout is not None
        for line in node.process.stdout:
            try:
                event = event_from_json(line)
            except (ValueError, TypeError):
                continue
            if event.kind == "node_started":
                node.invite = list(event.invite)
                if self.args.nodes > 1:
                    _send(node.process, "pause")
                node.started.set()
            elif event.kind == "round_finished":
                node.rounds = event.rounds_trained
                node.parts_at_round[event.rounds_trained] = _cpu_parts(node.process.pid)
            elif event.kind == "eval_finished":
                node.last_eval = event.accuracy_greedy
                node.parts_at_eval[event.rounds_trained] = _cpu_parts(node.process.pid)
                cpu_file = self.work / "cpu" / f"{run_name(self.sapo, self.seed, node.index)}.json"
                cpu_file.parent.mkdir(parents=True, exist_ok=True)
                cpu_file.write_text(json.dumps(_cpu_record(node)), encoding="utf-8")
                _say(f"  {run_name(self.sapo, self.seed, node.index)}: held-out {event.accuracy_greedy:.3f} "
                     f"after {event.rounds_trained} rounds ({event.seconds:.0f} s)")
                if event.rounds_trained >= rounds_of(self.args, self.sapo):
                    node.done.set()
                    _send(node.process, "stop")
            elif event.kind == "error":
                node.error = event.message
        node.started.set()

    def _wait(self, condition, timeout: float | None) -> bool:
        deadline = None if timeout is None else time.monotonic() + timeout
        last_line = time.monotonic()
        while not condition():
            if self.cancelled.is_set():
                self.outcome = "interrupted"
                return False
            if time.time() >= self.stop_at:
                self.outcome = "out_of_time"
                return False
            available = psutil.virtual_memory().available / 2**30
            if available < self.args.memory_reserve_gb:
                self.outcome = f"aborted: only {available:.1f} GB of memory left"
                _say("  " + self.outcome)
                return False
            dead = [n for n in self.nodes if n.process.poll() is not None and not n.done.is_set()]
            if dead:
                return self._fail(f"node {dead[0].index + 1} exited with {dead[0].process.returncode}")
            if deadline is not None and time.monotonic() > deadline:
                return self._fail("timed out")
            if time.monotonic() - last_line > 120:
                last_line = time.monotonic()
                _say(f"  rounds {[n.rounds for n in self.nodes]}, {available:.1f} GB available")
            time.sleep(1.0)
        return True

    def _fail(self, why: str) -> bool:
        for node in self.nodes:
            tail = node.stderr_path.read_text(errors="replace").strip().splitlines()[-5:] if node.stderr_path.exists() else []
            _say(f"  node {node.index + 1} ({node.error or 'no error event'}): " + " | ".join(tail))
        self.outcome = f"failed: {why}"
        return False


def stop_processes(processes: list[subprocess.Popen], timeout_s: float) -> None:
    """Ask each node to stop (a checkpoint, its daemon shut down); kill what is still up at the deadline."""
    for process in processes:
        if process.poll() is None:
            _send(process, "stop")
    deadline = time.monotonic() + timeout_s
    for process in processes:
        try:
            process.wait(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            kill_tree(process.pid)


CPU_PARTS = ("main_thread", "other_threads", "children")


def _cpu_parts(pid: int) -> dict[str, float]:
    """User and system seconds of a node process so far, split where they were spent: its main thread (generation,
    updates, evaluations), its other threads (the DHT's event loop, checking peer groups, the control socket) and its
    children (its p2p daemon). Empty once the process is gone."""
    try:
        root = psutil.Process(pid)
        times, threads, children = root.cpu_times(), root.threads(), root.children(recursive=True)
    except psutil.Error:
        return {}
    main = sum(t.user_time + t.system_time for t in threads if t.id == pid)
    others = times.user + times.system - main  # threads that already ended count here too
    daemons = 0.0
    for child in children:
        try:
            child_times = child.cpu_times()
        except psutil.Error:
            continue
        daemons += child_times.user + child_times.system
    return dict(zip(CPU_PARTS, (round(main, 1), round(others, 1), round(daemons, 1)), strict=True))


def _cpu_seconds(parts: dict[str, float]) -> float:
    """All of a node's CPU seconds, its p2p daemon's included."""
    return round(sum(parts.values()), 1) if parts else math.nan


def _cpu_record(node: _Node) -> dict:
    """What the runner writes of a node's CPU seconds (read by training_cpu and training_cpu_parts)."""
    return {"at_eval": {n: _cpu_seconds(p) for n, p in node.parts_at_eval.items()},
            "at_round_end": {n: _cpu_seconds(p) for n, p in node.parts_at_round.items()},
            "parts_at_eval": node.parts_at_eval, "parts_at_round_end": node.parts_at_round}


def _send(process: subprocess.Popen, line: str) -> None:
    try:
        process.stdin.write(line + "\n")
        process.stdin.flush()
    except (BrokenPipeError, OSError, ValueError):
        pass


def _say(text: str) -> None:
    print(f"[{dt.datetime.now(dt.timezone.utc):%H:%M:%S}] {text}", flush=True)


# ------------------------------------------------------------------------------------------- summaries
def summarize(args: argparse.Namespace, work: Path, sapo: Sapo, seed: int, outcome: str, minutes: float) -> dict:
    """One (configuration, seed) run: final numbers, diagnostics, and the curves of every node."""
    nodes = []
    for index in range(args.nodes):
        store = RunStore(work / "runs" / run_name(sapo, seed, index))
        metrics = [m for m in store.metrics() if m.rounds_trained <= args.rounds]
        evaluations = _one_per_round(store.evaluations())
        cpu_file = work / "cpu" / f"{run_name(sapo, seed, index)}.json"
        recorded = json.loads(cpu_file.read_text(encoding="utf-8")) if cpu_file.exists() else {}
        nodes.append({"metrics": metrics, "evaluations": evaluations, "cpu": training_cpu(recorded),
                      "cpu_parts": training_cpu_parts(recorded),
                      "flips": flip_totals(store.heldout_answers()),
                      "groups": groups_by_family(s for s in store.samples() if s.round <= _last_round(metrics))})
    # with --specialize, each node's rounds trained -> (held-out on its own family, on the others)
    own_others = [{e.rounds_trained: own_and_other_families(e, index) for e in node["evaluations"]}
                  if args.specialize is not None else {} for index, node in enumerate(nodes)]
    final_own_others = [own_other[args.rounds] for own_other in own_others if args.rounds in own_other]
    evals_at = lambda n: [e for node in nodes for e in node["evaluations"] if e.rounds_trained == n]  # noqa: E731
    rounds_at = lambda i: [m for node in nodes for m in node["metrics"] if m.rounds_trained == i + 1]  # noqa: E731
    all_metrics = [m for node in nodes for m in node["metrics"]]
    finals = evals_at(args.rounds)
    last = rounds_of(args, sapo)
    return {
        "config": sapo.name, "I": sapo.local, "J": sapo.external, "seed": seed, "nodes": args.nodes,
        # compared at ``rounds``; a solo run with --solo-rounds trains on to ``rounds_run`` (compared at equal CPU)
        "rounds": args.rounds, "rounds_run": last, "outcome": outcome,
        "complete": outcome == "complete" and len(finals) == args.nodes and len(evals_at(last)) == args.nodes,
        "minutes": round(minutes, 1),
        # when it ended: CPU seconds of runs from different sessions are not comparable (this machine's speed drifts)
        "finished_utc": _utc_now(),
        "heldout_round0": _mean([e.accuracy_greedy for e in evals_at(0)]),
        "heldout_final": _mean([e.accuracy_greedy for e in finals]),
        "heldout_final_per_node": [e.accuracy_greedy for e in finals],
        # With --specialize: the mean over nodes of the final held-out on the family a node mostly samples, and on
        # the others
        **({"heldout_final_own_family": _mean(own for own, _ in final_own_others),
            "heldout_final_other_families": _mean(other for _, other in final_own_others)}
           if args.specialize is not None else {}),
        # Mean over nodes at every evaluation all nodes reached: compares runs a deadline cut short at equal rounds.
        "heldout_by_round": {str(n): _mean(e.accuracy_greedy for e in evals_at(n))
                             for n in sorted({e.rounds_trained for node in nodes for e in node["evaluations"]})
                             if len(evals_at(n)) == args.nodes},
        # Exact accuracy of answers sampled at the training temperature (--eval-samples per question).
        "heldout_sampled_round0": _mean([e.exact_mean for e in evals_at(0)]) if args.eval_samples else None,
        "heldout_sampled_final": _mean([e.exact_mean for e in finals]) if args.eval_samples else None,
        "heldout_sampled_by_round": {str(n): _mean(e.exact_mean for e in evals_at(n))
                                     for n in sorted({e.rounds_trained for node in nodes for e in node["evaluations"]})
                                     if len(evals_at(n)) == args.nodes} if args.eval_samples else None,
        "heldout_score_final": _mean([e.score_mean for e in finals]) if args.eval_samples else None,
        "heldout_wellformed_final": _mean([e.wellformed_rate for e in finals]),
        # CPU seconds (user + system, its p2p daemon included) each node had spent training at each of its
        # evaluations (training_cpu): a shared node generates fewer completions a round and trains on more groups
        # with spread, so runs are also compared at equal CPU seconds
        "cpu_seconds": _mean([node["cpu"][args.rounds] for node in nodes])
        if all(args.rounds in node["cpu"] for node in nodes) else None,
        # the same at ``rounds``, split by where it was spent (_cpu_parts), mean over nodes
        "cpu_seconds_parts": {part: _mean([node["cpu_parts"][part][args.rounds] for node in nodes])
                              for part in CPU_PARTS if all(args.rounds in node["cpu_parts"].get(part, {})
                                                           for node in nodes)},
        "heldout_by_cpu_per_node": [[[node["cpu"][e.rounds_trained], e.accuracy_greedy] for e in node["evaluations"]
                                     if e.rounds_trained in node["cpu"]] for node in nodes],
        # SAPO's cumulative reward: summed over nodes and rounds (mean reward of each round's own completions).
        "cumulative_reward": round(sum(m.reward_local for m in all_metrics), 4),
        "mean_reward_local": _mean([m.reward_local for m in all_metrics]),
        "wellformed_round0": _mean([m.wellformed_rate for m in rounds_at(0)]),
        "wellformed_round10": _mean([m.wellformed_rate for m in rounds_at(10)]),
        "diagnostics": _diagnostics(all_metrics),
        "curves": [{
            "node": index + 1,
            # rounds trained, greedy exact accuracy, well-formed rate, exact accuracy of the sampled answers
            "heldout": [[e.rounds_trained, round(e.accuracy_greedy, 4), round(e.wellformed_rate, 4),
                         round(e.exact_mean, 4) if args.eval_samples else None] for e in node["evaluations"]],
            # held-out questions gained and lost between consecutive evaluations (bench/heldout_flips.py for the
            # families and the collapse signature): rounds before, rounds after, gained, lost
            "heldout_flips": node["flips"],
            # rounds trained, greedy held-out accuracy of each family
            "heldout_per_family": [[e.rounds_trained, {f: round(a, 4) for f, a in e.per_family.items()}]
                                   for e in node["evaluations"]],
            # per family, over the rounds compared: the node's own groups and those with reward spread, and the
            # peers' groups its updates trained on with spread
            "groups_by_family": node["groups"],
            # with --specialize: rounds trained, held-out on the node's own family, on the others
            **({"heldout_own_other": [[n, round(own, 4), round(other, 4)]
                                      for n, (own, other) in own_others[index].items()]}
               if args.specialize is not None else {}),
            # rounds trained, local reward, well-formed rate, local exact accuracy, share of trained groups with
            # spread, peer groups trained on, peer groups dropped as equal-reward, seconds
            "rounds": [[m.rounds_trained, round(m.reward_local, 4), round(m.wellformed_rate, 4),
                        round(m.accuracy_local, 4), round(m.groups_with_spread, 4), m.groups_used,
                        m.groups_zero_advantage, round(m.seconds_total, 1)] for m in node["metrics"]],
        } for index, node in enumerate(nodes)],
    }


def _last_round(metrics: list[RoundFinished]) -> int:
    """The swarm round of a node's last round within the compared ones (samples are keyed by swarm round)."""
    return max((m.round for m in metrics), default=-1)


def groups_by_family(samples) -> dict[str, dict[str, int]]:
    """Per task family, from a node's rollout samples (one a group given to its updates): its own groups, those of
    them with reward spread (the only ones that give GRPO a gradient), and the peers' groups it trained on with
    spread. Where a node's own groups of a family seldom have spread, what it learns there comes from peers."""
    from node.sapo.scoring import TRAINED  # here: the module loads reasoning-gym, seconds this file's users need not

    counts: dict[str, dict[str, int]] = {}
    for sample in samples:
        # a group given to an update is "trained" where its rewards differ (and "no_signal" or "update_skipped"
        # where they do not); a peer group may also have been dropped or rejected before it
        if not sample.local and sample.fate != TRAINED:
            continue
        family = counts.setdefault(sample.family, {"own": 0, "own_with_spread": 0, "peer_with_spread": 0})
        if sample.local:
            family["own"] += 1
            family["own_with_spread"] += sample.fate == TRAINED
        else:
            family["peer_with_spread"] += 1
    return counts


def training_cpu_parts(recorded: dict) -> dict[str, dict[int, float]]:
    """training_cpu for each part of _cpu_parts (empty for files written before the parts were recorded)."""
    if "parts_at_eval" not in recorded:
        return {}
    return {part: training_cpu({"at_eval": {k: v[part] for k, v in recorded["parts_at_eval"].items() if part in v},
                                "at_round_end": {k: v[part] for k, v in recorded["parts_at_round_end"].items()
                                                 if part in v}})
            for part in CPU_PARTS}


def training_cpu(recorded: dict) -> dict[int, float]:
    """A node's CPU seconds spent on its rounds, at each evaluation (rounds trained -> seconds): what it had spent at
    the end of that round, less its start-up and round-0 evaluation and every evaluation since. An evaluation costs
    as much as several rounds and comes at the same rounds in every configuration, so counting it would dilute the
    difference between them; and a solo run that trains on (--solo-rounds) evaluates once more. Files written
    before the ends of rounds were recorded hold the CPU seconds at each evaluation, which are returned as they are."""
    if "at_eval" not in recorded:
        return {int(k): v for k, v in recorded.items()}
    at_eval = {int(k): v for k, v in recorded["at_eval"].items()}
    at_round_end = {int(k): v for k, v in recorded["at_round_end"].items()}
    if 0 not in at_eval:
        return {}
    spent, evaluations = {0: 0.0}, 0.0  # evaluations: CPU seconds of the evaluations after round 0 so far
    for n in sorted(k for k in at_eval if k > 0):
        if n not in at_round_end:
            break
        spent[n] = round(at_round_end[n] - at_eval[0] - evaluations, 1)
        evaluations += at_eval[n] - at_round_end[n]
    return spent


def own_and_other_families(evaluation: EvalFinished, index: int) -> tuple[float, float]:
    """Node ``index``'s held-out accuracy on the family it mostly samples with --specialize, and on the others (each
    family weighed by its questions)."""
    family = _own_family(index)
    rest = [f for f in evaluation.per_family if f != family]
    others = sum(evaluation.per_family[f] * evaluation.per_family_questions[f] for f in rest) \
        / sum(evaluation.per_family_questions[f] for f in rest)
    return evaluation.per_family[family], others


def _one_per_round(evaluations: list[EvalFinished]) -> list[EvalFinished]:
    by_round: dict[int, EvalFinished] = {}
    for e in evaluations:
        by_round.setdefault(e.rounds_trained, e)
    return [by_round[n] for n in sorted(by_round)]


def _diagnostics(metrics: list[RoundFinished]) -> dict:
    """Why sharing helps or not: what happened to peer groups, and how many rounds had a gradient at all."""
    if not metrics:
        return {}
    received = sum(m.groups_received for m in metrics)
    return {
        "rounds": len(metrics),
        "updates_skipped": sum(m.update_skipped for m in metrics),
        "groups_with_spread": _mean([m.groups_with_spread for m in metrics]),
        "peer_groups_received": received,
        "peer_groups_trained": sum(m.groups_used for m in metrics),
        "peer_groups_equal_rewards": sum(m.groups_zero_advantage for m in metrics),
        "peer_groups_not_needed": sum(m.groups_not_needed for m in metrics),
        "peer_groups_rejected": sum(m.groups_rejected for m in metrics),
        # what the swarm gave (None in runs older than these figures): groups with reward spread trained on, ours and
        # peers', and peers' ones on a family where our own groups of that round had none
        "local_groups_with_spread": _total([m.local_groups_with_spread for m in metrics]),
        "peer_groups_with_spread": _total([m.peer_groups_with_spread for m in metrics]),
        "peer_groups_spread_we_lacked": _total([m.peer_groups_spread_we_lacked for m in metrics]),
        "rounds_j_filled": _mean([m.groups_used >= m.external_groups_wanted for m in metrics
                                  if m.external_groups_wanted]),
        "peer_group_age_s": _mean([m.peer_group_age_s_mean for m in metrics]),
        "reward_external": _mean([m.reward_external for m in metrics if m.reward_external is not None]),
        "seconds_per_round": _mean([m.seconds_total for m in metrics]),
        "seconds_waiting_for_peers": _mean([m.seconds_gather for m in metrics]),
        "final_difficulty": metrics[-1].difficulty,
    }


def _total(values) -> int | None:
    values = [v for v in values if v is not None]
    return sum(values) if values else None


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return round(statistics.fmean(values), 4) if values else None


def report(args: argparse.Namespace, runs: list[dict], minutes: float) -> dict:
    complete = [r for r in runs if r["complete"]]
    configs = list(dict.fromkeys(r["config"] for r in complete))
    per_config = {}
    for name in configs:
        of = [r for r in complete if r["config"] == name]
        finals = [r["heldout_final"] for r in of]
        per_config[name] = {
            "seeds": [r["seed"] for r in of],
            "heldout_round0_mean": _mean(r["heldout_round0"] for r in of),
            "heldout_final_mean": _mean(finals),
            "heldout_final_sd": round(statistics.stdev(finals), 4) if len(finals) > 1 else None,
            "heldout_final_min": min(finals), "heldout_final_max": max(finals),
            "cumulative_reward_mean": _mean(r["cumulative_reward"] for r in of),
            "minutes_per_run": _mean(r["minutes"] for r in of),
        }
    solo = next((name for name in configs if name.endswith("J=0")), None)
    comparisons = []
    if solo:
        solo_by_seed = {r["seed"]: r for r in complete if r["config"] == solo}
        for name in configs:
            if name == solo:
                continue
            pairs = [(solo_by_seed[r["seed"]], r) for r in complete if r["config"] == name and r["seed"] in solo_by_seed]
            deltas = [r["heldout_final"] - s["heldout_final"] for s, r in pairs]
            budgets = [min(_cpu_reached(s), _cpu_reached(r)) if s.get("cpu_seconds") and r.get("cpu_seconds")
                       else None for s, r in pairs]
            equal_cpu = [_heldout_at_cpu(r, b) - _heldout_at_cpu(s, b) for (s, r), b in zip(pairs, budgets) if b]
            comparisons.append({
                "shared": name, "solo": solo, "seeds": [s["seed"] for s, _ in pairs],
                "heldout_final_delta": [round(d, 4) for d in deltas],
                # paired by seed: the mean difference and its bootstrap 95 % interval over the seeds
                "heldout_final_delta_mean": _mean(deltas),
                "ci95": _paired_ci95(deltas),
                # at equal CPU seconds per node: each run's held-out at the CPU seconds both runs' curves reach
                # (None where the runs have no CPU figures)
                "cpu_seconds_budget": [round(b, 1) if b else None for b in budgets],
                "heldout_equal_cpu_delta": [round(d, 4) for d in equal_cpu],
                "heldout_equal_cpu_delta_mean": _mean(equal_cpu),
                "ci95_equal_cpu": _paired_ci95(equal_cpu),
                "seeds_shared_at_least_solo": sum(r["heldout_final"] >= s["heldout_final"] for s, r in pairs),
                "cumulative_reward_ratio": [round(r["cumulative_reward"] / s["cumulative_reward"], 3)
                                            if s["cumulative_reward"] else None for s, r in pairs],
            } | {  # with --specialize: where the difference lies, on the family a node mostly samples or the others
                f"{key}_delta": [round(r[key] - s[key], 4) for s, r in pairs] for key in
                ("heldout_final_own_family", "heldout_final_other_families")
                if pairs and all(key in run for pair in pairs for run in pair)
            })
    partial = []  # pairs of one seed not both finished: compared at the last evaluation both reached
    for shared in runs:
        if shared["config"].endswith("J=0"):
            continue
        for solo_run in runs:
            if not solo_run["config"].endswith("J=0") or solo_run["seed"] != shared["seed"]:
                continue
            if shared["complete"] and solo_run["complete"]:
                continue
            common = set(shared.get("heldout_by_round", {})) & set(solo_run.get("heldout_by_round", {})) - {"0"}
            if common:
                n = max(common, key=int)
                partial.append({"shared": shared["config"], "solo": solo_run["config"], "seed": shared["seed"],
                                "rounds": int(n), "heldout_shared": shared["heldout_by_round"][n],
                                "heldout_solo": solo_run["heldout_by_round"][n]})
    headline = next((name for name in configs if not name.endswith("J=0")), configs[0] if configs else None)
    of_headline = [r for r in complete if r["config"] == headline]
    return {
        "schema": SCHEMA,
        "model": " + ".join(_model_label(m) for m in args.node_models) if args.node_models else _model_label(args.model),
        "machine": _machine(),
        "generated_utc": _utc_now(),
        "command": "python bench/swarm_vs_solo.py " + " ".join(args.argv),
        "minutes": round(minutes, 1),
        "settings": settings_of(args),
        "heldout": {"config": headline, "round0": _mean(r["heldout_round0"] for r in of_headline),
                    "final": _mean(r["heldout_final"] for r in of_headline), "after_rounds": args.rounds,
                    "metric": "greedy exact-match (pass@1) on the node's held-out set, mean over nodes and seeds"},
        "heldout_sampled": {"config": headline,
                            "round0": _mean(r.get("heldout_sampled_round0") for r in of_headline),
                            "final": _mean(r.get("heldout_sampled_final") for r in of_headline),
                            "after_rounds": args.rounds,
                            "metric": f"exact-match of {args.eval_samples} answers per held-out question sampled at "
                                      "the training temperature, mean over nodes and seeds"}
        if args.eval_samples else None,
        "wellformed": {"config": headline, "round0": _mean(r["wellformed_round0"] for r in of_headline),
                       "round10": _mean(r["wellformed_round10"] for r in of_headline),
                       "metric": "share of a round's own completions with one complete <answer> block"},
        "swarm_vs_solo": [{"config": r["config"], "seed": r["seed"], "heldout_round0": r["heldout_round0"],
                           "heldout_final": r["heldout_final"], "cumulative_reward": r["cumulative_reward"],
                           "minutes": r["minutes"]} for r in complete],
        "per_config": per_config,
        "comparisons": comparisons,
        "partial_comparisons": partial,
        "incomplete": [{"config": r["config"], "seed": r["seed"], "outcome": r["outcome"]}
                       for r in runs if not r["complete"]],
        "runs": runs,
    }


def _utc_now() -> str:
    return dt.datetime.now(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _cpu_reached(run: dict) -> float:
    """The CPU seconds a run's nodes had spent at their last evaluation, on average."""
    return statistics.fmean(points[-1][0] for points in run["heldout_by_cpu_per_node"])


def _heldout_at_cpu(run: dict, budget: float) -> float:
    """Mean over the run's nodes of the held-out accuracy at ``budget`` CPU seconds, read off each node's curve
    between the two evaluations around it (linearly: taking the last evaluation within the budget instead would
    charge the dearer run of a pair for up to a whole evaluation interval it did not use); a curve that ends before
    the budget gives its last value, one that starts after it its first."""
    values = []
    for points in run["heldout_by_cpu_per_node"]:
        cpus, accuracies = [cpu for cpu, _ in points], [accuracy for _, accuracy in points]
        after = bisect.bisect_left(cpus, budget)
        if after == 0 or after == len(cpus):
            values.append(accuracies[min(after, len(cpus) - 1)])
            continue
        share = (budget - cpus[after - 1]) / (cpus[after] - cpus[after - 1])
        values.append(accuracies[after - 1] + share * (accuracies[after] - accuracies[after - 1]))
    return statistics.fmean(values)


def _paired_ci95(deltas: list[float], resamples: int = 10_000) -> list[float] | None:
    """Percentile bootstrap 95 % interval of the mean paired difference (seeds resampled with replacement; a fixed
    generator, so the results file is reproducible); None below two pairs."""
    if len(deltas) < 2:
        return None
    rng = random.Random(0)
    means = sorted(statistics.fmean(rng.choices(deltas, k=len(deltas))) for _ in range(resamples))
    return [round(means[int(0.025 * resamples)], 4), round(means[int(0.975 * resamples) - 1], 4)]


def _model_label(model: str) -> str:
    return "SmolLM2-135M-Instruct (bundled Q4_1 GGUF, dequantized to fp32)" if model == "bundled" else model


def _machine() -> str:
    memory = psutil.virtual_memory().total / 2**30
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (f"{cpu}, {psutil.cpu_count(logical=True)} CPU threads, {memory:.0f} GB RAM, {platform.system()}; "
            f"1 torch thread per node, shared with other work")


# ----------------------------------------------------------------------------------------------- curves
COLORS = {"I=4,J=0": "#555555", "I=2,J=0": "#ff7f0e", "I=2,J=2": "#1f77b4", "I=1,J=3": "#d62728", "I=3,J=1": "#2ca02c"}


def draw(result: dict, out: Path) -> list[Path]:
    """The PNGs: held-out accuracy per configuration, the per-round learning signals, and (where runs recorded CPU
    seconds) held-out accuracy against CPU seconds."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        _say("matplotlib is not installed: no curves drawn (pip install matplotlib)")
        return []
    runs = [r for r in result["runs"] if any(curve["heldout"] for curve in r["curves"])]
    if not runs:
        return []
    finished = [r for r in runs if r["complete"]]
    configs = list(dict.fromkeys(r["config"] for r in runs))
    rounds = result["settings"]["rounds"]
    title = f"{result['model'].split(' (')[0]}, {result['settings']['nodes']} nodes" + (
        ", 3-stage game" if result["settings"].get("game") == "multistage" else "") + (
        "\neach node mostly on one family" if result["settings"].get("specialize") is not None else "")
    paths = []

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2), gridspec_kw={"width_ratios": [3, 2]})
    for name in configs:
        color = COLORS.get(name)
        of = [r for r in runs if r["config"] == name]
        points: dict[int, list[float]] = {}
        sampled: dict[int, list[float]] = {}
        for r in of:
            by_round: dict[int, list[float]] = {}
            for curve in r["curves"]:
                for entry in curve["heldout"]:
                    by_round.setdefault(entry[0], []).append(entry[1])
                    points.setdefault(entry[0], []).append(entry[1])
                    if len(entry) > 3 and entry[3] is not None:
                        sampled.setdefault(entry[0], []).append(entry[3])
            xs = sorted(by_round)
            left.plot(xs, [statistics.fmean(by_round[x]) for x in xs], color=color, alpha=0.3, lw=1)
        xs = sorted(points)
        left.plot(xs, [statistics.fmean(points[x]) for x in xs], color=color, lw=2.5, marker="o",
                  label=f"{name}, greedy (mean of {len(of)} run{'s' if len(of) > 1 else ''}; thin: each seed)")
        if sampled:
            xs = sorted(sampled)
            left.plot(xs, [statistics.fmean(sampled[x]) for x in xs], color=color, lw=2, ls="--", marker="^",
                      label=f"{name}, answers sampled as in training")
    baseline = _mean(r["heldout_round0"] for r in runs)
    if baseline is not None:
        left.axhline(baseline, color="black", ls=":", lw=1, label=f"round-0 baseline {baseline:.2f}")
    left.xaxis.get_major_locator().set_params(integer=True)
    left.set_xlabel("rounds trained")
    left.set_ylabel("held-out exact accuracy")
    left.set_title(f"Held-out accuracy on unseen tasks: {title}")
    left.legend(fontsize=8, loc="upper left")
    left.grid(alpha=0.3)
    for offset, name in enumerate(configs):
        finals = [(r["seed"], r["heldout_final"]) for r in finished if r["config"] == name]
        if not finals:
            continue
        right.scatter([offset] * len(finals), [f for _, f in finals], color=COLORS.get(name), s=40, zorder=3)
        for seed, value in finals:
            right.annotate(f"s{seed}", (offset, value), textcoords="offset points", xytext=(6, -3), fontsize=7)
        right.hlines(statistics.fmean(f for _, f in finals), offset - 0.25, offset + 0.25, color=COLORS.get(name), lw=2)
    for name in configs[1:]:  # pair each seed's solo and shared result
        for r in finished:
            if r["config"] != name:
                continue
            solo = next((s for s in finished if s["config"] == configs[0] and s["seed"] == r["seed"]), None)
            if solo:
                right.plot([0, configs.index(name)], [solo["heldout_final"], r["heldout_final"]], color="grey",
                           alpha=0.4, lw=0.8)
    right.set_xticks(range(len(configs)), configs)
    right.set_xlim(-0.6, len(configs) - 0.4)
    right.set_title(f"After {rounds} rounds, per seed (mean of nodes)")
    right.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    paths.append(out / "learning_heldout.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    panels = [(1, "local reward (5-round moving average)"), (2, "well-formed rate of own completions"),
              (4, "share of trained groups with reward spread"), (5, "peer groups trained on per round")]
    fig, axes = plt.subplots(2, 2, figsize=(11, 6.5))
    for ax, (column, label) in zip(axes.flat, panels):
        for name in configs:
            per_round: dict[int, list[float]] = {}
            for r in runs:
                if r["config"] != name:
                    continue
                for curve in r["curves"]:
                    for row in curve["rounds"]:
                        per_round.setdefault(row[0], []).append(row[column])
            xs = sorted(per_round)
            ys = [statistics.fmean(per_round[x]) for x in xs]
            if column == 1:
                ys = [statistics.fmean(ys[max(0, i - 4): i + 1]) for i in range(len(ys))]
            ax.plot(xs, ys, color=COLORS.get(name), lw=2, label=name)
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("rounds trained")
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=8)
    fig.suptitle(f"Learning signals per round (mean over nodes and seeds): {title}", fontsize=11)
    fig.tight_layout()
    paths.append(out / "learning_signals.png")
    fig.savefig(paths[-1], dpi=110)
    plt.close(fig)

    with_cpu = [r for r in finished if r.get("cpu_seconds")]
    if with_cpu:  # held-out against CPU seconds: where the equal-CPU comparison reads each curve
        fig, ax = plt.subplots(figsize=(7.5, 4.5))
        for name in configs:
            of = [r for r in with_cpu if r["config"] == name]
            for i, r in enumerate(of):  # one line a seed: mean over its nodes at each evaluation
                curves = r["heldout_by_cpu_per_node"]
                length = min(len(points) for points in curves)
                xs = [statistics.fmean(points[k][0] for points in curves) for k in range(length)]
                ys = [statistics.fmean(points[k][1] for points in curves) for k in range(length)]
                ax.plot(xs, ys, color=COLORS.get(name), marker="o", ms=3, lw=1.2, alpha=0.7,
                        label=f"{name}, {r.get('rounds_run', r['rounds'])} rounds (one line a seed)" if i == 0
                        else None)
        ax.set_xlabel("CPU seconds per node spent training (user + system, its p2p daemon included)")
        ax.set_ylabel("held-out exact accuracy")
        ax.set_title(f"Held-out accuracy against CPU spent: {title}", fontsize=10)
        ax.legend(fontsize=8, loc="upper left")
        ax.grid(alpha=0.3)
        fig.tight_layout()
        paths.append(out / "learning_cpu.png")
        fig.savefig(paths[-1], dpi=110)
        plt.close(fig)
    return paths


# -------------------------------------------------------------------------------------------------- main
def save(path: Path, result: dict) -> None:
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    tmp.replace(path)


def load_previous(path: Path, args: argparse.Namespace) -> tuple[list[dict], float]:
    """Runs already measured with the same settings (reused on resume), and the minutes they took."""
    if args.fresh or not path.exists():
        return [], 0.0
    try:
        previous = json.loads(path.read_text())
    except json.JSONDecodeError:
        return [], 0.0
    if previous.get("schema") != SCHEMA or previous.get("settings") != settings_of(args):
        _say(f"{path} holds runs with other settings: starting a new sweep (its file will be replaced)")
        return [], 0.0
    return list(previous.get("runs", [])), float(previous.get("minutes", 0.0))


def _recorded_command(path: Path) -> str | None:
    """The sweep command a results file records (None without one)."""
    try:
        return json.loads(path.read_text()).get("command")
    except (OSError, json.JSONDecodeError):
        return None


def resolve_model(name: str, work: Path) -> str:
    if name != "tiny":
        return name
    target = work / "tiny-model"
    if not (target / "config.json").exists():
        from node.learning import models  # torch loads in this process only for the tiny model
        from tests.tiny_model import tiny_random

        tiny_random(models.resolve(models.BUNDLED), target)
    return str(target)


def deadline_of(args: argparse.Namespace) -> float:
    stops = [time.time() + 60 * args.budget_min] if args.budget_min else []
    if args.deadline:
        now = dt.datetime.now(dt.timezone.utc)
        hour, minute = (int(x) for x in args.deadline.split(":"))
        at = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
        if at < now:
            at += dt.timedelta(days=1)
        stops.append(at.timestamp())
    return min(stops) if stops else math.inf


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--nodes", type=int, default=2, help="K: node processes per run (2..4)")
    parser.add_argument("--configs", nargs="+", default=["I=4,J=0", "I=2,J=2"],
                        help="SAPO configurations; the one with J=0 is the solo baseline")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--rounds", type=int, default=20, help="rounds trained per node")
    parser.add_argument("--solo-rounds", type=int, metavar="N",
                        help="the solo configuration (J=0) trains on to N rounds, so that its curve reaches the CPU "
                        "seconds a shared node spends in --rounds (compared at --rounds as before, and at equal CPU "
                        "seconds on the longer curve)")
    parser.add_argument("--generations", type=int, default=4, help="G")
    parser.add_argument("--max-new-tokens", type=int, default=DEMO_MAX_NEW_TOKENS)
    parser.add_argument("--eval-every", type=int, default=5, help="held-out evaluation every N rounds (and at 0)")
    parser.add_argument("--eval-questions", type=int, default=64)
    parser.add_argument("--eval-samples", type=int, default=DEMO_EVAL_SAMPLES,
                        help="answers per held-out question sampled at the training temperature, beside the greedy "
                        "one (0 = greedy only; default: the demo's)")
    parser.add_argument("--eval-seed", type=int, default=0)
    parser.add_argument("--gather-timeout", type=float, default=30.0)
    parser.add_argument("--model", default="bundled", help="'bundled', 'tiny' (plumbing check), or any node model")
    parser.add_argument("--node-models", nargs="+", metavar="MODEL",
                        help="a swarm of different models: node k runs the k-th (one per node; default --model for "
                        "every node), in every configuration alike")
    parser.add_argument("--set", action="append", metavar="SECTION.KEY=VALUE", help="extra node setting")
    parser.add_argument("--specialize", type=float, metavar="W",
                        help="a heterogeneous swarm: node k mostly samples the demo's family k mod 3 (weight 1, the "
                        "others W, 0 < W <= 1), in every configuration alike; held-out stays on every family")
    parser.add_argument("--work", type=Path, default=Path.home() / ".cache" / "rl-swarm-bench" / "swarm_vs_solo")
    parser.add_argument("--game", choices=("sapo", "multistage"), default="sapo",
                        help="multistage: the answer-critique-revise game; a J=0 configuration then plays each node "
                        "alone, any other J all nodes in one swarm (I is the questions of a round)")
    parser.add_argument("--out", type=Path, help="folder of learning.json and the curves (default: bench/results, "
                        "bench/results/game for the multi-stage game)")
    parser.add_argument("--deadline", help="UTC HH:MM: start no run that cannot finish by then, stop at it")
    parser.add_argument("--budget-min", type=float, help="wall-clock budget of this invocation in minutes")
    parser.add_argument("--node-gb", type=float, default=3.5, help="expected peak memory of one node")
    parser.add_argument("--memory-reserve-gb", type=float, default=1.5,
                        help="stop a run (reported as aborted) when less memory than this is left: never risk OOM")
    parser.add_argument("--parallel", action="store_true",
                        help="run the configurations of a seed at the same time (same machine load for each)")
    parser.add_argument("--fresh", action="store_true", help="ignore runs saved in the results file")
    parser.add_argument("--report-only", action="store_true", help="redraw curves and summary from the results file")
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    args.out = args.out or (RESULTS_DIR / "game" if args.game == "multistage" else RESULTS_DIR)
    if args.eval_every <= 0 or args.rounds % args.eval_every:
        parser.error("--rounds must be a multiple of --eval-every (the last round is evaluated)")
    if args.solo_rounds is not None and (args.solo_rounds < args.rounds or args.solo_rounds % args.eval_every):
        parser.error("--solo-rounds must be at least --rounds and a multiple of --eval-every")
    if args.node_models and len(args.node_models) != args.nodes:
        parser.error(f"--node-models takes one model per node: {args.nodes} for --nodes {args.nodes}")
    if args.specialize is not None and not 0 < args.specialize <= 1:
        parser.error("--specialize takes the other families' weight, above 0 (a node still takes peers' tasks of "
                     "them) and at most 1")
    sapos = [Sapo.parse(text) for text in args.configs]
    args.configs = [s.name for s in sapos]

    args.out.mkdir(parents=True, exist_ok=True)
    results_path = args.out / "learning.json"
    runs, minutes = load_previous(results_path, args)
    if args.report_only:
        # Runs not in the results file (still going, or their sweep was killed) are read from their run folders.
        for seed in args.seeds:
            for sapo in sapos:
                folders = [args.work / "runs" / run_name(sapo, seed, i) for i in range(args.nodes)]
                known = any(r["config"] == sapo.name and r["seed"] == seed for r in runs)
                if known or not all((folder / "metrics.jsonl").exists() for folder in folders):
                    continue
                began = min((folder / "config.toml").stat().st_mtime for folder in folders)
                last = max(path.stat().st_mtime for folder in folders for path in folder.glob("*.jsonl"))
                took = (last - began) / 60
                runs.append(summarize(args, args.work, sapo, seed, "partial: read from its run folders", took))
        result = report(args, runs, minutes)
        measured_by = _recorded_command(results_path)
        if measured_by:  # the command that ran the sweep stays the file's command: it regenerates the runs
            result["command"], result["reported_by"] = measured_by, result["command"]
        save(results_path, result)
        draw(result, args.out)
        _print_summary(result)
        return 0

    args.work.mkdir(parents=True, exist_ok=True)
    models = [resolve_model(name, args.work) for name in args.node_models or [args.model] * args.nodes]

    def interrupt(signum, frame) -> None:  # SIGTERM too: the running nodes are stopped in order, then we exit
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    stop_at = deadline_of(args)
    todo = [(seed, sapo) for seed in args.seeds for sapo in sapos
            if not any(r["complete"] and r["config"] == sapo.name and r["seed"] == seed for r in runs)]
    _say(f"{len(todo)} runs to do ({args.nodes} nodes each); results in {results_path}")
    # With --parallel the configurations of one seed run side by side: they share the machine's load exactly.
    batches = [[(seed, sapo) for s, sapo in todo if s == seed] for seed in dict.fromkeys(s for s, _ in todo)]
    if not args.parallel:
        batches = [[item] for batch in batches for item in batch]
    for batch in batches:
        durations = [r["minutes"] for r in runs if r["complete"]]
        expected = 60 * (max(durations) if durations else 0)
        if time.time() + expected > stop_at:
            _say(f"stopping: the next run takes ~{expected / 60:.0f} min, the wall budget ends sooner")
            break
        needed = len(batch) * args.nodes * args.node_gb + args.memory_reserve_gb
        available = psutil.virtual_memory().available / 2**30
        if available < needed:
            _say(f"waiting: {available:.1f} GB available, {needed:.1f} GB needed for {len(batch) * args.nodes} nodes")
            while available < needed and time.time() < stop_at:
                time.sleep(30)
                available = psutil.virtual_memory().available / 2**30
            if available < needed:
                break
        plays = [_Run(args, args.work, sapo, seed, models, stop_at) for seed, sapo in batch]
        outcomes: dict[int, tuple[str, float]] = {}

        def play(i: int, run: _Run) -> None:
            began = time.monotonic()
            outcomes[i] = (run.play(), (time.monotonic() - began) / 60)

        _say(", ".join(f"run {sapo.name} seed {seed} ({rounds_of(args, sapo)} rounds)" for seed, sapo in batch)
             + f": {args.nodes} nodes each")
        started = time.monotonic()
        threads = [threading.Thread(target=play, args=(i, run)) for i, run in enumerate(plays)]
        for thread in threads:
            thread.start()
        try:
            while any(thread.is_alive() for thread in threads):
                time.sleep(1.0)
        except KeyboardInterrupt:
            for run in plays:
                run.cancelled.set()
            for thread in threads:
                thread.join()
            _say("interrupted: the nodes were stopped; runs finished so far are in the results file")
            return 130
        minutes += (time.monotonic() - started) / 60
        for i, (seed, sapo) in enumerate(batch):
            outcome, took = outcomes.get(i, ("failed: crashed", 0.0))
            summary = summarize(args, args.work, sapo, seed, outcome, took)
            runs = [r for r in runs if not (r["config"] == sapo.name and r["seed"] == seed)] + [summary]
            _say(f"run {sapo.name} seed {seed}: {outcome}, {took:.1f} min; held-out {summary['heldout_round0']} -> "
                 f"{summary['heldout_final']}, cumulative reward {summary['cumulative_reward']}")
        result = report(args, runs, minutes)
        save(results_path, result)
        draw(result, args.out)
        if any(outcome == "out_of_time" for outcome, _ in outcomes.values()):
            break
    result = report(args, runs, minutes)
    save(results_path, result)
    draw(result, args.out)
    _print_summary(result)
    return 0


def _print_summary(result: dict) -> None:
    print(f"\nheld-out exact accuracy (greedy), {result['settings']['nodes']} nodes x "
          f"{result['settings']['rounds']} rounds:")
    print("| configuration | seeds | round 0 | final (mean) | sd | min..max | cumulative reward | min/run |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, c in result["per_config"].items():
        print(f"| {name} | {','.join(map(str, c['seeds']))} | {c['heldout_round0_mean']} | {c['heldout_final_mean']}"
              f" | {c['heldout_final_sd']} | {c['heldout_final_min']}..{c['heldout_final_max']}"
              f" | {c['cumulative_reward_mean']} | {c['minutes_per_run']} |")
    for c in result["comparisons"]:
        print(f"{c['shared']} vs {c['solo']}: delta per seed {c['heldout_final_delta']}; shared >= solo on "
              f"{c['seeds_shared_at_least_solo']} of {len(c['seeds'])} seeds; mean {c['heldout_final_delta_mean']}, "
              f"95 % interval {c['ci95']}")
        if "heldout_final_own_family_delta" in c:
            print(f"  on each node's own family: {c['heldout_final_own_family_delta']}; on the others: "
                  f"{c['heldout_final_other_families_delta']}")
        if c["heldout_equal_cpu_delta"]:
            print(f"  at equal CPU seconds per node: delta per seed {c['heldout_equal_cpu_delta']}; mean "
                  f"{c['heldout_equal_cpu_delta_mean']}, 95 % interval {c['ci95_equal_cpu']}")


if __name__ == "__main__":
    sys.exit(main())
