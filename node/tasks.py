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
from collections.abc import Mapping
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Any

import reasoning_gym
from reasoning_gym.dataset import ProceduralDataset
from reasoning_gym.factory import DATASETS

from node.errors import NodeError
from node.taskref import TaskRef

log = logging.getLogger(__name__)

SYSTEM_PROMPT = (
    "You are a careful problem solver. Think briefly and to the point, then give your final answer, "
    "in exactly the format the question asks for, inside <answer>...</answer> tags, e.g. <answer>42</answer>. "
    "Put nothing but the final answer inside the tags."
)

MAX_INDEX = 10**9  # task indices are in [0, MAX_INDEX)
MAX_SEED = 2**63 - 1

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


# config_id -> (family, canonical JSON), so that score() finds the config a task was generated with.
_known_configs: dict[str, tuple[str, str]] = {}


class TaskSource:
    """Samples and regenerates tasks of the enabled families."""

    def __init__(
        self,
        weights: Mapping[str, float],
        *,
        seed: int,
        configs: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> None:
        configs = dict(configs or {})
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
        self._config_ids: dict[str, str] = {}
        for family in self.families:
            canonical = _checked_config(family, configs.get(family, {}))
            cid = _digest(canonical)
            _known_configs[cid] = (family, canonical)
            self._config_ids[family] = cid
            _check_addressable(family, canonical, seed)

    def sample(self, n: int, rng: random.Random) -> list[Task]:
        families = rng.choices(self.families, weights=self._weights, k=n)
        refs = [TaskRef(family, self._config_ids[family], self.seed, rng.randrange(MAX_INDEX)) for family in families]
        return [self._task(ref) for ref in refs]

    def regenerate(self, ref: TaskRef) -> Task:
        """Rebuild a task a peer sampled; raises :class:`TaskRejected` for refs this node will not run."""
        if not isinstance(ref.family, str) or ref.family not in self._config_ids:
            raise TaskRejected("family_not_enabled")
        if ref.config_id != self._config_ids[ref.family]:
            raise TaskRejected("config_mismatch")
        if type(ref.seed) is not int or not 0 <= ref.seed <= MAX_SEED:
            raise TaskRejected("bad_seed")
        if type(ref.index) is not int or not 0 <= ref.index < MAX_INDEX:
            raise TaskRejected("bad_index")
        try:
            return self._task(ref)
        except Exception:  # a generator bug a peer's ref happens to hit must not take this node down
            log.debug("could not regenerate %s", ref, exc_info=True)
            raise TaskRejected("generation_failed") from None

    def _task(self, ref: TaskRef) -> Task:
        _, canonical = _known_configs[ref.config_id]
        entry = _dataset(ref.family, canonical, ref.seed)[ref.index]
        answer = entry["answer"]
        return Task(ref, entry["question"], None if answer is None else str(answer), entry)


def build_messages(question: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": question}]


def extract_answer(completion: str) -> str | None:
    """The stripped content of the last complete ``<answer>...</answer>`` block, or None when there is none.

    An opening tag with no closing tag after it (a generation cut off by the token limit) does not count: its
    content may be a partial answer, and scoring it would reward running out of tokens.
    """
    end = completion.rfind(_CLOSE)
    if end < 0:
        return None
    start = completion.rfind(_OPEN, 0, end)
    if start < 0:
        return None
    content_start = start + len(_OPEN)
    answer = completion[content_start : completion.find(_CLOSE, content_start)].strip()
    return answer or None


def score(task: Task, completion: str, *, format_weight: float = 0.0) -> float:
    """Reward of a completion: the task's own correctness score in [0, 1] plus ``format_weight`` when well formed."""
    reward = _correctness(task, extract_answer(completion))
    if _well_formed(completion):
        reward += format_weight
    return reward


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
    if type(seed) is not int or not 0 <= seed <= MAX_SEED:
        raise NodeError(
            f"Task seed {seed!r} is out of range.",
            hint=f"set tasks.seed to an integer from 0 to {MAX_SEED}, or leave it empty",
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
