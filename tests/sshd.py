"""A real OpenSSH server on loopback for the remote-node tests: its own host key, a client key, a known_hosts file
and an ssh_config naming it, all in a test folder; skipped with the reason where sshd is not installed.

OpenSSH's own sshd rather than a Python server: it is what the users' servers run, so host-key checking,
``BatchMode``, session teardown on a dropped connection and the remote shell's quoting are the real ones.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import psutil

HOST_ALIAS = "fleet-test"


def sshd_binary() -> str | None:
    for candidate in (shutil.which("sshd"), "/usr/sbin/sshd"):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    return None


def unavailable_reason() -> str | None:
    if sshd_binary() is None or shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        return "OpenSSH (sshd, ssh, ssh-keygen) is not installed: apt-get install openssh-server openssh-client"
    if os.getuid() != 0:
        return "sshd's session setup needs root here (the test logs in as the user running it, as root)"
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class LoopbackSshd:
    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        os.chmod(folder, 0o700)
        self.port = _free_port()
        self.host_key = folder / "host_ed25519"
        self.client_key = folder / "client_ed25519"
        for key in (self.host_key, self.client_key):
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
        (folder / "authorized_keys").write_text(self.client_key.with_suffix(".pub").read_text())
        host_public = self.host_key.with_suffix(".pub").read_text().split()
        self.known_hosts = folder / "known_hosts"
        self.known_hosts.write_text(f"[127.0.0.1]:{self.port} {host_public[0]} {host_public[1]}\n")
        self.config = folder / "sshd_config"
        self.config.write_text(
            f"Port {self.port}\nListenAddress 127.0.0.1\nHostKey {self.host_key}\n"
            f"AuthorizedKeysFile {folder / 'authorized_keys'}\nPidFile {folder / 'sshd.pid'}\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\nUsePAM no\nStrictModes no\n"
            "PermitRootLogin prohibit-password\nLogLevel VERBOSE\n"
        )
        self.ssh_config = folder / "ssh_config"
        self.ssh_config.write_text(
            f"Host {HOST_ALIAS}\n  HostName 127.0.0.1\n  Port {self.port}\n  User root\n"
            f"  IdentityFile {self.client_key}\n  IdentitiesOnly yes\n  UserKnownHostsFile {self.known_hosts}\n"
        )
        self.process: subprocess.Popen | None = None
        Path("/run/sshd").mkdir(mode=0o755, exist_ok=True)  # its privilege-separation folder

    def only_allow(self, forced_command: str) -> None:
        """Let the client's key run nothing but ``forced_command`` (authorized_keys ``command=...,restrict``)."""
        key = self.client_key.with_suffix(".pub").read_text().strip()
        (self.folder / "authorized_keys").write_text(f'command="{forced_command}",restrict {key}\n')

    def start(self, timeout_s: float = 20.0) -> LoopbackSshd:
        self.process = subprocess.Popen([sshd_binary(), "-D", "-e", "-f", str(self.config)],
                                        stdout=subprocess.DEVNULL, stderr=open(self.folder / "sshd.log", "ab"))
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"sshd exited: {(self.folder / 'sshd.log').read_text()[-2000:]}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                time.sleep(0.1)
        raise RuntimeError("sshd did not listen in time")

    def stop(self) -> None:
        """The server and every session it serves go away, as when a computer drops off the network."""
        if self.process is None:
            return
        try:
            sessions = psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            sessions = []
        self.process.kill()
        self.process.wait(10)
        for session in sessions:
            try:
                if session.name().startswith("sshd"):
                    session.kill()
            except psutil.NoSuchProcess:  # it ended with its server
                pass
        self.process = None

    def log(self) -> str:
        return (self.folder / "sshd.log").read_text(errors="replace")
