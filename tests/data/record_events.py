"""Writes recorded_events.jsonl: the event stream of a real node, recorded from a real two-node swarm.

    python tests/data/record_events.py            # minutes: the bundled model, on loopback

Two node processes with the demo's settings (the bundled model, one thread each, a small held-out set); node 1's
whole JSON-lines stream is written, exactly as the app receives it, until node 1 has finished ``ROUNDS`` rounds
with peer groups trained on, then both stop. The GUI tests replay it (tests/test_app_widgets.py).
"""

from __future__ import annotations

import sys
import tempfile
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from node.cli.demo import demo_config  # noqa: E402
from node.events import Event  # noqa: E402
from node.process_client import NodeProcess, stop_all  # noqa: E402

OUT = Path(__file__).with_name("recorded_events.jsonl")
ROUNDS = 5
START_TIMEOUT_S = 600  # the first start converts the bundled model
TIMEOUT_S = 1800


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="rl-swarm-record-"))
    stream: list[str] = []
    rounds_done, invite, started, done = [], [], threading.Event(), threading.Event()

    def record(event: Event) -> None:
        stream.append(event.to_json())
        if event.kind == "node_started":
            invite.extend(event.invite)
            started.set()
        elif event.kind == "round_finished" and event.groups_used > 0:
            rounds_done.append(event.round)
        if len(rounds_done) >= ROUNDS:
            done.set()

    processes = []
    for index in range(2):
        config = demo_config(work, index, model="bundled", threads=1, join=invite if index else [])
        config = config.update({"evaluation": {"questions": 16}}, source="recording")
        path = work / f"node-{index + 1}.toml"
        config.save(path)
        on_event = record if index == 0 else None
        processes.append(NodeProcess(["run", "--config", str(path)], on_event=on_event,
                                     log_path=work / f"node-{index + 1}.log", name=f"node-{index + 1}").start())
        if index == 0 and not started.wait(START_TIMEOUT_S):
            stop_all(processes, timeout_s=120)
            print("node 1 did not start; see", work / "node-1.log")
            return 1
    try:
        if not done.wait(TIMEOUT_S):
            print(f"node 1 trained on peer groups in only {len(rounds_done)} rounds within {TIMEOUT_S} s")
            return 1
    finally:
        stop_all(processes, timeout_s=120)
    OUT.write_text("\n".join(stream) + "\n")
    print(f"{len(stream)} events of {len(rounds_done)} rounds with peer groups -> {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
