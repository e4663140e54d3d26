"""The teaching-first choice of peer groups: what a group can teach this node, judged only by what this node knows.

SAPO takes its J peer groups uniformly. A group teaches through its advantages: one whose rewards (graded by our own
verifier) spread more gives a stronger, better balanced signal (a group of equal rewards gives none), and among
groups alike in that, one of a family this node still gets wrong has more to teach than one of a family it solves.
:func:`teaching_rank` orders candidates that way for :meth:`node.sapo.peer_buffer.PeerGroupBuffer.take`, which keeps
the registered-first and one-group-per-network rules above it, so no peer or network gets more slots by publishing
groups that rank first.

The accuracy per family is this node's own, of its own recent local groups (:class:`OwnAccuracy`): nothing a peer
says about itself or about us enters it.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Callable

from node.sapo.scoring import ScoredGroup

RECENT_GROUPS = 8  # per family: recent enough to follow the curriculum's moves, enough to not be one question's luck


class OwnAccuracy:
    """This node's exact accuracy on its last :data:`RECENT_GROUPS` local groups of each family (bounded: local
    groups are only ever of the families this node samples)."""

    def __init__(self, window: int = RECENT_GROUPS) -> None:
        if window <= 0:
            raise ValueError("the window must be positive")
        self._window = window
        self._recent: dict[str, deque[float]] = {}

    def record(self, family: str, accuracy: float) -> None:
        self._recent.setdefault(family, deque(maxlen=self._window)).append(accuracy)

    def of(self, family: str) -> float | None:
        """The mean over the family's recent groups; None before this node has played any."""
        recent = self._recent.get(family)
        return statistics.fmean(recent) if recent else None


def teaching_rank(own: OwnAccuracy) -> Callable[[ScoredGroup], tuple[float, float]]:
    """A sort key, smallest first: larger reward spread (the standard deviation GRPO normalizes by), then lower own
    accuracy on the group's family. A family this node has no recent groups of comes after those it has: nothing
    says it is weak there."""

    def rank(group: ScoredGroup) -> tuple[float, float]:
        accuracy = own.of(group.task.ref.family)
        return -statistics.pstdev(group.rewards), math.inf if accuracy is None else accuracy

    return rank
