"""What a partition would otherwise lose: our entries no replica confirmed, and the peers' rounds we read while cut off.

A link that goes down for a minute loses nothing that is still fresh when it comes back:

* :class:`Unconfirmed`: every entry we publish is held here until a replica confirms it; the DHT loop stores the
  held ones again while they are fresh (a receiver would refuse an older group anyway). Bounded in entries and
  bytes: past them, the oldest go first (they are the first to go stale). A newer pointer of the same round replaces
  the held one, and a store confirms an entry only when it carried the value held, so a late answer to an old store
  never drops the newer pointer.
* :class:`Reappearances`: a peer whose pointer shows up again after rounds without one may have published those
  rounds while we (or it) were cut off; those rounds are due for more reads: a few seconds later, when the
  peer's own retries have landed, and later still for retries that timed out or a slow link that sends many. A peer
  seen for the first time counts as back from a gap too: the rounds we read before without it (it may have joined
  just before our link went down, before any pointer of it reached us).
"""

from __future__ import annotations

import dataclasses
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable

MAX_UNCONFIRMED_ENTRIES = 256
MAX_UNCONFIRMED_BYTES = 4 * 1024**2
RESEND_STEP_S = 1e-6  # a held entry's expiration grows by this at each store again (float resolution here: 2.4e-7)
# a peer that reappears stores its held entries right after its first new one is confirmed: read its gap this much
# later; again after one of those stores timed out (the DHT's 10-s call timeout, then its 3-s retry) and after two did
# (a slow link with many held entries; CI once missed one round of a 20-round gap whose last read was at 15 s)
REREAD_AFTER_S = (3.0, 15.0, 40.0)
MAX_REREADS_PER_POLL = 8
# two due reads of a round closer than this are one: a poll reads a round at most once anyway, and the times a stream
# of new identities can add to a round stay bounded
COALESCE_S = 1.0


@dataclasses.dataclass
class Entry:
    round: int  # the swarm round it belongs to
    key: str
    subkey: bytes
    value: object
    size: int
    held_since: float  # monotonic: when this value was handed over
    expiration: float  # DHT time its first store asked for
    sends: int = 0  # stores of it again so far

    def resend_expiration(self) -> float:
        """The expiration of its next store again: its first one, a microsecond later each time. A replica keeps a
        value only if it expires later than the one it holds, so an entry already stored somewhere still lands; and a
        newer pointer of ours (published later, so expiring later) is never overwritten by an older one sent again."""
        self.sends += 1
        return self.expiration + RESEND_STEP_S * self.sends


class Unconfirmed:
    """Our entries that no replica has confirmed yet, oldest first."""

    def __init__(self, *, max_entries: int = MAX_UNCONFIRMED_ENTRIES, max_bytes: int = MAX_UNCONFIRMED_BYTES,
                 now: Callable[[], float] = time.monotonic) -> None:
        if max_entries <= 0 or max_bytes <= 0:
            raise ValueError("bounds must be positive")
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self._now = now
        self._entries: OrderedDict[tuple[str, bytes], Entry] = OrderedDict()
        self._bytes = 0
        self.dropped = 0  # entries pushed out by the bounds before any replica took them (for tests and benches)

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def bytes(self) -> int:
        return self._bytes

    def hold(self, round: int, keys: list[str], subkeys: list[bytes], values: list[object], *,
             expiration: float) -> None:
        """Entries handed to the DHT just now, stored until ``expiration``: held until confirmed (a held entry of
        the same key and subkey, an older value, is replaced)."""
        now = self._now()
        for key, subkey, value in zip(keys, subkeys, values):
            size = len(value) if isinstance(value, bytes) else 16
            old = self._entries.pop((key, subkey), None)
            if old is not None:
                self._bytes -= old.size
            self._entries[(key, subkey)] = Entry(round, key, subkey, value, size, now, expiration)
            self._bytes += size
        while self._entries and (len(self._entries) > self.max_entries or self._bytes > self.max_bytes):
            _, oldest = self._entries.popitem(last=False)
            self._bytes -= oldest.size
            self.dropped += 1

    def confirm(self, stored: dict | None, keys: list[str], subkeys: list[bytes], values: list[object]) -> int:
        """A store of these entries answered ``stored`` ({(key, subkey): bool}, None if it failed): the entries a
        replica took are no longer held, unless a newer value replaced them meanwhile. How many were released."""
        released = 0
        for key, subkey, value in zip(keys, subkeys, values):
            held = self._entries.get((key, subkey))
            if stored and stored.get((key, subkey)) and held is not None and held.value == value:
                del self._entries[(key, subkey)]
                self._bytes -= held.size
                released += 1
        return released

    def due(self, fresh: Callable[[Entry], bool], *, older_than_s: float) -> list[Entry]:
        """The held entries to store again: those whose own store has had ``older_than_s`` to answer. Entries no
        longer ``fresh`` are dropped first (nobody would train on them)."""
        for item, entry in list(self._entries.items()):
            if not fresh(entry):
                del self._entries[item]
                self._bytes -= entry.size
        now = self._now()
        return [entry for entry in self._entries.values() if now - entry.held_since >= older_than_s]

    def rounds(self) -> list[int]:
        return sorted({entry.round for entry in self._entries.values()})


class Reappearances:
    """Rounds to read once more because a peer reappeared after rounds without a pointer of it, or showed up for the
    first time after rounds we read without it."""

    def __init__(self, *, reread_after_s: tuple[float, ...] = REREAD_AFTER_S,
                 now: Callable[[], float] = time.monotonic) -> None:
        self._after = reread_after_s
        self._now = now
        self._last: dict[str, int] = {}  # peer -> latest round a pointer of it was read in
        self._read: set[int] = set()  # rounds of the window read so far
        self._due: dict[int, list[float]] = {}  # round -> when to read it again, soonest first

    def seen(self, round: int, peers: Iterable[str]) -> None:
        """``round`` was read and held pointers of ``peers``. The rounds between a peer's previous one and this one
        (for a peer not seen before, the earlier rounds read without it) are due for more reads (a gap round not
        read yet gets its first read now, before the peer's retries landed)."""
        for peer in peers:
            last = self._last.get(peer)
            if last is None:
                self._schedule([r for r in self._read if r < round])
            elif round > last + 1:
                self._schedule(range(last + 1, round))
            if last is None or round > last:
                self._last[peer] = round
        self._read.add(round)

    def _schedule(self, rounds: Iterable[int]) -> None:
        """Reads of ``rounds`` after each of the delays, besides those already due: a later reappearance, or a new
        identity, never postpones a read that is due sooner."""
        now = self._now()
        for gap in rounds:
            times = self._due.setdefault(gap, [])
            for after in self._after:
                if all(abs(now + after - other) >= COALESCE_S for other in times):
                    times.append(now + after)
            times.sort()

    def take(self, oldest: int, *, limit: int = MAX_REREADS_PER_POLL) -> list[int]:
        """The rounds due for a read now (newest first, at most ``limit``); forgets what is older than ``oldest``,
        the freshness window's first round."""
        self._last = {peer: r for peer, r in self._last.items() if r >= oldest}
        self._read = {r for r in self._read if r >= oldest}
        self._due = {r: times for r, times in self._due.items() if r >= oldest}
        now = self._now()
        ready = sorted((r for r, times in self._due.items() if times[0] <= now), reverse=True)[:limit]
        for r in ready:
            self._due[r] = [t for t in self._due[r] if t > now]
            if not self._due[r]:
                del self._due[r]
        return ready
