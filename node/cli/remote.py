"""``rl-swarm-node attach | start | stop | logs``: watch and steer a node that runs headless on this machine.

These are the only commands the app runs on another computer (``ssh HOST rl-swarm-node attach ...``): ``attach``
streams a run's history (metrics, evaluations, recent samples) and then the running node's live events from its
control socket (:mod:`node.control_socket`), and forwards ``pause`` / ``resume`` / ``stop`` lines from stdin to it.
When no node runs the run it says so (state ``stopped``) and attaches as soon as one starts. Leaving ``attach``
(Ctrl-C, a closed stdin, a dropped SSH connection) never stops the node.
"""

from __future__ import annotations

import argparse
import os
import queue
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path

from node import control_socket
from node.cli.event_output import add_event_options, event_stream
from node.config import default_data_dir
from node.errors import NodeError
from node.events import (
    EvalFinished, ErrorReported, EventDecodeError, NodeStarted, RolloutSample, RoundFinished, StateChanged, decode_event,
)
from node.logs import LOG_FILE

HISTORY_SAMPLES = 300  # the gossip view's depth
START_OUTPUT = "node.out"  # in the run folder: what a node started by `start` printed (its log is node.log)
RECONNECT_S = 1.0  # while no node runs the run, how often attach looks for one
REMOTE_COMMANDS = ("attach", "start", "stop", "logs")  # what `ssh-only` lets an SSH key run


def add_commands(commands) -> None:
    attach = commands.add_parser("attach", help="stream a run's history, then its running node's events; "
                                                "pause/resume/stop lines on stdin (with --control-stdin)")
    _run_options(attach)
    attach.add_argument("--samples", type=int, default=HISTORY_SAMPLES, help="recent rollout samples to send first")
    add_event_options(attach)
    attach.add_argument("--control-stdin", action="store_true", help="forward pause/resume/stop lines to the node")
    attach.set_defaults(handler=_cmd_attach)

    start = commands.add_parser("start", help="start a run's node in the background with the run's saved config")
    _run_options(start)
    start.add_argument("--wait", type=float, default=180.0, metavar="SECONDS",
                       help="how long to wait for the node to listen on its control socket")
    start.set_defaults(handler=_cmd_start)

    stop = commands.add_parser("stop", help="ask a run's running node to finish its step, checkpoint and exit")
    _run_options(stop)
    stop.add_argument("--wait", type=float, default=0.0, metavar="SECONDS", help="wait this long for it to exit")
    stop.set_defaults(handler=_cmd_stop)

    logs = commands.add_parser("logs", help="print the last lines of a run's node log")
    _run_options(logs)
    logs.add_argument("--lines", type=int, default=200)
    logs.set_defaults(handler=_cmd_logs)


    only = commands.add_parser(
        "ssh-only", help="for ~/.ssh/authorized_keys: command=\"rl-swarm-node ssh-only\",restrict before a key lets "
                         "that key run only attach, start, stop and logs")
    only.set_defaults(handler=_cmd_ssh_only)


def _cmd_ssh_only(args: argparse.Namespace) -> int:
    """A forced SSH command: run the command the client asked for only when it is one of the node's remote
    commands; the words before it (however the client's settings name the node's CLI) are ignored."""
    from node.cli.main import main

    asked = os.environ.get("SSH_ORIGINAL_COMMAND", "")
    try:
        words = shlex.split(asked)
    except ValueError:
        words = []
    position = next((i for i, word in enumerate(words) if word in REMOTE_COMMANDS), None)
    if position is None:
        raise NodeError(f"this SSH key may only run the node's remote commands ({', '.join(REMOTE_COMMANDS)}), "
                        f"not {asked[:200]!r}", hint="use this key from the RL Swarm app's fleet view")
    return main(words[position:])


def _run_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--run", default="default", metavar="NAME", help="the run's name ([run] run_name)")
    parser.add_argument("--data-dir", type=Path, help="the node's data folder ([run] data_dir)")


def run_dir_of(args: argparse.Namespace) -> Path:
    data_dir = Path(args.data_dir or default_data_dir()).expanduser()
    run_dir = data_dir / "runs" / args.run
    if not run_dir.is_dir():
        runs = sorted(p.name for p in (data_dir / "runs").glob("*") if p.is_dir())
        known = f"runs here: {', '.join(runs)}" if runs else f"no run has been made in {data_dir} yet"
        raise NodeError(f"there is no run named {args.run!r} in {data_dir}",
                        hint=f"{known}; pass --run NAME and --data-dir as the node was started with")
    return run_dir


# ------------------------------------------------------------------------------------------------------ attach
def _cmd_attach(args: argparse.Namespace) -> int:
    from node.runstore import RunStore

    run_dir = run_dir_of(args)
    out = event_stream(args) or sys.stdout
    inbox: queue.Queue[tuple[str, str]] = queue.Queue()
    link = _Link(run_dir, inbox)
    link.connect_once()  # before reading the history: live rounds that land meanwhile are buffered, not lost
    store = RunStore(run_dir)
    last: dict[type, int] = {}
    try:
        for history in (store.metrics(), store.evaluations(), store.samples(last=args.samples)):
            for event in history:
                _write(out, event.to_json())
                last[type(event)] = max(last.get(type(event), -1), event.round)
        threading.Thread(target=link.run, name="attach-link", daemon=True).start()
        if args.control_stdin:
            threading.Thread(target=_read_commands, args=(link, inbox), name="attach-stdin", daemon=True).start()
        while True:
            what, line = inbox.get()
            if what == "eof":
                return 0
            if what == "event":
                try:
                    event, _ = decode_event(line)
                except EventDecodeError:
                    continue  # a newer node's event kind: the app would skip it too
                if isinstance(event, NodeStarted) and event.resumed_from_round is not None:
                    # it cut its history back to its checkpoint: the rounds after it are played again
                    last = {kind: min(round_, event.resumed_from_round) for kind, round_ in last.items()}
                if isinstance(event, (RoundFinished, EvalFinished, RolloutSample)) \
                        and event.round <= last.get(type(event), -1):
                    continue  # already sent from the history
                _write(out, line)
            else:
                _write(out, line)  # a state or error attach itself reports
    except BrokenPipeError:  # whoever read us is gone (a dropped SSH connection): the node runs on
        return 0
    except KeyboardInterrupt:
        return 0
    finally:
        link.close()


def _write(out, line: str) -> None:
    out.write(line + "\n")
    out.flush()


def _read_commands(link: _Link, inbox: queue.Queue[tuple[str, str]]) -> None:
    for line in sys.stdin:
        command = line.strip().lower()
        if command == "cancel":
            command = "stop"
        if command in control_socket.COMMANDS:
            link.send(command)
    inbox.put(("eof", ""))


class _Link:
    """The connection to the run's node, made again whenever a node starts after the last one ended."""

    def __init__(self, run_dir: Path, inbox: queue.Queue[tuple[str, str]]) -> None:
        self.run_dir = run_dir
        self.inbox = inbox
        self._sock = None
        self._lock = threading.Lock()
        self._closed = threading.Event()

    def connect_once(self, *, quiet: bool = False) -> bool:
        sock = control_socket.connect(self.run_dir)
        if sock is None:
            if not quiet:  # dated when the node last wrote to its run folder: when it was last heard of
                self._say("stopped", "no node is running this run", last_heard(self.run_dir))
            return False
        reader = sock.makefile("r", encoding="utf-8", errors="replace")
        sock.settimeout(None)
        try:
            control_socket.check_hello(reader.readline())
        except NodeError as exc:
            sock.close()
            self.inbox.put(("state", ErrorReported(message=exc.message, hint=exc.hint, fatal=False).to_json()))
            return False
        with self._lock:
            self._sock, self._reader = sock, reader
        return True

    def run(self) -> None:
        path = control_socket.socket_path(self.run_dir)
        while not self._closed.is_set():
            if self._sock is None:
                # Waiting for a node to start: a file test a second (a stale socket of a killed node refuses).
                while not self._closed.wait(RECONNECT_S):
                    if path.exists() and self.connect_once(quiet=True):
                        break
                else:
                    return
            for line in self._reader:
                if line.strip():
                    self.inbox.put(("event", line.strip()))
            with self._lock:
                self._sock.close()
                self._sock = None
            if not self._closed.is_set():
                self._say("stopped", "the node exited")

    def send(self, command: str) -> None:
        with self._lock:
            sock = self._sock
            if sock is not None:
                try:
                    sock.sendall((command + "\n").encode())
                    return
                except OSError:
                    pass
        self.inbox.put(("state", ErrorReported(
            message=f"{command} was not delivered: no node is running this run",
            hint="start it first (Start, or `rl-swarm-node start --run NAME` on that computer)", fatal=False,
        ).to_json()))

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            if self._sock is not None:
                try:
                    self._sock.shutdown(2)
                except OSError:
                    pass

    def _say(self, state: str, detail: str, at: float | None = None) -> None:
        event = StateChanged(state=state, detail=detail, time=at or time.time())
        self.inbox.put(("state", event.to_json()))


def last_heard(run_dir: Path) -> float | None:
    """When the run's node last wrote its log or history (None for a run that never ran)."""
    times = []
    for name in (LOG_FILE, "metrics.jsonl", "evaluations.jsonl"):
        try:
            times.append((run_dir / name).stat().st_mtime)
        except OSError:
            pass
    return max(times, default=None)


# ------------------------------------------------------------------------------------------------ start / stop
def _cmd_start(args: argparse.Namespace) -> int:
    from node.launch import node_command, node_environment

    run_dir = run_dir_of(args)
    config = run_dir / "config.toml"
    if not config.exists():
        raise NodeError(f"the run {args.run!r} has no saved configuration ({config})",
                        hint="start it once with `rl-swarm-node run --run-name NAME ...`; later starts reuse it")
    live = control_socket.connect(run_dir)
    if live is not None:
        live.close()
        print(f"a node is already running {args.run}")
        return 0
    with open(run_dir / START_OUTPUT, "ab") as output:
        process = subprocess.Popen(
            node_command("run", "--config", str(config)), stdin=subprocess.DEVNULL, stdout=output, stderr=output,
            env=node_environment(), start_new_session=True,  # outlives this command and the SSH session
        )
    deadline = time.monotonic() + args.wait
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = (run_dir / START_OUTPUT).read_text(encoding="utf-8", errors="replace").splitlines()[-8:]
            raise NodeError(f"the node exited at once with status {process.returncode}: " + " | ".join(tail),
                            hint=f"see {run_dir / LOG_FILE}")
        sock = control_socket.connect(run_dir)
        if sock is not None:
            sock.close()
            print(f"started {args.run} (pid {process.pid})")
            return 0
        time.sleep(0.5)  # the node imports torch before it listens: seconds
    print(f"started {args.run} (pid {process.pid}); it is not listening yet", file=sys.stderr)
    return 0


def _cmd_stop(args: argparse.Namespace) -> int:
    run_dir = run_dir_of(args)
    sock = control_socket.connect(run_dir)
    if sock is None:
        print(f"no node is running {args.run}")
        return 0
    with sock:
        sock.sendall(b"stop\n")
        deadline = time.monotonic() + args.wait
        sock.settimeout(max(0.1, args.wait))
        try:
            while time.monotonic() < deadline and sock.recv(65536):
                pass
        except OSError:
            pass
    print(f"asked {args.run} to stop")
    return 0


def _cmd_logs(args: argparse.Namespace) -> int:
    path = run_dir_of(args) / LOG_FILE
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except FileNotFoundError:
        lines = []
    sys.stdout.write("".join(line + "\n" for line in lines[-max(1, args.lines):]))
    return 0

