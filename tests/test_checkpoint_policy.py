"""Checkpoints come by training time and at events (pause, stop, a request, before an upload), not every N rounds."""

from __future__ import annotations

import threading

import pytest

from node.checkpoint_policy import CheckpointPolicy
from node.config import NodeConfig
from node.events import EventBus
from node.learning.checkpoint import Checkpointer
from node.runner import SwarmNode
from tests.nodes import tiny_config
from tests.test_app_hub import hub  # noqa: F401 - fixture: the loopback Hub


def test_a_checkpoint_is_due_after_minutes_of_training_not_after_rounds():
    policy = CheckpointPolicy(every_s=20 * 60)
    assert policy.due() is None and not policy.unsaved
    for _ in range(100):  # a hundred quick rounds of ten seconds: 16.7 minutes, no checkpoint
        policy.round_trained(10.0)
        assert policy.due() is None
    assert policy.unsaved
    for _ in range(20):
        policy.round_trained(10.0)
    assert policy.due() == "time"
    policy.saved()
    assert policy.due() is None and not policy.unsaved and policy.trained_s == 0.0


def test_rounds_can_be_asked_for_as_well():
    policy = CheckpointPolicy(every_s=3600, every_rounds=3)
    policy.round_trained(1.0)
    policy.round_trained(1.0)
    assert policy.due() is None
    policy.round_trained(1.0)
    assert policy.due() == "rounds"


def test_the_default_is_twenty_minutes_and_the_old_round_setting_is_retired():
    config = NodeConfig.build({"run": {"checkpoint_every": 5}})  # a config file an earlier version wrote
    assert config.run.checkpoint_minutes == 20.0 and config.run.checkpoint_every_rounds is None
    assert "checkpoint_every" not in config.to_dict()["run"]


@pytest.mark.slow
def test_a_node_saves_on_pause_on_request_and_on_stop_not_every_few_rounds(tiny_model_dir, tmp_path):
    config = tiny_config(tiny_model_dir, tmp_path, run={"rounds": 50, "checkpoint_every_rounds": None},
                         evaluation={"every_rounds": 0})
    bus, events = EventBus(), []
    node = SwarmNode(config, bus=bus)
    paused, finished = threading.Event(), threading.Event()

    def watch(event):
        events.append(event)
        if event.kind == "round_finished" and event.rounds_trained == 2:
            node.pause()
        if event.kind == "checkpoint_saved" and event.reason == "pause":
            paused.set()
        if event.kind == "round_finished" and event.rounds_trained == 3:
            node.request_checkpoint()
        if event.kind == "round_finished" and event.rounds_trained == 7:
            node.stop()
            finished.set()

    bus.subscribe(watch)
    thread = threading.Thread(target=node.run)
    thread.start()
    assert paused.wait(300), [e.kind for e in events]
    node.resume()
    assert finished.wait(300), [e.kind for e in events]
    thread.join(120)
    assert not thread.is_alive()

    saved = [(e.reason, e.round) for e in events if e.kind == "checkpoint_saved"]
    # rounds 0-1 before the pause, round 2 when asked, rounds 3-6 when stopped; never "every 5 rounds"
    assert saved == [("pause", 1), ("requested", 2), ("stop", 6)], saved
    folder, state = Checkpointer(config.run_dir / "checkpoints").latest()
    assert state.rounds_trained == 7 and (folder / "optimizer" / "meta.json").is_file()
    older = sorted((config.run_dir / "checkpoints").glob("round-*"))
    assert [p.name for p in older] == ["round-00000002", "round-00000006"]
    assert not (older[0] / "optimizer").exists()  # the fallback keeps the weights only
    assert (older[0] / "model" / "model.safetensors").is_file()


@pytest.mark.slow
def test_a_manual_upload_from_the_app_first_saves_the_rounds_a_training_node_has_not_saved(qtbot, tmp_path,
                                                                                          tiny_model_dir, hub):
    from PySide6.QtCore import Qt

    from tests.apphelpers import make_window
    from tests.test_hub_upload import WRITE

    config = tiny_config(tiny_model_dir, tmp_path / "data", run={"checkpoint_every_rounds": None},
                         evaluation={"every_rounds": 0}, upload={"endpoint": hub.url, "repo_id": "alice/manual"})
    window = make_window(qtbot, config)
    panel = window.hub
    panel.passphrase.setText("correct horse battery")
    panel.token.setText(WRITE)
    qtbot.mouseClick(panel.login_button, Qt.MouseButton.LeftButton)
    qtbot.waitUntil(lambda: panel.account is not None, timeout=30_000)
    events, finished = [], []
    window.supervisor.event.connect(events.append)
    panel.uploadFinished.connect(finished.append)
    window.supervisor.start()
    qtbot.waitUntil(lambda: window.dashboard.history.totals["rounds"] >= 2, timeout=180_000)
    assert not [e for e in events if e.kind == "checkpoint_saved"]  # 20 minutes of training are far off

    rounds_before = window.dashboard.history.last.round
    qtbot.mouseClick(panel.upload_button, Qt.MouseButton.LeftButton)
    assert "saving a checkpoint" in panel.progress.format()
    qtbot.waitUntil(lambda: bool(finished) or "not uploaded" in panel.progress.format(), timeout=240_000)
    saved = [e for e in events if e.kind == "checkpoint_saved"]
    assert [e.reason for e in saved] == ["requested"] and saved[0].round >= rounds_before
    assert finished and finished[0].round == saved[0].round, panel.result.text()
    window.supervisor.stop()
    qtbot.waitUntil(lambda: window.supervisor.state == "stopped", timeout=120_000)
