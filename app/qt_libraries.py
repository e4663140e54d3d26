"""Before Qt starts on Linux/X11: name the system libraries its xcb plugin needs and that are missing.

Without them Qt aborts with "Could not load the Qt platform plugin "xcb"", which says nothing about what to install.
Qt-free, so it can run before PySide6 is imported.
"""

from __future__ import annotations

import os
import sys
from ctypes.util import find_library

# library name (as ctypes finds it) -> Debian/Ubuntu package; the .deb installer depends on the same list.
XCB_LIBRARIES = {
    "xcb-cursor": "libxcb-cursor0", "xcb-icccm": "libxcb-icccm4", "xcb-image": "libxcb-image0",
    "xcb-keysyms": "libxcb-keysyms1", "xcb-render-util": "libxcb-render-util0", "xcb-shape": "libxcb-shape0",
    "xcb-randr": "libxcb-randr0", "xcb-xkb": "libxcb-xkb1", "xkbcommon-x11": "libxkbcommon-x11-0",
    "xkbcommon": "libxkbcommon0", "EGL": "libegl1", "fontconfig": "libfontconfig1",
}


def uses_xcb(environ: dict[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    if not sys.platform.startswith("linux"):
        return False
    platform = env.get("QT_QPA_PLATFORM", "")
    if platform:
        return platform.startswith("xcb")
    return bool(env.get("DISPLAY")) and not env.get("WAYLAND_DISPLAY")


def missing_packages(find=find_library) -> list[str]:
    return [package for library, package in XCB_LIBRARIES.items() if not find(library)]


def advice(missing: list[str]) -> str:
    return ("RL Swarm: Qt needs X11 libraries that are not installed: " + ", ".join(missing) + ".\n"
            "On Debian or Ubuntu install them with:\n  sudo apt-get install " + " ".join(missing) + "\n")


def warn_if_missing(find=find_library, stream=None) -> list[str]:
    """Print the apt line for what is missing (Qt's own abort follows); returns the missing packages."""
    if not uses_xcb():
        return []
    missing = missing_packages(find)
    if missing:
        (stream or sys.stderr).write(advice(missing))
    return missing
