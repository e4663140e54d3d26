"""The node-process client against a child whose channels are dirty: garbage on stdout, malformed, unknown-kind
and missing-field event lines. Nothing of it may be fatal, every kind of bad line is counted, and the exit is
always reported."""

from __future__ import annotations

import queue
import signal
import sys
from pathlib import Path

import pytest

from node.events import StateChanged
from node.process_client import NodeProcess, exit_reason, stop_all

FAKE = Path(__file__).with_name("fake_node.py")


def fake(mode: str, **options) -> tuple[NodeProcess, queue.Queue, queue.Queue]:
    events: queue.Queue = queue.Queue()
    exits: queue.Queue = queue.Queue()
    process = NodeProcess(argv=[sys.executable, str(FAKE), mode], on_event=events.put, on_exit=exits.put,
                          name=f"fake-{mode}", **options)
    return process.start(), events, exits


def next_event(events: queue.Queue, timeout: float = 30.0):
    return events.get(timeout=timeout)


@pytest.mark.parametrize("use_fd", [True, False], ids=["events-fd", "stdout-fallback"])
def test_bad_lines_are_counted_never_fatal_and_commands_reach_the_child(use_fd):
    process, events, exits = fake("dirty-then-wait", use_fd=use_fd)
    first = next_event(events)
    assert isinstance(first, StateChanged) and first.state == "training"  # delivered despite an unknown field
    assert process.send("pause")
    assert next_event(events).state == "paused"
    assert process.stop(timeout_s=30) == 0
    assert exits.get(timeout=5) == 0 and exits.empty()  # reported exactly once
    assert [next_event(events).state for _ in range(2)] == ["training", "stopped"]  # every event before the exit
    stats = process.stats
    assert (stats.unknown_kind, stats.missing_fields, stats.extra_fields) == (2, 1, 1)
    assert stats.events == 4
    # The malformed line counts the same on both channels; on the stdout fallback the library's print is noise too.
    assert stats.not_json == (1 if use_fd else 2)
    assert process.channel == ("fd" if use_fd else "stdout")
    assert "a warning on stderr" in process.output_tail()
    if use_fd:
        assert "garbage a library printed" in process.output_tail()  # stdout is plain output on the fd channel


def test_the_exit_is_reported_after_the_events_with_its_status():
    process, events, exits = fake("dirty-then-exit-3")
    assert exits.get(timeout=30) == 3
    kinds = [events.get_nowait().kind for _ in range(events.qsize())]
    assert kinds == ["state_changed", "error"]
    assert process.exit_reason().description == "the node exited with status 3"
    assert not process.running


def test_a_sigkill_is_reported_as_probably_out_of_memory(tmp_path):
    process, _, exits = fake("sigkill-self", log_path=tmp_path / "child.log")
    assert exits.get(timeout=30) == -signal.SIGKILL
    reason = process.exit_reason()
    assert reason.signal_name == "SIGKILL" and reason.probable_oom and "out of memory" in reason.description
    assert "a warning on stderr" in (tmp_path / "child.log").read_text()
    assert "a warning on stderr" in process.output_tail()


def test_a_child_that_ignores_stop_is_killed_after_the_timeout_and_not_called_oom():
    process, events, _ = fake("ignore-stop")
    next_event(events)
    assert process.stop(timeout_s=1.0) == -signal.SIGKILL
    reason = process.exit_reason()
    assert not reason.probable_oom and "did not stop in time" in reason.description


def test_stop_all_stops_every_child_under_one_deadline():
    children = [fake("dirty-then-wait")[0], fake("ignore-stop")[0]]
    stop_all(children, timeout_s=2.0)
    assert [child.returncode for child in children] == [0, -signal.SIGKILL]


def test_exit_reasons_name_signals():
    assert exit_reason(-signal.SIGTERM).signal_name == "SIGTERM"
    assert not exit_reason(-signal.SIGTERM).probable_oom
    assert exit_reason(0).description == "the node exited with status 0"


def test_unknown_commands_are_refused():
    process, _, _ = fake("dirty-then-wait")
    with pytest.raises(ValueError):
        process.send("reboot")
    process.stop(30)
