"""Starts the desktop app: logging, the config (the setup wizard on first run), the window and the node."""

from __future__ import annotations

import argparse
import logging
import logging.handlers
import os
import signal
import sys
from pathlib import Path

import psutil

from PySide6.QtCore import QCoreApplication, QTimer
from PySide6.QtGui import QIcon
from PySide6.QtWidgets import QApplication, QInputDialog, QLineEdit

from app.crash_dialog import ExceptionDialogs
from app.demo_peers import DemoPeers
from app.errors import Problem, error_dialog
from app.main_window import MainWindow
from app.paths import default_config_path, resource_path
from app.supervisor import NodeSupervisor
from app.wizard import SetupWizard
from node.api import BUNDLED
from node.chain.wallet import WalletStore
from node.cli.demo import DEMO_MAX_NEW_TOKENS, demo_config
from node.config import NodeConfig, default_data_dir
from node.errors import NodeError
from node.hub.auth import PASSPHRASE_ENV
from node.notify import load_webhook, webhook_stored
from node.secret_store import keyring_available
from node.swarm import admission as swarm_secret

log = logging.getLogger("app")
APP_LOG = "app.log"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rl-swarm", description="RL Swarm desktop app")
    parser.add_argument("--config", type=Path, default=None, help="config file (default: the user config folder)")
    parser.add_argument("--minimized", action="store_true", help="start in the tray (used by start-at-login)")
    parser.add_argument("--setup", action="store_true", help="open the setup wizard even if a config exists")
    parser.add_argument("--demo", action="store_true",
                        help="no setup: the bundled model on a loopback swarm with headless demo peers "
                             "(the terminal demo where there is no screen)")
    parser.add_argument("--demo-peers", type=int, default=1, metavar="N", help="headless peers in --demo (default 1)")
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
        if wizard.passphrase:
            self.supervisor.environment[PASSPHRASE_ENV] = wizard.passphrase
        return wizard.result_config

    def unlock_secrets(self, config: NodeConfig) -> None:
        """Without an OS keyring the wallet key, a private swarm's secret and the webhook URL are sealed with a
        passphrase: ask for it once per session."""
        if keyring_available() or PASSPHRASE_ENV in self.supervisor.environment or os.environ.get(PASSPHRASE_ENV):
            return
        data_dir, swarm = config.run.data_dir, config.swarm.swarm_name
        # Without a wallet set up the node itself says so, with the fix.
        wallet = config.chain.network != "none" and WalletStore(data_dir, config.chain.wallet).exists()
        private = not wallet and swarm_secret.exists(data_dir, swarm)
        if not wallet and not private and not webhook_stored(data_dir):
            return
        title, what = ("Unlock wallet", "The wallet key is") if wallet else \
            ("Unlock private swarm", "The private swarm's secret is") if private else \
            ("Unlock notifications", "The webhook URL for notifications is")
        prompt = f"{what} stored encrypted. Passphrase:"
        while True:
            passphrase, ok = QInputDialog.getText(None, title, prompt, QLineEdit.EchoMode.Password)
            if not ok:
                return  # the node will report the locked store
            try:
                if wallet:
                    WalletStore(data_dir, config.chain.wallet, passphrase=passphrase).unlock()
                elif private:
                    swarm_secret.load(data_dir, swarm, passphrase)
                else:
                    load_webhook(data_dir, passphrase)
            except NodeError as exc:
                prompt = f"{exc.message.rstrip('.')}. Passphrase:"
                continue
            self.supervisor.environment[PASSPHRASE_ENV] = passphrase
            return

    def open(self, config: NodeConfig, *, minimized: bool) -> MainWindow:
        app_log = setup_app_logging(config.run.data_dir)
        self.unlock_secrets(config)
        log.info("app started with config %s", self.config_path)
        self.window = MainWindow(config, self.config_path, self.supervisor, self.icon, app_log)
        self.window.wizardRequested.connect(self.rerun_wizard)
        if not minimized or self.window.tray is None:
            self.window.show()
        if config.desktop.start_training_on_launch and self.window.platform.ok:
            self.supervisor.start()
        return self.window

    def rerun_wizard(self) -> None:
        assert self.window is not None
        config = self.run_wizard(self.window.config)
        if config is not None:
            self.window.apply_config(config)


def has_screen() -> bool:
    if os.environ.get("QT_QPA_PLATFORM") or sys.platform in ("win32", "darwin"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def demo_setup(peers: int) -> tuple[Path, DemoPeers]:
    """The app's node is node 1 of the loopback demo; its config lives beside the user's, never replacing it."""
    data_dir = default_data_dir() / "demo"
    threads = max(1, (psutil.cpu_count(logical=False) or 1) // (peers + 1))
    config = demo_config(data_dir, 0, model=BUNDLED, threads=threads, max_new_tokens=DEMO_MAX_NEW_TOKENS)
    config = config.update({"desktop": {"start_training_on_launch": True}})
    path = default_config_path().with_name("demo.toml")
    config.save(path)
    return path, DemoPeers(data_dir, count=peers, model=BUNDLED, threads=threads, max_new_tokens=DEMO_MAX_NEW_TOKENS)


def run_app(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    if args.demo and not has_screen():
        from node.cli.demo import run_demo

        print("No screen here: running the terminal demo instead of the app.")
        return run_demo(nodes=args.demo_peers + 1, rounds=None, data_dir=default_data_dir() / "demo",
                        model=BUNDLED, max_new_tokens=DEMO_MAX_NEW_TOKENS)
    demo_peers = None
    if args.demo:
        args.config, demo_peers = demo_setup(args.demo_peers)
    QCoreApplication.setOrganizationName("rl-swarm")
    QCoreApplication.setApplicationName("RL Swarm")
    qt_app = QApplication.instance() or QApplication([sys.argv[0]])
    qt_app.setQuitOnLastWindowClosed(False)  # the tray keeps the app alive
    desktop = DesktopApp(qt_app, args.config or default_config_path())
    ExceptionDialogs(lambda: desktop.window.diagnostics() if desktop.window else "").install()
    try:
        config = desktop.load_config()
    except NodeError as exc:
        error_dialog(None, "RL Swarm cannot read its settings", Problem.of(exc)).exec()
        return 2
    if config is None or args.setup:
        config = desktop.run_wizard(config or NodeConfig.build())
        if config is None:
            return 0
    if demo_peers is not None:
        demo_peers.attach(desktop.supervisor)  # peers start and stop with the app's node
    window = desktop.open(config, minimized=args.minimized)
    # Ctrl-C in a terminal quits cleanly: Python only sees signals when the event loop lets it run.
    signal.signal(signal.SIGINT, lambda *_: window.quit())
    timer = QTimer(interval=300)
    timer.timeout.connect(lambda: None)
    timer.start()
    code = qt_app.exec()
    if desktop.supervisor.running and not desktop.supervisor.wait_stopped(5):
        desktop.supervisor.kill()
    if demo_peers is not None:
        demo_peers.stop()
    return code
