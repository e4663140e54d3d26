"""A first run as a new user meets it: the real ``rl-swarm`` entry point with an empty home folder, the setup wizard
finished by clicks, the first round trained; and the wizard re-run from Settings, finished the same way.

The wizard and the settings dialog run their own modal loops inside the app, so the clicks come from a timer
(tests/wizard_clicks.Script) that waits for each screen before it presses anything.
"""

from __future__ import annotations

import logging
import signal
import sys
from pathlib import Path

import pytest
from PySide6.QtCore import Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication, QMenu, QPushButton, QToolBar

from app.gui import DesktopApp
from app.main import main
from app.main_window import MainWindow
from app.settings_dialog import SettingsDialog
from node.config import NodeConfig
from tests.test_app_wizard import answered_at_once  # noqa: F401 - fixture
from tests.wizard_clicks import FINISH, NEXT, Script, click, open_wizard, shown_buttons, type_into

FIRST_ROUND_S = 900  # a fresh home: the bundled model is converted once, then one round on a shared 2-core machine


def top_level(kind: type):
    return next((w for w in QApplication.topLevelWidgets() if isinstance(w, kind) and w.isVisible()), None)


def next_enabled_on(page_of) -> callable:
    """A condition: the wizard shows the page ``page_of(wizard)`` and its Next can be pressed."""
    def ready() -> bool:
        wizard = open_wizard()
        return (wizard is not None and wizard.currentPage() is page_of(wizard)
                and wizard.button(NEXT).isVisible() and wizard.button(NEXT).isEnabled())
    return ready


def through_the_wizard(script: Script, on_swarm_page=lambda wizard: None) -> Script:
    """Welcome, identity, hardware and model: Next on each once it can be pressed; then Finish on the swarm step."""
    for page_of in (lambda w: w.welcome_page, lambda w: w.identity_page, lambda w: w.hardware_page,
                    lambda w: w.model_page):
        script.when("Next on the wizard's next page", next_enabled_on(page_of),
                    lambda: click(open_wizard().button(NEXT)))

    def finish() -> None:
        wizard = open_wizard()
        assert shown_buttons(wizard) == {"Back", "Finish", "Cancel"}, shown_buttons(wizard)
        on_swarm_page(wizard)
        click(wizard.button(FINISH))

    return script.when("the swarm step", lambda: open_wizard() is not None and
                       open_wizard().currentPage() is open_wizard().swarm_page, finish)


@pytest.fixture
def app_state(monkeypatch):
    """What the app's start-up sets for the whole process (root log handlers, excepthook, Ctrl-C), put back after."""
    handlers, level = logging.root.handlers[:], logging.root.level
    monkeypatch.setattr(sys, "excepthook", sys.excepthook)
    sigint = signal.getsignal(signal.SIGINT)
    yield
    logging.root.handlers, logging.root.level = handlers, level
    signal.signal(signal.SIGINT, sigint)


@pytest.mark.usefixtures("answered_at_once")
def test_the_wizard_re_run_from_settings_finishes_and_applies_the_new_swarm(qtbot, tmp_path):
    config_path = tmp_path / "config" / "config.toml"
    NodeConfig.build({"run": {"data_dir": str(tmp_path / "data")},
                      "desktop": {"start_training_on_launch": False}}).save(config_path)
    desktop = DesktopApp(QApplication.instance(), config_path)
    window = desktop.open(desktop.load_config(), minimized=False)
    qtbot.addWidget(window)
    toolbar_button = window.findChild(QToolBar, "controls").widgetForAction(window.settings_action)

    def rename(wizard) -> None:
        type_into(wizard.swarm_page.swarm_name, "friends")

    script = Script(timeout_s=60).when(
        "the settings dialog", lambda: top_level(SettingsDialog) is not None,
        lambda: click(next(b for b in top_level(SettingsDialog).findChildren(QPushButton)
                           if b.text() == "Run the setup wizard again…")))
    through_the_wizard(script, on_swarm_page=rename)
    script.start()
    click(toolbar_button)  # opens Settings; the script presses on from inside its modal loop
    qtbot.waitUntil(lambda: script.done, timeout=90_000)
    script.check()
    assert open_wizard() is None
    assert NodeConfig.load(config_path).swarm.swarm_name == "friends" and window.config.swarm.swarm_name == "friends"
    window.quitting = True


@pytest.mark.slow
def test_a_first_run_from_an_empty_home_finishes_the_wizard_and_trains_a_round(qtbot, tmp_path, monkeypatch, app_state):
    for name, folder in (("HOME", "home"), ("XDG_CONFIG_HOME", "home/.config"), ("XDG_DATA_HOME", "home/.local/share"),
                         ("XDG_CACHE_HOME", "home/.cache")):
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        monkeypatch.setenv(name, str(tmp_path / folder))
    home = tmp_path / "home"

    def rounds_trained() -> int:
        return sum(len(p.read_text().splitlines()) for p in home.rglob("metrics.jsonl"))

    def open_the_file_menu() -> None:
        bar = top_level(MainWindow).menuBar()
        QTest.mouseClick(bar, Qt.MouseButton.LeftButton, pos=bar.actionGeometry(file_menu().menuAction()).center())

    def file_menu() -> QMenu:
        return top_level(MainWindow).menuBar().findChild(QMenu)

    def press_quit() -> None:
        menu, window = file_menu(), top_level(MainWindow)
        QTest.mouseClick(menu, Qt.MouseButton.LeftButton, pos=menu.actionGeometry(window.quit_action).center())

    def leave() -> None:  # after a failure: the app must still quit, or main() never returns
        window = top_level(MainWindow)
        window.quit() if window else QApplication.quit()

    script = through_the_wizard(Script(timeout_s=FIRST_ROUND_S, on_error=leave))
    script.when("the main window", lambda: top_level(MainWindow) is not None, lambda: None)
    script.when("the first round", lambda: rounds_trained() >= 1, open_the_file_menu)
    script.when("the File menu", lambda: file_menu().isVisible(), press_quit)
    script.start()
    code = main([])  # the installed `rl-swarm` command, as a new user types it
    script.check()
    assert code == 0
    config = NodeConfig.load(Path(home / ".config" / "rl-swarm" / "config.toml"))
    assert config.training.model == "bundled" and config.swarm.initial_peers == []  # the recommendation, a new swarm
    assert rounds_trained() >= 1
