"""The SAPO-specific steps of a round that need neither a model nor a network.

Local and peer groups take one path: :func:`score_group` grades a group's completions with our own verifier (a
peer's ground truth is never used: it does not even travel). Peer groups are first checked against tasks we
regenerate ourselves (a peer's question must be exactly the one its task reference produces, and its prompt format
ours). Which J of the verified groups a round trains on is :meth:`node.sapo.peer_buffer.PeerGroupBuffer.take`'s choice.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass

from node.swarm.records import RoundRecord, SharedGroup
from node.tasks.source import Grade, Task, TaskRejected, TaskSource

Grader = Callable[[Task, str, bool], Grade]  # (task, completion text, finished) -> Grade

# What became of a group (RolloutSample.fate): trained on, or in the update with all rewards equal (zero advantage:
# it moved nothing), or not trained because the round had no group with reward spread and skipped its update; a
# peer group may also be dropped before the update, not needed, or rejected (rejected:<reason>).
TRAINED = "trained"
NO_SIGNAL = "no_signal"
UPDATE_SKIPPED = "update_skipped"
DROPPED_EQUAL_REWARDS = "dropped_equal_rewards"
REWARD_TIE = 1e-9  # rewards closer than this are equal: float sums of the same grades may differ in the last bits


def equal_rewards(rewards: Collection[float]) -> bool:
    """Whether a group's completions all scored the same: GRPO's advantages are then all zero, as is its gradient."""
    return max(rewards) - min(rewards) < REWARD_TIE


def trained_fate(rewards: Collection[float], *, update_run: bool) -> str:
    """The fate of a group given to the update: what really happened to it, not merely that it was picked."""
    if not update_run:
        return UPDATE_SKIPPED
    return NO_SIGNAL if equal_rewards(rewards) else TRAINED


@dataclass(frozen=True)
class ScoredGroup:
    """One question and its G completions, graded by our verifier; ``peer_id`` is ours for local groups."""

    peer_id: str
    round: int
    local: bool
    task: Task
    texts: tuple[str, ...]
    finished: tuple[bool, ...]
    grades: tuple[Grade, ...]

    @property
    def rewards(self) -> tuple[float, ...]:
        return tuple(g.reward for g in self.grades)

    @property
    def zero_advantage(self) -> bool:
        """All completions scored the same: GRPO's advantages are all zero, the group gives no gradient."""
        return equal_rewards(self.rewards)

    @property
    def accuracy(self) -> float:
        return sum(g.exact for g in self.grades) / len(self.grades)


def score_group(
    grader: Grader, *, peer_id: str, round: int, local: bool, task: Task, texts, finished,
) -> ScoredGroup:
    texts, finished = tuple(texts), tuple(finished)
    grades = tuple(grader(task, text, done) for text, done in zip(texts, finished, strict=True))
    return ScoredGroup(peer_id, round, local, task, texts, finished, grades)


@dataclass(frozen=True)
class PeerSignal:
    """What the swarm gave one round's update, counted in groups with reward spread (the ones that give a gradient)."""

    local_with_spread: int  # our own groups with spread
    peers_with_spread: int  # peer groups in the update with spread
    spread_we_lacked: int  # of those, the ones on a family where every own group of the round had equal rewards


def peer_signal(local: Iterable[ScoredGroup], peers: Iterable[ScoredGroup]) -> PeerSignal:
    """Count the reward spread a round's peer groups brought that its own groups lacked.

    A peer group brings spread we lacked when its rewards differ and this round drew at least one question of the same
    task family for itself, all of whose groups scored every completion the same (all right or all wrong): there the
    peer's group gives a gradient on a family where ours gave none. A family the round did not draw for itself does
    not count, so the figure never credits peers merely for covering other questions.
    """
    local, peers = list(local), list(peers)
    ours_with_spread = {g.task.ref.family for g in local if not g.zero_advantage}
    ours_flat = {g.task.ref.family for g in local} - ours_with_spread
    with_spread = [g for g in peers if not g.zero_advantage]
    return PeerSignal(
        local_with_spread=sum(not g.zero_advantage for g in local),
        peers_with_spread=len(with_spread),
        spread_we_lacked=sum(g.task.ref.family in ours_flat for g in with_spread),
    )


@dataclass(frozen=True)
class RejectedGroup:
    peer_id: str
    round: int
    group: SharedGroup
    reason: str


@dataclass
class Verification:
    accepted: list[ScoredGroup]
    rejected: list[RejectedGroup]

    @property
    def reasons(self) -> Counter[str]:
        return Counter(r.reason for r in self.rejected)


def verify_records(
    records: Iterable[RoundRecord], tasks: TaskSource, *, num_generations: int, grader: Grader,
    prompt_format: int,
) -> Verification:
    """Check peers' groups against our own regenerated tasks and grade those that pass."""
    accepted: list[ScoredGroup] = []
    rejected: list[RejectedGroup] = []
    for record in records:
        for group in record.groups:
            reason, task = _check(group, record, tasks, num_generations, prompt_format)
            if task is None:
                rejected.append(RejectedGroup(record.peer_id, record.round, group, reason))
                continue
            accepted.append(score_group(
                grader, peer_id=record.peer_id, round=record.round, local=False, task=task,
                texts=group.completions[:num_generations], finished=group.finished[:num_generations],
            ))
    return Verification(accepted=accepted, rejected=rejected)


def _check(group: SharedGroup, record: RoundRecord, tasks: TaskSource, num_generations: int,
           prompt_format: int) -> tuple[str, Task | None]:
    if record.prompt_format != prompt_format:
        # Its completions answer another prompt than the one we would train them under.
        return "prompt_format_mismatch", None
    if len(group.completions) < num_generations:
        return "group_too_small", None
    try:
        task = tasks.regenerate(group.task)
    except TaskRejected as exc:
        return exc.reason, None
    if task.question != group.question:
        # The peer's text is not what its task reference generates: a forged or corrupted question.
        return "question_mismatch", None
    return "", task
