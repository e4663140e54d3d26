"""Where the app finds its resources and keeps its configuration (also inside a frozen bundle)."""

from __future__ import annotations

import sys
from pathlib import Path

import platformdirs

from node.config import APP_NAME


def resource_path(*parts: str) -> Path:
    """A file under ``resources/``: next to the packages in a checkout, under ``sys._MEIPASS`` when frozen."""
    base = Path(getattr(sys, "_MEIPASS", Path(__file__).resolve().parent.parent))
    return base.joinpath("resources", *parts)


def default_config_path() -> Path:
    return platformdirs.user_config_path(APP_NAME, appauthor=False) / "config.toml"
