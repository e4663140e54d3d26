"""Saved swarm networks: presets shipped in resources/ plus the ones the user saved from an invite."""

from __future__ import annotations

import tomllib
from pathlib import Path

import tomli_w
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from app.paths import resource_path
from node.config import NAME_PATTERN
from node.errors import NodeError


class Network(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=80)
    description: str = ""
    swarm_name: str = Field(pattern=NAME_PATTERN)
    host: str = "0.0.0.0"
    initial_peers: list[str] = Field(default_factory=list)


def _read(path: Path) -> list[Network]:
    if not path.exists():
        return []
    try:
        return [Network.model_validate(entry) for entry in tomllib.loads(path.read_text("utf-8")).get("network", [])]
    except (tomllib.TOMLDecodeError, ValidationError) as exc:
        raise NodeError(f"The network list {path} is damaged: {exc}",
                        hint="fix or delete that file; it only holds saved invites", code="bad_networks") from None


def load_networks(user_file: Path) -> list[Network]:
    return _read(resource_path("networks.toml")) + _read(user_file)


def save_network(user_file: Path, network: Network) -> None:
    saved = [n for n in _read(user_file) if n.name != network.name] + [network]
    user_file.parent.mkdir(parents=True, exist_ok=True)
    user_file.write_text(tomli_w.dumps({"network": [n.model_dump() for n in saved]}), encoding="utf-8")
