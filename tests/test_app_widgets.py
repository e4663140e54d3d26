"""The desktop app's screens, driven offscreen with pytest-qt (no node process: these take a recorded stream)."""

from __future__ import annotations

import math
import os

import pytest
from PySide6.QtWidgets import QApplication, QMessageBox

from app import autostart
from app.gossip import MAX_ROWS
from app.history import RunHistory, moving_average
from app.logs_panel import LogTail
from app.policies import BATTERY, USER_ACTIVE, PausePolicies
from app.settings_dialog import SettingsDialog
from node.config import DesktopSettings, NodeConfig
from node.events import NodeStarted, RolloutSample, RoundFinished, StateChanged
from node.runstore import RunStore
from node.swarm.invite import parse_invite
from tests.apphelpers import make_window, recorded_events


def config_in(tmp_path, **sections) -> NodeConfig:
    return NodeConfig.build({"run": {"data_dir": str(tmp_path / "data")}, **sections})


def test_moving_average_skips_rounds_without_values():
    values = [1.0, math.nan, 0.0, 1.0]
    assert moving_average(values, window=2)[:2] == [1.0, 1.0]
    assert moving_average(values, window=2)[2:] == [0.5, 0.5]
    assert math.isnan(moving_average([math.nan])[0])


def test_dashboard_plays_a_recorded_event_stream(qtbot, tmp_path):
    window = make_window(qtbot, config_in(tmp_path))
    events = recorded_events()
    for event in events:
        window.supervisor.feed(event)
    rounds = [e for e in events if isinstance(e, RoundFinished)]
    samples = [e for e in events if isinstance(e, RolloutSample)]
    # a real run's stream: rewards, external rewards and peer groups trained on (not a run of zeros)
    assert any(r.reward_local > 0 for r in rounds) and any(r.reward_external for r in rounds)
    assert sum(r.groups_used for r in rounds) > 0
    assert window.dashboard.point_count("local") == len(rounds) >= 5
    assert window.dashboard.point_count("local_avg") == len(rounds)
    assert window.dashboard.point_count("external") == sum(r.reward_external is not None for r in rounds)
    assert window.dashboard.point_count("peers") == len(rounds)
    assert window.gossip.model.rowCount() == len(samples)
    started = next(e for e in events if isinstance(e, NodeStarted))
    assert window.header.name.text() == started.peer_name
    assert parse_invite(window.header.invite).peers == tuple(started.invite) and window.header.copy_invite.isEnabled()
    assert f"Rounds trained {rounds[-1].rounds_trained}" in window.header.counters.text()
    totals = window.header.counters.text()
    assert f"groups shared {sum(r.groups_shared for r in rounds)}" in totals
    assert f"received {sum(r.groups_received for r in rounds)}" in totals
    # The node's own states reach the header, the status bar and the buttons.
    last_state = [e for e in events if isinstance(e, StateChanged)][-1]
    assert window.supervisor.state == last_state.state
    window.supervisor.feed(StateChanged(state="waiting_for_peers", detail="2 of 2 groups"))
    assert window.header.state.text() == "Waiting for peers"
    assert window.pause_action.isEnabled() and window.stop_action.isEnabled() and not window.start_action.isEnabled()


def test_plots_load_the_run_history_at_start(qtbot, tmp_path):
    config = config_in(tmp_path)
    store = RunStore(config.run_dir)
    events = recorded_events()
    samples = [e for e in events if isinstance(e, RolloutSample)]
    for metrics in (e for e in events if isinstance(e, RoundFinished)):
        store.append_round(metrics, [s for s in samples if s.round == metrics.round])
    rounds = [e for e in events if isinstance(e, RoundFinished)]
    window = make_window(qtbot, config)
    assert window.dashboard.point_count("local") == len(rounds)
    assert window.gossip.model.rowCount() == len(samples)
    # A replayed event for a round already shown does not add a second point.
    window.supervisor.feed(rounds[0])
    assert window.dashboard.point_count("local") == len(rounds)
    window.dashboard.plots["seconds"].getPlotItem().getViewBox().scaleBy((0.1, 0.1))
    window.dashboard.reset_button.click()
    assert all(window.dashboard.plots["seconds"].getPlotItem().getViewBox().autoRangeEnabled())


def test_gossip_filters_and_caps_rows(qtbot, tmp_path):
    window = make_window(qtbot, config_in(tmp_path))
    sample = next(e for e in recorded_events() if isinstance(e, RolloutSample))
    peer = RolloutSample(round=1, source_peer="QmPeer", source_name="merry-brave-otter", local=False,
                         family="bf", question="What does this program print?", completion="<answer>7</answer>",
                         reward=1.0)
    window.gossip.add_samples([sample, peer])
    window.gossip.search.setText("otter")
    assert window.gossip.proxy.rowCount() == 1
    window.gossip.search.setText("")
    window.gossip.peers_only.setChecked(True)
    assert window.gossip.proxy.rowCount() == 1
    window.gossip.table.selectRow(0)
    assert "merry-brave-otter" in window.gossip.detail.toPlainText()
    window.gossip.add_samples([peer] * (MAX_ROWS + 10))
    assert window.gossip.model.rowCount() == MAX_ROWS


def test_tray_menu_and_close_to_tray(qtbot, tmp_path):
    window = make_window(qtbot, config_in(tmp_path), tray=True)
    window.show()
    tray = window.tray
    window.supervisor.feed(StateChanged(state="training"))
    assert tray.pause_action.isEnabled() and not tray.resume_action.isEnabled()
    tray.pause_action.trigger()
    assert "user" in window.supervisor.holds
    window.supervisor.feed(StateChanged(state="paused"))
    assert tray.resume_action.isEnabled() and not tray.pause_action.isEnabled()
    assert "paused by you" in window.status_label.text()
    tray.resume_action.trigger()
    assert "user" not in window.supervisor.holds
    rounds = [e for e in recorded_events() if isinstance(e, RoundFinished)]
    window.supervisor.feed(rounds[-1])
    assert f"round {rounds[-1].round}" in tray.toolTip() and "Paused" in tray.toolTip()
    window.close()  # with a tray, closing hides the window and training goes on
    assert not window.isVisible() and not window.quitting
    tray.open_action.trigger()
    assert window.isVisible()
    tray.quit_action.trigger()
    assert window.quitting


def test_settings_dialog_validates_and_returns_a_new_config(qtbot, tmp_path):
    config = config_in(tmp_path)
    dialog = SettingsDialog(config, idle_supported=False, hardware={})
    qtbot.addWidget(dialog)
    assert not dialog.active.isEnabled()  # no idle time on this desktop: the option says so instead of lying
    dialog.threads.setValue(1)
    dialog.gpu_cap.setValue(50)
    dialog.battery.setChecked(True)
    dialog.accept()
    new = dialog.result_config
    assert new.run.threads == 1 and new.run.gpu_memory_fraction == 0.5 and new.desktop.pause_on_battery
    assert new.training == config.training
    dialog = SettingsDialog(new, idle_supported=True, hardware={})
    qtbot.addWidget(dialog)
    dialog.threads.setValue(0)
    dialog.gpu_cap.setValue(0)
    dialog.accept()
    assert dialog.result_config.run.threads is None and dialog.result_config.run.gpu_memory_fraction is None


def test_settings_are_saved_with_the_node_config(qtbot, tmp_path):
    window = make_window(qtbot, config_in(tmp_path))
    new = window.config.update({"desktop": {"pause_on_battery": True, "idle_minutes": 9}})
    window.apply_config(new)
    saved = NodeConfig.load(window.config_path)
    assert saved.desktop.pause_on_battery and saved.desktop.idle_minutes == 9


def test_pause_policies_hold_and_release(qtbot):
    on_battery = [True]
    idle = [10.0]
    policies = PausePolicies(DesktopSettings(pause_on_battery=True, pause_when_user_active=True, idle_minutes=1),
                             interval_ms=10_000, battery=lambda: on_battery[0], idle=lambda: idle[0])
    seen = []
    policies.hold.connect(lambda reason, on: seen.append((reason, on)))
    policies.check()
    assert seen == [(BATTERY, True), (USER_ACTIVE, True)]
    on_battery[0], idle[0] = False, 120.0
    policies.check()
    assert seen[2:] == [(BATTERY, False), (USER_ACTIVE, False)]
    policies.apply(DesktopSettings())  # both off: never holds
    on_battery[0], idle[0] = True, 0.0
    policies.check()
    assert len(seen) == 4


def test_supervisor_holds_combine_user_and_policy_reasons(qtbot, tmp_path):
    window = make_window(qtbot, config_in(tmp_path))
    supervisor = window.supervisor
    supervisor.hold(BATTERY, True)
    supervisor.pause()
    supervisor.resume()
    assert supervisor.holds == {BATTERY}  # still paused: the battery rule holds
    supervisor.hold(BATTERY, False)
    assert not supervisor.holds


def test_log_tail_follows_rotation(tmp_path):
    path = tmp_path / "node.log"
    path.write_text("2026-01-01 INFO a: one\n2026-01-01 WARNING a: two\npartial")
    tail = LogTail(path, "node")
    assert tail.read_new() == ["2026-01-01 INFO a: one", "2026-01-01 WARNING a: two"]
    with open(path, "a") as f:
        f.write(" line\n")
    assert tail.read_new() == ["partial line"]
    os.replace(path, tmp_path / "node.log.1")
    path.write_text("2026-01-01 ERROR a: after rotation\n")
    assert tail.read_new() == ["2026-01-01 ERROR a: after rotation"]


def test_logs_panel_filters_and_copies_diagnostics_without_secrets(qtbot, tmp_path):
    window = make_window(qtbot, config_in(tmp_path))
    node_log = window.config.run_dir / "node.log"
    node_log.parent.mkdir(parents=True, exist_ok=True)
    node_log.write_text("2026-01-01 INFO node.runner: round 3 done\n2026-01-01 ERROR node.swarm.dht: peer vanished\n")
    window.logs.poll()
    assert "peer vanished" in window.logs.view.toPlainText()
    window.logs.level.setCurrentIndex(3)
    assert "round 3" not in window.logs.view.toPlainText() and "peer vanished" in window.logs.view.toPlainText()
    window.logs.level.setCurrentIndex(0)
    window.logs.search.setText("round")
    assert "peer vanished" not in window.logs.view.toPlainText()
    text = window.logs.copy_diagnostics()
    assert "Python" in text and "torch" in text and "peer vanished" in text
    assert QApplication.clipboard().text() == text


def test_autostart_entry_is_opt_in_and_removable(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert not autostart.is_enabled()
    autostart.set_enabled(True)
    entry = (tmp_path / "autostart" / "rl-swarm-desktop.desktop").read_text()
    assert "--minimized" in entry and "Exec=" in entry
    assert autostart.is_enabled()
    autostart.set_enabled(False)
    assert not autostart.is_enabled()


def test_history_totals():
    rounds = [e for e in recorded_events() if isinstance(e, RoundFinished)]
    history = RunHistory.from_metrics(rounds)
    assert history.totals["rounds"] == len(rounds) and history.totals["shared"] == sum(r.groups_shared for r in rounds)


@pytest.mark.parametrize("state", ["stopped", "finished", "failed", "crashed"])
def test_start_is_offered_whenever_the_node_is_not_running(qtbot, tmp_path, state):
    window = make_window(qtbot, config_in(tmp_path))
    window.on_state(state, "")
    assert window.start_action.isEnabled() and not window.stop_action.isEnabled()


def test_crash_loop_message_box(qtbot, tmp_path):
    window = make_window(qtbot, config_in(tmp_path))
    window.on_gave_up("The node crashed 4 times within 10 minutes, so it is not restarted again.\n\nLast lines...")
    assert window.crash_box.isVisible() and window.crash_box.icon() == QMessageBox.Icon.Critical


def test_quitting_while_a_restart_is_pending_cancels_it(qtbot, tmp_path):
    window = make_window(qtbot, config_in(tmp_path))
    window.supervisor._restart_timer.start(60_000)  # a crashed node waiting for its backoff
    finished = []
    window.quitFinished.connect(lambda: finished.append(True))
    window.quit()
    assert not window.supervisor._restart_timer.isActive() and finished == [True]
    assert window.supervisor.state == "stopped"
