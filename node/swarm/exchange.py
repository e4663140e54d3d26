"""What a round needs from the rollout exchange, and an in-memory exchange to play rounds without a network.

:class:`node.swarm.dht.DhtExchange` (the exchange over hivemind's DHT) is the real implementation;
:class:`InMemoryExchange` is the same contract over a dictionary shared by the nodes of one process, for tests and
experiments.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from node.clock import SwarmClock
from node.swarm.records import GroupRecord, RoundRecord, decode_record, encode_record


class Gathered(Protocol):
    """Peers' records for one round (``node.swarm.dht.GatherResult`` has this shape)."""

    records: tuple[RoundRecord, ...]  # valid records of OTHER peers, sorted by peer id
    rejected: Counter[str]  # records refused before they were decoded, by reason
    peers: frozenset[str]  # other peers that published for the round
    exhausted: bool  # the round's fetch budget is spent: asking again brings nothing new


class GroupSink(Protocol):
    """Where a feed puts peers' groups (:class:`node.sapo.peer_buffer.PeerGroupBuffer`)."""

    def offer(self, record: GroupRecord, *, published_at: float, size: int, network: str | None = None) -> bool: ...

    def wants(self, peer_id: str, network: str | None = None) -> int: ...

    def max_age_rounds(self) -> int: ...

    def poll_interval_s(self) -> float: ...


class Exchange(Protocol):
    """Publish our groups; feed peers' groups into a buffer in the background; gather one round on demand."""

    def start(self) -> None: ...

    def shutdown(self) -> None: ...

    def invite(self) -> list[str]: ...

    def publish(self, record: RoundRecord, *, spread: Sequence[int] | None = None, wait: bool = True) -> bool: ...

    def start_feed(self, sink: GroupSink, clock: SwarmClock) -> None: ...

    def gather(self, round: int) -> Gathered: ...

    def penalize(self, peer_id: str) -> None: ...

    def peers_seen(self) -> int: ...

    def connected_peers(self) -> int: ...


@dataclass(frozen=True)
class InMemoryGathered:
    records: tuple[RoundRecord, ...]
    rejected: Counter[str]
    peers: frozenset[str]
    exhausted: bool = False  # everything on the board is read at every call: no budget to spend


@dataclass
class InMemoryBoard:
    """The shared state of one in-memory swarm: encoded records per round, and the feeds of its members."""

    records: dict[int, dict[str, bytes]] = field(default_factory=dict)
    feeds: dict[str, GroupSink] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


class InMemoryExchange:
    """One peer's view of an :class:`InMemoryBoard`; records go through the wire codec like on the DHT."""

    def __init__(self, board: InMemoryBoard, peer_id: str, *, members: Sequence[str] = ()) -> None:
        self.board = board
        self.peer_id = peer_id
        self._members = tuple(members)  # peers counted as connected even before they publish
        self.started = False

    def start(self) -> None:
        self.started = True

    def shutdown(self) -> None:
        self.started = False

    def invite(self) -> list[str]:
        return [f"/memory/p2p/{self.peer_id}"]

    def publish(self, record: RoundRecord, *, spread: Sequence[int] | None = None, wait: bool = True) -> bool:
        """Store the record (a later one of the same round replaces it) and hand its groups to every other
        member's feed at once."""
        raw = encode_record(record)
        with self.board.lock:
            self.board.records.setdefault(record.round, {})[record.peer_id] = raw
            feeds = [sink for peer, sink in self.board.feeds.items() if peer != record.peer_id]
        _deliver(decode_record(raw), feeds, time.time())
        return True

    def start_feed(self, sink: GroupSink, clock: SwarmClock) -> None:
        """Hand ``sink`` every group other members publish from now on, and those of the recent rounds."""
        with self.board.lock:
            self.board.feeds[self.peer_id] = sink
            now = clock.now()
            recent = [raw for round_, entries in self.board.records.items() if round_ >= now - sink.max_age_rounds()
                      for peer, raw in entries.items() if peer != self.peer_id]
        for raw in recent:
            record = decode_record(raw)
            _deliver(record, [sink], clock.start_of(record.round + 1))

    def gather(self, round: int) -> InMemoryGathered:
        with self.board.lock:
            entries = dict(self.board.records.get(round, {}))
        records = [decode_record(raw) for peer, raw in sorted(entries.items()) if peer != self.peer_id]
        return InMemoryGathered(tuple(records), Counter(), frozenset(r.peer_id for r in records))

    def penalize(self, peer_id: str) -> None:
        """Peers of one process are trusted: nothing to back off from."""

    def peers_seen(self) -> int:
        with self.board.lock:
            seen = set(self.board.feeds) | {p for entries in self.board.records.values() for p in entries}
        return len(seen - {self.peer_id})

    def connected_peers(self) -> int:
        return len(set(self._members) - {self.peer_id})


def _deliver(record: RoundRecord, sinks: Sequence[GroupSink], published_at: float) -> None:
    for index, group in enumerate(record.groups):
        one = GroupRecord(record.peer_id, record.round, index, group, record.prompt_format)
        size = sum(map(len, group.completions)) + len(group.question)
        for sink in sinks:
            if sink.wants(record.peer_id) > 0:
                sink.offer(one, published_at=published_at, size=size)
