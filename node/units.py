"""Sizes as people read them, shared by the CLI and the app."""

from __future__ import annotations

_UNITS = ("B", "KiB", "MiB", "GiB")


def format_bytes(num: float) -> str:
    """1536 -> '1.5 KiB'; whole bytes below 1 KiB; GiB is the largest unit."""
    index = 0
    while num >= 1024 and index < len(_UNITS) - 1:
        num /= 1024
        index += 1
    return f"{num:.0f} B" if index == 0 else f"{num:.1f} {_UNITS[index]}"
