"""The round clock: which round to play next, given the rounds other peers announced.

A node follows the swarm forward so that late joiners catch up, but one peer (or a few) must not be able to move
it: a round is followed only when ``quorum`` distinct recently active peers announced it or a later one (and, with
``quorum_fraction``, that share of the active peers), and never more than ``max_jump`` rounds ahead of where we
are. Whatever peers announce, the result stays within ``0..MAX_ROUND``, the bound every record encoder accepts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from node.records import MAX_ROUND


@dataclass(frozen=True)
class ClockPolicy:
    quorum: int = 2  # distinct other peers; capped by how many are active, so two honest nodes still agree
    quorum_fraction: float = 0.0  # of the active peers, on top of ``quorum``
    max_jump: int = 1000  # rounds ahead of our own per step

    def __post_init__(self) -> None:
        if self.quorum < 1 or not 0.0 <= self.quorum_fraction <= 1.0 or self.max_jump < 1:
            raise ValueError(f"invalid round clock policy {self}")


def required_announcers(active: int, policy: ClockPolicy) -> int:
    """How many of ``active`` other peers must announce a round before we follow it."""
    return max(1, min(policy.quorum, active), math.ceil(policy.quorum_fraction * active))


def follow_round(current: int, announced: Mapping[str, int], policy: ClockPolicy) -> int:
    """The round to play: ``current``, or the highest round a quorum reached, at most ``max_jump`` further."""
    current = min(max(current, 0), MAX_ROUND)
    rounds = sorted((r for r in announced.values() if type(r) is int and 0 <= r <= MAX_ROUND), reverse=True)
    if not rounds:
        return current
    needed = required_announcers(len(rounds), policy)
    reached = rounds[needed - 1]  # the highest round at least `needed` peers announced (or passed)
    if reached <= current:
        return current
    return min(reached, current + policy.max_jump, MAX_ROUND)
