"""The fleet view's screenshot, over real SSH: OpenSSH's sshd on loopback stands in for two other computers.

    bash bench/screenshots.sh                        # with every other screen (Xvfb, openbox, trayer)
    python bench/fleet_screenshot.py --out DIR [--size 1600x1000] [--dark]

Rows: this computer's node (fed the recorded learning run of tests/data, as the other ``main-*`` screens are);
``home-server``, a stopped run whose history is that same recorded run's metrics in its run folder, attached with
``ssh ... rl-swarm-node attach`` (picked: its dashboard starts full from the history); ``rented-gpu``, a node of the
tiny random model started with the fleet's Start over SSH and training; ``laptop``, a computer that cannot be
reached (a closed port), shown as a lost connection being retried. Needs root and sshd (apt-get install
openssh-server), like the tests.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from PySide6.QtCore import QCoreApplication  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from app.gui import app_icon, setup_app_logging  # noqa: E402
from app.main_window import MainWindow  # noqa: E402
from app.supervisor import NodeSupervisor  # noqa: E402
from bench.screenshots import dark_palette, save, settle  # noqa: E402
from node.config import NodeConfig  # noqa: E402
from node.events import EvalFinished, RoundFinished, event_from_json  # noqa: E402
from node.remote import run_command  # noqa: E402
from node.runstore import RunStore  # noqa: E402
from tests import sshd  # noqa: E402

EVENTS = ROOT / "tests" / "data" / "learning_events.jsonl"


def remote(server: sshd.LoopbackSshd, name: str, data_dir: Path, **fields) -> dict:
    command = f"env PYTHONPATH={ROOT} HF_HUB_OFFLINE=1 OMP_NUM_THREADS=1 {sys.executable} -m node"
    return {"name": name, "host": sshd.HOST_ALIAS, "data_dir": str(data_dir), "node_command": command,
            "ssh_config": str(server.ssh_config), **fields}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "rl-swarm-screens")
    parser.add_argument("--size", default="1600x1000")
    parser.add_argument("--dark", action="store_true")
    args = parser.parse_args()
    reason = sshd.unavailable_reason()
    if reason:
        print(f"fleet screenshot skipped: {reason}", file=sys.stderr)
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    width, height = (int(v) for v in args.size.split("x"))
    suffix = ("-dark" if args.dark else "") + f"-{width}"
    work = Path(tempfile.mkdtemp(prefix="rl-swarm-fleet-"))
    server = sshd.LoopbackSshd(work / "ssh").start()
    events = [event_from_json(line) for line in EVENTS.read_text().splitlines()]

    # home-server: a run that trained for a while and stopped; its history is in its run folder
    home = NodeConfig.build({"run": {"data_dir": str(work / "home-server")}})
    store = RunStore(home.run_dir)
    for event in events:
        if isinstance(event, RoundFinished):
            store.append_round(event, [])
        elif isinstance(event, EvalFinished):
            store.append_evaluation(event)
    last = max(event.time for event in events)
    for path in home.run_dir.iterdir():  # written when the recorded run was, not now
        os.utime(path, (last, last))
    # rented-gpu: a run of the tiny random model, started from the fleet view
    from node.learning import models
    from tests.nodes import tiny_config
    from tests.tiny_model import tiny_random

    model = tiny_random(models.resolve(models.BUNDLED), work / "tiny-model")
    gpu = tiny_config(model, work / "rented-gpu")
    gpu.save(gpu.run_dir / "config.toml")

    app = QApplication([sys.argv[0]])
    if args.dark:
        dark_palette(app)
    QCoreApplication.setOrganizationName("rl-swarm-screens")
    data = work / "here"
    remotes = [remote(server, "home-server", work / "home-server"), remote(server, "rented-gpu", work / "rented-gpu"),
               {"name": "laptop", "host": "127.0.0.1", "port": 9, "ssh_config": str(server.ssh_config)}]
    config = NodeConfig.build({"run": {"data_dir": str(data)}, "swarm": {"swarm_name": "study-group"},
                               "fleet": {"remotes": remotes}})
    config.save(data / "config.toml")
    supervisor = NodeSupervisor(data / "config.toml")
    window = MainWindow(config, data / "config.toml", supervisor, app_icon(), setup_app_logging(data))
    window.resize(width, height)
    window.show()
    for event in events:
        supervisor.feed(event)
    supervisor._set_state("training", "")
    fleet = window.fleet
    window.tabs.setCurrentWidget(fleet)
    print(run_command(fleet.node("rented-gpu").remote, "start"), flush=True)
    settle(app, until=lambda: (fleet.node("rented-gpu").round or 0) >= 1, timeout=600)
    settle(app, until=lambda: fleet.node("laptop").link.state == "lost", timeout=60)
    fleet.table.selectRow(fleet.row_of("home-server"))
    settle(app, until=lambda: fleet.dashboard.point_count("local") == len(store.metrics()), timeout=60)
    settle(app, 1.0)
    save(window, args.out, f"main-fleet{suffix}")

    run_command(fleet.node("rented-gpu").remote, "stop", "--wait", "120")
    fleet.close_links()
    server.stop()
    window.quitting = True
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
