"""Peers' groups, fetched and verified in the background, for rounds to take at once: no round waits for a peer.

The exchange's background feed (:meth:`node.swarm.dht.DhtExchange.start_feed`) hands over each peer group it fetched
with :meth:`PeerGroupBuffer.offer`, on the DHT loop, where only a deque append happens. A verifier thread checks each
group against the task we regenerate ourselves and grades it with our own verifier
(:func:`node.sapo.scoring.verify_records`), so rewards and advantages are ours, never the peer's. A round then calls
:meth:`PeerGroupBuffer.take`: J groups chosen at once among the fresh usable ones (SAPO's uniform choice or the
teaching-first order of :mod:`node.sapo.teaching`, newest swarm round first, registered peers first, one group per
network before a second of any), or fewer when the buffer is short. Taken groups leave the buffer: a group is trained
on at most once.

Identities are free, network addresses are not: each group carries the address group (/24, /48) of the peer that
published it, as the feed saw it (:mod:`node.swarm.peer_addresses`; a group offered without one is its peer's own
network), and a network is what takes turns, holds a share and gets pushed out, whatever the number of identities
publishing from it.

Bounds: the buffer (verified and pending alike) holds at most ``max_bytes`` of peer text and ``max_per_peer`` groups
of any one peer or network; a peer or network over its share loses its oldest group, a full buffer drops the oldest
group of the network holding most. Groups older than ``max_age_s`` (or from a swarm round that old) are dropped,
never trained on.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Collection
from dataclasses import dataclass, field

from node.clock import SwarmClock
from node.sapo.scoring import RejectedGroup, ScoredGroup, Verification
from node.swarm.records import GroupRecord, RoundRecord

log = logging.getLogger(__name__)

DEFAULT_MAX_BYTES = 16 * 1024**2
DEFAULT_MAX_PER_PEER = 8
MIN_AUTO_AGE_S = 120.0  # automatic freshness: at least two minutes...
AUTO_AGE_ROUNDS = 3  # ...or three of this node's own rounds, whichever is longer
# How often the feed looks for peers' new groups: a few times in each of this node's rounds (a round takes its groups
# once), within these bounds. Each look reads the swarm directory through peers, on their CPU and ours
FEED_POLLS_PER_ROUND = 4
FEED_POLL_BOUNDS_S = (1.0, 10.0)

Verify = Callable[[RoundRecord], Verification]
Keep = Callable[[ScoredGroup], str]  # "" to keep a group, else the reason it is refused
Rank = Callable[[ScoredGroup], tuple[float, ...]]  # a sort key of what a group teaches, smallest first


@dataclass
class Buffered:
    """A peer group in the buffer. ``published_at``: our estimate (unix seconds) of when its peer published it, the
    first time our feed saw it announced, or the end of its swarm round if we saw it only later."""

    record: GroupRecord
    published_at: float
    size: int
    network: str = ""  # the publisher's address group ("": its own peer id stands for it)
    group: ScoredGroup | None = None  # set once verified

    @property
    def peer_id(self) -> str:
        return self.record.peer_id

    @property
    def source(self) -> str:
        """What takes turns and holds a share: the publisher's network."""
        return self.network or self.record.peer_id


@dataclass
class Taken:
    """What one round got from the buffer, and what happened to the other groups since the round before."""

    chosen: list[Buffered]
    arrived: int = 0  # groups verified since the previous take (rejected and dropped ones included)
    dropped: list[ScoredGroup] = field(default_factory=list)  # arrivals whose rewards were all equal
    rejected: list[RejectedGroup] = field(default_factory=list)  # failed verification or a check of ``take``
    expired: int = 0  # usable groups that went stale unused
    left: int = 0  # usable groups still buffered for later rounds
    peers: set[str] = field(default_factory=set)  # peers whose groups reached us within the freshness window


class PeerGroupBuffer:
    def __init__(
        self, clock: SwarmClock, verify: Verify, *, max_bytes: int = DEFAULT_MAX_BYTES,
        max_per_peer: int = DEFAULT_MAX_PER_PEER, max_age_s: float | None = None, drop_zero_advantage: bool = True,
        penalize: Callable[[str], None] = lambda peer: None,
    ) -> None:
        if max_bytes <= 0 or max_per_peer <= 0 or (max_age_s is not None and max_age_s <= 0):
            raise ValueError("buffer bounds must be positive")
        self.clock = clock
        self._verify = verify
        self.max_bytes, self.max_per_peer = max_bytes, max_per_peer
        self._max_age_setting = max_age_s
        self._round_seconds: float | None = None  # this node's last round time (for the automatic freshness)
        self._drop_zero_advantage = drop_zero_advantage
        self._penalize = penalize
        self._lock = threading.Condition()
        self._pending: deque[Buffered] = deque()
        self._ready: list[Buffered] = []
        self._bytes = 0
        self._arrived = 0
        self._dropped: list[ScoredGroup] = []
        self._rejected: list[RejectedGroup] = []
        self._expired = 0  # verified usable groups that left unused (stale or pushed out by the bounds)
        self._last_seen: dict[str, float] = {}  # peer -> when its last group reached us
        self.evicted = 0  # groups pushed out by the bounds (for tests and benches)
        self._thread: threading.Thread | None = None
        self._stopping = False

    # --------------------------------------------------------------------------------------------- freshness
    @property
    def max_age_s(self) -> float:
        if self._max_age_setting is not None:
            return self._max_age_setting
        own = AUTO_AGE_ROUNDS * self._round_seconds if self._round_seconds else 0.0
        return max(MIN_AUTO_AGE_S, own)

    def max_age_rounds(self) -> int:
        """Swarm rounds a fresh group can be from (what the feed reads)."""
        return self.clock.rounds_within(self.max_age_s)

    def round_took(self, seconds: float) -> None:
        """This node's last round took ``seconds`` (the automatic freshness and the feed's pace follow it)."""
        self._round_seconds = seconds

    def poll_interval_s(self) -> float:
        """How long the feed waits between two looks for new groups: a :data:`FEED_POLLS_PER_ROUND`-th of this
        node's last round (a group published meanwhile waits at most that long for a take that comes once a round),
        within :data:`FEED_POLL_BOUNDS_S`; the shortest before the first round has ended."""
        shortest, longest = FEED_POLL_BOUNDS_S
        if not self._round_seconds:
            return shortest
        return min(longest, max(shortest, self._round_seconds / FEED_POLLS_PER_ROUND))

    def _fresh(self, item: Buffered, now: float, round_now: int) -> bool:
        return (now - item.published_at <= self.max_age_s
                and self.clock.accepts(item.record.round, max_age_rounds=self.max_age_rounds(), now=round_now))

    # ------------------------------------------------------------------------------------- the feed's side
    def offer(self, record: GroupRecord, *, published_at: float, size: int, network: str | None = None) -> bool:
        """A peer group the feed fetched (cheap: called on the DHT loop), with its publisher's address group. False
        if refused: stale or not ours to hold (a group larger than the whole buffer)."""
        now = time.time()
        item = Buffered(record, min(published_at, now), size, network or "")
        if size > self.max_bytes or not self._fresh(item, now, self.clock.now()):
            return False
        with self._lock:
            self._pending.append(item)
            self._bytes += size
            self._last_seen[record.peer_id] = now
            self._enforce_bounds(item)
            self._lock.notify()
        return True

    def wants(self, peer_id: str, network: str | None = None) -> int:
        """How many more groups of this peer are worth fetching now: what is left of its share and of its network's
        (identities from one network share one share, so a flood never keeps another network's groups out)."""
        source = network or peer_id
        with self._lock:
            of_peer = sum(1 for item in self._all() if item.peer_id == peer_id)
            of_network = sum(1 for item in self._all() if item.source == source)
        return max(0, min(self.max_per_peer - of_peer, self.max_per_peer - of_network))

    def candidates(self) -> list[Buffered]:
        """The verified groups buffered now (a snapshot)."""
        with self._lock:
            return list(self._ready)

    def held(self) -> tuple[int, int]:
        """(groups, bytes) held now, verified and pending."""
        with self._lock:
            return len(self._ready) + len(self._pending), self._bytes

    def _all(self):
        yield from self._pending
        yield from self._ready

    def _enforce_bounds(self, new: Buffered) -> None:
        """Under the lock: the oldest group of the new group's peer, then of its network, goes past their share;
        past the byte cap, the oldest group of the network holding the most bytes (so a flood pushes out its own
        groups first, whatever the number of identities it publishes under)."""
        for belongs in (lambda item: item.peer_id == new.peer_id, lambda item: item.source == new.source):
            mine = [item for item in self._all() if belongs(item)]
            while len(mine) > self.max_per_peer:
                oldest = min(mine, key=lambda item: item.published_at)
                mine.remove(oldest)
                self._discard(oldest)
        while self._bytes > self.max_bytes:
            by_source: Counter[str] = Counter()
            for item in self._all():
                by_source[item.source] += item.size
            biggest = by_source.most_common(1)[0][0]
            self._discard(min((i for i in self._all() if i.source == biggest), key=lambda i: i.published_at))

    def _discard(self, item: Buffered) -> None:
        if item in self._pending:
            self._pending.remove(item)
        else:
            self._ready.remove(item)
            self._expired += 1
        self._bytes -= item.size
        self.evicted += 1

    # ---------------------------------------------------------------------------------------- verification
    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._verify_loop, name="peer-verifier", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        with self._lock:
            self._stopping = True
            self._lock.notify_all()
        if self._thread is not None:
            self._thread.join(10)

    def verify_pending(self) -> None:
        """Verify everything pending now, in the caller's thread (the verifier thread does it continuously)."""
        while self._verify_one(block=False):
            pass

    def _verify_loop(self) -> None:
        while self._verify_one(block=True):
            pass

    def _verify_one(self, *, block: bool) -> bool:
        with self._lock:
            while not self._pending and block and not self._stopping:
                self._lock.wait()
            if self._stopping or not self._pending:
                return False
            item = self._pending[0]
        try:
            verification = self._verify(item.record.as_round_record())
        except Exception:  # a verifier bug a peer's group hits must not stop the buffer
            log.warning("verifying a group of %s failed", item.peer_id, exc_info=True)
            verification = Verification([], [RejectedGroup(item.peer_id, item.record.round, item.record.group,
                                                           "verification_failed")])
        with self._lock:
            if not self._pending or self._pending[0] is not item:
                return True  # evicted meanwhile
            self._pending.popleft()
            self._arrived += 1
            if verification.rejected:
                self._rejected += verification.rejected[:1]
                self._bytes -= item.size
            elif self._drop_zero_advantage and verification.accepted[0].zero_advantage:
                self._dropped.append(verification.accepted[0])
                self._bytes -= item.size
            else:
                item.group = verification.accepted[0]
                self._ready.append(item)
        if verification.rejected:  # forged, foreign or malformed: counts toward the peer's backoff
            self._penalize(item.peer_id)
        return True

    # ------------------------------------------------------------------------------------------ the round
    def take(
        self, count: int, rng: random.Random, *, keep: Keep = lambda group: "",
        preferred: Collection[str] | None = None, rank: Rank | None = None,
    ) -> Taken:
        """Up to ``count`` fresh usable groups, chosen now; never waits. ``keep`` may refuse a candidate (the
        peer-text cap, the log-prob floor), which then leaves the buffer as rejected. ``rank`` (the teaching-first
        choice, :func:`node.sapo.teaching.teaching_rank`) orders candidates before the swarm round does; registered
        peers still come first and each network still gets one group before a second of any, whatever it ranks."""
        now, round_now = time.time(), self.clock.now()
        with self._lock:
            stale = [item for item in self._ready if not self._fresh(item, now, round_now)]
            for item in stale:
                self._ready.remove(item)
                self._bytes -= item.size
            candidates = list(self._ready)
            self._last_seen = {p: t for p, t in self._last_seen.items() if now - t <= self.max_age_s}
            taken = Taken(chosen=[], arrived=self._arrived, dropped=self._dropped, rejected=self._rejected,
                          expired=self._expired + len(stale), peers=set(self._last_seen))
            self._arrived, self._dropped, self._rejected, self._expired = 0, [], [], 0
        rng.shuffle(candidates)
        candidates.sort(key=lambda item: -item.record.round)  # stable: uniform within each swarm round
        if rank is not None:
            candidates.sort(key=lambda item: rank(item.group))  # stable: ties keep the order above
        if preferred is not None:
            candidates.sort(key=lambda item: item.peer_id not in preferred)
        gone: list[Buffered] = []
        per_source: Counter[str] = Counter()  # one group per network before a second of any
        level = 0
        while len(taken.chosen) < count:
            progressed = False
            for item in candidates:
                if len(taken.chosen) >= count:
                    break
                if item in gone or per_source[item.source] != level:
                    continue
                reason = keep(item.group)
                gone.append(item)
                if reason:
                    taken.rejected.append(RejectedGroup(item.peer_id, item.record.round, item.record.group, reason))
                    self._penalize(item.peer_id)
                    continue
                taken.chosen.append(item)
                per_source[item.source] += 1
                progressed = True
            if not progressed:
                break
            level += 1
        with self._lock:
            for item in gone:
                if item in self._ready:
                    self._ready.remove(item)
                    self._bytes -= item.size
            taken.left = len(self._ready)
        return taken
