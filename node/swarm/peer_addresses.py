"""Which network a peer connects from: identities are free, network addresses are not.

An attacker mints peer identities by the thousand on one machine, but they all reach us from one address. Peers are
grouped by the network of the address their connection to us comes from (an IPv4 /24 or an IPv6 /48 by default, the
block one home or one server usually holds), and storage quotas (:mod:`node.swarm.storage`) and the choice of whose
groups to fetch (:mod:`node.swarm.dht`) count groups, not identities. The address is the one our p2p daemon sees on the
live connection, which the peer proved its identity over: not a claim the peer makes.
"""

from __future__ import annotations

import asyncio
import ipaddress
import time
from collections import OrderedDict
from collections.abc import Iterable

from hivemind.p2p import P2P, PeerID
from hivemind.utils.multiaddr import Multiaddr

UNKNOWN = "unknown"  # a peer we hold no connection to: all such peers count as one group
_FRESH_S = 60.0  # a peer's group is looked up again after this long (it may have moved)
_REFRESH_EVERY_S = 0.2  # at most this often a miss asks the daemon for its connections again
_MAX_PEERS = 8192


def address_group(maddr: Multiaddr | str, ipv4_prefix: int = 24, ipv6_prefix: int = 48) -> str:
    """The network block an address belongs to ("203.0.113.0/24"); a relayed address counts as its relay's."""
    text = str(maddr)
    parts = text.split("/")
    for proto, prefix in (("ip4", ipv4_prefix), ("ip6", ipv6_prefix)):
        if len(parts) > 2 and parts[1] == proto:
            return str(ipaddress.ip_network(f"{parts[2]}/{prefix}", strict=False))
    return parts[2] if len(parts) > 2 else text  # dns names and the like: the name itself


class AddressBook:
    """Peer id -> address group of our live connection to it, from our p2p daemon's list of connections."""

    def __init__(self, p2p: P2P, *, ipv4_prefix: int = 24, ipv6_prefix: int = 48) -> None:
        self._p2p = p2p
        self._prefixes = ipv4_prefix, ipv6_prefix
        self._groups: OrderedDict[str, tuple[str, float]] = OrderedDict()  # peer id -> (group, seen at)
        self._refreshed_at = -float("inf")
        self._refreshing: asyncio.Future | None = None

    async def group_of(self, peer: PeerID | str) -> str:
        return (await self.groups_of([peer]))[str(peer)]

    async def groups_of(self, peers: Iterable[PeerID | str]) -> dict[str, str]:
        """Each peer's address group; :data:`UNKNOWN` for a peer we hold no connection to."""
        peers = [str(p) for p in peers]
        now = time.monotonic()
        if any(self._stale(p, now) for p in peers) and now - self._refreshed_at >= _REFRESH_EVERY_S:
            await self._refresh()
        return {p: self._groups[p][0] if p in self._groups else UNKNOWN for p in peers}

    def known_groups(self, peers: Iterable[PeerID | str]) -> dict[str, str]:
        """Each peer's address group as last read, without asking the daemon (for code running on its loop)."""
        return {str(p): self._groups[str(p)][0] if str(p) in self._groups else UNKNOWN for p in peers}

    def recent_groups(self) -> set[str]:
        """The address groups of the peers we held a connection to lately (in the last minute)."""
        now = time.monotonic()
        return {group for group, seen in self._groups.values() if now - seen <= _FRESH_S}

    def _stale(self, peer: str, now: float) -> bool:
        found = self._groups.get(peer)
        return found is None or now - found[1] > _FRESH_S

    async def _refresh(self) -> None:
        if self._refreshing is None:  # concurrent callers wait for the one request in flight
            self._refreshing = asyncio.ensure_future(self._list())
        refreshing = self._refreshing
        try:
            await asyncio.shield(refreshing)
        finally:
            if self._refreshing is refreshing and refreshing.done():
                self._refreshing = None

    async def _list(self) -> None:
        infos = await self._p2p.list_peers()
        now = self._refreshed_at = time.monotonic()
        for info in infos:
            if info.addrs:
                peer = info.peer_id.to_base58()
                self._groups[peer] = (address_group(info.addrs[0], *self._prefixes), now)
                self._groups.move_to_end(peer)
        while len(self._groups) > _MAX_PEERS:
            self._groups.popitem(last=False)
