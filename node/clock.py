"""The swarm's clock: a round is a slice of time, so there is nothing for peers to agree on and nothing to hijack.

``round = floor((now - epoch) / round_seconds)``, with the epoch and the round length carried by the invite and the
configuration (an invite without them means the defaults below). Every member derives the same round from its own
clock; the keys peers publish under are that round, and a round number from a peer is only ever read when it is near
the one this node expects (:meth:`SwarmClock.accepts`), so no count of identities can move anyone's clock. Clocks of
ordinary computers agree within seconds (NTP); a node whose clock is off by more than a round still trains, it only
sees fewer peer groups.

SAPO does not need peers to play "the same round": a node plays its own rounds as fast as its hardware allows and
takes peers' groups of the last few time rounds (:mod:`node.sapo.peer_buffer`). Its own round count is its own.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

MAX_ROUND = 2**40  # a round a second for 34,000 years; far below any integer limit of msgpack or the chain
DEFAULT_EPOCH = 1_767_225_600.0  # 2026-01-01T00:00:00Z: any fixed instant works, as long as every member uses it
DEFAULT_ROUND_SECONDS = 10.0
# A peer's round a little ahead of ours is a clock a few seconds fast, not an attack: accepted
CLOCK_SKEW_ROUNDS = 1


@dataclass(frozen=True)
class SwarmClock:
    epoch: float = DEFAULT_EPOCH  # unix seconds at which round 0 began
    round_seconds: float = DEFAULT_ROUND_SECONDS

    def __post_init__(self) -> None:
        if not math.isfinite(self.epoch) or not (math.isfinite(self.round_seconds) and self.round_seconds > 0):
            raise ValueError(f"invalid swarm clock {self}")

    def round_at(self, unix_time: float) -> int:
        """The round at ``unix_time``, within ``0..MAX_ROUND`` whatever the clock says."""
        return min(max(math.floor((unix_time - self.epoch) / self.round_seconds), 0), MAX_ROUND)

    def now(self) -> int:
        return self.round_at(time.time())

    def start_of(self, round: int) -> float:
        return self.epoch + round * self.round_seconds

    def rounds_within(self, seconds: float) -> int:
        """How many rounds back a group published ``seconds`` ago can be (its round began before it was sent)."""
        return math.ceil(seconds / self.round_seconds) + 1

    def accepts(self, round: int, *, max_age_rounds: int, now: int | None = None) -> bool:
        """Whether a peer's ``round`` is near the one this node expects: not older than ``max_age_rounds``, not
        ahead by more than a clock's skew."""
        expected = self.now() if now is None else now
        return type(round) is int and expected - max_age_rounds <= round <= expected + CLOCK_SKEW_ROUNDS
