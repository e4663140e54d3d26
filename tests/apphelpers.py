"""Building the app's window around a real supervisor, for the pytest-qt tests."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtGui import QIcon

from app.gui import setup_app_logging
from app.main_window import MainWindow
from app.policies import PausePolicies
from app.supervisor import NodeSupervisor
from node.config import NodeConfig
from node.events import event_from_json

RECORDED = Path(__file__).parent / "data" / "recorded_events.jsonl"


def recorded_events():
    return [event_from_json(line) for line in RECORDED.read_text().splitlines()]


def make_window(qtbot, config: NodeConfig, *, tray: bool = False, **supervisor_options) -> MainWindow:
    path = config.run.data_dir / "config.toml"
    config.save(path)
    supervisor = NodeSupervisor(path, **supervisor_options)
    policies = PausePolicies(config.desktop, battery=lambda: False, idle=lambda: None)
    window = MainWindow(config, path, supervisor, QIcon(), setup_app_logging(config.run.data_dir),
                        policies=policies, tray=tray)
    qtbot.addWidget(window, before_close_func=_leave_quietly)
    return window


def _leave_quietly(window: MainWindow) -> None:
    """Teardown closes the window: no node left behind, and no "quit?" dialog waiting for a click."""
    window.fleet.close_links()
    window.supervisor.kill()
    window.supervisor.wait_stopped(30)
    window.quitting = True
