"""Addresses of swarm members this node met and saw work, kept per data folder and swarm: a node whose invite's
peers are gone rejoins through them.

Only addresses that were seen to work are kept (a member's own reachable addresses, or a peer we dialed back), at
most :data:`MAX_PEERS` peers, most recent last. The file is plain JSON, validated on read: a damaged or foreign
file is ignored, never trusted.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path

log = logging.getLogger(__name__)

MAX_PEERS = 16
MAX_ADDRESSES = 4  # per peer
_FILE = "known_peers.json"
_ADDRESS = re.compile(r"/(ip4|ip6|dns4|dns6|dns)/[^\s]{1,300}/p2p/[1-9A-HJ-NP-Za-km-z]{40,60}")


def _path(data_dir: Path, swarm_name: str) -> Path:
    return Path(data_dir) / "swarms" / swarm_name / _FILE


def load(data_dir: Path, swarm_name: str) -> list[str]:
    """The remembered addresses, most recently met peers first; [] if none or the file is unreadable."""
    try:
        data = json.loads(_path(data_dir, swarm_name).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return []
    peers = data.get("peers") if isinstance(data, dict) and data.get("version") == 1 else None
    if not isinstance(peers, dict):
        return []
    addresses = []
    for peer, addrs in list(peers.items())[-MAX_PEERS:][::-1]:
        if not isinstance(addrs, list):
            continue
        addresses += [a for a in addrs[:MAX_ADDRESSES]
                      if isinstance(a, str) and _ADDRESS.fullmatch(a) and a.endswith(f"/p2p/{peer}")]
    return addresses


def save(data_dir: Path, swarm_name: str, contacts: dict[str, list[str]], *, own_peer_id: str) -> None:
    """Merge ``contacts`` (peer -> addresses, most recent last) into the file, keeping the newest peers."""
    path = _path(data_dir, swarm_name)
    try:
        old = json.loads(path.read_text(encoding="utf-8")).get("peers", {})
    except (OSError, ValueError, AttributeError):
        old = {}
    merged = {p: a for p, a in old.items() if isinstance(a, list) and p not in contacts}
    for peer, addrs in contacts.items():
        good = [a for a in addrs if _ADDRESS.fullmatch(a) and a.endswith(f"/p2p/{peer}")][:MAX_ADDRESSES]
        if good and peer != own_peer_id:
            merged[peer] = good
    merged = dict(list(merged.items())[-MAX_PEERS:])
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"version": 1, "peers": merged}), encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        log.warning("could not remember the swarm's peers in %s", path, exc_info=True)
