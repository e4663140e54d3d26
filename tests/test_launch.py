"""node.launch.kill_tree: a node killed hard takes its p2p daemon and the daemon's control socket with it."""

from __future__ import annotations

import subprocess
import sys
import time

import psutil

from node.launch import kill_tree

# stands in for p2pd: listens on the unix socket its -listen= argument names, as hivemind starts it
DAEMON = """
import socket, sys, time
path = sys.argv[1].removeprefix("-listen=/unix")
server = socket.socket(socket.AF_UNIX)
server.bind(path)
server.listen()
time.sleep(120)
"""
# stands in for a node: starts the daemon as its child, then lives on
NODE = """
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]])
time.sleep(120)
"""


def test_killing_a_node_removes_its_daemons_control_socket(tmp_path):
    control = tmp_path / "hivemind-p2pd-test.sock"
    node = subprocess.Popen([sys.executable, "-c", NODE, DAEMON, f"-listen=/unix{control}"])
    try:
        deadline = time.monotonic() + 30
        while not control.exists():
            assert time.monotonic() < deadline, "the stand-in daemon never opened its socket"
            time.sleep(0.05)
        daemon = psutil.Process(node.pid).children()[0]
        kill_tree(node.pid)
        node.wait(10)
        daemon.wait(10)
        assert not control.exists()
    finally:
        node.kill()
        node.wait()

