"""Task sampling, regeneration from peers' task refs, and verifiable rewards.

Tasks come from reasoning-gym. A task is named by a :class:`TaskRef`; any node with the same family config
regenerates the identical question and answer from it, so ground truth never crosses the network.

Every node creates its datasets with the same fixed ``size`` and addresses entries by index alone. Families whose
entries depend on ``size`` or on the order of generation cannot be addressed that way and are refused.

Completions scored here may come from peers and are treated as hostile: :func:`score` never raises on them, and
the reasoning-gym scorers that would run answer text as Python are either hardened or refused (see
:func:`_harden_reasoning_gym`).
"""

from __future__ import annotations

import ast
import hashlib
import importlib
import json
import logging
import math
import random
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Any

import reasoning_gym
from reasoning_gym.dataset import ProceduralDataset
from reasoning_gym.factory import DATASETS

from node.errors import NodeError
from node.tasks.prompts import SYSTEM_PROMPT, build_messages, example_digest  # noqa: F401 (re-exported)
from node.tasks.taskref import TaskRef

log = logging.getLogger(__name__)

MAX_INDEX = 10**9  # task indices are in [0, MAX_INDEX)
# reasoning-gym seeds each entry with seed + index, so seed ranges far apart never share an entry. Training tasks
# (ours and peers') use seeds below TRAIN_SEED_LIMIT; worked examples and the held-out evaluation set live above it,
# so neither is ever a training task, and a peer cannot make us train on the evaluation set.
TRAIN_SEED_LIMIT = 2**60
EXAMPLE_SEED_BASE = 2**61
EVAL_SEED_BASE = 2**62
# Entries an easy config produces that teach nothing (x + 0, x * 1) or that a small model's scorer partially credits
# for a near miss (negative results) are skipped when sampling; this many draws are tried before giving up.
_DRAWS = 32

_OPEN, _CLOSE = "<answer>", "</answer>"

# Entries are addressed by index, never iterated, so the size only has to be one every node agrees on.
_DATASET_SIZE = 1
# Indices at which a family must give the same entry whatever the order of generation (see _check_addressable).
_PROBE_INDICES = (7, MAX_INDEX - 1)
# Some scorers cost more than linear time in the answer's length (propositional_logic parses recursively), and no
# correct answer is much longer than the reference, so longer answers score 0 without being parsed.
_MIN_ANSWER_LIMIT = 256
_ANSWER_LIMIT_FACTOR = 4
_DATASET_CACHE_SIZE = 512  # (family, config, seed) triples; peers use many seeds

# reasoning-gym 0.1.25 scorers that eval() the answer so that Python-literal answers earn partial credit.
_LITERAL_EVAL_SCORERS = ("binary_matrix", "spiral_matrix", "string_insertion", "n_queens")
# Scorers that parse the answer with sympy, which evals it; answer text cannot be made safe for them.
_UNSAFE_SCORERS = frozenset(
    {"countdown", "puzzle24", "polynomial_multiplication", "simple_integration", "intermediate_integration"}
)
# Not a task family: it mixes other families and needs its own dataset list.
_NOT_FAMILIES = frozenset({"composite"})


class TaskRejected(Exception):
    """A peer's task ref this node will not regenerate; ``reason`` is a short stable snake_case string."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class Task:
    ref: TaskRef
    question: str
    answer: str | None  # None where any valid answer is correct (propositional_logic)
    entry: dict  # the raw reasoning-gym entry, which its scorer needs


def config_id(family: str, config: Mapping[str, Any]) -> str:
    """Digest that names a family's generator config; peers regenerate each other's tasks only when it matches."""
    return _digest(_canonical(family, config))


def _digest(canonical: str) -> str:
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def _canonical(family: str, config: Mapping[str, Any]) -> str:
    return json.dumps([family, dict(config)], sort_keys=True, separators=(",", ":"), ensure_ascii=True)


# config_id -> (family, canonical JSON), so that grade() finds the config a task was generated with.
_known_configs: dict[str, tuple[str, str]] = {}


class TaskSource:
    """Samples and regenerates tasks of the enabled families, at any level of each family's difficulty ladder.

    Each family has one or more generator configs, easiest first (its ladder; see :mod:`node.tasks.curriculum`). Every
    level's config is registered, so a peer's task at any level regenerates here from its ref alone.
    """

    def __init__(
        self,
        weights: Mapping[str, float],
        *,
        seed: int,
        configs: Mapping[str, Mapping[str, Any]] | None = None,
        ladders: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    ) -> None:
        configs = dict(configs or {})
        ladders = dict(ladders or {})
        for family in [*weights, *configs]:
            _check_family(family)
        _check_seed(seed)
        enabled = {family: _weight(family, weight) for family, weight in weights.items()}
        enabled = {family: weight for family, weight in enabled.items() if weight > 0}
        if not enabled:
            raise NodeError(
                "No task family is enabled.",
                hint="give at least one family in tasks.weights a positive weight, e.g. basic_arithmetic = 1.0",
                code="task_config",
            )
        self.seed = seed
        self.families: tuple[str, ...] = tuple(enabled)
        self._weights = tuple(enabled.values())
        # family -> config ids of its ladder, easiest first; a config given by the user is a one-level ladder
        self.levels: dict[str, tuple[str, ...]] = {}
        for family in self.families:
            rungs = [configs[family]] if family in configs else list(ladders.get(family) or [{}])
            ids = []
            for config in rungs:
                canonical = _checked_config(family, config)
                cid = _digest(canonical)
                _known_configs[cid] = (family, canonical)
                ids.append(cid)
            _check_addressable(family, _known_configs[ids[0]][1], seed)
            self.levels[family] = tuple(ids)

    def sample(self, n: int, rng: random.Random, levels: Mapping[str, int] | None = None) -> list[Task]:
        """``n`` tasks of weighted random families, each at its level in ``levels`` (default: the easiest)."""
        families = rng.choices(self.families, weights=self._weights, k=n)
        return [self._draw(family, self._config_at(family, levels), self.seed, rng) for family in families]

    def regenerate(self, ref: TaskRef) -> Task:
        """Rebuild a task a peer sampled; raises :class:`TaskRejected` for refs this node will not run."""
        if not isinstance(ref.family, str) or ref.family not in self.levels:
            raise TaskRejected("family_not_enabled")
        if ref.config_id not in self.levels[ref.family]:
            raise TaskRejected("config_mismatch")
        if type(ref.seed) is not int or not 0 <= ref.seed < TRAIN_SEED_LIMIT:
            raise TaskRejected("bad_seed")
        if type(ref.index) is not int or not 0 <= ref.index < MAX_INDEX:
            raise TaskRejected("bad_index")
        try:
            return self._task(ref)
        except Exception:  # a generator bug a peer's ref happens to hit must not take this node down
            log.debug("could not regenerate %s", ref, exc_info=True)
            raise TaskRejected("generation_failed") from None

    def example(self, task: Task) -> tuple[str, str] | None:
        """The worked example shown before ``task``: a solved task of the same family and level.

        A pure function of the ref, drawn from seeds no training or evaluation task uses; None where the family has
        no single answer to show.
        """
        rng = random.Random(example_digest(task.ref))
        example = self._draw(task.ref.family, task.ref.config_id, EXAMPLE_SEED_BASE, rng, avoid=task.question)
        return None if example.answer is None else (example.question, example.answer)

    def messages(self, task: Task) -> list[dict[str, str]]:
        """The chat every peer builds for ``task`` (see :mod:`node.tasks.prompts`)."""
        return build_messages(task.question, self.example(task))

    def evaluation_set(self, n: int, *, seed: int = 0, levels: int = 1) -> list[Task]:
        """``n`` held-out tasks, the same on every peer with the same families, ladders and ``seed``.

        Families take turns, then the first ``levels`` rungs of each ladder; entries come from a seed range training
        never uses.
        """
        rng = random.Random(f"evaluation:{seed}")
        base = EVAL_SEED_BASE + seed % 2**56
        tasks = []
        for i in range(n):
            family = self.families[i % len(self.families)]
            ladder = self.levels[family]
            level = (i // len(self.families)) % min(max(1, levels), len(ladder))
            tasks.append(self._draw(family, ladder[level], base, rng))
        return tasks

    def level_of(self, ref: TaskRef) -> int:
        return self.levels[ref.family].index(ref.config_id)

    def _config_at(self, family: str, levels: Mapping[str, int] | None) -> str:
        ladder = self.levels[family]
        level = (levels or {}).get(family, 0)
        return ladder[min(max(level, 0), len(ladder) - 1)]

    def _draw(self, family: str, cid: str, seed: int, rng: random.Random, *, avoid: str | None = None) -> Task:
        task = None
        for _ in range(_DRAWS):
            task = self._task(TaskRef(family, cid, seed, rng.randrange(MAX_INDEX)))
            if _teaches(task) and task.question != avoid:
                return task
        assert task is not None
        return task

    def _task(self, ref: TaskRef) -> Task:
        _, canonical = _known_configs[ref.config_id]
        entry = _dataset(ref.family, canonical, ref.seed)[ref.index]
        answer = entry["answer"]
        return Task(ref, entry["question"], None if answer is None else str(answer), entry)


def _teaches(task: Task) -> bool:
    """False for arithmetic entries that teach nothing (a 0 or 1 operand of *, a 0 of + / -) or have a negative
    result, which reasoning-gym's scorer half-credits for the positive number."""
    expression = task.entry.get("metadata", {}).get("expression")
    if not isinstance(expression, str) or task.answer is None:
        return True
    if task.answer.startswith("-"):
        return False
    terms = expression.replace("(", " ").replace(")", " ").split()
    numbers = [t for t in terms if t.isdigit()]
    if "0" in numbers:
        return False
    return not ("*" in terms and "1" in numbers)


def answer_span(completion: str) -> tuple[int, int] | None:
    """Where the graded block lies in ``completion``: the start of its ``<answer>`` and the end of its
    ``</answer>``; None when there is none. The one definition of "the answer" for grading and for the cap on the
    text around it (:mod:`node.sapo.peer_text`), so that what is graded and what is capped cannot differ.

    The graded block is the last complete one. An opening tag with no closing tag after it (a generation cut off by
    the token limit) does not count: its content may be a partial answer, and scoring it would reward running out of
    tokens.
    """
    end = completion.rfind(_CLOSE)
    if end < 0:
        return None
    start = completion.rfind(_OPEN, 0, end)
    if start < 0:
        return None
    close = completion.find(_CLOSE, start + len(_OPEN))
    return start, close + len(_CLOSE)


def extract_answer(completion: str) -> str | None:
    """The stripped content of the graded ``<answer>...</answer>`` block (:func:`answer_span`), or None."""
    span = answer_span(completion)
    if span is None:
        return None
    answer = completion[span[0] + len(_OPEN) : span[1] - len(_CLOSE)].strip()
    return answer or None


@dataclass(frozen=True)
class Grade:
    """What our verifier makes of one completion."""

    reward: float  # what GRPO trains on: exact credit (plus the format bonus when well formed)
    exact: bool  # the answer is exactly right: this, never partial credit, is accuracy
    score: float  # reasoning-gym's own score, partial credit included, reported apart
    wellformed: bool
    reason: str  # correct, partial_credit, wrong_value, no_answer_block, cut_at_token_limit


def grade(task: Task, completion: str, *, finished: bool = True, format_weight: float = 0.0) -> Grade:
    """Grade a completion (ours or a peer's; never raises on hostile text).

    Where the reference answer is a number, only the exact number earns reward: reasoning-gym's partial credit for
    an answer that merely contains it ("-1" for "1", "118" for "18") would reward wrong answers.
    """
    answer = extract_answer(completion)
    credit = _correctness(task, answer)
    exact = credit >= 1.0 if task.answer is None else _same_answer(answer, task.answer)
    wellformed = _well_formed(completion)
    if exact:
        reason = "correct"
    elif answer is None:
        reason = "no_answer_block" if finished else "cut_at_token_limit"
    else:
        reason = "partial_credit" if credit > 0 else "wrong_value"
    earned = 1.0 if exact else (0.0 if _number(task.answer) is not None else credit)
    return Grade(earned + (format_weight if wellformed else 0.0), exact, credit, wellformed, reason)


def _same_answer(answer: str | None, reference: str) -> bool:
    if answer is None:
        return False
    if answer == reference.strip():
        return True
    mine, theirs = _number(answer), _number(reference)
    return mine is not None and theirs is not None and mine == theirs


def _number(text: str | None) -> float | None:
    if text is None or len(text) > 64:
        return None
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _correctness(task: Task, answer: str | None) -> float:
    if answer is None or len(answer) > max(_MIN_ANSWER_LIMIT, _ANSWER_LIMIT_FACTOR * len(task.answer or "")):
        return 0.0
    family, canonical = _known_configs[task.ref.config_id]
    try:
        value = float(_dataset(family, canonical, task.ref.seed).score_answer(answer, task.entry))
    except Exception:  # scorers are third-party code fed hostile text
        log.debug("%s scorer raised on %r", family, answer[:80], exc_info=True)
        return 0.0
    return min(1.0, max(0.0, value)) if math.isfinite(value) else 0.0


def _well_formed(completion: str) -> bool:
    return (
        completion.count(_OPEN) == 1
        and completion.count(_CLOSE) == 1
        and completion.find(_OPEN) < completion.find(_CLOSE)
        and extract_answer(completion) is not None
    )


@lru_cache(maxsize=_DATASET_CACHE_SIZE)
def _dataset(family: str, canonical_config: str, seed: int) -> ProceduralDataset:
    config = json.loads(canonical_config)[1]
    return reasoning_gym.create_dataset(family, seed=seed, size=_DATASET_SIZE, **config)


def _families() -> list[str]:
    return sorted(set(DATASETS) - _UNSAFE_SCORERS - _NOT_FAMILIES)


def _check_family(family: object) -> None:
    if family in _UNSAFE_SCORERS:
        raise NodeError(
            f"Task family {family!r} is not supported: its scorer runs answer text as code, "
            "which is unsafe for completions from peers.",
            hint=f"remove {family} from tasks.weights and tasks.configs",
            code="task_config",
        )
    if family not in DATASETS or family in _NOT_FAMILIES:
        raise NodeError(
            f"Unknown task family {family!r}.",
            hint="use reasoning-gym family names in tasks.weights and tasks.configs: " + ", ".join(_families()),
            code="task_config",
        )


def _check_seed(seed: object) -> None:
    if type(seed) is not int or not 0 <= seed < TRAIN_SEED_LIMIT:
        raise NodeError(
            f"Task seed {seed!r} is out of range.",
            hint=f"set tasks.seed to an integer from 0 to {TRAIN_SEED_LIMIT - 1}, or leave it empty",
            code="task_config",
        )


def _weight(family: str, weight: object) -> float:
    if isinstance(weight, (int, float)) and not isinstance(weight, bool) and math.isfinite(weight) and weight >= 0:
        return float(weight)
    raise NodeError(
        f"Task weight {weight!r} for {family} is not a non-negative number.",
        hint=f"set tasks.weights.{family} to a number >= 0 (0 disables the family)",
        code="task_config",
    )


def _checked_config(family: str, config: Mapping[str, Any]) -> str:
    """The canonical JSON of a family's generator config, once reasoning-gym has accepted it."""
    options = sorted(f.name for f in fields(DATASETS[family][1]) if f.name not in ("seed", "size"))
    hint = f"fix tasks.configs.{family}; its options are: {', '.join(options)}"
    if not isinstance(config, Mapping) or {"seed", "size"} & set(config):
        raise NodeError(
            f"The generator config for {family} must be a table of options other than seed and size.",
            hint=hint + " (the node sets seed and size itself)",
            code="task_config",
        )
    try:
        canonical = _canonical(family, config)
        _dataset(family, canonical, 0)
    except Exception as exc:  # reasoning-gym reports bad options as TypeError, ValueError or AssertionError
        raise NodeError(
            f"reasoning-gym rejected the generator config for {family}: {str(exc) or type(exc).__name__}",
            hint=hint,
            code="task_config",
        ) from exc
    return canonical


def _check_addressable(family: str, canonical: str, seed: int) -> None:
    """Refuse families whose entries are not a function of (seed, index) alone: peers could not regenerate them."""
    try:
        forward = [_entry_key(_fresh(family, canonical, seed)[i]) for i in _PROBE_INDICES]
        backward = [_entry_key(_fresh(family, canonical, seed)[i]) for i in reversed(_PROBE_INDICES)]
        addressable = forward == backward[::-1]
    except Exception:
        log.debug("probing %s failed", family, exc_info=True)
        addressable = False
    if not addressable:
        raise NodeError(
            f"Task family {family!r} cannot regenerate a task from its seed and index alone, "
            "so peers could not check each other's rollouts.",
            hint=f"remove {family} from tasks.weights",
            code="task_config",
        )


def _fresh(family: str, canonical: str, seed: int) -> ProceduralDataset:
    return _dataset.__wrapped__(family, canonical, seed)


def _entry_key(entry: dict) -> tuple[str, str]:
    return str(entry["question"]), str(entry["answer"])


def _discard(*_args: object, **_kwargs: object) -> None:
    return None


def _harden_reasoning_gym() -> None:
    """Patch reasoning-gym where it is unsafe or noisy for a headless node scoring peers' text.

    The eval() in the _LITERAL_EVAL_SCORERS scorers is only meant to read Python literals, so binding the name to
    ast.literal_eval keeps every score they give for literals and runs no code. The bf compiler prints progress
    dots to stdout, which is not ours to write to.
    """
    for family in _LITERAL_EVAL_SCORERS:
        sys.modules[DATASETS[family][0].__module__].eval = ast.literal_eval  # type: ignore[attr-defined]
    bf_optimizer = importlib.import_module("reasoning_gym.code.contrib.bfit.Compiler.Optimizer")
    bf_optimizer.print = _discard  # type: ignore[attr-defined]


_harden_reasoning_gym()
