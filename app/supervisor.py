"""Runs the node in a supervised child process and turns its event stream into Qt signals.

The node is a separate process (hivemind forks, and a crash or OOM kill of the trainer must not take the GUI
down). Spawning, the event channel, commands, the graceful stop and the tree kill are
:class:`node.process_client.NodeProcess`'s; this QObject only hands its callbacks to the GUI thread through queued
signals and adds the app's policy: pause reasons, the states it shows, restart with backoff until the node has
crashed ``crash_limit`` times within ``crash_window_s``, then stop retrying and say why.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from PySide6.QtCore import QObject, QTimer, Signal, Slot

from node.config import NodeConfig
from node.events import Event, ErrorReported, StateChanged
from node.process_client import EventStreamParser, NodeProcess, describe_exit
from node.platform_support import wsl_config

log = logging.getLogger(__name__)

# Exit status of the node CLI for a NodeError: a problem the user has to fix (bad config, model won't fit).
# Restarting cannot help, so it is reported and not retried.
USER_ERROR_EXIT = 2

# States of the supervised process as the app shows them; the node's own states come through as they are.
SupervisorState = str  # "stopped" | "starting" | node states | "restarting" | "crashed" | "failed" | "finished"

__all__ = ["NodeSupervisor", "USER_ERROR_EXIT", "describe_exit"]


class NodeSupervisor(QObject):
    event = Signal(object)  # every node Event, in order
    stateChanged = Signal(str, str)  # state, detail
    crashed = Signal(str)  # why, with the last lines the node wrote to stderr
    gaveUp = Signal(str)  # crash loop: not retrying

    _eventArrived = Signal(object)
    _exited = Signal(int, object)  # exit code, the NodeProcess it belongs to

    def __init__(
        self,
        config_path: Path,
        *,
        node_args: Callable[[Path], Sequence[str]] | None = None,
        argv: Sequence[str] | None = None,
        backoff_s: Sequence[float] = (2.0, 5.0, 15.0, 30.0),
        crash_limit: int = 4,
        crash_window_s: float = 600.0,
        stop_timeout_s: float = 180.0,
    ) -> None:
        super().__init__()
        self.config_path = config_path
        self._node_args = node_args or (lambda path: ["run", "--config", str(path)])
        self._argv = argv  # a whole command line instead of the node CLI (tests run a fake child)
        self.backoff_s = tuple(backoff_s)
        self.crash_limit = crash_limit
        self.crash_window_s = crash_window_s
        self.stop_timeout_s = stop_timeout_s
        self.state: SupervisorState = "stopped"
        self.detail = ""
        self.last_error: ErrorReported | None = None
        self.last_exit_code: int | None = None
        self.environment: dict[str, str] = {}  # extra variables for the node (e.g. the secret-store passphrase)
        self._process: NodeProcess | None = None
        self._last_process: NodeProcess | None = None
        self._holds: set[str] = set()
        self._stop_requested = False
        self._crash_times: list[float] = []
        self._restart_timer = QTimer(self, singleShot=True)
        self._restart_timer.timeout.connect(self._launch)
        self._eventArrived.connect(self._on_event)
        self._replay = EventStreamParser("replay")
        self._exited.connect(self._on_exit)

    # -- controls ------------------------------------------------------------------------------------------

    @property
    def running(self) -> bool:
        return self._process is not None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    @property
    def holds(self) -> frozenset[str]:
        return frozenset(self._holds)

    @property
    def stderr_tail(self) -> list[str]:
        """The last lines the node wrote (stdout and stderr), for crash reports and diagnostics."""
        process = self._process or self._last_process
        return process.output_tail(40).splitlines() if process else []

    def start(self) -> None:
        if self._process is not None:
            return
        self._crash_times.clear()
        self._launch()

    def stop(self) -> None:
        """Ask the node to finish its step, checkpoint and exit; force it after ``stop_timeout_s``."""
        self._restart_timer.stop()
        self._stop_requested = True
        if self._process is None:
            self._set_state("stopped")
            return
        self._set_state("stopping", "finishing the current step and saving a checkpoint")
        self._process.request_stop(self.stop_timeout_s)

    def hold(self, reason: str, on: bool = True) -> None:
        """Pause for a reason ("user", "battery", "user_active"); training resumes when no reason is left."""
        before = bool(self._holds)
        (self._holds.add if on else self._holds.discard)(reason)
        if bool(self._holds) != before and self._process is not None:
            self._process.send("pause" if self._holds else "resume")
            if self._holds and self.state in ("training", "waiting_for_peers", "starting"):
                self._set_state(self.state, "pausing after this round")

    def pause(self) -> None:
        self.hold("user", True)

    def request_checkpoint(self) -> bool:
        """Ask the running node to save a checkpoint after its current round; False when no node can be asked."""
        return self._process is not None and self._process.send("checkpoint")

    def resume(self) -> None:
        self.hold("user", False)

    def wait_stopped(self, timeout_s: float) -> bool:
        """Blocking wait for the process to end (used when the app quits, after the window has closed)."""
        process = self._process
        return process is None or process.wait(timeout_s) is not None

    def feed(self, line: str | Event) -> None:
        """Handle one line of a node's event stream as if the running node had written it (replays of recorded
        runs, tests, screenshots): it goes through the same parser, then the same reactions, on this thread."""
        event = self._replay.parse(line if isinstance(line, str) else line.to_json())
        if event is not None:
            self._on_event(event)

    def kill(self) -> None:
        if self._process is not None:
            self._process.kill()

    # -- process -------------------------------------------------------------------------------------------

    def _launch(self) -> None:
        self._stop_requested = False
        self.last_error = None
        self._set_state("starting")
        process = NodeProcess(
            self._node_args(self._node_config_path()), argv=self._argv, env=dict(self.environment),
            on_event=self._eventArrived.emit, name="node",
        )
        process.on_exit = lambda code: self._exited.emit(code, process)
        try:
            process.start()
        except OSError as exc:
            self._set_state("failed", f"could not start the node: {exc}")
            self.crashed.emit(f"could not start the node ({exc})")
            return
        self._process = process
        if self._holds:
            process.send("pause")

    def _node_config_path(self) -> Path:
        """On Windows the node runs in WSL2 and reads Linux paths: it gets a translated copy of the config."""
        if sys.platform != "win32":
            return self.config_path
        path = self.config_path.with_suffix(".wsl.toml")
        wsl_config(NodeConfig.load(self.config_path)).save(path)
        return path

    # -- reactions (GUI thread) ----------------------------------------------------------------------------

    @Slot(object)
    def _on_event(self, event: Event) -> None:
        if isinstance(event, StateChanged):
            detail = event.detail
            if self._holds and event.state in ("training", "waiting_for_peers"):
                detail = "pausing after this round"
            # Once a stop is requested the state stays "stopping" until the process has really exited (the node
            # still shuts its swarm down after saying "stopped").
            if not self._stop_requested:
                self._set_state(event.state, detail)
        elif isinstance(event, ErrorReported):
            self.last_error = event
        self.event.emit(event)

    @Slot(int, object)
    def _on_exit(self, code: int, process: NodeProcess) -> None:
        if process is not self._process:
            return
        self._process, self._last_process = None, process
        self.last_exit_code = code
        if self._stop_requested:
            self._set_state("stopped")
            return
        if code == 0:
            self._set_state("finished", "the configured number of rounds is done")
            return
        reason = process.exit_reason()
        why = reason.description if reason else describe_exit(code)
        if self.last_error is not None:
            why += f": {self.last_error.message}" + (f" ({self.last_error.hint})" if self.last_error.hint else "")
        tail = process.output_tail(12)
        report = why + (f"\n\nLast lines from the node:\n{tail}" if tail else "")
        if code == USER_ERROR_EXIT:
            self._set_state("failed", why)
            self.crashed.emit(report)
            return
        now = time.monotonic()
        self._crash_times = [t for t in self._crash_times if now - t < self.crash_window_s] + [now]
        self.crashed.emit(report)
        if len(self._crash_times) >= self.crash_limit:
            minutes = self.crash_window_s / 60
            message = (f"The node crashed {len(self._crash_times)} times within {minutes:.0f} minutes, so it is "
                       f"not restarted again. {report}")
            self._set_state("crashed", f"crashed {len(self._crash_times)} times; not restarting")
            self.gaveUp.emit(message)
            return
        delay = self.backoff_s[min(len(self._crash_times) - 1, len(self.backoff_s) - 1)]
        self._set_state("restarting", f"{why}; restarting in {delay:g} s")
        self._restart_timer.start(int(delay * 1000))

    def _set_state(self, state: SupervisorState, detail: str = "") -> None:
        self.state, self.detail = state, detail
        self.stateChanged.emit(state, detail)
