"""The app's supervisor around the process client, with a fake child that writes a dirty event stream: the GUI
thread gets the good events as signals, and the exit (status, crash report, restart policy) is always seen."""

from __future__ import annotations

import sys

from app.supervisor import NodeSupervisor
from tests.test_process_client import FAKE


def supervisor(tmp_path, mode: str, **options) -> NodeSupervisor:
    path = tmp_path / "config.toml"
    path.write_text("")
    return NodeSupervisor(path, argv=[sys.executable, str(FAKE), mode], **options)


def test_a_dirty_stream_then_a_crash_is_seen_and_restarted(qtbot, tmp_path):
    node = supervisor(tmp_path, "dirty-then-exit-3", backoff_s=(0.1,), crash_limit=2)
    states, reports, gave_up, kinds = [], [], [], []
    node.stateChanged.connect(lambda state, detail: states.append(state))
    node.crashed.connect(reports.append)
    node.gaveUp.connect(gave_up.append)
    node.event.connect(lambda event: kinds.append(event.kind))
    node.start()
    qtbot.waitUntil(lambda: node.state == "crashed", timeout=30_000)
    assert "restarting" in states and len(reports) == 2 and gave_up
    assert "exited with status 3: the model does not fit (pick a smaller one)" in reports[0]
    assert "a warning on stderr" in reports[0]  # the child's last output lines explain the crash
    assert kinds == ["state_changed", "error"] * 2
    assert not node.running


def test_pause_and_stop_go_through_the_command_channel(qtbot, tmp_path):
    node = supervisor(tmp_path, "dirty-then-wait")
    details = []
    node.event.connect(lambda event: details.append(event.detail))
    node.start()
    qtbot.waitUntil(lambda: node.state == "training", timeout=30_000)
    node.pause()
    qtbot.waitUntil(lambda: "got pause" in details, timeout=10_000)
    node.stop()
    assert node.state == "stopping"
    qtbot.waitUntil(lambda: node.state == "stopped", timeout=30_000)
    assert node.last_exit_code == 0 and not node.running


def test_a_node_that_ignores_stop_is_killed_after_the_timeout(qtbot, tmp_path):
    node = supervisor(tmp_path, "ignore-stop", stop_timeout_s=1.0)
    node.start()
    qtbot.waitUntil(lambda: node.state == "training", timeout=30_000)
    node.stop()
    qtbot.waitUntil(lambda: node.state == "stopped", timeout=30_000)
    assert node.last_exit_code == -9


def test_fed_lines_go_through_the_stream_parser(qtbot, tmp_path):
    """Recorded runs and GUI tests feed JSON lines: bad ones are counted and skipped, good ones reach the GUI."""
    node = supervisor(tmp_path, "dirty-then-wait")
    kinds = []
    node.event.connect(lambda event: kinds.append(event.kind))
    for line in ["not json", '{"kind": "from_the_future"}', '{"kind": "state_changed"}',
                 '{"kind": "state_changed", "state": "paused", "new_field": 1}']:
        node.feed(line)
    assert kinds == ["state_changed"] and node.state == "paused"
    stats = node._replay.stats
    assert (stats.not_json, stats.unknown_kind, stats.missing_fields, stats.extra_fields) == (1, 1, 1, 1)
