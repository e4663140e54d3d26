"""Held-out evaluation: how well the policy answers tasks it never trains on.

The evaluation set is fixed for a run and the same on every peer with the same task families (see
:meth:`node.tasks.source.TaskSource.evaluation_set`: a seed range training never uses, the first rungs of each family's
ladder). Each question is answered once greedily (pass@1) and ``samples`` times at the training temperature (with
no samples, the means are over the greedy answers: sampling G answers costs G times the compute); the answers are
graded by the training verifier, and exact-match accuracy is reported apart from reasoning-gym's score,
so partial credit never passes for accuracy. It runs between rounds, in chunks, and stops early when the node stops.

Every prompt starts with the same tokens (the system prompt; the worked example differs per question): the longest
prefix all prompts share is run once per evaluation, and each chunk copies its keys and values instead of running
it for every question again (:meth:`node.learning.grpo.Policy.prefill`).

Besides its totals (an ``EvalFinished`` event, for the app), an evaluation returns each question's greedy answer
(:class:`node.runstore.HeldoutAnswers`, for the run folder only), so that a fall-back of accuracy can be read
question by question: many answers flipping both ways, or wrong answers converging on one value.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from node.events import EvalFinished
from node.learning.decoding import Prefix, shared_prefix
from node.learning.grpo import Completion, Policy
from node.runstore import ANSWER_CHARS, HeldoutAnswer, HeldoutAnswers
from node.tasks.source import Task, TaskSource, extract_answer, grade

# Sequences generated per batch (questions x (1 + samples)): bounds memory and lets progress and stop requests
# through. The demo's evaluation batch (16 questions, a greedy and 2 sampled answers each): an evaluation without
# samples (the configured default) fills it with 48 questions instead of 16, fewer decoding steps for about the
# memory the demo's evaluation takes; wider batches raised the peak RSS further (docs/performance.md).
CHUNK_ROWS = 48
# A shorter common prefix is run with each prompt as before: it would save a few tokens a row for a forward call of
# its own and a copy into every row.
MIN_SHARED_PREFIX = 16


@dataclass(frozen=True)
class EvalSettings:
    questions: int = 64
    samples: int = 0  # sampled completions per question for the mean exact-match
    max_new_tokens: int = 48
    temperature: float = 1.0
    top_p: float = 1.0
    seed: int = 0  # picks the evaluation set; peers with the same seed and families share it
    levels: int = 2  # rungs of each family's ladder in the set


@dataclass(frozen=True)
class Evaluation:
    summary: EvalFinished  # totals and per-family accuracy: the event the app shows
    answers: HeldoutAnswers  # every question's greedy answer: the run folder's record


class EvalCancelled(Exception):
    """The node was stopped during an evaluation; its partial result is not reported."""


class Evaluator:
    def __init__(self, policy: Policy, tasks: TaskSource, settings: EvalSettings) -> None:
        self.policy = policy
        self.tasks = tasks
        self.settings = settings
        self.questions: list[Task] = tasks.evaluation_set(settings.questions, seed=settings.seed, levels=settings.levels)
        self._prompts = [policy.prompt_ids(tasks.messages(task)) for task in self.questions]
        self._shared = shared_prefix(self._prompts)
        self.question_set = question_set_digest(self.questions)

    def run(
        self, *, round: int, rounds_trained: int, should_stop: Callable[[], bool] = lambda: False,
        progress: Callable[[int, int], None] = lambda done, total: None,
    ) -> Evaluation:
        started = time.perf_counter()
        s = self.settings
        greedy_exact, sampled_exact, scores, wellformed = [], [], [], []
        answers: list[HeldoutAnswer] = []
        by_family: dict[str, list[bool]] = defaultdict(list)
        total = len(self.questions)
        # Once per evaluation: the weights change between evaluations, not during one.
        prefix = self.policy.prefill(self._shared) if len(self._shared) >= MIN_SHARED_PREFIX else None
        chunk = questions_per_chunk(s.samples)
        for start in range(0, total, chunk):
            progress(start, total)
            tasks = self.questions[start : start + chunk]
            prompts = self._prompts[start : start + chunk]
            if s.samples:
                greedy, sampled = self.policy.greedy_and_sampled(
                    prompts, samples=s.samples, max_new_tokens=s.max_new_tokens, temperature=s.temperature,
                    top_p=s.top_p, seed=s.seed + start, should_stop=should_stop, prefix=prefix,
                )
            else:
                greedy, sampled = self._greedy(prompts, should_stop, prefix), [[] for _ in prompts]
            if should_stop():
                raise EvalCancelled
            for task, best, group in zip(tasks, greedy, sampled, strict=True):
                g = grade(task, best.text, finished=best.finished)
                greedy_exact.append(g.exact)
                wellformed.append(g.wellformed)
                by_family[task.ref.family].append(g.exact)
                answer = extract_answer(best.text)
                answers.append(HeldoutAnswer(task.ref.family, None if answer is None else answer[:ANSWER_CHARS],
                                             g.exact, g.wellformed))
                if not group:
                    sampled_exact.append(g.exact)
                    scores.append(g.score)
                for completion in group:
                    sg = grade(task, completion.text, finished=completion.finished)
                    sampled_exact.append(sg.exact)
                    scores.append(sg.score)
        progress(total, total)
        summary = EvalFinished(
            round=round, rounds_trained=rounds_trained, questions=total,
            accuracy_greedy=_mean(greedy_exact), exact_mean=_mean(sampled_exact), score_mean=_mean(scores),
            wellformed_rate=_mean(wellformed),
            per_family={family: _mean(values) for family, values in sorted(by_family.items())},
            per_family_questions={family: len(values) for family, values in sorted(by_family.items())},
            seconds=time.perf_counter() - started,
        )
        return Evaluation(summary, HeldoutAnswers(round, rounds_trained, self.question_set, tuple(answers)))

    def _greedy(self, prompts: list[tuple[int, ...]], should_stop: Callable[[], bool], prefix: Prefix | None
                ) -> list[Completion]:
        groups = self.policy.generate(
            prompts, num_generations=1, max_new_tokens=self.settings.max_new_tokens, temperature=1.0, top_p=1.0,
            seed=0, should_stop=should_stop, greedy=True, prefix=prefix,
        )
        return [group[0] for group in groups]


def questions_per_chunk(samples: int) -> int:
    """How many questions one batch answers: each takes its greedy row and ``samples`` sampled ones."""
    return max(1, CHUNK_ROWS // (1 + samples))


def question_set_digest(tasks: list[Task]) -> str:
    """Names an evaluation set by its tasks (family, generator config, seed, index of each, in order)."""
    refs = [[t.ref.family, t.ref.config_id, t.ref.seed, t.ref.index] for t in tasks]
    return hashlib.sha256(json.dumps(refs, separators=(",", ":")).encode()).hexdigest()[:16]


def _mean(values) -> float:
    values = list(values)
    return float(sum(values)) / len(values) if values else 0.0
