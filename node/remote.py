"""The command lines that reach a node on another computer over SSH, and what an SSH failure means in plain words.

The app runs the one node-process client (:class:`node.process_client.NodeProcess`) over ``ssh HOST
rl-swarm-node attach ...``: SSH carries the event stream (the remote command's stdout) and the control lines (its
stdin), so nothing new listens on any port. SSH is run as the user runs it (their ``~/.ssh/config``, keys and
agent), with host keys checked as ``ssh`` checks them, and ``BatchMode`` so that it never waits for a password or a
host-key question nobody can see: it fails instead, and :func:`explain_ssh_failure` says what to do. On the far side
only the node's own commands run (``attach``, ``start``, ``stop``, ``logs``), each argument quoted for its shell.

This module never imports Qt or torch.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Sequence

from node.config import RemoteNodeSettings
from node.errors import NodeError

SSH = "ssh"
# Keepalives: a dead network is noticed within ~30 s instead of TCP's many minutes.
SSH_OPTIONS = ("-T", "-o", "BatchMode=yes", "-o", "ServerAliveInterval=10", "-o", "ServerAliveCountMax=3",
               "-o", "ConnectTimeout=20")
# ssh exits with 255 when SSH itself failed (connection, authentication, host key); else the remote command's status
SSH_FAILED = 255
COMMAND_NOT_FOUND = 127


def ssh_argv(remote: RemoteNodeSettings, command: str, *args: str) -> list[str]:
    """``ssh ... HOST <node command> <command> --run NAME [--data-dir D] <args>``: one of the node's own commands."""
    options = list(SSH_OPTIONS)
    if remote.ssh_config is not None:
        options += ["-F", str(remote.ssh_config)]
    if remote.port is not None:
        options += ["-p", str(remote.port)]
    node_args = [command, "--run", remote.run_name]
    if remote.data_dir:
        node_args += ["--data-dir", remote.data_dir]
    words = [*map(_shell_word, shlex.split(remote.node_command)), *map(shlex.quote, [*node_args, *args])]
    return [SSH, *options, "--", remote.host, " ".join(words)]


def _shell_word(word: str) -> str:
    """A word of the node command, quoted, except that a leading ``~/`` still means the remote user's home."""
    if word.startswith("~/"):
        return "~/" + shlex.quote(word[2:])
    return shlex.quote(word)


def explain_ssh_failure(remote: RemoteNodeSettings, code: int, output: str) -> NodeError:
    """What a failed ``ssh`` run means, from its exit status and the last lines it wrote, with what to do."""
    where = f"{remote.host}" + (f" port {remote.port}" if remote.port else "")
    text = output.lower()
    if "host key verification failed" in text or "remote host identification has changed" in text:
        return NodeError(
            f"the host key of {where} is not known or has changed, so the app does not connect",
            hint=f"run `ssh {remote.host}` once in a terminal, check the key's fingerprint with the server's owner "
                 "and accept it; a changed key can mean someone is in the middle",
            code="ssh_host_key")
    if "permission denied" in text or "too many authentication failures" in text:
        return NodeError(
            f"{where} did not accept any of your SSH keys",
            hint="add your public key to ~/.ssh/authorized_keys there, or load the key into your SSH agent "
                 "(`ssh-add`); the app never asks for passwords",
            code="ssh_auth")
    if "could not resolve hostname" in text or "name or service not known" in text:
        return NodeError(f"the host name {remote.host} is not known",
                         hint="check the spelling, or add a Host entry for it to ~/.ssh/config", code="ssh_host")
    if "connection refused" in text or "timed out" in text or "no route to host" in text \
            or "network is unreachable" in text or "connection closed" in text or "broken pipe" in text \
            or "connection reset" in text or "timeout" in text:
        return NodeError(f"the connection to {where} failed or dropped",
                         hint="the computer may be off, asleep or offline; the app retries by itself, and the node "
                              "there keeps training meanwhile",
                         code="ssh_connection")
    if code == COMMAND_NOT_FOUND or "command not found" in text or "no such file or directory" in text:
        return NodeError(
            f"`{remote.node_command}` was not found on {remote.host}",
            hint="install RL Swarm there, or set this node's command to the full path of rl-swarm-node "
                 "(e.g. ~/rl-swarm/.venv/bin/rl-swarm-node)",
            code="ssh_no_node")
    lines = [line.strip() for line in output.strip().splitlines()]
    said = [line.removeprefix("error: ") for line in lines if line.startswith("error: ")]
    if said and code != SSH_FAILED:  # the node's own NodeError, as its CLI prints it: pass it on as it is
        hints = [line.removeprefix("how to fix: ") for line in lines if line.startswith("how to fix: ")]
        return NodeError(f"{remote.name}: {said[-1]}", hint=hints[-1] if hints else "", code="remote_command")
    last = lines[-1] if lines else f"exit status {code}"
    if code == SSH_FAILED:
        return NodeError(f"SSH to {where} failed: {last}", hint=f"try `ssh {remote.host}` in a terminal",
                         code="ssh_failed")
    return NodeError(f"the node's command on {remote.host} failed: {last}",
                     hint="the node's log there may say more (Logs)", code="remote_command")


def command_line(argv: Sequence[str]) -> str:
    """An argv as a user would type it (for logs and error details)."""
    return " ".join(map(shlex.quote, argv))


def run_command(remote: RemoteNodeSettings, command: str, *args: str, timeout_s: float = 240.0) -> str:
    """Run one of the node's commands there (``start``, ``stop``, ``logs``) and return what it printed; a failure
    raises the NodeError of :func:`explain_ssh_failure`. Blocking: the app calls it off the GUI thread."""
    argv = ssh_argv(remote, command, *args)
    try:
        result = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace",
                                timeout=timeout_s)
    except FileNotFoundError:
        raise NodeError("the ssh command is not installed on this computer",
                        hint="install OpenSSH's client (it comes with macOS, Windows 10+ and most Linux systems)",
                        code="ssh_missing") from None
    except subprocess.TimeoutExpired:
        raise NodeError(f"{remote.host} did not answer `{command}` within {timeout_s:.0f} s",
                        hint="the connection may be very slow; try again", code="ssh_connection") from None
    if result.returncode != 0:
        raise explain_ssh_failure(remote, result.returncode, result.stderr + result.stdout)
    return result.stdout
