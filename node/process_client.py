"""The one client for node child processes: spawn, read typed events, send commands, stop, kill, explain the exit.

Everything that runs ``rl-swarm-node run`` or ``rl-swarm-node upload`` as a child (the app's supervisor, the
app's demo peers, ``rl-swarm-node demo``, ``rl-swarm --self-test``, the upload panel and the tests) goes through
:class:`NodeProcess`; none of them opens a pipe of its own.

Channels of a child:

- **events**: JSON lines on a dedicated pipe whose write end the child inherits (``--events-fd N``), so nothing a
  library prints can be mistaken for, or corrupt, an event. Where a file descriptor cannot be handed over (on
  Windows the node runs inside WSL2 behind ``wsl.exe``, which forwards only stdin/stdout/stderr) the events come
  on stdout instead (``--events-jsonl``): :attr:`NodeProcess.channel` then says ``"stdout"`` and non-event lines
  there are counted as noise.
- **commands**: one word a line on stdin (``pause``, ``resume``, ``stop``, ``cancel``, ``checkpoint``; ``--control-stdin``).
- **output**: stdout and stderr go to a log file when one is given, else their last lines are kept in memory;
  :meth:`NodeProcess.output_tail` returns them for a crash report.

Parsing is tolerant: a line that is not JSON, an unknown kind, or a known kind with missing fields is counted in
:attr:`NodeProcess.stats` and logged, never fatal; known kinds with extra fields are delivered and counted. The
exit is always reported, once, after the events read so far (``on_exit``), with :func:`describe_exit` naming the
signal and calling a SIGKILL what it usually is: the system running out of memory.

This module never imports Qt or torch.
"""

from __future__ import annotations

import collections
import io
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Literal

from node.events import Event, EventDecodeError, decode_event
from node.launch import kill_tree, node_command, node_environment, popen_options

log = logging.getLogger(__name__)

Command = Literal["pause", "resume", "stop", "cancel", "checkpoint"]
COMMANDS: tuple[str, ...] = ("pause", "resume", "stop", "cancel", "checkpoint")
OUTPUT_LINES = 200
# After the process has exited, how long its event reader may take to hand over what is still in the pipe.
DRAIN_TIMEOUT_S = 5.0


def fd_passing_supported() -> bool:
    """Can a child inherit our event pipe? Not on Windows: the node runs in WSL2 behind ``wsl.exe``."""
    return sys.platform != "win32"


@dataclass
class StreamStats:
    """What the event reader saw; anything but ``events`` means skew or noise, worth a log line, never a crash."""

    events: int = 0
    not_json: int = 0
    unknown_kind: int = 0
    missing_fields: int = 0
    extra_fields: int = 0  # delivered events that carried fields this version does not know

    @property
    def skipped(self) -> int:
        return self.not_json + self.unknown_kind + self.missing_fields


class EventStreamParser:
    """Turns JSON lines into events, counting what is not one (every reader of node events goes through it)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.stats = StreamStats()

    def parse(self, line: str, *, shared_stdout: bool = False) -> Event | None:
        """The event on this line, or None (counted and logged) when there is none; never raises.

        ``shared_stdout``: the line came from a stdout that libraries print to as well, so text that is not JSON
        is ordinary output, logged at debug level."""
        try:
            event, extra = decode_event(line)
        except EventDecodeError as exc:
            setattr(self.stats, exc.reason, getattr(self.stats, exc.reason) + 1)
            if shared_stdout and exc.reason == "not_json":
                log.debug("%s stdout: %s", self.name, line)
            else:
                log.warning("%s: skipped an event line (%s): %s", self.name, exc.reason, exc)
            return None
        if extra:
            self.stats.extra_fields += 1
            log.debug("%s: %s carried unknown fields %s", self.name, event.kind, extra)
        self.stats.events += 1
        return event


@dataclass(frozen=True)
class ExitReason:
    code: int
    signal_name: str | None = None
    probable_oom: bool = False
    description: str = ""


def exit_reason(code: int) -> ExitReason:
    """Explain an exit status: the signal that ended the process (negative codes), and whether it was probably the
    kernel's out-of-memory killer (SIGKILL that nobody here sent)."""
    if code >= 0:
        return ExitReason(code, description=f"the node exited with status {code}")
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    if -code == getattr(signal, "SIGKILL", 9):
        return ExitReason(code, name, True, f"the node was killed ({name}); this is most often the system running "
                                            "out of memory: pick a smaller model or fewer completions per round")
    return ExitReason(code, name, False, f"the node was terminated by {name}")


def describe_exit(code: int) -> str:
    return exit_reason(code).description


@dataclass
class _Exit:
    code: int | None = None
    reported: threading.Event = field(default_factory=threading.Event)


class NodeProcess:
    """One node child process. Callbacks run on the client's reader threads, in order: every event, then the exit.

    ``args`` are the node CLI arguments after ``rl-swarm-node`` (e.g. ``["run", "--config", path]``); the client
    adds the event channel and ``--control-stdin`` (for ``run``) itself. ``argv`` replaces the whole command line
    (tests run a fake child with it); the client still appends its channel options to it.
    """

    def __init__(
        self,
        args: Sequence[str] = (),
        *,
        on_event: Callable[[Event], None] | None = None,
        on_exit: Callable[[int], None] | None = None,
        env: dict[str, str] | None = None,
        log_path: Path | None = None,
        name: str = "node",
        argv: Sequence[str] | None = None,
        control: bool = True,
        use_fd: bool | None = None,
    ) -> None:
        self.args = list(args)
        self.name = name
        self.on_event = on_event
        self.on_exit = on_exit
        self.env = dict(env or {})
        self.log_path = log_path
        self._argv = list(argv) if argv is not None else None
        self.control = control
        self.use_fd = fd_passing_supported() if use_fd is None else use_fd
        self.channel: Literal["fd", "stdout"] = "fd" if self.use_fd else "stdout"
        self.parser = EventStreamParser(name)
        self.process: subprocess.Popen | None = None
        self._output: collections.deque[str] = collections.deque(maxlen=OUTPUT_LINES)
        self._exit = _Exit()
        self._stdin_lock = threading.Lock()
        self._reader: threading.Thread | None = None
        self._kill_timer: threading.Timer | None = None
        self.stop_requested = False
        self.killed = False
        self.controlled = False  # whether the child reads commands on stdin (``run`` does; ``upload`` reads cancel)

    # -- lifecycle ---------------------------------------------------------------------------------------------

    def start(self) -> NodeProcess:
        """Spawn the child; raises OSError when it cannot be started at all."""
        read_fd = write_fd = None
        channel_args: list[str] = []
        if self.use_fd:
            read_fd, write_fd = os.pipe()
            channel_args = ["--events-fd", str(write_fd)]
        else:
            channel_args = ["--events-jsonl"]
        self.controlled = self.control and (self._argv is not None or (self.args[:1] == ["run"]))
        if self.controlled:
            channel_args.append("--control-stdin")
        command = [*(self._argv if self._argv is not None else node_command(*self.args)), *channel_args]
        output: IO | int
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            output = open(self.log_path, "ab")
        else:
            output = subprocess.PIPE
        log.info("starting %s: %s (events on %s)", self.name, " ".join(command), self.channel)
        try:
            self.process = subprocess.Popen(
                command, stdin=subprocess.PIPE,
                stdout=output if self.use_fd else subprocess.PIPE, stderr=output,
                env={**node_environment(), **self.env}, pass_fds=(write_fd,) if write_fd is not None else (),
                **popen_options(),
            )
        except OSError:
            if read_fd is not None:
                os.close(read_fd)
            raise
        finally:
            if write_fd is not None:
                os.close(write_fd)  # the child holds it now; EOF on our end follows its exit
            if output is not subprocess.PIPE:
                output.close()
        process = self.process
        if self.use_fd:
            assert read_fd is not None
            events = os.fdopen(read_fd, "r", encoding="utf-8", errors="replace")
            self._reader = self._thread(self._read_events, events, "events")
            if process.stdout is not None:
                self._thread(self._read_output, process.stdout, "stdout")
        else:
            assert process.stdout is not None
            events = io.TextIOWrapper(process.stdout, encoding="utf-8", errors="replace")
            self._reader = self._thread(self._read_events, events, "events")
        if process.stderr is not None:
            self._thread(self._read_output, process.stderr, "stderr")
        self._thread(self._wait, None, "wait")
        return self

    def _thread(self, target, stream, what: str) -> threading.Thread:
        args = () if stream is None else (stream,)
        thread = threading.Thread(target=target, args=args, name=f"{self.name}-{what}", daemon=True)
        thread.start()
        return thread

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    @property
    def returncode(self) -> int | None:
        return self._exit.code

    @property
    def running(self) -> bool:
        return self.process is not None and not self._exit.reported.is_set()

    def send(self, command: str) -> bool:
        """Write one command line to the child's stdin; False when it cannot be delivered (the child is gone)."""
        if command not in COMMANDS:
            raise ValueError(f"unknown node command {command!r}; one of {', '.join(COMMANDS)}")
        process = self.process
        if process is None or process.stdin is None:
            return False
        with self._stdin_lock:
            try:
                process.stdin.write((command + "\n").encode())
                process.stdin.flush()
                return True
            except (BrokenPipeError, OSError, ValueError):
                log.debug("%s: stdin closed; %r not delivered", self.name, command)
                return False

    def request_stop(self, timeout_s: float | None = None) -> None:
        """Ask the child to finish its step and exit (``stop`` on stdin, or SIGTERM without a control channel);
        kill its process tree if it is still up after ``timeout_s``. Returns at once."""
        process = self.process
        if process is None or self._exit.reported.is_set():
            return
        self.stop_requested = True
        if not (self.controlled and self.send("stop")) and process.poll() is None:
            try:
                process.terminate()
            except OSError:
                pass
        if timeout_s is not None and self._kill_timer is None:
            self._kill_timer = threading.Timer(timeout_s, self._kill_if_running)
            self._kill_timer.daemon = True
            self._kill_timer.start()

    def stop(self, timeout_s: float) -> int | None:
        """Graceful stop with a deadline, then the tree kill; blocks until the exit is reported."""
        self.request_stop()
        code = self.wait(timeout_s)
        if code is None:
            self.kill()
            code = self.wait(DRAIN_TIMEOUT_S + 5.0)
        return code

    def kill(self) -> None:
        """SIGKILL the child and everything it started (its p2p daemon would otherwise be orphaned)."""
        process = self.process
        if process is not None and process.poll() is None:
            log.warning("%s (pid %d) is being killed with its children", self.name, process.pid)
            self.killed = True
            kill_tree(process.pid)

    def wait(self, timeout_s: float | None = None) -> int | None:
        """The exit code once the exit has been reported (all events delivered before it), or None on timeout."""
        if self.process is None:
            return None
        self._exit.reported.wait(timeout_s)
        return self._exit.code

    def exit_reason(self) -> ExitReason | None:
        """Why the child ended (None while it runs); a kill after a stop that timed out is not called OOM."""
        code = self._exit.code
        if code is None:
            return None
        if self.killed:
            return ExitReason(code, "SIGKILL", False, "the node was killed because it did not stop in time")
        return exit_reason(code)

    def output_tail(self, lines: int = 12) -> str:
        """The last lines the child wrote to stdout/stderr (from its log file when it has one)."""
        if self.log_path is not None:
            try:
                text = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
            except OSError:
                return ""
            return "\n".join(text[-lines:])
        return "\n".join(list(self._output)[-lines:])

    def _kill_if_running(self) -> None:
        if not self._exit.reported.is_set():
            log.warning("%s did not stop in time", self.name)
            self.kill()

    # -- reader threads ------------------------------------------------------------------------------------

    def _read_events(self, stream: Iterable[str]) -> None:
        try:
            for line in stream:
                line = line.strip()
                if line:
                    self._handle_line(line)
        except (OSError, ValueError):  # the stream was closed under us
            pass

    @property
    def stats(self) -> StreamStats:
        return self.parser.stats

    def _handle_line(self, line: str) -> None:
        event = self.parser.parse(line, shared_stdout=self.channel == "stdout")
        if event is None:
            if self.channel == "stdout" and line[:1] not in "{[":
                self._output.append(line)  # a library printing on the shared stdout: output, not a broken event
            return
        if self.on_event is not None:
            try:
                self.on_event(event)
            except Exception:
                log.exception("%s: event handler failed on %s", self.name, event.kind)

    def _read_output(self, stream: IO[bytes]) -> None:
        for raw in stream:
            self._output.append(raw.decode("utf-8", errors="replace").rstrip())

    def _wait(self) -> None:
        assert self.process is not None
        code = self.process.wait()
        if self._kill_timer is not None:
            self._kill_timer.cancel()
        if self._reader is not None:
            # A grandchild that inherited the pipe could hold it open past the exit: give up on it after a while.
            self._reader.join(DRAIN_TIMEOUT_S)
        if self.process.stdin is not None:
            try:
                self.process.stdin.close()
            except OSError:
                pass
        self._exit.code = code
        self._exit.reported.set()
        if self.stats.skipped:
            log.warning("%s: %d lines of its event stream were not usable events (%s)", self.name, self.stats.skipped,
                        self.stats)
        if self.on_exit is not None:
            try:
                self.on_exit(code)
            except Exception:
                log.exception("%s: exit handler failed", self.name)


def stop_all(processes: Sequence[NodeProcess], timeout_s: float) -> None:
    """Ask every child to stop at once, then wait for them under one deadline; kill the trees still up."""
    for process in processes:
        process.request_stop()
    deadline = time.monotonic() + timeout_s
    for process in processes:
        if process.wait(max(0.5, deadline - time.monotonic())) is None:
            process.kill()
            process.wait(DRAIN_TIMEOUT_S + 5.0)
