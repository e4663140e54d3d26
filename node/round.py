"""One SAPO round, top to bottom.

1. sample I local questions at the curriculum's level of each family;
2. generate G completions for each, in one batched call;
3. grade them with our verifier and publish them (as text, with task refs, never ground truth);
4. gather peers' groups until J usable ones are in, every live peer's record is in, or the deadline passes;
5. verify and grade every peer group with the same verifier, drop equal-reward groups, pick J;
6. one GRPO update on the local and picked groups, skipped when none has reward spread (no gradient);
7. move the curriculum, and report metrics and one sample per group with its fate.

The round talks to the swarm only through an :class:`~node.exchange.Exchange`, so it runs the same over the DHT or
in memory; it reports through callbacks, and the caller (:mod:`node.runner`) owns events, persistence and the chain.
"""

from __future__ import annotations

import logging
import random
import statistics
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from node.curriculum import Curriculum
from node.events import RolloutSample, RoundFinished, RoundProgress
from node.exchange import Exchange
from node.grpo import Completion, GrpoLearner, Policy, StepStats, TrainGroup
from node.identity import peer_name
from node.peer_text import outside_text_limit, within_limit
from node.prompts import PROMPT_FORMAT
from node.records import RoundRecord, SharedGroup
from node.sapo import (
    DROPPED_EQUAL_REWARDS, NOT_NEEDED, RejectedGroup, ScoredGroup, score_group, select_external, trained_fate,
    verify_records,
)
from node.tasks import Grade, Task, TaskSource, grade

log = logging.getLogger(__name__)

SAMPLE_TEXT_CHARS = 2000  # rollout samples are for reading, not for training
GATHER_POLL_S = 1.0
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
    gather_timeout_s: float
    peer_text_ratio: float = 2.0  # cap on peer text outside <answer>, relative to our own (node.peer_text)
    peer_logprob_floor: float | None = None  # least mean per-token log-prob of a peer completion under our policy


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
        return TrainGroup(prompt_ids=self.prompt_ids(group.task), completions=tuple(completions), rewards=group.rewards)


@dataclass
class Gathering:
    candidates: list[ScoredGroup] = field(default_factory=list)
    rejected: list[RejectedGroup] = field(default_factory=list)
    undecodable: Counter[str] = field(default_factory=Counter)  # records the exchange refused before decoding
    peers: set[str] = field(default_factory=set)
    stopped_because: str = ""


@dataclass
class RoundOutcome:
    metrics: RoundFinished
    samples: list[RolloutSample]
    peers: set[str]
    rewards_by_peer: dict[str, list[float]]  # for the chain's reward submission


Report = Callable[[RoundProgress], None]
OnWait = Callable[[str], None]


def play_round(
    parts: RoundParts, number: int, *, seed: str, rounds_trained: int, should_stop: Callable[[], bool],
    report: Report = lambda progress: None, on_wait: OnWait = lambda detail: None,
) -> RoundOutcome:
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

    # 3. grade and publish
    local = [
        score_group(parts.grade, peer_id=parts.peer_id, round=number, local=True, task=task,
                    texts=[c.text for c in completions], finished=[c.finished for c in completions])
        for task, completions in zip(tasks, generated, strict=True)
    ]
    report(RoundProgress(round=number, phase="sharing", done=0, total=len(local)))
    t0 = time.perf_counter()
    shared = _publish(parts, number, local)
    seconds_share = time.perf_counter() - t0

    # 4-5. peers' groups, verified and graded by us; J picked among those with reward spread
    t0 = time.perf_counter()
    gathering = _gather(parts, number, local, should_stop, report, on_wait)
    registered = None if parts.registry is None else parts.registry.registered_peers(
        g.peer_id for g in gathering.candidates)
    selection = select_external(
        gathering.candidates, s.external_groups, rng, current_round=number, drop_zero_advantage=s.drop_zero_advantage,
        preferred=registered,
    )
    seconds_gather = time.perf_counter() - t0

    # 6. one GRPO update, unless no group can give a gradient
    trained = local + selection.chosen
    with_spread = [g for g in trained if not g.zero_advantage]
    if with_spread:
        report(RoundProgress(round=number, phase="training", done=0, total=len(trained)))
        train_groups = [parts.to_train_group(g, c) for g, c in zip(local, generated, strict=True)]
        train_groups += [parts.to_train_group(g) for g in selection.chosen]
        stats = parts.learner.step(train_groups)
    else:
        stats = StepStats(loss=0.0, kl=None, completion_length=_mean([len(c.ids) for cs in generated for c in cs]),
                          seconds=0.0)

    # 7. curriculum, metrics, samples
    for group in local:
        parts.curriculum.record(group.task.ref.family, parts.tasks.level_of(group.task.ref), group.accuracy,
                                not group.zero_advantage)
    moved = parts.curriculum.update()
    if moved:
        log.info("curriculum: %s", ", ".join(f"{family} -> level {level}" for family, level in moved.items()))

    local_grades = [g for group in local for g in group.grades]
    local_rewards = [g.reward for g in local_grades]
    external_rewards = [r for group in selection.chosen for r in group.rewards]
    rejected = Counter(r.reason for r in gathering.rejected) + gathering.undecodable
    received = len(gathering.candidates) + sum(rejected.values())
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
        seconds_total=time.perf_counter() - started,
        peers_seen=len(gathering.peers),
        groups_shared=shared,
        groups_received=received,
        groups_used=len(selection.chosen),
        groups_zero_advantage=selection.count(DROPPED_EQUAL_REWARDS),
        groups_rejected=sum(rejected.values()),
        rejected_reasons=dict(rejected),
        groups_not_needed=selection.count(NOT_NEEDED),
        wellformed_rate=_mean([g.wellformed for g in local_grades]),
        accuracy_local=_mean([g.exact for g in local_grades]),
        groups_with_spread=len(with_spread) / len(trained) if trained else 0.0,
        mean_abs_advantage=_mean_abs_advantage(trained),
        grad_norm=stats.grad_norm,
        entropy=stats.entropy,
        update_skipped=not with_spread,
        difficulty=difficulty,
        groups_from_registered=None if registered is None else sum(g.peer_id in registered for g in selection.chosen),
    )
    fates = selection.fates | {id(g): trained_fate(g.rewards, update_run=bool(with_spread)) for g in trained}
    samples = [_sample(number, g, fates[id(g)]) for g in local + gathering.candidates]
    samples += [_rejected_sample(number, r) for r in gathering.rejected]
    rewards_by_peer: dict[str, list[float]] = {parts.peer_id: local_rewards}
    for group in selection.chosen:
        rewards_by_peer.setdefault(group.peer_id, []).extend(group.rewards)
    log.info(
        "round %d: reward %.3f, exact %.2f, well-formed %.2f | %d peers | peer groups: %d trained, %d equal rewards, "
        "%d not needed, %d rejected (%s) | %s | %.1f s",
        number, metrics.reward_local, metrics.accuracy_local, metrics.wellformed_rate, metrics.peers_seen,
        metrics.groups_used, metrics.groups_zero_advantage, metrics.groups_not_needed, metrics.groups_rejected,
        gathering.stopped_because or "-", "update skipped: no group with reward spread" if metrics.update_skipped
        else f"updated on {len(trained)} groups ({len(with_spread)} with spread)", metrics.seconds_total,
    )
    return RoundOutcome(metrics=metrics, samples=samples, peers=gathering.peers, rewards_by_peer=rewards_by_peer)


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


def _publish(parts: RoundParts, number: int, local: list[ScoredGroup]) -> int:
    record = RoundRecord(
        peer_id=parts.peer_id, round=number, prompt_format=PROMPT_FORMAT,
        groups=tuple(SharedGroup(task=g.task.ref, question=g.task.question, completions=g.texts, finished=g.finished)
                     for g in local),
    )
    # groups whose completions our verifier graded differently: receivers fetch those first
    spread = [i for i, g in enumerate(local) if not g.zero_advantage]
    return len(record.groups) if parts.exchange.publish(record, spread=spread) else 0


def _gather(parts: RoundParts, number: int, local: list[ScoredGroup], should_stop: Callable[[], bool],
            report: Report, on_wait: OnWait) -> Gathering:
    """Peers' groups of this round and the previous one, until waiting longer cannot help."""
    s = parts.settings
    deadline = time.monotonic() + s.gather_timeout_s
    verified: dict[tuple[str, int], tuple[list[ScoredGroup], list[RejectedGroup]]] = {}
    undecodable: dict[int, Counter[str]] = {}
    peers: set[str] = set()
    text_limit = outside_text_limit([t for g in local for t in g.texts], s.peer_text_ratio)
    while True:
        published_now: frozenset[str] = frozenset()
        exhausted = True
        for round_ in (number, number - 1) if number > 0 else (number,):
            result = parts.exchange.gather(round_)
            peers |= result.peers
            undecodable[round_] = result.rejected
            exhausted = exhausted and result.exhausted
            if round_ == number:
                published_now = result.peers
            for record in result.records:
                if (record.peer_id, record.round) not in verified:  # each record is verified once
                    v = verify_records([record], parts.tasks, num_generations=s.num_generations, grader=parts.grade,
                                       prompt_format=PROMPT_FORMAT)
                    accepted, rejected = _refuse(v.accepted, v.rejected, "payload_outside_answer",
                                                 lambda g: within_limit(g.texts, g.rewards, text_limit))
                    if s.peer_logprob_floor is not None:  # after the length cap, which bounds what it scores
                        accepted, rejected = _refuse(accepted, rejected, "unlikely_text",
                                                     lambda g: _likely_enough(parts, g, s.peer_logprob_floor))
                    verified[(record.peer_id, record.round)] = (accepted, rejected)
                    if rejected:  # forged, foreign or payload-carrying: counts toward the peer's backoff
                        parts.exchange.penalize(record.peer_id)
        candidates = [g for accepted, _ in verified.values() for g in accepted]
        usable = sum(1 for g in candidates if not (s.drop_zero_advantage and g.zero_advantage))
        live = parts.exchange.peers_seen()
        reason = _stop_waiting(parts, usable, len(published_now), live, deadline, should_stop) or (
            "fetch budget spent" if exhausted and usable < s.external_groups else "")
        if reason:
            break
        heard = f"{len(published_now)} of {live} live peers published" if live else "no live peer seen yet"
        detail = f"{usable}/{s.external_groups} usable peer groups; {heard}"
        on_wait(detail)
        report(RoundProgress(round=number, phase="waiting_for_peers", done=usable, total=s.external_groups,
                             detail=detail))
        _sleep(GATHER_POLL_S, should_stop)
    return Gathering(
        candidates=candidates,
        rejected=[r for _, rejected in verified.values() for r in rejected],
        undecodable=sum(undecodable.values(), Counter()),
        peers=peers,
        stopped_because=reason,
    )


def _refuse(accepted: list[ScoredGroup], rejected: list[RejectedGroup], reason: str,
            keep: Callable[[ScoredGroup], bool]) -> tuple[list[ScoredGroup], list[RejectedGroup]]:
    """Move the groups that ``keep`` refuses from accepted to rejected, for ``reason``."""
    kept, dropped = [], []
    for g in accepted:
        if keep(g):
            kept.append(g)
        else:
            dropped.append(RejectedGroup(peer_id=g.peer_id, round=g.round, reason=reason,
                                         group=SharedGroup(g.task.ref, g.task.question, g.texts, g.finished)))
    return kept, rejected + dropped


def _likely_enough(parts: RoundParts, group: ScoredGroup, floor: float) -> bool:
    """Whether every completion's mean per-token log-prob under our policy, after the prompt we would train it
    under, reaches ``floor``: text our policy finds extremely unlikely is no rollout of a policy like ours."""
    if parts.settings.drop_zero_advantage and group.zero_advantage:
        return True  # never trained, so not worth a forward pass
    train = parts.to_train_group(group)
    return min(parts.policy.completion_logprobs(train.prompt_ids, train.completions)) >= floor


def _stop_waiting(parts: RoundParts, usable: int, published: int, live: int, deadline: float,
                  should_stop: Callable[[], bool]) -> str:
    """Why waiting for more peer groups is over ("" while it is not)."""
    if parts.settings.external_groups == 0:
        return "solo (J = 0)"
    if usable >= parts.settings.external_groups:
        return "enough peer groups"
    if should_stop():
        return "stopping"
    if live == 0 and parts.exchange.connected_peers() == 0:
        return "no peers: trained solo"
    if live > 0 and published >= live:
        return "every live peer's record is in"
    if time.monotonic() >= deadline:
        return "gather deadline passed"
    return ""


def _sleep(seconds: float, should_stop: Callable[[], bool]) -> None:
    end = time.monotonic() + seconds
    while not should_stop() and (left := end - time.monotonic()) > 0:
        time.sleep(min(0.1, left))


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


def _mean_abs_advantage(groups: list[ScoredGroup]) -> float:
    """Mean |advantage| over the trained completions, with GRPO's per-group normalization."""
    values = []
    for group in groups:
        rewards = group.rewards
        mean, std = statistics.fmean(rewards), statistics.pstdev(rewards)
        values += [abs(r - mean) / (std + 1e-4) for r in rewards]
    return _mean(values)


def _mean(values) -> float:
    values = list(values)
    return float(sum(values)) / len(values) if values else 0.0
