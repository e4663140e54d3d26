"""Seconds since the user last touched keyboard or mouse, system-wide; None where the OS does not tell us.

Used by "pause while the user is active" (volunteer-computing style: train only while the computer is idle).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import re
import subprocess
import sys


def idle_seconds() -> float | None:
    if sys.platform == "win32":
        return _windows()
    if sys.platform == "darwin":
        return _macos()
    return _x11()


def _windows() -> float | None:
    class LastInputInfo(ctypes.Structure):
        _fields_ = [("cbSize", ctypes.c_uint), ("dwTime", ctypes.c_uint)]

    info = LastInputInfo(ctypes.sizeof(LastInputInfo), 0)
    if not ctypes.windll.user32.GetLastInputInfo(ctypes.byref(info)):  # type: ignore[attr-defined]
        return None
    return (ctypes.windll.kernel32.GetTickCount() - info.dwTime) / 1000.0  # type: ignore[attr-defined]


def _macos() -> float | None:
    try:
        out = subprocess.run(["ioreg", "-c", "IOHIDSystem"], capture_output=True, text=True, timeout=5).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r'"HIDIdleTime"\s*=\s*(\d+)', out)
    return int(match.group(1)) / 1e9 if match else None


class _XScreenSaverInfo(ctypes.Structure):
    _fields_ = [("window", ctypes.c_ulong), ("state", ctypes.c_int), ("kind", ctypes.c_int),
                ("til_or_since", ctypes.c_ulong), ("idle", ctypes.c_ulong), ("eventMask", ctypes.c_ulong)]


def _x11() -> float | None:
    """X11 through libXss; Wayland compositors expose no idle time to ordinary clients, so None there."""
    if not os.environ.get("DISPLAY"):
        return None
    xlib_name, xss_name = ctypes.util.find_library("X11"), ctypes.util.find_library("Xss")
    if not xlib_name or not xss_name:
        return None
    xlib, xss = ctypes.cdll.LoadLibrary(xlib_name), ctypes.cdll.LoadLibrary(xss_name)
    xlib.XOpenDisplay.restype = ctypes.c_void_p
    xlib.XDefaultRootWindow.argtypes = [ctypes.c_void_p]
    xlib.XDefaultRootWindow.restype = ctypes.c_ulong
    xlib.XCloseDisplay.argtypes = [ctypes.c_void_p]
    xss.XScreenSaverAllocInfo.restype = ctypes.POINTER(_XScreenSaverInfo)
    xss.XScreenSaverQueryInfo.argtypes = [ctypes.c_void_p, ctypes.c_ulong, ctypes.POINTER(_XScreenSaverInfo)]
    display = xlib.XOpenDisplay(None)
    if not display:
        return None
    try:
        info = xss.XScreenSaverAllocInfo()
        if not xss.XScreenSaverQueryInfo(display, xlib.XDefaultRootWindow(display), info):
            return None
        idle_ms = info.contents.idle
        xlib.XFree(info)
        return idle_ms / 1000.0
    finally:
        xlib.XCloseDisplay(display)
