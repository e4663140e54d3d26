"""What a round needs from the rollout exchange, and an in-memory exchange to play rounds without a network.

:class:`node.swarm.DhtExchange` (the exchange over hivemind's DHT) is the real implementation; :class:`InMemoryExchange`
is the same contract over a dictionary shared by the nodes of one process, for tests and experiments.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from node.records import RoundRecord, decode_record, encode_record


class Gathered(Protocol):
    """Peers' records for one round (``node.swarm.GatherResult`` has this shape)."""

    records: tuple[RoundRecord, ...]  # valid records of OTHER peers, sorted by peer id
    rejected: Counter[str]  # records refused before they were decoded, by reason
    peers: frozenset[str]  # other peers that published for the round
    exhausted: bool  # the round's fetch budget is spent: asking again brings nothing new


class Exchange(Protocol):
    """Publish our round record, gather peers' records, share a round clock."""

    def start(self) -> None: ...

    def shutdown(self) -> None: ...

    def invite(self) -> list[str]: ...

    def publish(self, record: RoundRecord, *, spread: Sequence[int] | None = None) -> bool: ...

    def gather(self, round: int) -> Gathered: ...

    def announce_round(self, round: int) -> None: ...

    def swarm_round(self, current: int | None = None) -> int | None: ...

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
    """The shared state of one in-memory swarm: encoded records per round and each peer's announced round."""

    records: dict[int, dict[str, bytes]] = field(default_factory=dict)
    clock: dict[str, int] = field(default_factory=dict)
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

    def publish(self, record: RoundRecord, *, spread: Sequence[int] | None = None) -> bool:
        raw = encode_record(record)
        with self.board.lock:
            self.board.records.setdefault(record.round, {})[record.peer_id] = raw
        return True

    def gather(self, round: int) -> InMemoryGathered:
        with self.board.lock:
            entries = dict(self.board.records.get(round, {}))
        records = [decode_record(raw) for peer, raw in sorted(entries.items()) if peer != self.peer_id]
        return InMemoryGathered(tuple(records), Counter(), frozenset(r.peer_id for r in records))

    def announce_round(self, round: int) -> None:
        with self.board.lock:
            self.board.clock[self.peer_id] = round

    def penalize(self, peer_id: str) -> None:
        """Peers of one process are trusted: nothing to back off from."""

    def swarm_round(self, current: int | None = None) -> int | None:
        with self.board.lock:
            return max(self.board.clock.values(), default=None)

    def peers_seen(self) -> int:
        with self.board.lock:
            seen = set(self.board.clock) | {p for entries in self.board.records.values() for p in entries}
        return len(seen - {self.peer_id})

    def connected_peers(self) -> int:
        return len(set(self._members) - {self.peer_id})
