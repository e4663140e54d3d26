"""The running node's control socket: what an attached client is sent, which commands it may give, who may connect,
and the SSH command lines and failure explanations of remote nodes (a real sshd on loopback, no node needed)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from node import control_socket
from node.config import NodeConfig, RemoteNodeSettings
from node.control_socket import ControlServer
from node.errors import NodeError
from node.events import NodeStarted, StateChanged, event_from_json
from node.remote import run_command, ssh_argv
from tests import sshd

ROOT = Path(__file__).resolve().parents[1]


def _started() -> NodeStarted:
    return NodeStarted(peer_id="12D3", peer_name="calm brave otter", swarm_name="s", invite=[], model="m",
                       device="cpu", hardware={}, run_dir="/r", resumed_from_round=None)


def _lines(sock: socket.socket, count: int, timeout_s: float = 10.0) -> list[str]:
    reader = sock.makefile("r", encoding="utf-8")
    sock.settimeout(timeout_s)
    return [reader.readline().strip() for _ in range(count)]


def _until(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.02)


@pytest.fixture
def world_readable_dir():
    """A folder other users may enter, so that only the socket's own mode and the peer check keep them out."""
    folder = Path(tempfile.mkdtemp(prefix="rls-ctl-"))
    os.chmod(folder, 0o755)
    yield folder
    subprocess.run(["rm", "-rf", str(folder)], check=False)


def test_an_attached_client_gets_where_the_node_stands_then_live_events_and_steers_it(world_readable_dir):
    run_dir = world_readable_dir / "runs" / "default"
    done: list[str] = []
    server = ControlServer(run_dir, {"pause": lambda: done.append("pause"), "resume": lambda: done.append("resume"),
                                     "stop": lambda: done.append("stop")}).start()
    try:
        server.publish(_started())
        server.publish(StateChanged(state="starting"))
        server.publish(StateChanged(state="training"))
        assert oct(os.stat(server.path).st_mode & 0o777) == "0o600"
        client = control_socket.connect(run_dir)
        hello, started, state = _lines(client, 3)
        control_socket.check_hello(hello)
        assert event_from_json(started).peer_name == "calm brave otter"
        assert event_from_json(state).state == "training", "only the latest state, not the whole past"
        _until(lambda: server.clients == 1)
        server.publish(StateChanged(state="paused", detail="by you"))
        assert event_from_json(_lines(client, 1)[0]).detail == "by you"

        client.sendall(b"pause\nrm -rf /\n" + b"x" * 5000 + b"\nRESUME\nstop\n")
        _until(lambda: len(done) == 3)
        assert done == ["pause", "resume", "stop"], "only the node's own commands are taken"

        with pytest.raises(NodeError, match="already running"):
            ControlServer(run_dir, {}).start()
        client.close()
        _until(lambda: server.clients == 0)
    finally:
        server.close()
    assert not server.path.exists()
    assert control_socket.connect(run_dir) is None


def test_a_killed_nodes_socket_is_replaced_and_a_slow_client_never_holds_the_node_up(world_readable_dir):
    run_dir = world_readable_dir / "run"
    run_dir.mkdir()
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(control_socket.socket_path(run_dir)))
    stale.close()  # left behind, as by a SIGKILL
    server = ControlServer(run_dir, {}).start()
    try:
        client = control_socket.connect(run_dir)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        _until(lambda: server.clients == 1)
        started = time.monotonic()
        for _ in range(3 * control_socket.CLIENT_QUEUE_EVENTS):
            server.publish(StateChanged(state="training", detail="x" * 200))  # the client never reads
        assert time.monotonic() - started < 10
        _until(lambda: server.clients == 0)
        _until(lambda: not any(t.name == "control-write" for t in threading.enumerate()))  # its writer ended too
        client.close()
    finally:
        server.close()


def test_other_users_cannot_connect(world_readable_dir):
    run_dir = world_readable_dir / "run"
    server = ControlServer(run_dir, {"stop": lambda: None}).start()
    probe = ("import socket,sys; s=socket.socket(socket.AF_UNIX)\n"
             "try:\n s.connect(sys.argv[1])\nexcept PermissionError: print('refused'); sys.exit()\n"
             "s.settimeout(5); print('closed' if s.recv(100) == b'' else 'served')")
    nobody = {"user": 65534} if os.getuid() == 0 else None
    if nobody is None:
        server.close()
        pytest.skip("switching to another user needs root")
    try:
        python = "/usr/bin/python3" if os.path.exists("/usr/bin/python3") else sys.executable
        run = lambda: subprocess.run([python, "-c", probe, str(server.path)], capture_output=True, text=True,  # noqa: E731
                                     timeout=30, **nobody).stdout.strip()
        assert run() == "refused", "the socket is owner-only"
        os.chmod(server.path, 0o666)  # even if its mode were widened, the peer's uid is checked
        assert run() == "closed"
    finally:
        server.close()


def test_a_run_folder_too_long_for_a_socket_address_gets_a_private_short_one(tmp_path):
    run_dir = tmp_path / ("x" * 60) / ("y" * 60)
    path = control_socket.socket_path(run_dir)
    assert len(str(path)) < 100 and path.parent.stat().st_mode & 0o777 == 0o700
    server = ControlServer(run_dir, {}).start()
    try:
        client = control_socket.connect(run_dir)
        control_socket.check_hello(_lines(client, 1)[0])
        client.close()
    finally:
        server.close()


def test_remote_settings_are_validated_and_quoted_for_the_remote_shell():
    remote = RemoteNodeSettings(name="box", host="me@gpu.example.org", port=2222, run_name="r1",
                                data_dir="/data/my runs; rm -rf ~", node_command="'~/rl swarm/bin/rl-swarm-node'")
    argv = ssh_argv(remote, "attach")
    assert argv[:2] == ["ssh", "-T"] and "BatchMode=yes" in argv and "-p" in argv
    assert not any("StrictHostKeyChecking" in word for word in argv)
    assert argv[-3:-1] == ["--", "me@gpu.example.org"]
    assert argv[-1] == "~/'rl swarm/bin/rl-swarm-node' attach --run r1 --data-dir '/data/my runs; rm -rf ~'"
    for bad in ({"host": "-oProxyCommand=evil"}, {"name": "a b"}, {"data_dir": "a\nb"}):
        with pytest.raises(NodeError):
            NodeConfig.build({"fleet": {"remotes": [{"name": "box", "host": "h", **bad}]}})
    with pytest.raises(NodeError, match="unique"):
        NodeConfig.build({"fleet": {"remotes": [{"name": "a", "host": "h"}, {"name": "a", "host": "k"}]}})


@pytest.fixture
def ssh_server(tmp_path):
    reason = sshd.unavailable_reason()
    if reason:
        pytest.skip(reason)
    server = sshd.LoopbackSshd(tmp_path / "ssh").start()
    yield server
    server.stop()


def node_over_ssh(server: sshd.LoopbackSshd, data_dir: Path, **fields) -> RemoteNodeSettings:
    """The node of this checkout, run through the test's sshd as a remote computer would run it."""
    command = (f"env PYTHONPATH={ROOT} HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 OMP_NUM_THREADS=1 "
               f"{sys.executable} -m node")
    return RemoteNodeSettings(name="box", host=sshd.HOST_ALIAS, data_dir=str(data_dir), node_command=command,
                              ssh_config=server.ssh_config, **fields)


def test_ssh_failures_say_what_to_do(ssh_server, tmp_path):
    remote = node_over_ssh(ssh_server, tmp_path / "data")
    with pytest.raises(NodeError, match="no run named 'default'") as missing:
        run_command(remote, "logs", timeout_s=120)
    assert missing.value.code == "remote_command"

    with pytest.raises(NodeError) as not_installed:
        run_command(remote.model_copy(update={"node_command": "/nowhere/rl-swarm-node"}), "logs")
    assert not_installed.value.code == "ssh_no_node" and "full path" in not_installed.value.hint

    ssh_server.known_hosts.write_text("")  # a host key nobody accepted: ssh refuses, and never asks
    with pytest.raises(NodeError) as unknown:
        run_command(remote, "logs")
    assert unknown.value.code == "ssh_host_key" and "fingerprint" in unknown.value.hint

    ssh_server.stop()
    with pytest.raises(NodeError) as down:
        run_command(remote, "logs")
    assert down.value.code == "ssh_connection"


def test_a_key_restricted_to_the_nodes_commands_runs_them_and_nothing_else(ssh_server, tmp_path):
    remote = node_over_ssh(ssh_server, tmp_path / "data")
    python = f"env PYTHONPATH={ROOT} {sys.executable} -m node"
    ssh_server.only_allow(f"{python} ssh-only")
    with pytest.raises(NodeError, match="no run named 'default'"):  # the node's own `logs` ran, and answered
        run_command(remote, "logs", timeout_s=120)
    marker = tmp_path / "pwned"
    argv = [*ssh_argv(remote, "logs")[:-1], f"touch {marker}"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert result.returncode == 2 and "may only run the node's remote commands" in result.stderr
    assert not marker.exists()


def test_nothing_new_listens_on_the_network(world_readable_dir):
    """The control socket is a Unix socket: no TCP or UDP port is opened for it."""
    import psutil

    before = {c.laddr for c in psutil.net_connections("inet") if c.pid == os.getpid()}
    server = ControlServer(world_readable_dir / "run", {}).start()
    try:
        threading.Event().wait(0.1)
        after = {c.laddr for c in psutil.net_connections("inet") if c.pid == os.getpid()}
        assert after == before
    finally:
        server.close()
