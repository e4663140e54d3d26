"""Disk writes of a training node: checkpoints every 5 rounds (the old default) against every 20 minutes of training
and at events (the new default), side by side in one run, plus the size of one checkpoint of the bundled model.

Each setting runs a real node (tiny random model, solo, in-memory exchange, no evaluation) in its own child process
for the same number of rounds, several times, alternating; the child reports its own ``/proc/self/io`` at the end
(``write_bytes``: what reached the block layer, fsyncs included; ``wchar``: what it passed to write calls) and the
checkpoints it saved. ``--bundled`` also saves one checkpoint of the bundled model (weights, tokenizer, 8-bit AdamW
moments after one step) and measures it, for the per-hour arithmetic in docs/checkpoints.md.

    python bench/checkpoint_writes.py --rounds 30 --repeats 3 --bundled

Writes bench/results/checkpoint_writes.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

RESULTS = ROOT / "bench" / "results" / "checkpoint_writes.json"
SETTINGS = {
    "every 5 rounds (old default)": {"checkpoint_every_rounds": 5},
    "every 20 min + events (new default)": {},
}


def _io() -> dict[str, int]:
    fields = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
    return {key: int(value) for key, value in fields.items()}


def child(args: argparse.Namespace) -> None:
    """One node run in this process; prints one JSON line: I/O counters, checkpoints, rounds, seconds."""
    from node.config import NodeConfig
    from node.events import EventBus
    from node.runner import SwarmNode
    from node.swarm.exchange import InMemoryBoard, InMemoryExchange

    run = {"data_dir": args.data_dir, "threads": 1, "rounds": args.rounds, **json.loads(args.run)}
    config = NodeConfig.build({
        "training": {"model": args.model, "device": "cpu", "local_questions": 2, "external_groups": 0,
                     "num_generations": 4, "max_new_tokens": 16, "max_prompt_tokens": 256, "learning_rate": 1e-4},
        "tasks": {"weights": {"basic_arithmetic": 1.0}}, "evaluation": {"every_rounds": 0}, "run": run,
    })
    board = InMemoryBoard()
    bus, saved = EventBus(), []
    bus.subscribe(lambda e: saved.append(e.reason) if e.kind == "checkpoint_saved" else None)
    node = SwarmNode(config, bus=bus, exchange=lambda cfg, identity, peers: InMemoryExchange(board, identity.peer_id))
    before, started = _io(), time.monotonic()
    node.run()
    after = _io()
    print(json.dumps({"write_bytes": after["write_bytes"] - before["write_bytes"],
                      "wchar": after["wchar"] - before["wchar"], "checkpoints": saved,
                      "rounds": node.rounds_trained, "seconds": time.monotonic() - started}))


def bundled_checkpoint_bytes() -> dict[str, int]:
    """Save one checkpoint of the bundled model after one 8-bit AdamW step; its size with and without moments."""
    import torch
    from bitsandbytes.optim import AdamW8bit

    from node.learning import models
    from node.learning.checkpoint import Checkpointer, CheckpointState

    model, tokenizer = models.load(models.resolve("bundled"), cache_dir=Path(tempfile.gettempdir()),
                                   dtype=torch.float32, device="cpu")
    optimizer = AdamW8bit(model.parameters(), lr=1e-6)
    model(input_ids=torch.tensor([[1, 2, 3, 4]]), labels=torch.tensor([[1, 2, 3, 4]])).loss.backward()
    optimizer.step()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Checkpointer(Path(tmp)).save(model, tokenizer, optimizer,
                                              CheckpointState(round=0, rounds_trained=1, global_step=1, model="bundled"))
        total = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
        moments = sum(p.stat().st_size for p in (folder / "optimizer").rglob("*") if p.is_file())
    return {"checkpoint_bytes": total, "optimizer_bytes": moments, "weights_bytes": total - moments}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--bundled", action="store_true", help="also measure one checkpoint of the bundled model")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", help=argparse.SUPPRESS)
    parser.add_argument("--run", default="{}", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)

    from node.learning import models
    from tests.tiny_model import tiny_random

    work = Path(tempfile.mkdtemp(prefix="ckpt-writes-"))
    model_dir = tiny_random(models.resolve("bundled"), work / "tiny")
    rows: dict[str, list[dict]] = {name: [] for name in SETTINGS}
    for repeat in range(args.repeats):
        for name, run in SETTINGS.items():  # alternating, so drift of the shared machine hits both alike
            data_dir = work / f"run-{repeat}-{len(rows[name])}-{abs(hash(name))}"
            out = subprocess.run(
                [sys.executable, __file__, "--child", "--model", str(model_dir), "--data-dir", str(data_dir),
                 "--rounds", str(args.rounds), "--run", json.dumps(run)],
                capture_output=True, text=True, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
            )
            rows[name].append(json.loads(out.stdout.strip().splitlines()[-1]))
    result = {"command": f"python bench/checkpoint_writes.py --rounds {args.rounds} --repeats {args.repeats}"
              + (" --bundled" if args.bundled else ""), "rounds": args.rounds, "runs": rows}
    print(f"| setting ({args.rounds} rounds, tiny model) | checkpoints | MB written (median, range) |")
    print("| --- | --- | --- |")
    for name, runs in rows.items():
        written = [r["write_bytes"] / 1e6 for r in runs]
        print(f"| {name} | {runs[0]['checkpoints']} | {statistics.median(written):.1f} "
              f"({min(written):.1f}-{max(written):.1f}) |")
    if args.bundled:
        result["bundled"] = bundled_checkpoint_bytes()
        print("bundled model checkpoint:", {k: f"{v / 1e6:.0f} MB" for k, v in result["bundled"].items()})
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    import shutil

    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
