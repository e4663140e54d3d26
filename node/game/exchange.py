"""How stage records travel: the small interface the game needs, in memory (tests) and over the swarm's DHT.

Both implementations carry encoded bytes and decode them on the receiving side with
:func:`~node.game.records.decode_stage_record`, so the in-memory exchange exercises the same validation as the
network. Both guarantee what the DHT's owner signatures guarantee: an entry can only be written by its author, and
a record that claims another author, round or stage than the slot it was found in is rejected.

The swarm's stage clock: every node announces the (round, stage) it is playing. Identities are free, so the swarm's
position is counted by network, not by identity (:meth:`GameExchange.network_positions`: the furthest position of
each network address group, /24 or /48, ourselves left out), and the driver takes their lower median: where late joiners
enter and where laggards catch up. Identities minted on one host are one network, one vote, and cannot move the
game ahead of the honest networks. The positions of each peer tell a node whose work of a stage is still to come.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from dataclasses import dataclass
from typing import Protocol

from node.game import STAGES
from node.game.records import (
    StageRecord, decode_stage_record, encode_stage_record,
)
from node.swarm.records import RecordRejected

log = logging.getLogger(__name__)

Position = tuple[int, int]  # (round, stage), compared lexicographically


@dataclass(frozen=True)
class StageGather:
    records: tuple[StageRecord, ...]  # valid records of OTHER peers for that round and stage, sorted by peer id
    rejected: Counter[str]  # reason -> count
    peers: frozenset[str]  # other peers that published there (authenticated, valid record or not)


class GameExchange(Protocol):
    """Publishing and gathering stage records, and the swarm's stage clock."""

    @property
    def peer_id(self) -> str: ...

    def publish(self, record: StageRecord) -> bool:
        """Store our record for ``(record.round, record.stage)``; False when it could not be stored."""

    def gather(self, round: int, stage: int) -> StageGather:
        """Other peers' valid records for ``(round, stage)``; bad entries are counted, never raised."""

    def announce(self, round: int, stage: int) -> None:
        """Tell the swarm we are playing ``stage`` of ``round``."""

    def positions(self) -> dict[str, Position]:
        """The (round, stage) each live peer, us included, announced last."""

    def network_positions(self) -> list[Position]:
        """The furthest (round, stage) other peers announced in each network address group, one per group, sorted."""

    def peers(self) -> int:
        """How many other members the swarm has now, announced or not (0: this node is alone)."""


def clock_value(round: int, stage: int) -> int:
    return round * len(STAGES) + stage - 1


def clock_position(value: int) -> Position:
    return value // len(STAGES), value % len(STAGES) + 1


def check_gathered(author: str | None, raw: object, round: int, stage: int) -> StageRecord:
    """Decode an entry found under ``(round, stage)`` written by ``author``; raises :class:`RecordRejected`."""
    if author is None:
        raise RecordRejected("bad_signature")
    record = decode_stage_record(raw)  # type: ignore[arg-type]
    if record.peer_id != author:
        raise RecordRejected("peer_mismatch")
    if record.round != round or record.stage != stage:
        raise RecordRejected("round_mismatch")
    return record


def _collect(entries: list[tuple[str | None, object]], own: str, round: int, stage: int) -> StageGather:
    records, rejected, peers = [], Counter(), set()
    for author, raw in entries:
        if author == own:
            continue
        if author is not None:
            peers.add(author)
        try:
            records.append(check_gathered(author, raw, round, stage))
        except RecordRejected as e:
            rejected[e.reason] += 1
    if rejected:
        log.info("Round %d stage %d: rejected entries %s", round, stage, dict(rejected))
    records.sort(key=lambda r: r.peer_id)
    return StageGather(records=tuple(records), rejected=rejected, peers=frozenset(peers))


def furthest_per_network(positions: dict[str, Position], network_of, own: str) -> list[Position]:
    """The furthest of the other peers' ``positions`` in each network (``network_of(peer)``), sorted: a network is one
    vote whatever the number of identities announcing from it."""
    furthest: dict[str, Position] = {}
    for peer, position in positions.items():
        if peer != own:
            network = network_of(peer)
            furthest[network] = max(position, furthest.get(network, position))
    return sorted(furthest.values())


class InMemoryGameHub:
    """A swarm in one process: the shared storage behind each member's :class:`InMemoryGameExchange`."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[Position, dict[str, bytes]] = {}
        self._clock: dict[str, int] = {}
        self._members: set[str] = set()
        self._networks: dict[str, str] = {}

    def exchange(self, peer_id: str, *, network: str | None = None) -> InMemoryGameExchange:
        """A member's exchange; members given the same ``network`` stand for identities on one host (each member is
        a network of its own otherwise)."""
        with self._lock:
            self._members.add(peer_id)
            self._networks[peer_id] = network or peer_id
        return InMemoryGameExchange(self, peer_id)

    def network_of(self, peer_id: str) -> str:
        with self._lock:
            return self._networks.get(peer_id, peer_id)

    def leave(self, peer_id: str) -> None:
        """The peer is gone, and so is its clock entry, as its DHT entry expires when it stops announcing."""
        with self._lock:
            self._members.discard(peer_id)
            self._clock.pop(peer_id, None)

    def others(self, peer_id: str) -> int:
        with self._lock:
            return len(self._members - {peer_id})

    def store(self, author: str, round: int, stage: int, raw: bytes) -> None:
        """Write ``author``'s entry for (round, stage), as the DHT lets only the key's owner do."""
        with self._lock:
            self._entries.setdefault((round, stage), {})[author] = raw

    def entries(self, round: int, stage: int) -> list[tuple[str, bytes]]:
        with self._lock:
            return list(self._entries.get((round, stage), {}).items())

    def announce(self, author: str, value: int) -> None:
        with self._lock:
            self._clock[author] = value

    def clock(self) -> dict[str, int]:
        with self._lock:
            return dict(self._clock)


class InMemoryGameExchange:
    def __init__(self, hub: InMemoryGameHub, peer_id: str) -> None:
        self._hub = hub
        self._peer_id = peer_id

    @property
    def peer_id(self) -> str:
        return self._peer_id

    def publish(self, record: StageRecord) -> bool:
        if record.peer_id != self._peer_id:
            raise ValueError(f"record of {record.peer_id} cannot be published by {self._peer_id}")
        self._hub.store(self._peer_id, record.round, record.stage, encode_stage_record(record))
        return True

    def gather(self, round: int, stage: int) -> StageGather:
        return _collect(list(self._hub.entries(round, stage)), self._peer_id, round, stage)

    def announce(self, round: int, stage: int) -> None:
        self._hub.announce(self._peer_id, clock_value(round, stage))

    def positions(self) -> dict[str, Position]:
        return {peer: clock_position(value) for peer, value in self._hub.clock().items()}

    def network_positions(self) -> list[Position]:
        return furthest_per_network(self.positions(), self._hub.network_of, self._peer_id)

    def peers(self) -> int:
        return self._hub.others(self._peer_id)


class DhtGameExchange:
    """The game's records in the swarm's DHT (protocol v2), signed and validated like the rollout exchange's.

    Each author's stage record has its own key, and every node announces its position in the game (``round * 3 +
    stage - 1``) in its shard of the game clock; :class:`node.swarm.dht.DhtExchange` owns the key shapes, and its
    validator refuses any other shape, a record under another author's key, or a position in another shard. A gather
    reads the clock, then the records of the peers that have reached that stage (a bounded sample in a very large
    swarm).
    """

    def __init__(self, swarm) -> None:  # node.swarm.dht.DhtExchange: imported lazily, it pulls in hivemind
        from node.swarm.dht import _SIGNATURE_MARKER

        self._swarm = swarm
        self._marker = _SIGNATURE_MARKER

    @property
    def peer_id(self) -> str:
        return self._swarm.peer_id

    def publish(self, record: StageRecord) -> bool:
        if record.peer_id != self.peer_id:
            raise ValueError(f"record of {record.peer_id} cannot be published by {self.peer_id}")
        value = encode_stage_record(record)
        if self._marker in value:
            log.warning("Stage %d record not shared: its text contains %r", record.stage, self._marker)
            return False
        return self._swarm.publish_stage(record.round, record.stage, value)

    def gather(self, round: int, stage: int) -> StageGather:
        reached = [peer for peer, position in self.positions().items() if position >= (round, stage)]
        return _collect(self._swarm.stage_entries(round, stage, reached), self.peer_id, round, stage)

    def announce(self, round: int, stage: int) -> None:
        self._swarm.announce_position(clock_value(round, stage))

    def positions(self) -> dict[str, Position]:
        return {author: clock_position(value) for author, value in self._swarm.announced_positions().items()}

    def network_positions(self) -> list[Position]:
        positions = self.positions()
        groups = self._swarm.address_groups(list(positions))
        return furthest_per_network(positions, groups.__getitem__, self.peer_id)

    def peers(self) -> int:
        return max(self._swarm.peers_seen(), self._swarm.connected_peers())


_HUB_LOCK = threading.Lock()


def game_exchange_for(exchange) -> GameExchange:
    """The game's exchange riding on a node's rollout exchange: the DHT swarm, or an in-memory board (tests)."""
    from node.swarm.exchange import InMemoryExchange

    if isinstance(exchange, InMemoryExchange):
        with _HUB_LOCK:  # the nodes of one board share one hub
            hub = exchange.board.__dict__.setdefault("game_hub", InMemoryGameHub())
        return hub.exchange(exchange.peer_id)
    return DhtGameExchange(exchange)
