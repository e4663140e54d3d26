"""How smooth the GUI stays while its node trains, and what the app costs in memory on top of the node.

    .venv/bin/python bench/gui_stall.py [--model bundled|tiny] [--rounds 3]

A 10 ms QTimer runs in the GUI thread the whole time; its lateness (how much later than due each tick fires) is
the longest the event loop was blocked. Reported as p50 / p99 / max over the whole run, from the node's start
until it has finished ``--rounds`` rounds (so model loading, every round's plot update, gossip rows and the log
tail are all inside the window; a GGUF model is converted beforehand). Memory: resident set of the GUI process and of the node process tree, sampled
every second; the app's extra memory over running the headless node alone is the GUI process's.
Targets (issue "Desktop app"): p99 stall < 50 ms, max < 200 ms.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402
from PySide6.QtCore import QCoreApplication, QElapsedTimer, QTimer  # noqa: E402
from PySide6.QtWidgets import QApplication  # noqa: E402

from app.gui import app_icon, setup_app_logging  # noqa: E402
from app.main_window import MainWindow  # noqa: E402
from app.supervisor import NodeSupervisor  # noqa: E402
from node.config import NodeConfig  # noqa: E402
from node.events import RoundFinished  # noqa: E402

TICK_MS = 10


def tree_rss(pid: int) -> int:
    try:
        parent = psutil.Process(pid)
        return sum(p.memory_info().rss for p in [parent, *parent.children(recursive=True)])
    except psutil.NoSuchProcess:
        return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="bundled", help="'bundled', 'tiny' (random 2-layer) or a model path")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    data = Path(tempfile.mkdtemp(prefix="rl-swarm-gui-bench-"))
    model = args.model
    if model == "tiny":
        from node.learning import models

        from tests.tiny_model import tiny_random

        model = str(tiny_random(models.resolve(models.BUNDLED), data / "tiny"))
    else:
        # Convert a GGUF model before measuring (a one-time cost of the first start, with its own memory peak),
        # in a child process so the GUI process stays as it would be.
        subprocess.run([sys.executable, "-c", (
            "import sys, torch; from pathlib import Path; from node.learning import models; "
            "models.load(models.resolve(sys.argv[1]), cache_dir=Path(sys.argv[2]), dtype=torch.float32, device='cpu')"
        ), model, str(data / "models")], check=True, cwd=ROOT)
    config = NodeConfig.build({
        "training": {"model": model, "max_new_tokens": 64},
        "swarm": {"host": "127.0.0.1", "gather_timeout_s": 0},
        "run": {"data_dir": str(data), "rounds": args.rounds, "checkpoint_every_rounds": 100},
    })
    config_path = data / "config.toml"
    config.save(config_path)

    QCoreApplication.setOrganizationName("rl-swarm-bench")
    app = QApplication([sys.argv[0]])
    supervisor = NodeSupervisor(config_path)
    window = MainWindow(config, config_path, supervisor, app_icon(), setup_app_logging(data), tray=False)
    window.show()

    lateness: list[float] = []
    at: list[float] = []  # seconds since start of each tick, to tell what a long stall coincided with
    happenings: list[tuple[float, str]] = []
    clock = QElapsedTimer()
    clock.start()
    last = [clock.nsecsElapsed()]

    def tick() -> None:
        now = clock.nsecsElapsed()
        lateness.append(max(0.0, (now - last[0]) / 1e6 - TICK_MS))
        at.append(now / 1e9)
        last[0] = now

    timer = QTimer(interval=TICK_MS)
    timer.timeout.connect(tick)
    gui = psutil.Process()
    memory = {"gui": [], "node": [], "node_tree": []}

    def sample_memory() -> None:
        memory["gui"].append(gui.memory_info().rss)
        if supervisor.pid:
            try:
                memory["node"].append(psutil.Process(supervisor.pid).memory_info().rss)
            except psutil.NoSuchProcess:
                return
            memory["node_tree"].append(tree_rss(supervisor.pid))

    sampler = QTimer(interval=1000)
    sampler.timeout.connect(sample_memory)
    rounds: list[RoundFinished] = []
    supervisor.event.connect(lambda e: rounds.append(e) if isinstance(e, RoundFinished) else None)
    supervisor.event.connect(lambda e: happenings.append((clock.nsecsElapsed() / 1e9, e.kind)))
    supervisor.stateChanged.connect(lambda state, _: app.quit() if state in ("finished", "failed", "crashed") else None)
    started = time.monotonic()
    timer.start()
    sampler.start()
    supervisor.start()
    app.exec()
    timer.stop()
    sampler.stop()
    seconds = time.monotonic() - started
    if len(rounds) < args.rounds:
        print(f"node ended early in state {supervisor.state}: {supervisor.detail}", file=sys.stderr)
        return 1
    ordered = sorted(lateness)
    p99 = ordered[int(0.99 * (len(ordered) - 1))]
    mib = 2**20
    gui_peak, node_peak = max(memory["gui"]) / mib, max(memory["node"]) / mib
    print(f"model {args.model}, {len(rounds)} rounds in {seconds:.0f} s, {len(lateness)} timer ticks")
    print(f"GUI stall (timer lateness): p50 {statistics.median(lateness):.1f} ms, p99 {p99:.1f} ms, "
          f"max {ordered[-1]:.1f} ms  [targets: p99 < 50, max < 200]")
    for index in sorted(range(len(lateness)), key=lateness.__getitem__)[-5:][::-1]:
        near = [kind for t, kind in happenings if abs(t - at[index]) < 0.5]
        print(f"  stall {lateness[index]:.0f} ms at {at[index]:.1f} s; node events within 0.5 s: {near or 'none'}")
    print(f"memory peak (RSS): GUI process {gui_peak:.0f} MiB, node process {node_peak:.0f} MiB "
          f"(with p2pd and helpers {max(memory['node_tree']) / mib:.0f} MiB); "
          f"the app adds {gui_peak / node_peak:.0%} on top of the headless node")
    return 0


if __name__ == "__main__":
    sys.exit(main())
