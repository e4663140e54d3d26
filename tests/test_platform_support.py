"""Can a node run here, and the Windows route through WSL2 (command building and ``wsl.exe`` output parsing)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from node import launch, platform_support
from node.platform_support import (
    PlatformStatus, WslDistro, check_p2pd, check_platform, check_windows, decode_wsl_output, parse_wsl_list,
    to_wsl_path, wsl_install_command, wsl_node_command,
)

WSL_LIST = "  NAME            STATE           VERSION\n* Ubuntu-24.04    Running         2\n  Legacy          Stopped         1\n"


@pytest.mark.skipif(sys.platform not in ("linux", "darwin"), reason="the node runs natively on Linux and macOS")
def test_this_machine_can_run_a_node_natively():
    status = check_platform()
    assert status == PlatformStatus(True, "ready")
    assert os.access(platform_support.p2pd_path(), os.X_OK)


def test_p2pd_that_is_missing_or_not_executable_is_reported_with_a_fix(tmp_path):
    missing = check_p2pd(tmp_path / "p2pd")
    assert (missing.ok, missing.code) == (False, "p2pd_missing") and "reinstall" in missing.hint
    daemon = tmp_path / "p2pd"
    daemon.write_bytes(b"\x7fELF")
    daemon.chmod(0o644)
    not_executable = check_p2pd(daemon)
    assert not not_executable.ok and "chmod +x" in not_executable.hint


def test_wsl_list_output_in_utf16_is_parsed_with_its_default_and_versions():
    raw = WSL_LIST.encode("utf-16-le")
    assert parse_wsl_list(decode_wsl_output(raw)) == [
        WslDistro("Ubuntu-24.04", "Running", 2, True), WslDistro("Legacy", "Stopped", 1, False),
    ]
    assert decode_wsl_output(b"0.1.0\n") == "0.1.0\n"  # a Linux program's own output is UTF-8


@pytest.mark.parametrize(("value", "expected"), [
    ("C:\\Users\\Ada Lovelace\\node.toml", "/mnt/c/Users/Ada Lovelace/node.toml"),
    ("d:/data/rl-swarm", "/mnt/d/data/rl-swarm"),
    ("--rounds", "--rounds"),
    ("bundled", "bundled"),
    ("Qwen/Qwen2.5-0.5B-Instruct", "Qwen/Qwen2.5-0.5B-Instruct"),
    ("/ip4/1.2.3.4/tcp/31337/p2p/QmPeer", "/ip4/1.2.3.4/tcp/31337/p2p/QmPeer"),
])
def test_windows_paths_become_wsl_paths_and_nothing_else_changes(value, expected):
    assert to_wsl_path(value) == expected


def test_the_windows_node_command_runs_the_linux_bundle_inside_wsl(monkeypatch):
    monkeypatch.delenv(platform_support.DISTRO_ENV, raising=False)
    monkeypatch.delenv(platform_support.WSL_NODE_ENV, raising=False)
    command = wsl_node_command(["run", "--config", "C:\\cfg\\node.toml", "--events-jsonl"])
    assert command == ["wsl.exe", "--cd", "~", "--exec", ".local/lib/rl-swarm-desktop/rl-swarm", "node",
                       "run", "--config", "/mnt/c/cfg/node.toml", "--events-jsonl"]
    monkeypatch.setenv(platform_support.DISTRO_ENV, "Debian")
    monkeypatch.setenv(platform_support.WSL_NODE_ENV, "/home/me/rl-swarm/.venv/bin/rl-swarm-node")
    assert wsl_node_command(["hardware"])[:5] == ["wsl.exe", "--distribution", "Debian", "--cd", "~"]
    assert wsl_node_command(["hardware"])[-2:] == ["/home/me/rl-swarm/.venv/bin/rl-swarm-node", "hardware"]


def test_node_command_uses_wsl_on_windows_and_the_bundle_when_frozen(monkeypatch):
    monkeypatch.setattr(sys, "platform", "win32")
    assert launch.node_command("hardware")[0] == "wsl.exe"
    monkeypatch.setattr(sys, "platform", "linux")
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    assert launch.node_command("hardware") == [sys.executable, "node", "hardware"]


def test_the_wsl_install_script_unpacks_the_tarball_into_place(tmp_path):
    """Run the real script with sh, as WSL would, on a tarball shaped like the Linux one."""
    source = tmp_path / "src" / "rl-swarm-desktop"
    source.mkdir(parents=True)
    (source / "VERSION").write_text("0.1.0\n")
    tarball = tmp_path / "bundle.tar.gz"
    subprocess.run(["tar", "-C", source.parent, "-czf", tarball, "rl-swarm-desktop"], check=True)
    home = tmp_path / "home"
    (home / ".local/lib/rl-swarm-desktop").mkdir(parents=True)
    (home / ".local/lib/rl-swarm-desktop/old-file").write_text("from an older version")
    command = wsl_install_command(tarball)
    assert command[:5] == ["wsl.exe", "--cd", "~", "--exec", "sh"]
    subprocess.run(command[4:], env={"HOME": str(home), "PATH": os.environ["PATH"]}, check=True)
    installed = home / ".local/lib/rl-swarm-desktop"
    assert (installed / "VERSION").read_text() == "0.1.0\n" and not (installed / "old-file").exists()


class FakeWsl:
    """Answers like wsl.exe does (UTF-16 for its own listing, UTF-8 for a Linux program's output)."""

    def __init__(self, listing: str | None, installed_version: str | None) -> None:
        self.listing, self.installed_version = listing, installed_version

    def __call__(self, argv):
        if "--list" in argv:
            if self.listing is None:
                return subprocess.CompletedProcess(argv, 1, "no distributions".encode("utf-16-le"), b"")
            return subprocess.CompletedProcess(argv, 0, self.listing.encode("utf-16-le"), b"")
        if self.installed_version is None:
            return subprocess.CompletedProcess(argv, 1, b"", b"cat: No such file or directory")
        return subprocess.CompletedProcess(argv, 0, f"{self.installed_version}\n".encode(), b"")


def test_windows_check_walks_the_user_through_each_missing_piece(monkeypatch):
    monkeypatch.delenv(platform_support.DISTRO_ENV, raising=False)
    version = platform_support.app_version()
    steps = [
        (None, FakeWsl(None, None), "wsl_missing", "wsl --install"),
        ("wsl.exe", FakeWsl(None, None), "wsl_no_distro", "wsl --install -d Ubuntu"),
        ("wsl.exe", FakeWsl(WSL_LIST.replace("* Ubuntu-24.04", "  Ubuntu-24.04").replace("  Legacy", "* Legacy"),
                            None), "wsl_version_1", "wsl --set-version Legacy 2"),
        ("wsl.exe", FakeWsl(WSL_LIST, None), "wsl_node_missing", "installs it for you"),
        ("wsl.exe", FakeWsl(WSL_LIST, "0.0.1"), "wsl_node_missing", "installs it for you"),
    ]
    for wsl_exe, run, code, hint in steps:
        status = check_windows(wsl_exe, run)
        assert (status.ok, status.code, status.node_runs_in) == (False, code, "wsl"), status
        assert hint in status.hint
    ready = check_windows("wsl.exe", FakeWsl(WSL_LIST, version))
    assert ready.ok and "Ubuntu-24.04" in ready.message
    assert check_windows("wsl.exe", FakeWsl(WSL_LIST, version), distro="Debian").code == "wsl_no_distro"


def test_the_wsl_node_reads_the_config_with_linux_paths():
    from node.config import NodeConfig
    from node.platform_support import wsl_config

    config = NodeConfig.build({"run": {"data_dir": "C:\\Users\\me\\AppData\\Local\\rl-swarm",
                                       "identity_file": "D:\\keys\\swarm.key"}})
    translated = wsl_config(config)
    assert str(translated.run.data_dir) == "/mnt/c/Users/me/AppData/Local/rl-swarm"
    assert str(translated.run.identity_file) == "/mnt/d/keys/swarm.key"
    assert translated.training == config.training
