"""What ``rl-swarm-node demo`` writes: a live table on a terminal; without one (piped, ``| tee``, CI), one whole line
per finished round and evaluation and a final table as wide as its columns, never cut into 80-column fragments.

Node events come from the hand-made stream in the node's JSON-lines format (tests/data/learning_events.jsonl); no
node process runs."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest
from rich.console import Console

from node.cli import demo
from node.events import event_from_json

STREAM = Path(__file__).parent / "data" / "learning_events.jsonl"
COLUMNS = ("node", "state", "round", "reward", "avg5", "acc5", "wf", "held-out", "sampled", "ext", "peers",
           "shared/used/rej", "s/rnd")


def events():
    return [event_from_json(line) for line in STREAM.read_text().splitlines()]


def of(kind: str):
    return [event for event in events() if event.kind == kind]


def fed_view(tmp_path, lines=None, index: int = 0, upto: int | None = None) -> demo._NodeView:
    """A node's view after the stream's events (the first ``upto`` of them)."""
    view = demo._NodeView(index=index, log_path=tmp_path / "node.log")
    for event in events()[:upto]:
        demo._follow(view, event, lines)
    return view


def test_without_a_terminal_each_round_and_evaluation_is_one_whole_line(tmp_path):
    out = io.StringIO()
    view = fed_view(tmp_path, demo._Lines(out))
    written = out.getvalue().splitlines()
    label = f"node 1 ({of('node_started')[0].peer_name})"
    assert written and all(line.startswith(label + ": ") for line in written)  # no line broken or wrapped

    rounds = of("round_finished")
    round_lines = [line for line in written if ": round " in line]
    assert len(round_lines) == len(rounds) and len([line for line in written if "held-out after" in line]) == len(
        of("eval_finished"))
    for line, event in zip(round_lines, rounds, strict=True):
        assert f"round {event.round} " in line and f"reward {event.reward_local:.3f} " in line
        assert f"peers {event.peers_seen} " in line and line.endswith(f"{event.seconds_total:.1f} s/round")
        assert f"wf {event.wellformed_rate:.2f} " in line and f"acc {event.accuracy_local:.2f} (avg5 " in line
    # The last round's line shows the row as it stood then (later evaluations are not in it yet).
    then = fed_view(tmp_path, upto=events().index(rounds[-1]) + 1)
    last = round_lines[-1]
    assert f"(avg5 {demo._recent_mean(then.accuracy):.2f})  wf" in last and f"held-out {demo._heldout(then.heldout)} " in last
    assert f"shared/used/rej {then.shared}/{then.used}/{then.rejected} " in last and len(then.heldout) > 1
    for evaluation in of("eval_finished"):
        line = next(line for line in written if f"held-out after {evaluation.rounds_trained} rounds" in line)
        assert f"greedy exact accuracy {evaluation.accuracy_greedy:.2f} on {evaluation.questions} unseen" in line
        assert f"sampled answers {evaluation.exact_mean:.2f} (" in line
    # Progress within a round and state changes only move the live table: a start line, then rounds and evaluations.
    assert len(written) == 1 + len(rounds) + len(of("eval_finished")) and "started" in written[0]

    quiet = fed_view(tmp_path)  # on a terminal (no lines) the same events update the same row
    assert (quiet.rewards, quiet.heldout, quiet.shared) == (view.rewards, view.heldout, view.shared)


def test_the_final_table_is_as_wide_as_its_columns_need_without_a_terminal(tmp_path):
    views = [fed_view(tmp_path, index=index) for index in range(3)]
    console = Console(file=io.StringIO(), width=80)  # what rich assumes when stdout is not a terminal
    assert not console.is_terminal
    demo.print_wide(console, demo._table(views))
    text = console.file.getvalue()
    rows = [line for line in text.splitlines() if views[0].name in line]
    assert len(rows) == 3 and max(len(line) for line in text.splitlines()) > 80
    header = next(line for line in text.splitlines() if "shared/used/rej" in line)
    assert [cell.strip() for cell in re.split(r"[│┃|]", header) if cell.strip()] == list(COLUMNS)
    v = views[0]
    assert v.sampled != v.heldout  # the stream's sampled accuracy differs from its greedy one
    for cell in (v.name, demo._heldout(v.heldout), demo._heldout(v.sampled), f"{v.shared}/{v.used}/{v.rejected}",
                 f"{v.rewards[-1]:.3f}", f"{v.seconds:.1f}"):
        assert all(cell in row for row in rows), cell


class _FakeProcess:
    running = False
    returncode = 0

    def request_stop(self) -> None:
        pass

    def wait(self, timeout: float) -> int:
        return 0

    def kill(self) -> None:
        pass


@pytest.fixture
def fake_nodes(monkeypatch, tmp_path):
    """run_demo with nodes that replay the stream at once instead of training."""
    def spawn(index, data_dir, model, rounds, threads, max_new_tokens, *, join, lines=None):
        view = fed_view(tmp_path, lines, index)
        view.process = _FakeProcess()
        return view

    monkeypatch.setattr(demo, "_spawn", spawn)
    monkeypatch.setattr(demo, "_wait_started", lambda view, stopping: True)
    lives = []
    monkeypatch.setattr(demo, "Live", lambda *args, **kwargs: lives.append(kwargs) or _NoLive())
    return lives


class _NoLive:
    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass

    def update(self, table) -> None:
        pass


def test_run_demo_writes_lines_when_piped_and_keeps_the_live_table_on_a_terminal(fake_nodes, capsys, tmp_path,
                                                                                  monkeypatch):
    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    assert demo.run_demo(nodes=2, rounds=None, data_dir=tmp_path / "demo", model="bundled") == 0
    piped = capsys.readouterr().out
    assert not fake_nodes  # no live table in a log
    assert len([line for line in piped.splitlines() if ": round " in line]) == 2 * len(of("round_finished"))
    assert "s/rnd" in piped and "shared/used/rej" in piped and "all nodes stopped cleanly" in piped
    assert "Ctrl-C stops all nodes cleanly." in piped.splitlines()[0]  # the intro is one line too

    monkeypatch.setattr(Console, "is_terminal", property(lambda self: True))
    assert demo.run_demo(nodes=2, rounds=None, data_dir=tmp_path / "demo", model="bundled") == 0
    on_terminal = capsys.readouterr().out
    assert len(fake_nodes) == 1 and ": round " not in on_terminal


def test_the_demo_trains_with_the_settings_its_runs_measured(tmp_path):
    """docs/learning.md's demo table was measured with peers' groups pushed only up and rewards not divided by their
    group's spread: a demo without either is not the demo those runs measured."""
    config = demo.demo_config(tmp_path, 0, model="bundled", threads=1)
    assert (config.training.peer_advantages, config.training.scale_rewards) == ("positive", "none")
