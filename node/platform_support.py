"""Can a node run on this computer, and how: natively (Linux, macOS) or inside WSL2 (Windows).

hivemind's p2p daemon (``p2pd``) has no native Windows build, and hivemind itself only installs on Linux and
macOS. On Windows the desktop app therefore runs the Linux bundle's node inside WSL2, the way other volunteer
computing clients run their Linux workers there: the Windows installer ships the Linux tarball, the app unpacks it
once into the WSL distribution (:func:`install_wsl_node`) and starts every node as
``wsl.exe --cd ~ --exec <bundle>/rl-swarm node run ...`` (:func:`wsl_node_command`). Only stdin, stdout and stderr
cross ``wsl.exe``, so there the events come on stdout (``--events-jsonl``, the process client's marked fallback
for its dedicated ``--events-fd`` pipe) and the controls on stdin (``--control-stdin``).

:func:`check_platform` tells the app, without importing Qt or torch, whether a node can start and, when it
cannot, what the user has to do; the GUI shows its ``message`` and ``hint``.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path, PureWindowsPath
from typing import Literal

from node.config import NodeConfig
from node.errors import NodeError

DISTRIBUTION = "rl-swarm-desktop"
# Inside WSL, relative to the Linux user's home: where the Linux bundle is unpacked, and its executable.
WSL_INSTALL_DIR = ".local/lib"
WSL_BUNDLE = "rl-swarm-desktop"
WSL_EXECUTABLE = f"{WSL_INSTALL_DIR}/{WSL_BUNDLE}/rl-swarm"
# Next to RL Swarm.exe, where the Windows installer puts the Linux tarball.
WSL_TARBALL = Path("wsl") / "rl-swarm-desktop-linux-x86_64.tar.gz"
WSL_TIMEOUT_S = 30
# Overrides: the WSL distribution to use (default: WSL's default one), and the node command inside it (e.g. a
# developer's ``/home/me/rl-swarm/.venv/bin/rl-swarm-node``).
DISTRO_ENV = "RL_SWARM_WSL_DISTRO"
WSL_NODE_ENV = "RL_SWARM_WSL_NODE"

Code = Literal[
    "ok", "p2pd_missing", "unsupported_os", "wsl_missing", "wsl_no_distro", "wsl_version_1", "wsl_node_missing"
]
Runner = Callable[[Sequence[str]], subprocess.CompletedProcess]


@dataclass(frozen=True)
class PlatformStatus:
    ok: bool
    message: str
    hint: str = ""
    code: Code = "ok"
    node_runs_in: Literal["native", "wsl"] = "native"


@dataclass(frozen=True)
class WslDistro:
    name: str
    state: str
    version: int
    default: bool


def check_platform() -> PlatformStatus:
    if sys.platform == "win32":
        return check_windows(shutil.which("wsl.exe"), _run)
    if sys.platform in ("linux", "darwin"):
        return check_p2pd(p2pd_path())
    return PlatformStatus(
        False, f"RL Swarm does not run on {sys.platform}", hint="use Linux, macOS or Windows 10/11", code="unsupported_os"
    )


# ---------------------------------------------------------------------------------------------- Linux, macOS
def p2pd_path() -> Path:
    """Where hivemind starts its daemon from: a file inside the hivemind package, in a frozen bundle too.

    Found without importing hivemind (which imports torch: seconds the app's start-up check cannot spare).
    """
    spec = importlib.util.find_spec("hivemind")
    if spec is None or not spec.submodule_search_locations:
        return Path("hivemind") / "hivemind_cli" / "p2pd"  # not installed: check_p2pd reports it missing
    return Path(list(spec.submodule_search_locations)[0]) / "hivemind_cli" / "p2pd"


def check_p2pd(path: Path) -> PlatformStatus:
    if not path.is_file():
        return PlatformStatus(
            False, f"the p2p daemon is missing ({path})",
            hint="reinstall RL Swarm (from source: pip install --force-reinstall hivemind==1.1.12)",
            code="p2pd_missing",
        )
    if not os.access(path, os.X_OK):
        return PlatformStatus(
            False, f"the p2p daemon at {path} is not executable", hint=f"run: chmod +x '{path}'", code="p2pd_missing"
        )
    return PlatformStatus(True, "ready")


# --------------------------------------------------------------------------------------------------- Windows
def check_windows(wsl_exe: str | None, run: Runner, *, distro: str | None = None) -> PlatformStatus:
    """Walk the user through what WSL2 still lacks, one step at a time."""
    wsl = dict(node_runs_in="wsl")
    if wsl_exe is None:
        return PlatformStatus(
            False, "RL Swarm runs its node in WSL2 (Windows Subsystem for Linux), which is not installed",
            hint="open PowerShell as administrator, run `wsl --install`, restart Windows, then start RL Swarm again",
            code="wsl_missing", **wsl,
        )
    listed = run([wsl_exe, "--list", "--verbose"])
    distros = parse_wsl_list(decode_wsl_output(listed.stdout)) if listed.returncode == 0 else []
    distro = distro or os.environ.get(DISTRO_ENV)
    chosen = next((d for d in distros if (d.name == distro if distro else d.default)), None)
    if chosen is None:
        missing = f"the WSL distribution {distro!r} is not installed" if distro else "WSL has no Linux distribution"
        return PlatformStatus(
            False, missing,
            hint="open PowerShell, run `wsl --install -d Ubuntu`, create the Linux user it asks for, then start "
            "RL Swarm again",
            code="wsl_no_distro", **wsl,
        )
    if chosen.version != 2:
        return PlatformStatus(
            False, f"the WSL distribution {chosen.name!r} runs under WSL 1; the node needs WSL 2",
            hint=f"open PowerShell and run `wsl --set-version {chosen.name} 2`",
            code="wsl_version_1", **wsl,
        )
    installed = run([*_wsl_prefix(wsl_exe, chosen.name), "--exec", "cat", f"{WSL_INSTALL_DIR}/{WSL_BUNDLE}/VERSION"])
    version = app_version()
    if installed.returncode != 0 or decode_wsl_output(installed.stdout).strip() != version:
        return PlatformStatus(
            False, f"the RL Swarm node {version} is not installed in WSL ({chosen.name}) yet",
            hint="RL Swarm installs it for you (about a minute, once per version)",
            code="wsl_node_missing", **wsl,
        )
    return PlatformStatus(True, f"ready (node in WSL 2, {chosen.name})", **wsl)


def app_version() -> str:
    """The bundle in WSL must match the app driving it (the events and controls are versioned together)."""
    return importlib.metadata.version(DISTRIBUTION)


def decode_wsl_output(raw: bytes | str) -> str:
    """``wsl.exe``'s own messages are UTF-16LE; what a Linux program prints through it is UTF-8."""
    if isinstance(raw, str):
        return raw
    if raw[1:2] == b"\x00" or raw.startswith(b"\xff\xfe"):
        return raw.decode("utf-16-le", errors="replace").lstrip("\ufeff")
    return raw.decode("utf-8", errors="replace")


_LIST_ROW = re.compile(r"^(?P<default>\*)?\s*(?P<name>\S+)\s+(?P<state>\S+)\s+(?P<version>\d+)\s*$")


def parse_wsl_list(text: str) -> list[WslDistro]:
    """Rows of ``wsl --list --verbose``: ``* Ubuntu    Running    2`` (the star marks the default)."""
    rows = []
    for line in text.replace("\x00", "").splitlines()[1:]:  # the first line is the header, in the user's language
        match = _LIST_ROW.match(line.strip())
        if match:
            rows.append(WslDistro(match["name"], match["state"], int(match["version"]), bool(match["default"])))
    return rows


def to_wsl_path(value: str) -> str:
    """``C:\\Users\\me\\x.toml`` -> ``/mnt/c/Users/me/x.toml``; anything that is not a drive path is unchanged."""
    path = PureWindowsPath(value)
    if not re.fullmatch(r"[A-Za-z]:", path.drive) or not path.root:
        return value
    return "/".join(["/mnt", path.drive[0].lower(), *path.parts[1:]])


def wsl_node_command(args: Sequence[str], *, wsl_exe: str = "wsl.exe", distro: str | None = None) -> list[str]:
    """The Windows argv that runs ``rl-swarm-node <args>`` inside WSL2; Windows file paths are translated."""
    inner = shlex.split(os.environ.get(WSL_NODE_ENV, "")) or [WSL_EXECUTABLE, "node"]
    return [*_wsl_prefix(wsl_exe, distro or os.environ.get(DISTRO_ENV)), "--exec", *inner,
            *(to_wsl_path(arg) for arg in args)]


def wsl_install_command(tarball: Path | str, *, wsl_exe: str = "wsl.exe", distro: str | None = None) -> list[str]:
    """Unpack the Linux bundle into ``~/.local/lib/rl-swarm-desktop`` inside WSL, replacing an older one."""
    script = (
        'set -e; mkdir -p "$HOME/.local/lib"; cd "$HOME/.local/lib"; '
        f'rm -rf {WSL_BUNDLE}.new; mkdir {WSL_BUNDLE}.new; tar -xzf "$1" -C {WSL_BUNDLE}.new --strip-components=1; '
        f'rm -rf {WSL_BUNDLE}; mv {WSL_BUNDLE}.new {WSL_BUNDLE}'
    )
    return [*_wsl_prefix(wsl_exe, distro or os.environ.get(DISTRO_ENV)), "--exec", "sh", "-c", script, "sh",
            to_wsl_path(str(tarball))]


def bundled_linux_tarball() -> Path:
    """The Linux tarball the Windows installer put next to the app's executable."""
    return Path(sys.executable).parent / WSL_TARBALL


def install_wsl_node(tarball: Path | None = None, *, distro: str | None = None, timeout_s: float = 900) -> None:
    """Install (or update) the node inside WSL; blocks for about a minute. Raises :class:`NodeError`."""
    tarball = tarball or bundled_linux_tarball()
    if not tarball.is_file():
        raise NodeError(f"the Linux node package is missing ({tarball})", hint="reinstall RL Swarm")
    wsl_exe = shutil.which("wsl.exe")
    if wsl_exe is None:
        raise NodeError("WSL is not installed", hint="open PowerShell as administrator and run `wsl --install`")
    try:
        done = subprocess.run(wsl_install_command(tarball, wsl_exe=wsl_exe, distro=distro), capture_output=True,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise NodeError("installing the node in WSL took too long", hint="try again; check free disk space") from None
    if done.returncode != 0:
        detail = decode_wsl_output(done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        raise NodeError(f"installing the node in WSL failed: {detail[0]}", hint="check free disk space in WSL")


def _wsl_prefix(wsl_exe: str, distro: str | None) -> list[str]:
    return [wsl_exe, *(["--distribution", distro] if distro else []), "--cd", "~"]


def _run(argv: Sequence[str]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(list(argv), capture_output=True, timeout=WSL_TIMEOUT_S)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return subprocess.CompletedProcess(list(argv), 1, b"", str(exc).encode())


def wsl_config(config: NodeConfig) -> NodeConfig:
    """The config as the node inside WSL must read it: the data folder and key file as /mnt/<drive>/... paths."""
    run = {"data_dir": to_wsl_path(str(config.run.data_dir))}
    if config.run.identity_file is not None:
        run["identity_file"] = to_wsl_path(str(config.run.identity_file))
    return config.update({"run": run})
