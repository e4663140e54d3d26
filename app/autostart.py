"""Start at login (opt-in): an XDG autostart entry, a macOS LaunchAgent, or the Windows Run key."""

from __future__ import annotations

import os
import plistlib
import shlex
import sys
from pathlib import Path

from node.launch import is_frozen

ENTRY_NAME = "rl-swarm-desktop"
LABEL = "org.rlswarm.desktop"


def launch_command() -> list[str]:
    """How the login session starts the app: minimized to the tray."""
    base = [sys.executable] if is_frozen() else [sys.executable, "-m", "app"]
    return [*base, "--minimized"]


def _xdg_path() -> Path:
    config = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return config / "autostart" / f"{ENTRY_NAME}.desktop"


def _launch_agent_path() -> Path:
    return Path.home() / "Library" / "LaunchAgents" / f"{LABEL}.plist"


def is_enabled() -> bool:
    if sys.platform == "win32":
        import winreg

        try:
            with winreg.OpenKey(winreg.HKEY_CURRENT_USER, r"Software\Microsoft\Windows\CurrentVersion\Run") as key:
                winreg.QueryValueEx(key, ENTRY_NAME)
            return True
        except OSError:
            return False
    return (_launch_agent_path() if sys.platform == "darwin" else _xdg_path()).exists()


def set_enabled(enabled: bool) -> None:
    command = launch_command()
    if sys.platform == "win32":
        import subprocess
        import winreg

        with winreg.OpenKey(winreg.HKEY_CURRENT_USER, r"Software\Microsoft\Windows\CurrentVersion\Run", 0,
                            winreg.KEY_SET_VALUE) as key:
            if enabled:
                winreg.SetValueEx(key, ENTRY_NAME, 0, winreg.REG_SZ, subprocess.list2cmdline(command))
            else:
                try:
                    winreg.DeleteValue(key, ENTRY_NAME)
                except FileNotFoundError:
                    pass
        return
    path = _launch_agent_path() if sys.platform == "darwin" else _xdg_path()
    if not enabled:
        path.unlink(missing_ok=True)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    if sys.platform == "darwin":
        path.write_bytes(plistlib.dumps({"Label": LABEL, "ProgramArguments": command, "RunAtLoad": True}))
    else:
        path.write_text(
            "[Desktop Entry]\nType=Application\nName=RL Swarm\nComment=Train with the swarm in the background\n"
            f"Exec={shlex.join(command)}\nIcon=rl-swarm\nX-GNOME-Autostart-enabled=true\nTerminal=false\n",
            encoding="utf-8",
        )
