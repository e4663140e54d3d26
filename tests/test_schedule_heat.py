"""Schedules and heat slow training down as configured, with an injected clock and injected sensor readings (no
sleeping, no hot laptop needed), and a real node reports its limits as typed events."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from node.config import NodeConfig
from node.errors import NodeError
from node.events import EventBus, ResourceLimitChanged, TemperaturesRead
from node.governor import ResourceGovernor
from node.heat import HeatGuard, Reading, read_temperatures
from node.schedule import Profile, describe, limit_at, parse_days, parse_time
from tests.nodes import tiny_config

WED_10 = datetime(2026, 11, 25, 10, 0)  # a Wednesday

OFFICE = [Profile(parse_days("mon-fri"), parse_time("09:00"), parse_time("18:00"), threads=1),
          Profile(parse_days("weekends"), 0, parse_time("24:00"), paused=True)]


def test_days_and_times_parse_and_refuse_what_they_cannot_read():
    assert parse_days("mon-fri") == {0, 1, 2, 3, 4} and parse_days("sat,sun") == parse_days("weekends") == {5, 6}
    assert parse_days("fri-mon") == {4, 5, 6, 0} and parse_days("daily") == set(range(7))
    assert parse_time("09:30") == 570 and parse_time("24:00") == 1440
    for bad_days in ("mon-fry", "someday", ""):
        with pytest.raises(ValueError, match="day names"):
            parse_days(bad_days)
    with pytest.raises(ValueError, match="HH:MM"):
        parse_time("9h")


def test_a_working_day_is_slowed_until_six_and_the_weekend_paused():
    limit = limit_at(OFFICE, WED_10)
    assert limit.threads == 1 and not limit.paused and limit.until == datetime(2026, 11, 25, 18, 0)
    assert describe(limit, reason="schedule", now=WED_10) == "slowed down by schedule until 18:00 (1 thread)"
    evening = limit_at(OFFICE, WED_10.replace(hour=19))
    assert not evening.limited and evening.until == datetime(2026, 11, 26, 9, 0)
    friday_night = datetime(2026, 11, 27, 23, 59)
    assert not limit_at(OFFICE, friday_night).limited
    saturday = limit_at(OFFICE, friday_night + timedelta(minutes=1))
    assert saturday.paused and saturday.until == datetime(2026, 11, 30, 0, 0)  # Monday 00:00
    assert describe(saturday, reason="schedule", now=datetime(2026, 11, 28)) == "paused by schedule until Mon 00:00"


def test_a_night_profile_runs_past_midnight_and_the_strictest_profile_wins():
    night = [Profile(parse_days("daily"), parse_time("22:00"), parse_time("06:00"), threads=8),
             Profile(parse_days("tue"), parse_time("05:00"), parse_time("07:00"), threads=2)]
    assert limit_at(night, datetime(2026, 11, 24, 23, 0)).threads == 8  # Tuesday evening
    early = limit_at(night, datetime(2026, 11, 25, 5, 30))  # Wednesday 05:30: Tuesday's night, not Tuesday's 5-7
    assert early.threads == 8 and early.until == datetime(2026, 11, 25, 6, 0)
    both = limit_at(night, datetime(2026, 11, 24, 5, 30))  # Tuesday 05:30: Monday's night and Tuesday's 5-7
    assert both.threads == 2 and both.until == datetime(2026, 11, 24, 7, 0)  # the limit, not a profile, changes


def test_profiles_live_in_the_typed_config_and_mistakes_say_how_to_fix_them():
    config = NodeConfig.build({"schedule": {"profiles": [
        {"days": "mon-fri", "start": "09:00", "end": "18:00", "threads": 1}, {"days": "weekends", "paused": True}]}})
    assert [p.profile() for p in config.schedule.profiles] == OFFICE
    with pytest.raises(NodeError, match=r"\[schedule\] profiles.0.*threads = N or paused = true"):
        NodeConfig.build({"schedule": {"profiles": [{"days": "daily"}]}})
    with pytest.raises(NodeError, match="resume_celsius"):
        NodeConfig.build({"heat": {"max_celsius": 70, "resume_celsius": 75}})


def test_the_heat_guard_has_hysteresis_and_ignores_what_it_cannot_read():
    temps = iter([70, 91, 85, 81, 79, 91])
    guard = HeatGuard(90, 80, read=lambda: Reading({"cpu": float(next(temps))}))
    assert [guard.check() for _ in range(6)] == [False, True, True, True, False, True]
    blind = HeatGuard(90, 80, read=lambda: Reading(note="no sensors"))
    assert not blind.check()
    off = HeatGuard(None, 80, read=lambda: Reading({"cpu": 120.0}))
    assert not off.check()


def test_this_computer_says_in_words_when_nothing_is_readable():
    reading = read_temperatures()
    assert reading.celsius or "sensors" in reading.note or "administrator" in reading.note or "driver" in reading.note


class Clock:
    def __init__(self, start: datetime) -> None:
        self.now = start

    def __call__(self) -> datetime:
        return self.now


def governor(clock, profiles=OFFICE, temps=None, cooldown_s=30.0):
    events, threads = [], []
    readings = iter(temps or [])
    heat = HeatGuard(90, 80, read=lambda: Reading({"cpu": float(next(readings))}) if temps else Reading(note="none"))
    gov = ResourceGovernor(profiles, heat, threads_when_hot=1, cooldown_s=cooldown_s, set_threads=threads.append,
                           emit=events.append, now=clock)
    return gov, events, threads


def test_the_governor_applies_threads_tells_changes_once_and_waits_out_a_paused_weekend():
    clock = Clock(WED_10)
    gov, events, threads = governor(clock)
    assert gov.check().threads == 1 and threads == [1]
    gov.check()
    limits = [e for e in events if isinstance(e, ResourceLimitChanged)]
    assert len(limits) == 1 and limits[0].summary == "slowed down by schedule until 18:00 (1 thread)"
    assert not gov.hold(lambda s: pytest.fail("a slowed-down node does not wait"))
    clock.now = WED_10.replace(hour=18)
    assert gov.check().threads is None and threads == [1, None] and events[-1].summary == ""

    clock.now = datetime(2026, 11, 28, 12, 0)  # Saturday noon: paused until Monday
    assert gov.check().paused
    waited: list[float] = []

    def wait(seconds: float) -> bool:  # the clock moves as far as the node waited
        waited.append(seconds)
        clock.now += timedelta(seconds=seconds)
        return False

    assert not gov.hold(wait)
    assert clock.now >= datetime(2026, 11, 30, 0, 0) and all(s <= 60 for s in waited)
    assert not gov.limit.limited and events[-1].summary == ""  # Monday 00:00: the weekend is over, 9-18 not yet
    clock.now = datetime(2026, 11, 28, 12, 0)
    gov.check()
    assert gov.hold(lambda seconds: True)  # a stop while paused by the schedule ends the wait at once


def test_heat_slows_down_with_a_pause_between_rounds_until_the_machine_cooled():
    clock = Clock(WED_10.replace(hour=20))  # no schedule limit in the evening
    gov, events, threads = governor(clock, temps=[70, 95, 85, 79], cooldown_s=30)
    waits: list[float] = []
    assert not gov.check().limited and threads == []
    for expected_hot in (True, True, False):
        limit = gov.check()
        assert (limit.threads == 1) is expected_hot
        gov.hold(lambda seconds: waits.append(seconds) or False)
    assert waits == [30.0, 30.0]  # a cool-down pause between rounds while hot, none once cool
    assert threads == [1, None]
    temperatures = [e for e in events if isinstance(e, TemperaturesRead)]
    assert [e.celsius["cpu"] for e in temperatures] == [70, 95, 85, 79] and [e.hot for e in temperatures] == [
        False, True, True, False]
    heat = [e for e in events if isinstance(e, ResourceLimitChanged)]
    assert [e.reason for e in heat] == ["", "heat", ""]  # full speed is told too, so a header clears
    assert heat[1].summary == (
        "slowed down by heat (1 thread): CPU 95 °C, 30 s pause between rounds")
    assert heat[-1].reason == "" and heat[-1].summary == ""


@pytest.mark.slow
def test_a_node_reports_its_schedule_and_temperatures_as_events(tiny_model_dir, tmp_path):
    config = tiny_config(tiny_model_dir, tmp_path, run={"rounds": 2, "threads": 2}, evaluation={"every_rounds": 0},
                         schedule={"profiles": [{"days": "wed", "start": "09:00", "end": "18:00", "threads": 1}]})
    bus, events = EventBus(), []
    bus.subscribe(events.append)
    from node.runner import SwarmNode

    node = SwarmNode(config, bus=bus)
    node.now = Clock(WED_10)
    node.read_temperatures = lambda: Reading(note="this computer exposes no temperature sensors")
    torch_threads = []
    bus.subscribe(lambda e: torch_threads.append(__import__("torch").get_num_threads())
                  if e.kind == "round_finished" else None)
    node.run()
    limits = [e for e in events if e.kind == "resource_limit"]
    assert [(e.reason, e.threads, e.summary) for e in limits] == [
        ("schedule", 1, "slowed down by schedule until 18:00 (1 thread)")]
    assert limits[0].until == datetime(2026, 11, 25, 18, 0).timestamp()
    assert torch_threads == [1, 1]
    temperatures = [e for e in events if e.kind == "temperatures"]
    assert len(temperatures) == 1 and temperatures[0].celsius == {} and "no temperature" in temperatures[0].note


def test_settings_edit_a_schedule_and_the_heat_limit_by_clicking(qtbot, tmp_path):
    from PySide6.QtCore import Qt, QTime
    from PySide6.QtWidgets import QDialogButtonBox

    from app.settings_dialog import SettingsDialog

    config = NodeConfig.build({"run": {"data_dir": str(tmp_path)}, "schedule": {"profiles": [
        {"days": "weekends", "paused": True}, {"days": "daily", "start": "22:00", "end": "06:00", "threads": 4}]}})
    dialog = SettingsDialog(config, idle_supported=False, hardware={})
    qtbot.addWidget(dialog)
    assert dialog.schedule_on.isChecked() and dialog.schedule_threads.text() == "paused"
    assert "1 more profile" in dialog.schedule_note.text()
    dialog.schedule_days.setCurrentIndex(dialog.schedule_days.findData("mon-fri"))
    dialog.schedule_start.setTime(QTime(9, 0))
    dialog.schedule_end.setTime(QTime(18, 0))
    dialog.schedule_threads.setValue(1)
    dialog.heat_max.setValue(85)
    ok = dialog.findChild(QDialogButtonBox).button(QDialogButtonBox.StandardButton.Ok)
    qtbot.mouseClick(ok, Qt.MouseButton.LeftButton)
    new = dialog.result_config
    assert [p.model_dump() for p in new.schedule.profiles] == [
        {"days": "mon-fri", "start": "09:00", "end": "18:00", "threads": 1, "paused": False},
        {"days": "daily", "start": "22:00", "end": "06:00", "threads": 4, "paused": False}]
    assert new.heat.max_celsius == 85 and new.heat.resume_celsius == 75  # the gap of 10 °C is kept

    dialog = SettingsDialog(new, idle_supported=False, hardware={})
    qtbot.addWidget(dialog)
    dialog.show()  # laid out, so the click lands on the check box's label
    qtbot.waitExposed(dialog)
    qtbot.mouseClick(dialog.schedule_on, Qt.MouseButton.LeftButton)  # off: the profile it edits goes
    assert not dialog.schedule_start.isEnabled()
    dialog.heat_max.setValue(dialog.heat_max.minimum())
    assert dialog.heat_max.text() == "never"
    qtbot.mouseClick(dialog.findChild(QDialogButtonBox).button(QDialogButtonBox.StandardButton.Ok),
                     Qt.MouseButton.LeftButton)
    assert [p.days for p in dialog.result_config.schedule.profiles] == ["daily"]
    assert dialog.result_config.heat.max_celsius is None


def test_the_header_says_what_slows_training_down_and_how_hot_it_is(qtbot, tmp_path):
    from tests.apphelpers import make_window

    window = make_window(qtbot, NodeConfig.build({"run": {"data_dir": str(tmp_path)}}))
    header = window.header
    window.supervisor.feed(ResourceLimitChanged(reason="schedule", threads=1, paused=False, until=None,
                                                summary="slowed down by schedule until 18:00 (1 thread)"))
    assert header.limit.isVisibleTo(window) and header.limit.text() == "Slowed down by schedule until 18:00 (1 thread)"
    window.supervisor.feed(TemperaturesRead(celsius={}, note="this computer exposes no temperature sensors"))
    assert header.temperatures.text() == "Temperatures: not readable here"
    assert "no temperature sensors" in header.temperatures.toolTip()
    window.supervisor.feed(TemperaturesRead(celsius={"cpu": 93.4, "gpu0": 71.0}, hot=True))
    assert header.temperatures.text() == "CPU 93 °C · GPU0 71 °C" and "#c62828" in header.temperatures.styleSheet()
    window.supervisor.feed(ResourceLimitChanged(reason="", threads=None, paused=False, until=None, summary=""))
    assert not header.limit.isVisibleTo(window)
