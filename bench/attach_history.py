"""How long attaching to a remote run takes until its charts are full: ``ssh ... rl-swarm-node attach`` through a real
sshd on loopback, for runs of N rounds (each round's metrics as the recorded learning run of tests/data has them,
renumbered), and the fleet dashboard's redraw of the whole history once it is in.

    PYTHONPATH=. .venv/bin/python bench/attach_history.py [--rounds 100 1000 5000] [--repeats 5]

Prints, per N, the median and range over the repeats of: seconds from starting ssh until the last round arrived
(ssh handshake, the node CLI's start on the far side, reading and sending the history), and seconds of one
``Dashboard.load_history`` of N rounds (offscreen Qt). Needs root and sshd, like the tests.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from node.config import RemoteNodeSettings  # noqa: E402
from node.events import EvalFinished, RoundFinished, event_from_json  # noqa: E402
from node.process_client import NodeProcess  # noqa: E402
from node.remote import ssh_argv  # noqa: E402
from node.runstore import RunStore  # noqa: E402
from tests import sshd  # noqa: E402

EVENTS = ROOT / "tests" / "data" / "learning_events.jsonl"


def make_run(data_dir: Path, rounds: int) -> list[RoundFinished]:
    recorded = [e for e in map(event_from_json, EVENTS.read_text().splitlines()) if isinstance(e, RoundFinished)]
    store = RunStore(data_dir / "runs" / "default")
    metrics = [dataclasses.replace(recorded[i % len(recorded)], round=i) for i in range(rounds)]
    with open(store.metrics_path, "w", encoding="utf-8") as f:
        f.writelines(m.to_json() + "\n" for m in metrics)
    return metrics


def attach_seconds(remote: RemoteNodeSettings, rounds: int) -> float:
    got = threading.Event()
    seen = [0]

    def on_event(event) -> None:
        if isinstance(event, RoundFinished):
            seen[0] += 1
            if seen[0] == rounds:
                got.set()

    started = time.perf_counter()
    process = NodeProcess(argv=ssh_argv(remote, "attach"), use_fd=False, on_event=on_event, name="attach").start()
    if not got.wait(300):
        raise RuntimeError(f"only {seen[0]} of {rounds} rounds arrived: {process.output_tail()}")
    elapsed = time.perf_counter() - started
    process.kill()
    process.wait(30)
    return elapsed


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, nargs="+", default=[100, 1000, 5000])
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    reason = sshd.unavailable_reason()
    if reason:
        print(f"skipped: {reason}")
        return 0
    from PySide6.QtWidgets import QApplication

    from app.dashboard import Dashboard

    app = QApplication([])  # noqa: F841 (the dashboard needs one)
    work = Path(tempfile.mkdtemp(prefix="rl-swarm-attach-bench-"))
    server = sshd.LoopbackSshd(work / "ssh").start()
    command = f"env PYTHONPATH={ROOT} {sys.executable} -m node"
    try:
        print("rounds | attach until the last round (s): median [min-max] | dashboard redraw (s): median [min-max]")
        for rounds in args.rounds:
            data = work / f"run-{rounds}"
            metrics = make_run(data, rounds)
            remote = RemoteNodeSettings(name="bench", host=sshd.HOST_ALIAS, data_dir=str(data),
                                        node_command=command, ssh_config=server.ssh_config)
            attach = [attach_seconds(remote, rounds) for _ in range(args.repeats)]
            dashboard = Dashboard()
            redraw = []
            for _ in range(args.repeats):
                started = time.perf_counter()
                dashboard.load_history(metrics, list[EvalFinished]())
                redraw.append(time.perf_counter() - started)
            print(f"{rounds:>6} | {statistics.median(attach):.2f} [{min(attach):.2f}-{max(attach):.2f}] | "
                  f"{statistics.median(redraw):.3f} [{min(redraw):.3f}-{max(redraw):.3f}]", flush=True)
    finally:
        server.stop()
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
