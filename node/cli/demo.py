"""``rl-swarm-node demo``: a real swarm of N node processes on loopback, with a live table of their progress.

The first node starts the swarm; the others join it with its invite. Each node is a separate ``rl-swarm-node run``
process reporting through its JSON-lines event stream, exactly as the desktop app drives a node.

On a terminal the table redraws in place. Without one (piped, ``| tee``, CI) a redrawn table would be cut to 80
columns and repeated, so the demo writes one plain line per finished round and per evaluation instead, and the final
table as wide as its columns need.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import psutil
from rich.console import Console
from rich.live import Live
from rich.measure import Measurement
from rich.table import Table

from node.config import NodeConfig
from node.errors import NodeError
from node.events import Event
from node.process_client import NodeProcess, stop_all

START_TIMEOUT_S = 600  # first start converts the bundled model
STOP_TIMEOUT_S = 120
# A 135M model's answers end by themselves after 7-14 tokens when it follows the worked example; longer limits only
# make rambling completions slower.
DEMO_MAX_NEW_TOKENS = 48
DEMO_EVAL_EVERY = 5  # held-out accuracy over time is the demo's headline
# Answers sampled per held-out question at the training temperature, beside the greedy one. Sampled answers are what
# GRPO trains and sharpens: their exact accuracy starts far below the greedy answer's and rises most (README,
# "Learning"). Each sample costs as much as the greedy answer, so the evaluation takes 1 + SAMPLES times as long.
DEMO_EVAL_SAMPLES = 2


@dataclass
class _NodeView:
    index: int
    log_path: Path
    process: NodeProcess | None = None
    name: str = "starting..."
    state: str = "starting"
    round: int | None = None
    rewards: list[float] = field(default_factory=list)
    reward_external: float | None = None
    wellformed: float | None = None
    accuracy: list[float] = field(default_factory=list)
    heldout: list[tuple[int, float]] = field(default_factory=list)  # (rounds trained, greedy exact accuracy)
    sampled: list[tuple[int, float]] = field(default_factory=list)  # (rounds trained, exact accuracy of samples)
    phase: str = ""
    peers: int = 0
    shared: int = 0
    used: int = 0
    rejected: int = 0
    seconds: float | None = None
    invite: list[str] = field(default_factory=list)
    error: str = ""
    started: threading.Event = field(default_factory=threading.Event)


def run_demo(*, nodes: int, rounds: int | None, data_dir: Path, model: str, max_new_tokens: int | None = None) -> int:
    max_new_tokens = max_new_tokens or DEMO_MAX_NEW_TOKENS
    if nodes < 1:
        raise NodeError("the demo needs at least one node", hint="use --nodes 3")
    data_dir.mkdir(parents=True, exist_ok=True)
    threads = max(1, (psutil.cpu_count(logical=False) or 1) // nodes)
    console = Console()
    lines = None if console.is_terminal else _Lines(sys.stdout)
    if lines is not None:
        console = Console(soft_wrap=True)  # a log's lines are not cut at 80 columns
    console.print(f"[bold]RL Swarm demo[/]: {nodes} nodes on loopback, model {model}, {threads} thread(s) each; "
                  f"data in {data_dir}. Ctrl-C stops all nodes cleanly.")
    views: list[_NodeView] = []
    stopping = threading.Event()

    def on_signal(signum, frame) -> None:
        stopping.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        views.append(_spawn(0, data_dir, model, rounds, threads, max_new_tokens, join=[], lines=lines))
        if not _wait_started(views[0], stopping):
            return _finish(views, console, stopped_early=True)
        for index in range(1, nodes):
            views.append(_spawn(index, data_dir, model, rounds, threads, max_new_tokens, join=views[0].invite,
                                lines=lines))
        if lines is None:
            with Live(_table(views), console=console, refresh_per_second=2) as live:
                while not stopping.is_set() and any(v.process.running for v in views):
                    live.update(_table(views))
                    stopping.wait(0.5)
                live.update(_table(views))
        else:
            while not stopping.is_set() and any(v.process.running for v in views):
                stopping.wait(0.5)
            print_wide(console, _table(views))
        return _finish(views, console, stopped_early=stopping.is_set())
    finally:
        _stop_all(views)
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def demo_config(data_dir: Path, index: int, *, model: str, threads: int,
                max_new_tokens: int = DEMO_MAX_NEW_TOKENS, rounds: int | None = None, join: list[str] | tuple[str, ...] = ()) -> NodeConfig:
    """Node ``index`` of a loopback demo swarm (the CLI demo and the app's ``--demo`` use the same settings)."""
    return NodeConfig.build({
        # The task mix is the default for the model's size (easy arithmetic with a difficulty ladder for the bundled
        # model). A small bonus for a well-formed <answer> block gives groups reward spread while the model is still
        # learning the format.
        # Sampling in float32: with the worked example a prompt is ~130 tokens, and a bfloat16 prefill on a CPU
        # without native bfloat16 matmuls is several times slower than float32.
        # The round's groups in one forward/backward pass (micro_batch_groups 0), so the head every prompt starts with
        # (template and worked example, about half of each) runs once for all of them: less CPU than a pass per group,
        # the more groups a round trains the more, at no higher peak (docs/performance.md, "Prompt tokens once").
        # Twice the default learning rate: the demo has only minutes to show learning; decaying from there, because at
        # a constant 1e-5 held-out accuracy dipped after round 10 in most runs, and with the decay it rose from round
        # 5 on in all three seeds measured (the README's learning section). A higher start rate did worse.
        # A peer's completions are trained up where they beat their group's mean, never down: our policy did not sample
        # them. With SAPO's full advantages one node of each 45-minute demo run fell back after round 20, a node that
        # trained mostly on its peer's groups; pushed only up, 1 node of 10 in five runs dipped under the floor, by 4
        # questions at round 20 (docs/learning.md, "The demo" and "Peer groups pushed only up").
        # Rewards less their group's mean, not divided by its spread (Dr. GRPO): divided, a group of wrong answers that
        # differ only in form pushes them as hard as a right answer. Not divided, all 10 nodes of five runs stayed
        # above the floor, against 9 of 10; the accuracy reached was the same within the seeds' spread
        # (docs/learning.md, "Rewards minus the group's mean, not divided by its spread").
        "training": {"model": model, "max_new_tokens": max_new_tokens, "format_reward_weight": 0.2,
                     "learning_rate": 1e-5, "lr_decay_rounds": 5, "peer_advantages": "positive",
                     "scale_rewards": "none",
                     "temperature": 1.0, "generation_dtype": "float32", "micro_batch_groups": 0},
        "swarm": {"swarm_name": "demo", "host": "127.0.0.1", "gather_timeout_s": 30.0, "initial_peers": list(join)},
        "evaluation": {"every_rounds": DEMO_EVAL_EVERY, "samples": DEMO_EVAL_SAMPLES},
        "run": {"data_dir": str(data_dir), "run_name": f"node-{index + 1}", "threads": threads,
                "identity_file": str(data_dir / "identities" / f"node-{index + 1}.key"),
                "rounds": rounds},
    })


def _spawn(index: int, data_dir: Path, model: str, rounds: int | None, threads: int, max_new_tokens: int,
           *, join: list[str], lines: _Lines | None = None) -> _NodeView:
    config = demo_config(data_dir, index, model=model, threads=threads, max_new_tokens=max_new_tokens,
                         rounds=rounds, join=join)
    config_path = data_dir / f"node-{index + 1}.toml"
    config.save(config_path)
    view = _NodeView(index=index, log_path=data_dir / f"node-{index + 1}.stderr.log")
    # The children run in their own session: the demo's Ctrl-C handler stops them in order, they must not get
    # the terminal's SIGINT too.
    view.process = NodeProcess(["run", "--config", str(config_path)], on_event=lambda event: _follow(view, event, lines),
                               on_exit=lambda code: _exited(view, code, lines), log_path=view.log_path,
                               name=f"demo-node-{index + 1}").start()
    return view


def _follow(view: _NodeView, event: Event, lines: _Lines | None = None) -> None:
    """Update the node's row from its event; without a terminal, also write the event's line, if it has one."""
    _update(view, event)
    if lines is not None and (line := event_line(view, event)) is not None:
        lines.write(line)


def _update(view: _NodeView, event: Event) -> None:
    kind = event.kind
    if kind == "node_started":
        view.name, view.invite = event.peer_name, event.invite
        view.started.set()
    elif kind == "state_changed":
        view.state, view.phase = event.state, ""
    elif kind == "round_progress":
        view.phase = event.phase + (f" {event.done}/{event.total}" if event.total else "")
    elif kind == "eval_finished":
        view.heldout.append((event.rounds_trained, event.accuracy_greedy))
        view.sampled.append((event.rounds_trained, event.exact_mean))
    elif kind == "round_finished":
        view.round, view.phase = event.round, ""
        view.rewards.append(event.reward_local)
        view.accuracy.append(event.accuracy_local)
        view.reward_external, view.wellformed = event.reward_external, event.wellformed_rate
        view.peers, view.seconds = event.peers_seen, event.seconds_total
        view.shared += event.groups_shared
        view.used += event.groups_used
        view.rejected += event.groups_rejected
    elif kind == "error":
        view.error = event.message


def _exited(view: _NodeView, code: int, lines: _Lines | None = None) -> None:
    view.state = f"exited ({code})"
    view.started.set()
    if lines is not None:
        lines.write(f"{_label(view)}: exited with code {code}")


class _Lines:
    """Whole lines to a log, one writer at a time (each node's events arrive on its own reader thread)."""

    def __init__(self, out: TextIO) -> None:
        self._out = out
        self._lock = threading.Lock()

    def write(self, line: str) -> None:
        with self._lock:
            self._out.write(line + "\n")
            self._out.flush()


def event_line(view: _NodeView, event: Event) -> str | None:
    """The plain line a log gets for this event (after the view took it in), or None for events that only move
    the live table (progress within a round, state changes)."""
    kind = event.kind
    if kind == "node_started":
        return f"{_label(view)}: started, model {event.model} on {event.device}, swarm {event.swarm_name}"
    if kind == "round_finished":
        return (f"{_label(view)}: round {event.round}  reward {_fmt(event.reward_local)} "
                f"(avg5 {_fmt(_recent_mean(view.rewards))})  acc {_fmt(event.accuracy_local, '.2f')} "
                f"(avg5 {_fmt(_recent_mean(view.accuracy), '.2f')})  "
                f"wf {_fmt(event.wellformed_rate, '.2f')}  held-out {_heldout(view.heldout)}  "
                f"ext {_fmt(event.reward_external)}  peers {event.peers_seen}  "
                f"shared/used/rej {view.shared}/{view.used}/{view.rejected}  {_fmt(event.seconds_total, '.1f')} s/round")
    if kind == "eval_finished":
        return (f"{_label(view)}: held-out after {event.rounds_trained} rounds: greedy exact accuracy "
                f"{event.accuracy_greedy:.2f} on {event.questions} unseen questions ({_heldout(view.heldout)}), "
                f"sampled answers {event.exact_mean:.2f} ({_heldout(view.sampled)})")
    if kind == "error":
        return f"{_label(view)}: error: {event.message}"
    return None


def _label(view: _NodeView) -> str:
    return f"node {view.index + 1} ({view.name})"


def print_wide(console: Console, table: Table) -> None:
    """Print the table as wide as its columns need, whatever width the console assumes (80 without a terminal)."""
    needed = Measurement.get(console, console.options.update(width=10_000), table).maximum
    assumed = console.width
    console.width = max(needed, assumed)  # print(width=) is capped at the console's width
    try:
        console.print(table)
    finally:
        console.width = assumed


def _wait_started(view: _NodeView, stopping: threading.Event) -> bool:
    deadline = time.monotonic() + START_TIMEOUT_S
    while not view.started.wait(0.5):
        if stopping.is_set() or time.monotonic() > deadline:
            return False
    return bool(view.invite)


def _table(views: list[_NodeView]) -> Table:
    table = Table(
        title="RL Swarm demo — live (reward, acc: own completions, acc = exact; wf: well-formed; ext: peer "
        "completions trained on; held-out: greedy exact accuracy on unseen tasks, first -> latest (rounds); "
        "sampled: the same for answers sampled as in training)",
        expand=False,
    )
    columns = ("node", "state", "round", "reward", "avg5", "acc5", "wf", "held-out", "sampled", "ext", "peers",
               "shared/used/rej", "s/rnd")
    for column in columns:
        table.add_column(column, justify="right" if column not in ("node", "state", "held-out", "sampled") else "left")
    for v in views:
        table.add_row(
            v.name, v.error or (f"{v.state}: {v.phase}" if v.phase else v.state), _fmt(v.round, "d"),
            _fmt(v.rewards[-1] if v.rewards else None), _fmt(_recent_mean(v.rewards)),
            _fmt(_recent_mean(v.accuracy), ".2f"), _fmt(v.wellformed, ".2f"), _heldout(v.heldout),
            _heldout(v.sampled), _fmt(v.reward_external), str(v.peers), f"{v.shared}/{v.used}/{v.rejected}", _fmt(v.seconds, ".1f"),
        )
    return table


def _recent_mean(values: list[float], n: int = 5) -> float | None:
    recent = values[-n:]
    return sum(recent) / len(recent) if recent else None


def _heldout(results: list[tuple[int, float]]) -> str:
    if not results:
        return "-"
    (_, first), (rounds, latest) = results[0], results[-1]
    return f"{first:.2f}" if len(results) == 1 else f"{first:.2f} -> {latest:.2f} ({rounds})"


def _fmt(value, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def _stop_all(views: list[_NodeView]) -> None:
    stop_all([view.process for view in views if view.process is not None], STOP_TIMEOUT_S)


def _finish(views: list[_NodeView], console: Console, *, stopped_early: bool) -> int:
    _stop_all(views)
    failed = [v for v in views if v.process is not None and v.process.returncode not in (0, None)]
    for view in failed:
        console.print(f"[red]node {view.index + 1} ({view.name}): {view.process.exit_reason().description}[/]; "
                      f"last log lines from {view.log_path}:")
        console.print(view.process.output_tail(10), markup=False)
    if not failed:
        console.print("all nodes stopped cleanly" + (" (interrupted)" if stopped_early else ""))
    return 1 if failed else 0

