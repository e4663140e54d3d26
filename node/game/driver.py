"""Plays rounds of the multi-stage game: answer, critique, revise; each stage one GRPO update of the one model.

Timing: a node announces a stage when it starts generating for it (for critique and revise: once their inputs are
gathered, so a peer that joins while others wait for answers still answers). It enters a round at the swarm's
current position (a late joiner plays the critique of a round whose answers are out, and its revision); within a
round it moves to the stage the swarm (or the chain's coordinator, 3 stages per round in 0.4.x/0.5.x) has reached,
and a round the swarm has left behind is closed early. Before a stage that needs peers' work, the node waits for
the peers that will still publish it (see :meth:`GameDriver._gather`), at most ``gather_timeout_s``. A node with no
peer answers plays the answer stage only, and says so.

Trust: peers' texts are only ever shown to our model or judged by our verifier on the task we regenerated; a peer
item whose question is not exactly what its task reference generates is rejected. Round winners are the peers
whose final answers our verifier scores best.
"""

from __future__ import annotations

import hashlib
import logging
import random
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from node.events import EventBus, RolloutSample, RoundFinished, RoundProgress
from node.game import GAME_FAMILIES, STAGE_MAX_REWARD, STAGES
from node.game.exchange import GameExchange, Position
from node.game.prompts import (
    CriticView, ShownAnswer, answer_value, answer_well_formed, canonical, critic_view,
    NONE, critique_messages, excerpt, majority, parse_critique, revise_messages,
)
from node.game.records import MAX_TEXT_CHARS, StageItem, StageRecord
from node.game.rewards import (
    answer_reward, correctness, critique_reward, is_exact, majority_is_right, revise_reward, value_is_correct,
)
from node.learning.grpo import Completion, GrpoLearner, Policy, TrainGroup
from node.sapo.scoring import equal_rewards, trained_fate
from node.swarm.identity import peer_name
from node.tasks.source import Task, TaskSource

log = logging.getLogger(__name__)

ANSWER, CRITIQUE, REVISE = 1, 2, 3
GATHER_POLL_S = 0.5
SAMPLE_TEXT_CHARS = 2000
ALONE_DETAIL = "no peer answers arrived: this round plays the answer stage only"


class GameCancelled(Exception):
    """Stop was requested during a round; nothing more of it is trained or shared."""


@dataclass(frozen=True)
class GameOutcome:
    """One round of the game, as the node persists and reports it."""

    metrics: RoundFinished
    samples: list[RolloutSample]
    peers: frozenset[str]  # the other peers whose work we saw this round


def game_seed(swarm_name: str, tasks_seed: int | None) -> int:
    """The dataset seed every member of a swarm draws the round's questions from."""
    if tasks_seed is not None:
        return tasks_seed
    return int.from_bytes(hashlib.sha256(f"game:{swarm_name}".encode()).digest()[:7], "big")


@dataclass(frozen=True)
class GameSettings:
    """What the driver needs from the node's configuration."""

    questions: int  # I: questions per round, the same for the whole swarm
    num_generations: int  # G
    max_new_tokens: int
    temperature: float
    top_p: float
    shown_answers: int = 5  # K: peers' answers a critic sees (and critiques a reviser sees)
    gather_timeout_s: float = 20.0
    seed: int = 0


@dataclass
class _PeerAnswers:
    shown: list[ShownAnswer]  # as the critic saw them (shuffled)
    authors: list[str]


@dataclass
class _Round:
    number: int
    questions: list[Task]
    answers: dict[int, _PeerAnswers] | None = None  # question index -> peers' answers, once gathered
    played: list[str] = field(default_factory=list)
    rewards: dict[str, list[float]] = field(default_factory=dict)
    accuracy: dict[str, float] = field(default_factory=dict)
    wellformed: float = 0.0
    tokens: int = 0
    groups: int = 0  # trained groups over all stages
    groups_with_spread: int = 0
    updates: int = 0  # GRPO steps run (a stage whose groups all lack reward spread runs none)
    lengths: list[float] = field(default_factory=list)
    loss: float = 0.0
    seconds: Counter[str] = field(default_factory=Counter)
    shared: int = 0
    received: int = 0
    used: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    peers: set[str] = field(default_factory=set)
    samples: list[RolloutSample] = field(default_factory=list)
    final_scores: dict[str, list[float]] = field(default_factory=dict)  # peer -> our scores of its final answers
    own_first: list[float] = field(default_factory=list)  # our verifier's score of the answer we published
    own_final: list[float] = field(default_factory=list)
    final_values: dict[int, list[str | None]] = field(default_factory=dict)  # question -> every final answer seen


class GameDriver:
    def __init__(
        self, *, settings: GameSettings, policy: Policy, learner: GrpoLearner, tasks: TaskSource,
        exchange: GameExchange, bus: EventBus, should_stop: Callable[[], bool] = lambda: False,
        chain=None, chain_position: Callable[[], Position | None] | None = None,
        wait: Callable[[float], object] | None = None,
    ) -> None:
        self.settings = settings
        self.policy = policy
        self.learner = learner
        self.tasks = tasks
        self.exchange = exchange
        self.bus = bus
        self.should_stop = should_stop
        self.chain = chain  # ChainParticipant: winners and reward are submitted to it
        self.chain_position = chain_position
        self._wait = wait or time.sleep

    @property
    def peer_id(self) -> str:
        return self.exchange.peer_id

    # --------------------------------------------------------------------------------------------- a round
    def play_round(self, last_round: int | None, rounds_trained: int) -> GameOutcome:
        """Play one round from where the swarm is; raises :class:`GameCancelled` when stopped midway."""
        started = time.perf_counter()
        number, stage = self._entry(last_round)
        chain_round = self.chain.chain_round() if self.chain is not None else None
        state = _Round(number, self._questions(number))
        while stage <= REVISE:
            if self.should_stop():
                raise GameCancelled
            if stage == ANSWER:
                self.exchange.announce(number, stage)
                self._answer(state)
            elif stage == CRITIQUE:
                if not self._critique(state):
                    log.info("round %d: %s", number, ALONE_DETAIL)
                    self._progress(state, "training", ALONE_DETAIL)
                    break
            else:
                self._revise(state)
            stage = self._next_stage(number, stage)
            if stage is None:
                log.info("round %d: the swarm moved on to a later round; closing this one", number)
                break
        if "revise" in state.played:
            self._winners(state)
        if self.chain is not None:
            # The round's one reward on a one-stage coordinator (0.6.0): the correctness of our final answers (our
            # first answers when there was nothing to revise).
            own = state.own_final or state.own_first
            # Winners are named from peers with at least one final answer right: a wrong answer wins nothing, even
            # where nobody did better.
            candidates = {peer: scores for peer, scores in state.final_scores.items() if sum(scores) > 0}
            # Where the coordinator has the game's stages, each stage played is rewarded at its chain stage (0-based):
            # all our completions of it, as shares of the stage's maximum, so 1 is the best of any stage.
            per_stage = {
                STAGES.index(name): [r / STAGE_MAX_REWARD[name] for r in rewards] for name, rewards in state.rewards.items()
            }
            self.chain.round_finished(chain_round, own, candidates, stage_rewards=per_stage)
        metrics = self._metrics(state, rounds_trained + 1, time.perf_counter() - started)
        return GameOutcome(metrics=metrics, samples=state.samples, peers=frozenset(state.peers))

    def _entry(self, last_round: int | None) -> Position:
        own: Position = (0 if last_round is None else last_round + 1, ANSWER)
        candidates = [own, self._swarm_position(), self._chain_position()]
        entry = max(p for p in candidates if p is not None)
        if entry != own:
            log.info("joining the swarm at round %d, stage %s", entry[0], STAGES[entry[1] - 1])
        return entry

    def _next_stage(self, number: int, stage: int) -> int | None:
        """The stage to play next in this round; None when the swarm has moved on to a later round."""
        ahead = [p for p in (self._swarm_position(), self._chain_position()) if p is not None]
        furthest = max(ahead, default=(number, stage))
        if furthest[0] > number:
            return None
        return max(stage + 1, furthest[1] if furthest[0] == number else 0)

    def _swarm_position(self) -> Position | None:
        """Where the other networks are: the lower median of their furthest positions. One network's many
        identities are one vote, and a position ahead of most honest networks never moves us."""
        positions = self.exchange.network_positions()
        return positions[(len(positions) - 1) // 2] if positions else None

    def _chain_position(self) -> Position | None:
        return self.chain_position() if self.chain_position is not None else None

    def _questions(self, number: int) -> list[Task]:
        """The round's questions: a function of the swarm's game seed and the round alone, so every member agrees."""
        return [
            self.tasks.sample(1, random.Random(f"game:{self.tasks.seed}:{number}:{i}"))[0]
            for i in range(self.settings.questions)
        ]

    # ------------------------------------------------------------------------------------------- the stages
    def _answer(self, state: _Round) -> None:
        prompts = [self.policy.prompt_ids(self.tasks.messages(t)) for t in state.questions]
        completions = self._generate(state, ANSWER, prompts)
        rewards = [[answer_reward(t, c.text) for c in group] for t, group in zip(state.questions, completions, strict=True)]
        exact = [is_exact(t, c.text) for t, group in zip(state.questions, completions, strict=True) for c in group]
        state.accuracy["answer"] = sum(exact) / len(exact)
        flat = [c for group in completions for c in group]
        state.wellformed = sum(answer_well_formed(c.text) for c in flat) / len(flat)
        updated = self._train(state, ANSWER, prompts, completions, rewards)
        best = [_best(group, r) for group, r in zip(completions, rewards, strict=True)]
        state.own_first = [correctness(t, c.text) for t, c in zip(state.questions, best, strict=True)]
        self._publish(state, ANSWER, [(i, c.text, ()) for i, c in enumerate(best)])
        for task, group, r in zip(state.questions, completions, rewards, strict=True):
            best = max(range(len(group)), key=r.__getitem__)
            state.samples.append(self._sample(state, ANSWER, self.peer_id, task, group[best].text, r[best], r,
                                              fate=trained_fate(r, update_run=updated)))

    def _critique(self, state: _Round) -> bool:
        answers = self._peer_answers(state)
        if not answers:
            return False
        self.exchange.announce(state.number, CRITIQUE)  # only now: a peer joining while we waited still answers
        order = sorted(answers)
        prompts, truths = [], []
        for i in order:
            task = state.questions[i]
            prompts.append(self.policy.prompt_ids(critique_messages(task.question, answers[i].shown)))
            truths.append([value_is_correct(task, a.value) for a in answers[i].shown])
        completions = self._generate(state, CRITIQUE, prompts)
        rewards = [[critique_reward(c.text, truth) for c in group] for group, truth in zip(completions, truths, strict=True)]
        updated = self._train(state, CRITIQUE, prompts, completions, rewards)
        items = []
        for i, group, r in zip(order, completions, rewards, strict=True):
            shown = tuple(a.value or "" for a in answers[i].shown)
            items.append((i, _best(group, r).text, shown))
            best = max(range(len(group)), key=r.__getitem__)
            state.samples.append(self._sample(state, CRITIQUE, self.peer_id, state.questions[i], group[best].text, r[best], r,
                                              fate=trained_fate(r, update_run=updated)))
        self._publish(state, CRITIQUE, items)
        return True

    def _revise(self, state: _Round) -> None:
        answers = self._peer_answers(state)
        if not answers:
            return
        critics = self._peer_critiques(state)
        self.exchange.announce(state.number, REVISE)
        order = sorted(answers)
        prompts, majorities = [], []
        for i in order:
            task = state.questions[i]
            rng = self._rng(state.number, REVISE, i)
            shown = list(answers[i].shown)
            rng.shuffle(shown)  # new letters: a reviser cannot lean on the critics' lettering
            views = critics.get(i, [])
            prompts.append(self.policy.prompt_ids(revise_messages(task.question, shown, views)))
            top = majority(views)
            majorities.append((top, majority_is_right(task, top, [a.value for a in shown])))
        completions = self._generate(state, REVISE, prompts)
        rewards = [
            [revise_reward(state.questions[i], c.text, majority_value=top, majority_right=right) for c in group]
            for i, group, (top, right) in zip(order, completions, majorities, strict=True)
        ]
        exact = [is_exact(state.questions[i], c.text) for i, group in zip(order, completions, strict=True) for c in group]
        state.accuracy["revise"] = sum(exact) / len(exact)
        updated = self._train(state, REVISE, prompts, completions, rewards)
        items = []
        for i, group, r in zip(order, completions, rewards, strict=True):
            best = max(range(len(group)), key=r.__getitem__)
            items.append((i, group[best].text, ()))
            state.own_final.append(correctness(state.questions[i], group[best].text))
            state.final_values.setdefault(i, []).append(answer_value(group[best].text))
            state.samples.append(self._sample(state, REVISE, self.peer_id, state.questions[i], group[best].text, r[best], r,
                                              fate=trained_fate(r, update_run=updated)))
        self._publish(state, REVISE, items)

    def _winners(self, state: _Round) -> None:
        """Score every peer's final answers with our verifier; the best peers are this round's winners."""
        for author, i, item in self._gather(state, REVISE):
            task = state.questions[i]
            score = correctness(task, item.text)
            state.final_scores.setdefault(author, []).append(score)
            state.final_values.setdefault(i, []).append(answer_value(item.text))
            state.samples.append(self._sample(state, REVISE, author, task, item.text, score, [], fate="scored"))
        # The swarm's answer to a question: the plurality of everyone's final answers (ours included).
        right = []
        for i, values in state.final_values.items():
            written = [v for v in values if v is not None]
            top = majority([CriticView(frozenset({canonical(v)}), "") for v in written if canonical(v) is not None])
            right.append(top not in (None, NONE) and majority_is_right(state.questions[i], top, written))
        if right:
            state.accuracy["swarm_final"] = sum(right) / len(right)

    # ----------------------------------------------------------------------------------- peers' stage work
    def _peer_answers(self, state: _Round) -> dict[int, _PeerAnswers]:
        """Up to K peers' answers per question, shuffled (anonymous letters), gathered once per round."""
        if state.answers is None:
            by_question: dict[int, list[tuple[str, str]]] = {}
            for author, i, item in self._gather(state, ANSWER):
                by_question.setdefault(i, []).append((author, item.text))
            state.answers = {}
            for i, found in by_question.items():
                rng = self._rng(state.number, CRITIQUE, i)
                rng.shuffle(found)
                found = found[: self.settings.shown_answers]
                state.used += len(found)
                state.answers[i] = _PeerAnswers(
                    shown=[ShownAnswer(answer_value(text), excerpt(text)) for _, text in found],
                    authors=[author for author, _ in found],
                )
                task = state.questions[i]
                for author, text in found:
                    reward = answer_reward(task, text)
                    state.samples.append(self._sample(state, ANSWER, author, task, text, reward, []))
        return state.answers

    def _peer_critiques(self, state: _Round) -> dict[int, list[CriticView]]:
        """Peers' readable critiques per question, as values (up to K, shuffled); unreadable ones count for nothing."""
        views: dict[int, list[CriticView]] = {}
        for author, i, item in self._gather(state, CRITIQUE):
            task = state.questions[i]
            critique = parse_critique(item.text, len(item.shown))
            truth = [value_is_correct(task, v or None) for v in item.shown]
            reward = critique_reward(item.text, truth)
            fate = "shown" if critique is not None else "unreadable"
            state.samples.append(self._sample(state, CRITIQUE, author, task, item.text, reward, [], fate=fate))
            if critique is not None:
                views.setdefault(i, []).append(critic_view(critique, item.shown))
        for i, found in views.items():
            rng = self._rng(state.number, REVISE, -1 - i)
            rng.shuffle(found)
            del found[self.settings.shown_answers :]
            state.used += len(found)
        return views

    def _gather(self, state: _Round, stage: int) -> list[tuple[str, int, StageItem]]:
        """Peers' items for our questions at ``stage``.

        Waits, until K peers published it or ``gather_timeout_s`` passed, while a peer that will still publish it
        has not: one playing this round at that stage or before it, or one a round behind (it catches up at the
        swarm's position, e.g. after a held-out evaluation). For answers, while none arrived but the swarm has
        members, it waits too (a member that has not announced yet, busy loading or evaluating). Peers beyond the
        stage without a record (late joiners) and peers further behind are not waited for.
        """
        started = time.perf_counter()
        deadline = time.monotonic() + self.settings.gather_timeout_s
        self._progress(state, "waiting_for_peers", f"stage {STAGES[stage - 1]}")
        while True:
            result = self.exchange.gather(state.number, stage)
            published = {record.peer_id for record in result.records} | set(result.peers)
            coming = [
                peer for peer, (number, at) in self.exchange.positions().items()
                if peer != self.peer_id and peer not in published
                and (number == state.number - 1 or (number == state.number and at <= stage))
            ]
            unannounced = stage == ANSWER and not result.records and self.exchange.peers() > 0
            if (
                not (coming or unannounced) or len(result.records) >= self.settings.shown_answers
                or time.monotonic() >= deadline or self.should_stop()
            ):
                break
            self._wait(GATHER_POLL_S)
        state.seconds["gather"] += time.perf_counter() - started
        state.peers |= result.peers
        state.rejected.update(result.rejected)
        by_ref = {(t.ref, t.question): i for i, t in enumerate(state.questions)}
        known_refs = {t.ref for t in state.questions}
        items = []
        for record in result.records:
            seen: set[int] = set()
            for item in record.items:
                state.received += 1
                i = by_ref.get((item.task, item.question))
                if i is None:
                    # not this round's question, or a question text its reference does not generate: forged
                    state.rejected["question_mismatch" if item.task in known_refs else "not_this_round"] += 1
                elif i in seen:
                    state.rejected["duplicate_item"] += 1
                else:
                    seen.add(i)
                    items.append((record.peer_id, i, item))
        return items

    # ------------------------------------------------------------------------------------------- mechanics
    def _generate(self, state: _Round, stage: int, prompts: list[tuple[int, ...]]) -> list[list[Completion]]:
        s = self.settings
        self._progress(state, "generating", f"stage {STAGES[stage - 1]}")
        started = time.perf_counter()
        groups = self.policy.generate(
            prompts, num_generations=s.num_generations, max_new_tokens=s.max_new_tokens, temperature=s.temperature,
            top_p=s.top_p, seed=self._rng(state.number, stage, 0).getrandbits(63), should_stop=self.should_stop,
        )
        if self.should_stop():
            raise GameCancelled
        state.seconds["generate"] += time.perf_counter() - started
        state.tokens += sum(len(c.ids) for group in groups for c in group)
        return groups

    def _train(self, state, stage, prompts, completions, rewards) -> bool:
        """One GRPO step on this stage's groups; False when none had reward spread and the update was skipped."""
        self._progress(state, "training", f"stage {STAGES[stage - 1]}")
        groups = [
            TrainGroup(prompt_ids=p, completions=tuple(c), rewards=tuple(r))
            for p, c, r in zip(prompts, completions, rewards, strict=True)
        ]
        spread = [not equal_rewards(g.rewards) for g in groups]
        state.groups += len(groups)
        state.groups_with_spread += sum(spread)
        if any(spread):  # as in a SAPO round: without reward spread there is no gradient, so no update is run
            stats = self.learner.step(groups)
            state.seconds["train"] += stats.seconds
            state.loss += stats.loss
            state.lengths.append(stats.completion_length)
            state.updates += 1
        else:
            state.lengths.append(sum(c.length for group in completions for c in group) / sum(map(len, completions)))
        state.played.append(STAGES[stage - 1])
        state.rewards[STAGES[stage - 1]] = [x for r in rewards for x in r]
        return any(spread)

    def _publish(self, state: _Round, stage: int, items: Sequence[tuple[int, str, tuple[str, ...]]]) -> None:
        started = time.perf_counter()
        record = StageRecord(
            peer_id=self.peer_id, round=state.number, stage=stage,
            items=tuple(
                StageItem(task=state.questions[i].ref, question=state.questions[i].question, text=text[:MAX_TEXT_CHARS], shown=shown)
                for i, text, shown in items
            ),
        )
        if self.exchange.publish(record):
            state.shared += len(record.items)
        state.seconds["share"] += time.perf_counter() - started

    def _rng(self, number: int, stage: int, salt: int) -> random.Random:
        return random.Random(f"{self.settings.seed}:{self.peer_id}:{number}:{stage}:{salt}")

    def _progress(self, state: _Round, phase: str, detail: str) -> None:
        self.bus.emit(RoundProgress(round=state.number, phase=phase, detail=detail))  # type: ignore[arg-type]

    def _sample(self, state, stage, author, task: Task, text, reward, group, *, fate: str = "") -> RolloutSample:
        local = author == self.peer_id
        return RolloutSample(
            round=state.number, source_peer=author, source_name=peer_name(author), local=local,
            family=task.ref.family, question=task.question[:SAMPLE_TEXT_CHARS], completion=text[:SAMPLE_TEXT_CHARS],
            reward=reward, expected=task.answer, group_rewards=list(group), stage=STAGES[stage - 1],
            fate=fate or ("trained" if local else "shown"),
        )

    def _metrics(self, state: _Round, rounds_trained: int, seconds: float) -> RoundFinished:
        everything = [x for r in state.rewards.values() for x in r]
        mean = sum(everything) / len(everything) if everything else 0.0
        generate = state.seconds["generate"]
        return RoundFinished(
            round=state.number, rounds_trained=rounds_trained,
            reward_local=mean, reward_external=None, reward_train=mean,
            loss=state.loss, kl=None,
            completion_length=sum(state.lengths) / len(state.lengths) if state.lengths else 0.0,
            tokens_generated=state.tokens,
            generation_tokens_per_s=state.tokens / generate if generate > 0 else 0.0,
            seconds_generate=generate, seconds_share=state.seconds["share"], seconds_gather=state.seconds["gather"],
            seconds_train=state.seconds["train"], seconds_total=seconds,
            peers_seen=len(state.peers), groups_shared=state.shared, groups_received=state.received,
            groups_used=state.used, groups_zero_advantage=0, groups_rejected=sum(state.rejected.values()),
            rejected_reasons=dict(state.rejected),
            wellformed_rate=state.wellformed, accuracy_local=state.accuracy.get("answer", 0.0),
            groups_with_spread=state.groups_with_spread / state.groups if state.groups else 0.0,
            update_skipped=state.updates == 0,
            game="multistage",
            stage_rewards={stage: sum(r) / len(r) for stage, r in state.rewards.items() if r},
            stage_accuracy=dict(state.accuracy),
        )


def _best(group: list[Completion], rewards: list[float]) -> Completion:
    return group[max(range(len(group)), key=rewards.__getitem__)]


def chain_position(chain) -> Position | None:
    """The coordinator's (round, stage) as a game position; its stage is 0-based, ours 1-based.

    The round is the participant's cached one; the stage is read when asked (a few times per round). A coordinator
    with one stage per round (0.6.x) always reports stage 0, so it only ever moves rounds.
    """
    number = chain.chain_round()
    if number is None:
        return None
    try:
        stage = int(chain.client.current_stage())
    except Exception:  # noqa: BLE001 - an RPC hiccup must not stop the round; the round alone still counts
        log.debug("could not read the coordinator's stage", exc_info=True)
        stage = 0
    return number, min(max(stage, 0), len(STAGES) - 1) + 1


def game_tasks(config) -> TaskSource:
    """The source of the round's questions: the same for every member, whatever model each one runs.

    Configured families (tasks.weights) are played as configured; otherwise :data:`GAME_FAMILIES`. Families with a
    difficulty ladder play its first rung: a node's own curriculum cannot move questions the whole swarm shares.
    """
    from node.tasks.curriculum import SMALL_MODEL_LADDERS

    configured = {family: weight for family, weight in config.tasks.weights.items() if weight > 0}
    weights = configured or {family: 1.0 for family in GAME_FAMILIES}
    ladders = {family: SMALL_MODEL_LADDERS[family][:1] for family in weights if family in SMALL_MODEL_LADDERS}
    return TaskSource(
        weights, seed=game_seed(config.swarm.swarm_name, config.tasks.seed), configs=config.tasks.configs,
        ladders=ladders,
    )


def build_driver(config, *, policy: Policy, learner: GrpoLearner, exchange, chain, bus: EventBus,
                 should_stop: Callable[[], bool]) -> GameDriver:
    """The driver of a node configured with ``swarm.game = "multistage"``, on the node's rollout exchange."""
    from node.game.exchange import game_exchange_for

    train = config.training
    settings = GameSettings(
        questions=train.local_questions, num_generations=train.num_generations, max_new_tokens=train.max_new_tokens,
        temperature=train.temperature, top_p=train.top_p, shown_answers=config.swarm.critique_answers,
        gather_timeout_s=config.swarm.gather_timeout_s, seed=config.run.seed,
    )
    follow = chain is not None and config.chain.follow_round
    return GameDriver(
        settings=settings, policy=policy, learner=learner, tasks=game_tasks(config),
        exchange=game_exchange_for(exchange), bus=bus, should_stop=should_stop, chain=chain,
        chain_position=(lambda: chain_position(chain)) if follow else None,
    )
