"""Invites: how a swarm member tells others where to join, as one line that survives copy and paste.

``rl-swarm:join?swarm=<name>&game=<game>&peer=<multiaddr>&peer=...`` carries the swarm name and the game with the
addresses, because a node that joins under another swarm name would share and gather under different keys and
never see anyone, and one that plays another game would publish what nobody reads. An invite without a game comes
from a version that only played SAPO. A swarm whose clock is not the default one (:mod:`node.clock`) adds
``&epoch=<unix seconds>&round_s=<seconds>``: a joiner on another clock would publish and read other rounds' keys; an
invite without them (older versions, default swarms) means the defaults. A private swarm's invite also carries its admission secret (``&secret=...``,
see :mod:`node.swarm.admission`): whoever has the invite may take part, so it is shared like a password. Bare multiaddrs
(one per line or separated by spaces) are accepted as well.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlencode, urlsplit

import psutil

from node.clock import DEFAULT_EPOCH, DEFAULT_ROUND_SECONDS, SwarmClock
from node.config import GAMES, NAME_PATTERN
from node.errors import NodeError
from node.swarm.admission import check_secret

PREFIX = "rl-swarm:join?"
_MULTIADDR = re.compile(
    r"^/(ip4|ip6|dns|dns4|dns6)/[^/\s]+/(tcp|udp)/\d{1,5}(/quic(-v1)?)?/p2p/[1-9A-HJ-NP-Za-km-z]{40,60}$"
)
_SWARM = re.compile(NAME_PATTERN)


@dataclass(frozen=True)
class Invite:
    swarm_name: str | None  # None for bare addresses: the joiner's own swarm name is used
    peers: tuple[str, ...]
    game: str | None = None  # None for bare addresses: the joiner's own game setting is used
    admission_secret: str | None = field(default=None, repr=False)  # a private swarm's; never in a log line
    clock: SwarmClock | None = None  # None for bare addresses: the joiner's own clock settings are used


def format_invite(
    swarm_name: str, addresses: list[str], game: str = "sapo", admission_secret: str | None = None,
    swarm_epoch: float = DEFAULT_EPOCH, round_seconds: float = DEFAULT_ROUND_SECONDS,
) -> str:
    secret = [("secret", admission_secret)] if admission_secret else []
    timing = [("epoch", f"{swarm_epoch:.17g}"), ("round_s", f"{round_seconds:.17g}")] \
        if (swarm_epoch, round_seconds) != (DEFAULT_EPOCH, DEFAULT_ROUND_SECONDS) else []
    return PREFIX + urlencode(
        [("swarm", swarm_name), ("game", game), *secret, *timing, *(("peer", a) for a in addresses)], safe="/"
    )


def parse_invite(text: str) -> Invite:
    text = text.strip()
    if not text:
        raise NodeError("The invite is empty.", hint="paste the invite a swarm member copied for you", code="bad_invite")
    swarm_name = game = secret = clock = None
    if text.startswith(PREFIX):
        query = parse_qs(urlsplit(text).query)
        swarm_name = (query.get("swarm") or [None])[0]
        game = (query.get("game") or ["sapo"])[0]
        secret = (query.get("secret") or [None])[0]
        peers = query.get("peer", [])
        if swarm_name is not None and not _SWARM.match(swarm_name):
            raise NodeError(f"The invite names an invalid swarm {swarm_name!r}.",
                            hint="ask for a fresh invite", code="bad_invite")
        if game not in GAMES:
            raise NodeError(f"The invite is for a game this version does not play ({game[:40]!r}).",
                            hint="update RL Swarm, or ask for an invite to a swarm playing " + " or ".join(GAMES),
                            code="bad_invite")
        clock = _clock(query)
    else:
        peers = text.split()
    bad = [p for p in peers if not _MULTIADDR.match(p)]
    if bad or not peers:
        shown = bad[0] if bad else text[:80] if secret is None else "it names no address"  # never echo a secret
        raise NodeError(
            f"Not a valid invite: {shown!r}.",
            hint="an invite starts with 'rl-swarm:join?' or is an address like /ip4/1.2.3.4/tcp/31337/p2p/Qm...",
            code="bad_invite",
        )
    if secret is not None:
        check_secret(secret)
    return Invite(swarm_name, tuple(dict.fromkeys(peers)), game, secret, clock)


def _clock(query: dict[str, list[str]]) -> SwarmClock:
    """The swarm clock an invite names; the defaults for what it leaves out."""
    default = SwarmClock()
    try:
        epoch = float((query.get("epoch") or [default.epoch])[0])
        round_s = float((query.get("round_s") or [default.round_seconds])[0])
        if not (0 <= epoch <= 4e9 and 1 <= round_s <= 3600):
            raise ValueError
        return SwarmClock(epoch, round_s)
    except ValueError:
        raise NodeError("The invite names an invalid swarm clock (epoch or round length).",
                        hint="ask for a fresh invite", code="bad_invite") from None


def local_addresses(peer_id: str, port: int) -> list[str]:
    """Addresses others on this computer and its networks can reach us at (LAN first, loopback last)."""
    lan, loopback = [], []
    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            try:
                ip = ipaddress.ip_address(address.address.split("%")[0])
            except ValueError:
                continue
            if ip.version != 4 or ip.is_link_local:
                continue
            (loopback if ip.is_loopback else lan).append(f"/ip4/{ip}/tcp/{port}/p2p/{peer_id}")
    return lan + loopback
