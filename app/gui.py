"""Starts the desktop app: logging, the config (the setup wizard on first run), the window and the node."""

from __future__ import annotations

import argparse
import logging
import logging.handlers
import signal
import sys
from pathlib import Path

from PySide6.QtCore import QCoreApplication, QTimer
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication, QMessageBox

from app.main_window import MainWindow
from app.paths import default_config_path, resource_path
from app.supervisor import NodeSupervisor
from app.wizard import SetupWizard
from node.config import NodeConfig
from node.errors import NodeError

log = logging.getLogger("app")
APP_LOG = "app.log"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rl-swarm", description="RL Swarm desktop app")
    parser.add_argument("--config", type=Path, default=None, help="config file (default: the user config folder)")
    parser.add_argument("--minimized", action="store_true", help="start in the tray (used by start-at-login)")
    parser.add_argument("--setup", action="store_true", help="open the setup wizard even if a config exists")
    parser.add_argument("--self-test", action="store_true", help="headless check of the installation, then exit")
    return parser


def setup_app_logging(data_dir: Path) -> Path:
    folder = data_dir / "logs"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / APP_LOG
    handler = logging.handlers.RotatingFileHandler(path, maxBytes=2 * 2**20, backupCount=3, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(logging.INFO)
    return path


def app_icon() -> QIcon:
    icon = QIcon()
    for size in (16, 32, 48, 64, 128, 256, 512):
        png = resource_path("icons", f"app-{size}.png")
        if png.exists():
            icon.addFile(str(png))
    return icon


class DesktopApp:
    """Owns the long-lived pieces so the wizard can be re-run without restarting the app."""

    def __init__(self, qt_app: QApplication, config_path: Path) -> None:
        self.qt_app = qt_app
        self.config_path = config_path
        self.networks_file = config_path.parent / "networks.toml"
        self.icon = app_icon()
        qt_app.setWindowIcon(self.icon)
        self.window: MainWindow | None = None
        self.supervisor = NodeSupervisor(config_path)

    def load_config(self) -> NodeConfig | None:
        if not self.config_path.exists():
            return None
        return NodeConfig.load(self.config_path)

    def run_wizard(self, config: NodeConfig) -> NodeConfig | None:
        wizard = SetupWizard(config, self.networks_file)
        wizard.setWindowIcon(self.icon)
        if not wizard.exec() or wizard.result_config is None:
            return None
        wizard.result_config.save(self.config_path)
        return wizard.result_config

    def open(self, config: NodeConfig, *, minimized: bool) -> MainWindow:
        app_log = setup_app_logging(config.run.data_dir)
        log.info("app started with config %s", self.config_path)
        self.window = MainWindow(config, self.config_path, self.supervisor, self.icon, app_log)
        self.window.wizardRequested.connect(self.rerun_wizard)
        if not minimized or self.window.tray is None:
            self.window.show()
        if config.desktop.start_training_on_launch:
            self.supervisor.start()
        return self.window

    def rerun_wizard(self) -> None:
        assert self.window is not None
        config = self.run_wizard(self.window.config)
        if config is not None:
            self.window.apply_config(config)


def run_app(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    QCoreApplication.setOrganizationName("rl-swarm")
    QCoreApplication.setApplicationName("RL Swarm")
    qt_app = QApplication.instance() or QApplication([sys.argv[0]])
    qt_app.setQuitOnLastWindowClosed(False)  # the tray keeps the app alive
    desktop = DesktopApp(qt_app, args.config or default_config_path())
    try:
        config = desktop.load_config()
    except NodeError as exc:
        QMessageBox.critical(None, "RL Swarm", f"{exc.message}\n\n{exc.hint}")
        return 2
    if config is None or args.setup:
        config = desktop.run_wizard(config or NodeConfig.build())
        if config is None:
            return 0
    window = desktop.open(config, minimized=args.minimized)
    # Ctrl-C in a terminal quits cleanly: Python only sees signals when the event loop lets it run.
    signal.signal(signal.SIGINT, lambda *_: window.quit())
    timer = QTimer(interval=300)
    timer.timeout.connect(lambda: None)
    timer.start()
    code = qt_app.exec()
    if desktop.supervisor.running and not desktop.supervisor.wait_stopped(5):
        desktop.supervisor.kill()
    return code
