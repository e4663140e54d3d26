"""One SAPO round, top to bottom; it never waits for a peer.

1. sample I local questions at the curriculum's level of each family;
2. generate G completions for each, in one batched call;
3. grade them with our verifier and hand them to the exchange to publish (as text, with task refs, never ground
   truth), without waiting for the store;
4. take J peer groups at once from the buffer the exchange's background feed fills and a verifier thread checks and
   grades with the same verifier (:mod:`node.sapo.peer_buffer`): fresh ones only, fewer when it is short, chosen
   uniformly as in SAPO or teaching-first (:mod:`node.sapo.teaching`, from our own recent accuracy per family);
5. one GRPO update on the local and taken groups, skipped when none has reward spread (no gradient);
6. move the curriculum, and report metrics (with the age of the peer groups used) and one sample per group.

The round talks to the swarm only through an :class:`~node.swarm.exchange.Exchange` and a
:class:`~node.sapo.peer_buffer.PeerGroupBuffer`, so it runs the same over the DHT or in memory; it reports through
callbacks, and the caller (:mod:`node.runner`) owns events, persistence and the chain.
"""

from __future__ import annotations

import logging
import random
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from node.clock import SwarmClock
from node.config import PeerAdvantages, PeerChoice
from node.events import RolloutSample, RoundFinished, RoundProgress
from node.learning.grpo import Completion, GrpoLearner, Policy, StepStats, TrainGroup
from node.sapo.peer_buffer import Buffered, PeerGroupBuffer, Taken
from node.sapo.peer_text import outside_text_limit, within_limit
from node.sapo.scoring import (
    DROPPED_EQUAL_REWARDS, RejectedGroup, ScoredGroup, Verification, peer_signal, score_group, trained_fate,
    verify_records,
)
from node.sapo.teaching import OwnAccuracy, teaching_rank
from node.swarm.exchange import Exchange
from node.swarm.identity import peer_name
from node.swarm.records import RoundRecord, SharedGroup
from node.tasks.curriculum import Curriculum
from node.tasks.prompts import PROMPT_FORMAT
from node.tasks.source import Grade, Task, TaskSource, grade

log = logging.getLogger(__name__)

SAMPLE_TEXT_CHARS = 2000  # rollout samples are for reading, not for training
PROGRESS_EVERY_TOKENS = 8


class RoundCancelled(Exception):
    """Stop was requested while the round's completions were being generated."""


@dataclass(frozen=True)
class RoundSettings:
    local_questions: int  # I
    external_groups: int  # J
    num_generations: int  # G
    max_new_tokens: int
    temperature: float
    top_p: float
    format_reward_weight: float
    drop_zero_advantage: bool
    peer_text_ratio: float = 2.0  # cap on peer text outside <answer>, relative to our own (node.sapo.peer_text)
    peer_logprob_floor: float | None = None  # least mean per-token log-prob of a peer completion under our policy
    peer_choice: PeerChoice = "uniform"  # how J peer groups are chosen among the usable ones (node.sapo.teaching)
    peer_advantages: PeerAdvantages = "full"  # "positive": a peer completion below its group's mean gets advantage 0


class PeerRegistry(Protocol):
    """Which peers are registered on the chain's coordinator (:class:`node.chain.participant.ChainParticipant`);
    answers from what it knows, never waits for the chain."""

    def registered_peers(self, peer_ids: Iterable[str]) -> set[str]: ...


@dataclass
class RoundParts:
    """Everything a round uses, wired once by :func:`node.runner.build_node` (or by a test)."""

    peer_id: str
    tasks: TaskSource
    policy: Policy
    learner: GrpoLearner
    exchange: Exchange
    curriculum: Curriculum
    settings: RoundSettings
    registry: PeerRegistry | None = None  # with a chain: groups of registered peers are picked first
    clock: SwarmClock = SwarmClock()  # the swarm round our groups are published under
    buffer: PeerGroupBuffer | None = None  # peers' groups (see connect_peers); None: solo
    own_accuracy: OwnAccuracy = field(default_factory=OwnAccuracy)  # what the teaching-first choice reads

    def verify(self, record: RoundRecord) -> Verification:
        """A peer's groups checked against the tasks we regenerate, graded by our verifier (the buffer's thread)."""
        return verify_records([record], self.tasks, num_generations=self.settings.num_generations, grader=self.grade,
                              prompt_format=PROMPT_FORMAT)

    def grade(self, task: Task, text: str, finished: bool) -> Grade:
        """The one verifier of this node, for local and peer completions alike."""
        return grade(task, text, finished=finished, format_weight=self.settings.format_reward_weight)

    def prompt_ids(self, task: Task) -> tuple[int, ...]:
        return self.policy.prompt_ids(self.tasks.messages(task))

    def to_train_group(self, group: ScoredGroup, completions: list[Completion] | None = None) -> TrainGroup:
        """Token ids for the update; a peer's text is re-tokenized with our tokenizer under our own prompt."""
        if completions is None:
            completions = [
                self.policy.encode_completion(text, finished=done, max_new_tokens=self.settings.max_new_tokens)
                for text, done in zip(group.texts, group.finished, strict=True)
            ]
        return TrainGroup(prompt_ids=self.prompt_ids(group.task), completions=tuple(completions), rewards=group.rewards,
                          push_down=self.pushes_down(group))

    def pushes_down(self, group: ScoredGroup) -> bool:
        """Whether the group's completions below its mean are trained down (see RoundSettings.peer_advantages)."""
        return group.local or self.settings.peer_advantages == "full"


@dataclass
class RoundOutcome:
    metrics: RoundFinished
    samples: list[RolloutSample]
    peers: set[str]
    rewards_by_peer: dict[str, list[float]]  # for the chain's reward submission


Report = Callable[[RoundProgress], None]


def connect_peers(parts: RoundParts, *, max_bytes: int, max_per_peer: int, max_age_s: float | None) -> None:
    """Start filling a buffer of peers' groups in the background (nothing to do for a solo node, J = 0)."""
    if parts.settings.external_groups == 0:
        return
    parts.buffer = PeerGroupBuffer(
        parts.clock, parts.verify, max_bytes=max_bytes, max_per_peer=max_per_peer, max_age_s=max_age_s,
        drop_zero_advantage=parts.settings.drop_zero_advantage, penalize=parts.exchange.penalize,
    )
    parts.buffer.start()
    parts.exchange.start_feed(parts.buffer, parts.clock)


def disconnect_peers(parts: RoundParts) -> None:
    if parts.buffer is not None:
        parts.buffer.stop()


def play_round(
    parts: RoundParts, number: int, *, seed: str, rounds_trained: int, should_stop: Callable[[], bool],
    report: Report = lambda progress: None,
) -> RoundOutcome:
    """Round ``number`` of this node (its own count; the swarm round it publishes under comes from the clock)."""
    s = parts.settings
    started = time.perf_counter()
    rng = random.Random(seed)
    difficulty = dict(parts.curriculum.levels)

    # 1-2. our questions and their completions
    t0 = time.perf_counter()
    tasks = parts.tasks.sample(s.local_questions, rng, difficulty)
    generated = _generate(parts, number, tasks, rng, should_stop, report)
    seconds_generate = time.perf_counter() - t0
    if should_stop():  # generation was cut short: nothing of this round is trained or shared
        raise RoundCancelled
    tokens = sum(len(c.ids) for completions in generated for c in completions)

    # 3. grade and publish (in the background)
    local = [
        score_group(parts.grade, peer_id=parts.peer_id, round=number, local=True, task=task,
                    texts=[c.text for c in completions], finished=[c.finished for c in completions])
        for task, completions in zip(tasks, generated, strict=True)
    ]
    for group in local:  # before taking: this round's own groups are the freshest word on where we are weak
        parts.own_accuracy.record(group.task.ref.family, group.accuracy)
    report(RoundProgress(round=number, phase="sharing", done=0, total=len(local)))
    t0 = time.perf_counter()
    shared = _publish(parts, local)
    seconds_share = time.perf_counter() - t0

    # 4. J peer groups from the buffer, at once
    t0 = time.perf_counter()
    taken = _take(parts, local, rng)
    chosen = [item.group for item in taken.chosen]
    seconds_gather = time.perf_counter() - t0

    # 5. one GRPO update, unless no group can give a gradient
    trained = local + chosen
    with_spread = [g for g in trained if not g.zero_advantage]
    if with_spread:
        report(RoundProgress(round=number, phase="training", done=0, total=len(trained)))
        train_groups = [parts.to_train_group(g, c) for g, c in zip(local, generated, strict=True)]
        train_groups += [parts.to_train_group(g) for g in chosen]
        stats = parts.learner.step(train_groups)
    else:
        stats = StepStats(loss=0.0, kl=None, completion_length=_mean([c.length for cs in generated for c in cs]),
                          seconds=0.0)

    # 6. curriculum, metrics, samples
    for group in local:
        parts.curriculum.record(group.task.ref.family, parts.tasks.level_of(group.task.ref), group.accuracy,
                                not group.zero_advantage)
    moved = parts.curriculum.update()
    if moved:
        log.info("curriculum: %s", ", ".join(f"{family} -> level {level}" for family, level in moved.items()))

    local_grades = [g for group in local for g in group.grades]
    local_rewards = [g.reward for g in local_grades]
    external_rewards = [r for group in chosen for r in group.rewards]
    rejected = Counter(r.reason for r in taken.rejected)
    ages = _ages(parts.clock, taken.chosen)
    registered = None if parts.registry is None else parts.registry.registered_peers(g.peer_id for g in chosen)
    signal = peer_signal(local, chosen)
    seconds_total = time.perf_counter() - started
    if parts.buffer is not None:
        parts.buffer.round_took(seconds_total)
    metrics = RoundFinished(
        round=number,
        rounds_trained=rounds_trained + 1,
        reward_local=_mean(local_rewards),
        reward_external=_mean(external_rewards) if external_rewards else None,
        reward_train=_mean(local_rewards + external_rewards),
        loss=stats.loss,
        kl=stats.kl,
        completion_length=stats.completion_length,
        tokens_generated=tokens,
        generation_tokens_per_s=tokens / seconds_generate if seconds_generate > 0 else 0.0,
        seconds_generate=seconds_generate,
        seconds_share=seconds_share,
        seconds_gather=seconds_gather,
        seconds_train=stats.seconds,
        seconds_total=seconds_total,
        peers_seen=len(taken.peers),
        groups_shared=shared,
        groups_received=taken.arrived,
        groups_used=len(chosen),
        groups_zero_advantage=len(taken.dropped),
        groups_rejected=sum(rejected.values()),
        rejected_reasons=dict(rejected),
        groups_not_needed=taken.expired,
        wellformed_rate=_mean([g.wellformed for g in local_grades]),
        accuracy_local=_mean([g.exact for g in local_grades]),
        groups_with_spread=len(with_spread) / len(trained) if trained else 0.0,
        mean_abs_advantage=stats.mean_abs_advantage,
        grad_norm=stats.grad_norm,
        entropy=stats.entropy,
        update_skipped=not with_spread,
        difficulty=difficulty,
        groups_from_registered=None if registered is None else sum(g.peer_id in registered for g in chosen),
        external_groups_wanted=s.external_groups,
        peer_groups_buffered=taken.left,
        local_groups_with_spread=signal.local_with_spread,
        peer_groups_with_spread=signal.peers_with_spread,
        peer_groups_spread_we_lacked=signal.spread_we_lacked,
        **ages,
    )
    fates = {id(g): trained_fate(g.rewards, update_run=bool(with_spread)) for g in trained}
    samples = [_sample(number, g, fates[id(g)]) for g in trained]
    samples += [_sample(number, g, DROPPED_EQUAL_REWARDS) for g in taken.dropped]
    samples += [_rejected_sample(number, r) for r in taken.rejected]
    rewards_by_peer: dict[str, list[float]] = {parts.peer_id: local_rewards}
    for group in chosen:
        rewards_by_peer.setdefault(group.peer_id, []).extend(group.rewards)
    log.info(
        "round %d: reward %.3f, exact %.2f, well-formed %.2f | %d peers | peer groups: %d of %d trained (age %s; "
        "%d with spread our own groups lacked), "
        "%d arrived, %d equal rewards, %d rejected (%s), %d stale, %d buffered | %s | %.1f s",
        number, metrics.reward_local, metrics.accuracy_local, metrics.wellformed_rate, metrics.peers_seen,
        metrics.groups_used, s.external_groups,
        "-" if metrics.peer_group_age_s_max is None else f"max {metrics.peer_group_age_s_max:.1f} s",
        signal.spread_we_lacked,
        metrics.groups_received, metrics.groups_zero_advantage, metrics.groups_rejected,
        ", ".join(f"{k} {v}" for k, v in rejected.items()) or "-", metrics.groups_not_needed, taken.left,
        "update skipped: no group with reward spread" if metrics.update_skipped
        else f"updated on {len(trained)} groups ({len(with_spread)} with spread)", metrics.seconds_total,
    )
    return RoundOutcome(metrics=metrics, samples=samples, peers=taken.peers, rewards_by_peer=rewards_by_peer)


def _generate(parts: RoundParts, number: int, tasks: list[Task], rng: random.Random,
              should_stop: Callable[[], bool], report: Report) -> list[list[Completion]]:
    s = parts.settings
    steps = 0

    def polled() -> bool:  # called once per generated token
        nonlocal steps
        if steps % PROGRESS_EVERY_TOKENS == 0:
            report(RoundProgress(round=number, phase="generating", done=steps, total=s.max_new_tokens,
                                 detail=f"{len(tasks)} questions x {s.num_generations} completions"))
        steps += 1
        return should_stop()

    return parts.policy.generate(
        [parts.prompt_ids(task) for task in tasks], num_generations=s.num_generations,
        max_new_tokens=s.max_new_tokens, temperature=s.temperature, top_p=s.top_p, seed=rng.getrandbits(63),
        should_stop=polled,
    )


def _publish(parts: RoundParts, local: list[ScoredGroup]) -> int:
    """Hand our groups to the exchange under the current swarm round; returns at once (how many were handed)."""
    record = RoundRecord(
        peer_id=parts.peer_id, round=parts.clock.now(), prompt_format=PROMPT_FORMAT,
        groups=tuple(SharedGroup(task=g.task.ref, question=g.task.question, completions=g.texts, finished=g.finished)
                     for g in local),
    )
    # groups whose completions our verifier graded differently: receivers fetch those first
    spread = [i for i, g in enumerate(local) if not g.zero_advantage]
    return len(record.groups) if parts.exchange.publish(record, spread=spread, wait=False) else 0


def _take(parts: RoundParts, local: list[ScoredGroup], rng: random.Random) -> Taken:
    """J peer groups from the buffer now, each checked once more against what only this round knows: the cap on
    peer text outside <answer> (relative to our own texts) and, when set, the log-prob floor under our policy."""
    s = parts.settings
    if parts.buffer is None or s.external_groups == 0:
        return Taken(chosen=[])
    text_limit = outside_text_limit([t for g in local for t in g.texts], s.peer_text_ratio)

    def keep(group: ScoredGroup) -> str:
        if not within_limit(group.texts, group.rewards, text_limit):
            return "payload_outside_answer"
        if s.peer_logprob_floor is not None and not _likely_enough(parts, group, s.peer_logprob_floor):
            return "unlikely_text"
        return ""

    peers = {item.peer_id for item in parts.buffer.candidates()} if parts.registry is not None else set()
    registered = None if parts.registry is None else parts.registry.registered_peers(peers)
    rank = teaching_rank(parts.own_accuracy) if s.peer_choice == "teaching" else None
    return parts.buffer.take(s.external_groups, rng, keep=keep, preferred=registered, rank=rank)


def _ages(clock: SwarmClock, chosen: list[Buffered]) -> dict:
    """Mean and maximum age of the peer groups trained on, in swarm rounds and in seconds (None without any)."""
    if not chosen:
        return {}
    now, round_now = time.time(), clock.now()
    rounds = [round_now - item.record.round for item in chosen]
    seconds = [max(0.0, now - item.published_at) for item in chosen]
    return {"peer_group_age_rounds_mean": _mean(rounds), "peer_group_age_rounds_max": max(rounds),
            "peer_group_age_s_mean": _mean(seconds), "peer_group_age_s_max": max(seconds)}


def _likely_enough(parts: RoundParts, group: ScoredGroup, floor: float) -> bool:
    """Whether every completion's mean per-token log-prob under our policy, after the prompt we would train it
    under, reaches ``floor``: text our policy finds extremely unlikely is no rollout of a policy like ours."""
    if parts.settings.drop_zero_advantage and group.zero_advantage:
        return True  # never trained, so not worth a forward pass
    train = parts.to_train_group(group)
    return min(parts.policy.completion_logprobs(train.prompt_ids, train.completions)) >= floor


def _sample(number: int, group: ScoredGroup, fate: str) -> RolloutSample:
    best = max(range(len(group.texts)), key=lambda i: group.grades[i].reward)
    return RolloutSample(
        round=number, source_peer=group.peer_id, source_name=peer_name(group.peer_id), local=group.local,
        family=group.task.ref.family, question=group.task.question[:SAMPLE_TEXT_CHARS],
        completion=group.texts[best][:SAMPLE_TEXT_CHARS], reward=group.grades[best].reward,
        expected=group.task.answer, reason=group.grades[best].reason, fate=fate, group_rewards=list(group.rewards),
    )


def _rejected_sample(number: int, rejected: RejectedGroup) -> RolloutSample:
    group = rejected.group
    return RolloutSample(
        round=number, source_peer=rejected.peer_id, source_name=peer_name(rejected.peer_id), local=False,
        family=group.task.family, question=group.question[:SAMPLE_TEXT_CHARS],
        completion=(group.completions[0] if group.completions else "")[:SAMPLE_TEXT_CHARS], reward=0.0,
        expected=None, reason="", fate=f"rejected:{rejected.reason}", group_rewards=[],
    )


def _mean(values) -> float:
    values = list(values)
    return float(sum(values)) / len(values) if values else 0.0
