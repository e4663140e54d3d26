"""What the swarm gave this node, in words and figures the dashboard shows (no Qt here, so it is easy to test).

Everything comes from the node's own rounds (``RoundFinished``) and held-out evaluations (``EvalFinished``): the
line answers "is the swarm helping me?" from what peers' groups added to this node's updates, never from a
comparison with a run alone that the user never made.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from node.events import EvalFinished, RoundFinished

QUESTION = "Is the swarm helping?"
# Below this share of the rounds that took peer groups, peers filling a gap of ours is "now and then", not "often".
OFTEN_SHARE = 0.1


@dataclass(frozen=True)
class SwarmGiven:
    """Totals over the rounds that report what the swarm gave (SAPO rounds of a node new enough to count it)."""

    rounds: int = 0
    rounds_asking: int = 0  # rounds that wanted peer groups (J > 0)
    peer_groups_received: int = 0
    peer_groups_trained: int = 0  # given to the update
    own_with_spread: int = 0
    peers_with_spread: int = 0
    spread_we_lacked: int = 0
    rounds_all_signal_from_peers: int = 0  # none of our groups had spread; peers' did, so the update ran
    rounds_peers_filled_a_gap: int = 0  # rounds with spread we lacked, or with all of the signal from peers

    @classmethod
    def of(cls, metrics: Iterable[RoundFinished]) -> SwarmGiven:
        given = cls()
        for m in metrics:
            given = given.plus(m)
        return given

    def plus(self, m: RoundFinished) -> SwarmGiven:
        """These totals with round ``m`` added (unchanged where the round did not measure what the swarm gave: a
        game round, or a run folder older than these figures)."""
        if m.peer_groups_with_spread is None or m.local_groups_with_spread is None:
            return self
        lacked = m.peer_groups_spread_we_lacked or 0
        all_from_peers = m.local_groups_with_spread == 0 and m.peer_groups_with_spread > 0
        return replace(
            self, rounds=self.rounds + 1, rounds_asking=self.rounds_asking + (m.external_groups_wanted > 0),
            peer_groups_received=self.peer_groups_received + m.groups_received,
            peer_groups_trained=self.peer_groups_trained + m.groups_used,
            own_with_spread=self.own_with_spread + m.local_groups_with_spread,
            peers_with_spread=self.peers_with_spread + m.peer_groups_with_spread,
            spread_we_lacked=self.spread_we_lacked + lacked,
            rounds_all_signal_from_peers=self.rounds_all_signal_from_peers + all_from_peers,
            rounds_peers_filled_a_gap=self.rounds_peers_filled_a_gap + (lacked > 0 or all_from_peers),
        )

    @property
    def peer_share(self) -> float:
        """Share of the groups with reward spread (the ones that taught the model) that came from peers."""
        total = self.own_with_spread + self.peers_with_spread
        return self.peers_with_spread / total if total else 0.0


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def swarm_help_line(metrics: Iterable[RoundFinished]) -> str:
    """One line answering "is the swarm helping me?" from this run's rounds ("" before any round that counts it)."""
    return swarm_help_text(SwarmGiven.of(metrics))


def swarm_help_text(g: SwarmGiven) -> str:
    """:func:`swarm_help_line` from totals kept as rounds arrive."""
    if not g.rounds:
        return ""
    over = f"in {_count(g.rounds, 'round')}"
    own = "everything it learned came from its own questions"
    if not g.rounds_asking:
        return f"{QUESTION} Not in this run: this node trains alone (it takes no peer groups), so {own}."
    if not g.peer_groups_received and not g.peer_groups_trained:
        return f"{QUESTION} Not yet: no peer group has reached this node {over}, so {own}."
    if not g.peers_with_spread:
        shared = _count(max(g.peer_groups_received, g.peer_groups_trained), "group")
        return (f"{QUESTION} Not yet: peers shared {shared} {over}, but none it "
                f"could train on had reward spread (every answer to a question scored the same), so they taught it "
                f"nothing and {own}.")
    taught = (f"{g.peer_share:.0%} of the groups this node learned from came from peers "
              f"({g.peers_with_spread} of {g.own_with_spread + g.peers_with_spread} with reward spread, {over})")
    if not g.rounds_peers_filled_a_gap:
        return (f"{QUESTION} A little: {taught}, but none on a task where its own questions had none: more signal, "
                f"none it lacked.")
    gap = []
    if g.spread_we_lacked:
        gap.append(f"{g.spread_we_lacked} had spread on a task where its own questions had none")
    if g.rounds_all_signal_from_peers:
        gap.append(f"in {_count(g.rounds_all_signal_from_peers, 'round')} peers gave all of the signal")
    verdict = "Yes" if g.rounds_peers_filled_a_gap >= OFTEN_SHARE * g.rounds_asking else "Now and then"
    return f"{QUESTION} {verdict}: {taught}; " + "; ".join(gap) + "."


@dataclass(frozen=True)
class FamilyAccuracy:
    family: str
    first: float | None  # at the run's first evaluation (None: the family was not in it)
    last: float
    questions: int | None  # held-out questions of the family in the last evaluation (None: not reported)

    @property
    def change(self) -> float | None:
        return None if self.first is None else self.last - self.first


def family_accuracy(evaluations: Sequence[EvalFinished]) -> list[FamilyAccuracy]:
    """Held-out accuracy per task family: at the first evaluation and the latest, in the latest one's order."""
    if not evaluations:
        return []
    first, last = evaluations[0], evaluations[-1]
    return [FamilyAccuracy(family, first.per_family.get(family), accuracy, last.per_family_questions.get(family))
            for family, accuracy in last.per_family.items()]
