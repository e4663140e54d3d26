"""``rl-swarm --self-test``: prove that an installation can train, headless, in well under a minute or two.

It checks the platform (the p2p daemon is there and executable, or WSL2 is ready on Windows), then starts a solo
node for one round in a child process through :func:`node.launch.node_command`, exactly as the app does, so in a
frozen bundle it exercises the real path: the bundle re-entering itself as a node, p2pd starting from inside the
bundle, the bundled model being found, converted and loaded, one generate + GRPO step, a checkpoint, a clean
exit. It prints how long each step took and returns 0 on success, non-zero with a message and a hint otherwise.

This module stays light (no torch, no Qt): the parent only watches the child's event stream.
"""

from __future__ import annotations

import argparse
import queue
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from node.platform_support import check_platform
from node.process_client import NodeProcess

EXIT_OK, EXIT_FAILED, EXIT_PLATFORM = 0, 1, 3
DEFAULT_TIMEOUT_S = 900.0  # a slow first start converts the bundled model
STOP_GRACE_S = 30.0
RUN_NAME = "self-test"


@dataclass
class SelfTestResult:
    ok: bool
    message: str
    hint: str = ""
    timings: dict[str, float] = field(default_factory=dict)  # seconds since the self-test started


def self_test_args(data_dir: Path, model: str) -> list[str]:
    """The smallest real round: 1 question x 2 completions of 8 tokens, no peers, one round, then stop."""
    return [
        "run", "--data-dir", str(data_dir), "--run-name", RUN_NAME, "--model", model,
        "--swarm-name", "self-test", "--host", "127.0.0.1", "--families", "basic_arithmetic",
        "-I", "1", "-G", "2", "-J", "0", "--max-new-tokens", "8", "--rounds", "1", "--checkpoint-every-rounds", "1",
    ]


def run(data_dir: Path, *, model: str = "bundled", timeout_s: float = DEFAULT_TIMEOUT_S,
        progress=print, argv: list[str] | None = None) -> SelfTestResult:
    """``argv`` replaces the node's command line (tests run a child that never finishes with it)."""
    start = time.monotonic()
    timings: dict[str, float] = {}

    def mark(name: str) -> float:
        timings[name] = round(time.monotonic() - start, 2)
        return timings[name]

    status = check_platform()
    if not status.ok:
        return SelfTestResult(False, status.message, status.hint, timings)
    progress(f"platform: {status.message} ({mark('platform_checked'):.1f} s)")

    data_dir.mkdir(parents=True, exist_ok=True)
    # A fresh run each time (a finished one would resume with its round already done); the converted model in
    # <data_dir>/models is kept, so a repeated self-test with the same --data-dir skips the conversion.
    shutil.rmtree(data_dir / "runs" / RUN_NAME, ignore_errors=True)
    stderr_path = data_dir / "self-test.stderr.log"
    stderr_path.unlink(missing_ok=True)
    events: queue.Queue = queue.Queue()
    process = NodeProcess(self_test_args(data_dir, model), argv=argv, control=False, on_event=events.put,
                          on_exit=lambda code: events.put(None), log_path=stderr_path, name="self-test")
    process.start()
    errors: list[tuple[str, str]] = []
    finished_round = False
    deadline = start + timeout_s
    try:
        while True:
            try:
                event = events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                return SelfTestResult(
                    False, f"the node did not finish one round within {timeout_s:.0f} s",
                    f"see {stderr_path}", timings,
                )
            if event is None:
                break
            if event.kind == "node_started":
                progress(f"node started: peer {event.peer_name} on {event.device}, model {event.model} "
                         f"({mark('node_started'):.1f} s)")
            elif event.kind == "round_finished":
                finished_round = True
                progress(f"round {event.round} finished: {event.tokens_generated} tokens generated, "
                         f"loss {event.loss:+.4f}, round took {event.seconds_total:.1f} s "
                         f"({mark('round_finished'):.1f} s)")
            elif event.kind == "error":
                errors.append((event.message, event.hint))
        returncode = process.wait(max(1.0, deadline - time.monotonic()))
        if returncode is None:
            return SelfTestResult(False, "the node did not exit after its round", f"see {stderr_path}", timings)
    finally:
        process.stop(STOP_GRACE_S)
    progress(f"node exited with code {returncode} ({mark('node_exited'):.1f} s)")
    if errors:
        message, hint = errors[-1]
        return SelfTestResult(False, message, hint or f"see {stderr_path}", timings)
    if returncode != 0 or not finished_round:
        tail = " | ".join(process.output_tail(3).splitlines())
        return SelfTestResult(
            False, f"the node exited with code {returncode} before finishing a round" + (f": {tail}" if tail else ""),
            f"see {stderr_path}", timings,
        )
    return SelfTestResult(True, "one round trained and the node stopped cleanly", timings=timings)


def run_self_test(argv: list[str] | None = None) -> int:
    """Entry point of ``rl-swarm --self-test [--data-dir DIR] [--model REF] [--timeout S]``."""
    parser = argparse.ArgumentParser(prog="rl-swarm --self-test")
    parser.add_argument("--data-dir", type=Path, help="keep the run here (default: a temporary folder)")
    parser.add_argument("--model", default="bundled")
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S)
    args, _ = parser.parse_known_args(sys.argv[1:] if argv is None else argv)  # --self-test itself is ignored
    print("RL Swarm self-test: one solo round on this computer", flush=True)
    with tempfile.TemporaryDirectory(prefix="rl-swarm-self-test-") as scratch:
        result = run(args.data_dir or Path(scratch), model=args.model, timeout_s=args.timeout,
                     progress=lambda line: print(f"  {line}", flush=True))
    if result.ok:
        print(f"self-test passed in {max(result.timings.values()):.1f} s: {result.message}", flush=True)
        return EXIT_OK
    print(f"self-test FAILED: {result.message}", file=sys.stderr, flush=True)
    if result.hint:
        print(f"  how to fix: {result.hint}", file=sys.stderr, flush=True)
    return EXIT_PLATFORM if "platform_checked" not in result.timings else EXIT_FAILED
