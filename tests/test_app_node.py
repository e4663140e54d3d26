"""The app driving real node processes (tiny model, loopback): plots fill, controls work, crashes are handled."""

from __future__ import annotations

import os
import signal

import psutil
import pytest
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication

from tests.apphelpers import make_window
from tests.nodes import tiny_config

pytestmark = pytest.mark.slow
START_S = 180_000  # ms: a node process imports torch, loads the model and starts p2pd


def wait_state(qtbot, window, *states, timeout=START_S):
    qtbot.waitUntil(lambda: window.supervisor.state in states, timeout=timeout)


def test_app_runs_a_real_node_plots_arrive_and_controls_work(qtbot, tiny_model_dir, tmp_path):
    window = make_window(qtbot, tiny_config(tiny_model_dir, tmp_path / "data"))
    window.show()
    assert window.start_action.isEnabled() and not window.pause_action.isEnabled()
    window.start_action.trigger()
    qtbot.waitUntil(lambda: window.dashboard.point_count("local") >= 1, timeout=START_S)
    assert window.started is not None and window.header.name.text() == window.started.peer_name
    assert window.gossip.model.rowCount() >= 1 and window.dashboard.point_count("wellformed") >= 1
    assert window.logs.recent("node", 5), "the node's log file is followed"
    assert window.stop_action.isEnabled() and not window.start_action.isEnabled()

    window.pause_action.trigger()  # finishes the current round, then holds
    assert not window.pause_action.isEnabled()
    wait_state(qtbot, window, "paused")
    assert window.header.state.text() == "Paused" and window.resume_action.isEnabled()
    paused_rounds = window.dashboard.history.totals["rounds"]
    window.resume_action.trigger()
    qtbot.waitUntil(lambda: window.dashboard.history.totals["rounds"] > paused_rounds, timeout=START_S)

    window.stop_action.trigger()
    wait_state(qtbot, window, "stopped")
    assert window.start_action.isEnabled() and not window.stop_action.isEnabled()
    assert (window.config.run_dir / "checkpoints").exists() or any(window.config.run_dir.glob("**/latest.json"))


def test_without_a_tray_closing_asks_and_quitting_stops_the_node(qtbot, tiny_model_dir, tmp_path):
    window = make_window(qtbot, tiny_config(tiny_model_dir, tmp_path / "data"), tray=False)
    window.show()
    window.supervisor.start()
    wait_state(qtbot, window, "training", "waiting_for_peers")
    questions = []

    def answer() -> None:
        box = next(w for w in QApplication.topLevelWidgets() if w.objectName() == "confirmQuit" and w.isVisible())
        questions.append(box.text())
        next(b for b in box.buttons() if b.text().startswith("Keep training")).click()

    QTimer.singleShot(300, answer)
    window.close()
    assert questions and "stops training" in questions[0]
    assert window.supervisor.running and not window.quitting
    pid = window.supervisor.pid
    window.quit()
    wait_state(qtbot, window, "stopped")
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE


def test_a_killed_node_is_restarted_then_a_crash_loop_stops_retrying(qtbot, tiny_model_dir, tmp_path):
    window = make_window(qtbot, tiny_config(tiny_model_dir, tmp_path / "data"),
                         backoff_s=(0.5,), crash_limit=2, crash_window_s=600)
    reports, gave_up = [], []
    window.supervisor.crashed.connect(reports.append)
    window.supervisor.gaveUp.connect(gave_up.append)
    window.supervisor.start()
    for attempt in range(2):
        qtbot.waitUntil(lambda: window.started is not None, timeout=START_S)
        pid = window.supervisor.pid
        window.started = None
        os.kill(pid, signal.SIGKILL)  # what the kernel's OOM killer does
        qtbot.waitUntil(lambda: len(reports) == attempt + 1, timeout=60_000)
        assert "SIGKILL" in reports[-1] and "memory" in reports[-1]
        if attempt == 0:
            wait_state(qtbot, window, "restarting", "starting", "training", "waiting_for_peers")
    wait_state(qtbot, window, "crashed", timeout=10_000)
    assert gave_up and "crashed 2 times" in gave_up[0]
    assert window.crash_box.isVisible()
    assert window.start_action.isEnabled()


def test_a_configuration_error_is_shown_and_not_retried(qtbot, tiny_model_dir, tmp_path):
    config = tiny_config(tiny_model_dir, tmp_path / "data", training={"model": str(tmp_path / "no-such-model")})
    window = make_window(qtbot, config, backoff_s=(0.1,))
    reports = []
    window.supervisor.crashed.connect(reports.append)
    window.supervisor.start()
    wait_state(qtbot, window, "failed")
    # The exit was handled and no restart was scheduled: nothing can change the state any more.
    assert not window.supervisor.running and not window.supervisor._restart_timer.isActive()
    assert window.supervisor.state == "failed" and len(reports) == 1
    assert "no-such-model" in reports[0]
    assert "Error" in window.header.state.text()
    box = window.problem_box  # a refusal is a dialog with the node's reason, not a status-bar line
    assert box.objectName() == "refusalBox" and box.isVisible() and box.detailedText()

