"""A running node's local control socket: how ``rl-swarm-node attach`` (and through it the app, over SSH) watches
and steers a node that is already running, without opening a network port.

The node listens on a Unix socket beside its run folder's files (``<run_dir>/control.sock``, or a short path in a
private temporary folder when the run folder's path is too long for a socket address). Only the user who runs the
node may connect: the socket is made owner-only (mode 0600) and, where the system says who is on the other end
(Linux ``SO_PEERCRED``), a connection from another user is closed at once.

Protocol (version :data:`PROTOCOL_VERSION`): the node first writes one hello line
(``{"protocol": "rl-swarm-control", "version": 1}``), then the events a newcomer needs to know where the node
stands (its last ``node_started``, ``state_changed``, ``reachability`` and ``round_progress``), then every event as
the node emits it, one JSON line each (:mod:`node.events`). The client may write command lines (``pause``,
``resume``, ``stop``); anything else, and lines longer than :data:`MAX_COMMAND_BYTES`, are ignored. A client that
falls :data:`CLIENT_QUEUE_EVENTS` events behind is disconnected rather than ever slowing the node down; at most
:data:`MAX_CLIENTS` are served at once. Closing a connection never stops the node.

This module never imports Qt or torch.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import queue
import socket
import struct
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

from node.errors import NodeError
from node.events import Event, NodeStarted, ReachabilityChanged, RoundProgress, StateChanged

log = logging.getLogger(__name__)

SOCKET_FILE = "control.sock"
PROTOCOL = "rl-swarm-control"
PROTOCOL_VERSION = 1
COMMANDS = ("pause", "resume", "stop")
MAX_CLIENTS = 8
MAX_COMMAND_BYTES = 64
CLIENT_QUEUE_EVENTS = 4096
# sun_path holds 104 bytes on macOS, 108 on Linux, the terminating NUL included
_MAX_SOCKET_PATH = 100
# Events a newly attached client is sent first, so it knows the node's name, state and round without waiting.
_SNAPSHOT_KINDS = (NodeStarted, StateChanged, ReachabilityChanged, RoundProgress)


def socket_path(run_dir: Path) -> Path:
    """Where the node of ``run_dir`` listens; the node and ``attach`` compute the same path."""
    path = Path(run_dir).resolve() / SOCKET_FILE
    if len(os.fsencode(str(path))) <= _MAX_SOCKET_PATH:
        return path
    digest = hashlib.sha256(os.fsencode(str(path))).hexdigest()[:24]
    return _private_dir() / f"{digest}.sock"


def _private_dir() -> Path:
    base = Path(os.environ.get("XDG_RUNTIME_DIR") or tempfile.gettempdir())
    folder = base / f"rl-swarm-{os.getuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    info = folder.lstat()
    if info.st_uid != os.getuid() or info.st_mode & 0o077 or folder.is_symlink():
        raise NodeError(f"{folder} is not a private folder of this user",
                        hint="remove it (it holds only control sockets of stopped nodes) and start the node again")
    return folder


def hello_line() -> str:
    return json.dumps({"protocol": PROTOCOL, "version": PROTOCOL_VERSION})


def check_hello(line: str) -> None:
    """Raises NodeError when the first line of a control socket is not a hello this version speaks."""
    try:
        hello = json.loads(line)
    except ValueError:
        hello = None
    if not isinstance(hello, dict) or hello.get("protocol") != PROTOCOL:
        raise NodeError("the control socket did not answer as an RL Swarm node does",
                        hint="another program uses the socket's path; stop it, then attach again")
    if hello.get("version") != PROTOCOL_VERSION:
        raise NodeError(f"the node speaks control protocol {hello.get('version')}, this version {PROTOCOL_VERSION}",
                        hint="install the same RL Swarm version where the node runs and here")


def peer_uid(conn: socket.socket) -> int | None:
    """The uid of the process on the other end of a Unix socket, where the system tells it (Linux)."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None
    creds = conn.getsockopt(socket.SOL_SOCKET, option, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


def connect(run_dir: Path, timeout_s: float = 5.0) -> socket.socket | None:
    """A connection to the running node of ``run_dir``, or None when no node listens there."""
    return _connect_path(socket_path(run_dir), timeout_s)


class ControlServer:
    """Serves a running node's events and takes its commands on the run's control socket.

    ``actions``: command -> callable (the node's pause, resume and stop). Subscribe :meth:`publish` to the node's
    event bus; it never blocks (each client has its own bounded queue and writer thread)."""

    def __init__(self, run_dir: Path, actions: dict[str, Callable[[], None]]) -> None:
        self.path = socket_path(run_dir)
        self.actions = actions
        self._snapshot: dict[type, Event] = {}
        self._clients: list[queue.Queue[str | None]] = []
        self._connections: dict[int, socket.socket] = {}  # id of a client's outbox -> its connection
        self._lock = threading.Lock()
        self._sock: socket.socket | None = None

    def start(self) -> ControlServer:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if self.path.exists() or self.path.is_symlink():
            live = _connect_path(self.path, 1.0)
            if live is not None:
                live.close()
                raise NodeError(f"another node is already running this run (it listens on {self.path})",
                                hint="stop it first (`rl-swarm-node stop --run NAME`), or give this one another "
                                     "--run-name")
            self.path.unlink(missing_ok=True)  # left behind by a node that was killed
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.bind(str(self.path))
        os.chmod(self.path, 0o600)  # peer credentials are checked too, where the system reports them
        sock.listen(MAX_CLIENTS)
        self._sock = sock
        threading.Thread(target=self._accept, name="control-accept", daemon=True).start()
        log.info("control socket %s", self.path)
        return self

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is None:
            return
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        sock.close()
        self.path.unlink(missing_ok=True)
        with self._lock:
            clients = list(self._clients)
        for client in clients:
            self._drop(client)

    def publish(self, event: Event) -> None:
        line = event.to_json()
        with self._lock:
            for kind in _SNAPSHOT_KINDS:
                if isinstance(event, kind):
                    self._snapshot[kind] = event
            if isinstance(event, StateChanged) and event.state == "stopped":
                self._snapshot.pop(RoundProgress, None)
            clients = list(self._clients)
        for client in clients:
            if not _offer(client, line):
                log.warning("an attached client fell %d events behind; disconnecting it", CLIENT_QUEUE_EVENTS)
                self._drop(client)

    @property
    def clients(self) -> int:
        with self._lock:
            return len(self._clients)

    # -- connections ---------------------------------------------------------------------------------------

    def _accept(self) -> None:
        while self._sock is not None:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            uid = peer_uid(conn)
            if uid is not None and uid != os.getuid():
                log.warning("refused a control connection from uid %d", uid)
                conn.close()
                continue
            with self._lock:
                if len(self._clients) >= MAX_CLIENTS:
                    full = True
                else:
                    full = False
                    outbox: queue.Queue[str | None] = queue.Queue(CLIENT_QUEUE_EVENTS)
                    outbox.put(hello_line())
                    for kind in _SNAPSHOT_KINDS:
                        if kind in self._snapshot:
                            outbox.put(self._snapshot[kind].to_json())
                    self._clients.append(outbox)
                    self._connections[id(outbox)] = conn
            if full:
                log.warning("refused a control connection: %d clients attached already", MAX_CLIENTS)
                conn.close()
                continue
            threading.Thread(target=self._write, args=(conn, outbox), name="control-write", daemon=True).start()
            threading.Thread(target=self._read, args=(conn, outbox), name="control-read", daemon=True).start()

    def _write(self, conn: socket.socket, outbox: queue.Queue[str | None]) -> None:
        try:
            while (line := outbox.get()) is not None:
                conn.sendall((line + "\n").encode())
        except OSError:
            pass
        finally:
            self._drop(outbox)
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
            conn.close()

    def _read(self, conn: socket.socket, outbox: queue.Queue[str | None]) -> None:
        pending = b""
        try:
            while chunk := conn.recv(1024):
                pending += chunk
                while b"\n" in pending:
                    line, pending = pending.split(b"\n", 1)
                    self._command(line)
                if len(pending) > MAX_COMMAND_BYTES:
                    pending = b""  # not a command: drop it rather than buffer without bound
        except OSError:
            pass
        _offer(outbox, None)  # the client hung up: end its writer too

    def _command(self, line: bytes) -> None:
        command = line.strip().decode("ascii", errors="replace").lower()
        action = self.actions.get(command) if command in COMMANDS else None
        if action is None:
            log.debug("ignored control line %r", line[:MAX_COMMAND_BYTES])
            return
        log.info("control socket: %s", command)
        action()

    def _drop(self, outbox: queue.Queue[str | None]) -> None:
        with self._lock:
            if outbox in self._clients:
                self._clients.remove(outbox)
            conn = self._connections.pop(id(outbox), None)
        _offer(outbox, None)
        if conn is not None:  # a writer blocked on a client that stopped reading returns with an error
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)


def _offer(outbox: queue.Queue[str | None], line: str | None) -> bool:
    try:
        outbox.put_nowait(line)
        return True
    except queue.Full:
        if line is None:  # make room for the end marker: the writer stops at it
            with contextlib.suppress(queue.Empty):
                outbox.get_nowait()
            with contextlib.suppress(queue.Full):
                outbox.put_nowait(None)
        return False


def _connect_path(path: Path, timeout_s: float) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(timeout_s)
    try:
        sock.connect(str(path))
    except (FileNotFoundError, ConnectionRefusedError):
        sock.close()
        return None
    except OSError:
        sock.close()
        raise
    return sock
