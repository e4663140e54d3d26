"""Saves a PNG of every screen of the app, for looking at them (run under Xvfb for real window decorations).

    xvfb-run -a -s "-screen 0 1400x1000x24" .venv/bin/python bench/screenshots.py [--events FILE] [--out DIR]

The dashboard and gossip view are fed a recorded event stream of a real run (default: the two-node recording in
tests/data); the wizard asks the real node CLI for hardware and identity, so it shows this machine.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from PySide6.QtCore import QCoreApplication, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication, QWidget  # noqa: E402

from app.gui import app_icon, setup_app_logging  # noqa: E402
from app.main_window import MainWindow  # noqa: E402
from app.settings_dialog import SettingsDialog  # noqa: E402
from app.supervisor import NodeSupervisor  # noqa: E402
from app.wizard import SetupWizard  # noqa: E402
from node.config import NodeConfig  # noqa: E402
from node.events import event_from_json  # noqa: E402


def settle(app: QApplication, seconds: float = 0.3, until=None, timeout: float = 120) -> None:
    deadline = time.monotonic() + (timeout if until else seconds)
    while time.monotonic() < deadline:
        app.processEvents()
        if until is not None and until():
            break
        time.sleep(0.02)
    for _ in range(5):
        app.processEvents()


def save(widget: QWidget, out: Path, name: str) -> None:
    path = out / f"{name}.png"
    widget.grab().save(str(path))
    print(path)


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=Path, default=ROOT / "tests" / "data" / "recorded_events.jsonl")
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "rl-swarm-screens")
    parser.add_argument("--style", default=None, help="Qt style, e.g. Fusion")
    parser.add_argument("--dark", action="store_true", help="use a dark palette")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    QCoreApplication.setOrganizationName("rl-swarm-screens")
    app = QApplication([sys.argv[0]])
    if args.style:
        app.setStyle(args.style)
    if args.dark:  # what a desktop with a dark theme hands the app
        from PySide6.QtGui import QColor, QPalette

        app.setStyle("Fusion")
        palette = QPalette()
        for role, color in ((QPalette.ColorRole.Window, "#2b2b2b"), (QPalette.ColorRole.WindowText, "#e6e6e6"),
                            (QPalette.ColorRole.Base, "#1e1e1e"), (QPalette.ColorRole.AlternateBase, "#2b2b2b"),
                            (QPalette.ColorRole.Text, "#e6e6e6"), (QPalette.ColorRole.Button, "#3a3a3a"),
                            (QPalette.ColorRole.ButtonText, "#e6e6e6"), (QPalette.ColorRole.Highlight, "#2a82da"),
                            (QPalette.ColorRole.HighlightedText, "#ffffff"), (QPalette.ColorRole.ToolTipBase, "#3a3a3a"),
                            (QPalette.ColorRole.ToolTipText, "#e6e6e6"), (QPalette.ColorRole.PlaceholderText, "#9a9a9a")):
            palette.setColor(role, QColor(color))
        for role in (QPalette.ColorRole.WindowText, QPalette.ColorRole.Text, QPalette.ColorRole.ButtonText):
            palette.setColor(QPalette.ColorGroup.Disabled, role, QColor("#7a7a7a"))
        app.setPalette(palette)
    suffix = "-dark" if args.dark else ""
    data = Path(tempfile.mkdtemp(prefix="rl-swarm-screens-"))
    config = NodeConfig.build({"run": {"data_dir": str(data)}, "swarm": {"swarm_name": "study-group"}})

    wizard = SetupWizard(config, data / "networks.toml")
    wizard.show()
    settle(app, until=lambda: wizard.identity_page.peer is not None and wizard.hardware_page.data is not None)
    wizard.identity_page.wallet.setChecked(True)
    wizard.next()
    wizard.wallet_page.generate()
    settle(app)
    save(wizard, args.out, f"wizard-1b-wallet{suffix}")
    wizard.back()
    wizard.identity_page.local_only.setChecked(True)
    for index, name in enumerate(("identity", "hardware", "model", "swarm")):
        settle(app)
        save(wizard, args.out, f"wizard-{index + 1}-{name}{suffix}")
        if index < 3:
            wizard.next()
    wizard.swarm_page.join.setChecked(True)
    wizard.swarm_page.invite_text.setPlainText(wizard.swarm_page.invite_preview.text())
    settle(app)
    save(wizard, args.out, f"wizard-4-swarm-join{suffix}")
    wizard.close()

    supervisor = NodeSupervisor(data / "config.toml")
    window = MainWindow(config, data / "config.toml", supervisor, app_icon(), setup_app_logging(data))
    window.show()
    for line in args.events.read_text().splitlines():
        supervisor._eventArrived.emit(event_from_json(line))
    supervisor._set_state("training", "")
    settle(app, 1.0)
    save(window, args.out, f"main-dashboard{suffix}")
    window.tabs.setCurrentWidget(window.gossip)
    window.gossip.table.selectRow(0)
    settle(app)
    save(window, args.out, f"main-gossip{suffix}")
    window.tabs.setCurrentWidget(window.account)
    settle(app)
    save(window, args.out, f"main-account{suffix}")
    window.tabs.setCurrentWidget(window.hub)
    settle(app)
    save(window, args.out, f"main-huggingface{suffix}")
    window.tabs.setCurrentWidget(window.logs)
    import logging

    logging.getLogger("app").warning("example warning line in the app log")
    window.logs.poll()
    settle(app)
    save(window, args.out, f"main-logs{suffix}")
    window.tabs.setCurrentWidget(window.dashboard)

    dialog = SettingsDialog(config, idle_supported=True, parent=window)
    dialog.show()
    settle(app)
    save(dialog, args.out, f"settings{suffix}")
    dialog.close()

    window.on_gave_up("The node crashed 4 times within 10 minutes, so it is not restarted again. the node was killed "
                      "(SIGKILL); this is most often the system running out of memory: pick a smaller model or "
                      "fewer completions per round in Settings\n\nLast lines from the node:\n...")
    settle(app)
    save(window.crash_box, args.out, f"crash-loop{suffix}")
    window.crash_box.close()
    window.quitting = True
    QTimer.singleShot(0, app.quit)
    app.exec()
    return 0


if __name__ == "__main__":
    sys.exit(main())
