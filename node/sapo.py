"""The SAPO-specific steps of a round that need neither a model nor a network.

Peer groups are checked against tasks we regenerate ourselves (a peer's question must be exactly the one its
task reference produces, and its ground truth is never used), scored with our own verifier, filtered for zero
advantage and sampled uniformly, preferring groups of the current round over the previous one.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from node.records import RoundRecord
from node.tasks import Task, TaskRejected, TaskSource


@dataclass(frozen=True)
class PeerGroup:
    """A peer's group that passed every check, scored by our verifier."""

    peer_id: str
    round: int
    task: Task
    texts: tuple[str, ...]
    finished: tuple[bool, ...]
    rewards: tuple[float, ...]

    @property
    def zero_advantage(self) -> bool:
        return max(self.rewards) - min(self.rewards) < 1e-9


@dataclass
class Verification:
    accepted: list[PeerGroup]
    rejected: Counter[str]


def verify_records(
    records: Iterable[RoundRecord], tasks: TaskSource, *, num_generations: int,
    scorer: Callable[[Task, str], float],
) -> Verification:
    accepted: list[PeerGroup] = []
    rejected: Counter[str] = Counter()
    for record in records:
        for group in record.groups:
            if len(group.completions) < num_generations:
                rejected["group_too_small"] += 1
                continue
            try:
                task = tasks.regenerate(group.task)
            except TaskRejected as exc:
                rejected[exc.reason] += 1
                continue
            if task.question != group.question:
                # The peer's text is not what its task reference generates: a forged or corrupted question.
                rejected["question_mismatch"] += 1
                continue
            texts = tuple(group.completions[:num_generations])
            accepted.append(
                PeerGroup(
                    peer_id=record.peer_id,
                    round=record.round,
                    task=task,
                    texts=texts,
                    finished=tuple(group.finished[:num_generations]),
                    rewards=tuple(scorer(task, text) for text in texts),
                )
            )
    return Verification(accepted=accepted, rejected=rejected)


def select_external(
    candidates: list[PeerGroup], count: int, rng: random.Random, *, current_round: int, drop_zero_advantage: bool,
) -> tuple[list[PeerGroup], int]:
    """Pick ``count`` groups uniformly, current round first, at most one per peer (so that many groups or rounds of
    one peer cannot fill the J slots); returns them and how many zero-advantage were dropped."""
    usable = [g for g in candidates if not (drop_zero_advantage and g.zero_advantage)]
    dropped = len(candidates) - len(usable)
    current = [g for g in usable if g.round == current_round]
    older = [g for g in usable if g.round != current_round]
    rng.shuffle(current)
    rng.shuffle(older)
    chosen: list[PeerGroup] = []
    peers: set[str] = set()
    for group in current + older:
        if len(chosen) < count and group.peer_id not in peers:
            chosen.append(group)
            peers.add(group.peer_id)
    return chosen, dropped
