"""Which tasks a node trains on: the default mix for its model's size, and an adaptive difficulty per family.

A small model (the bundled 135M one) learns nothing from tasks it never solves: with no correct completion in a
group there is no reward spread and no gradient. So models under :data:`SMALL_MODEL_PARAMS` start on easy arithmetic
families they can partly solve, each with a ladder of harder generator configs; larger models keep the nine
families of the SAPO experiments at reasoning-gym's default difficulty.

Difficulty moves per family: up when the recent local accuracy at the current level is high (groups would soon all
be right: no spread), down when groups are mostly wrong and lose their spread. Each rung is its own generator config
with its own config id, and every node registers every rung, so a peer regenerates a task at any level from its ref.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from node.tasks.taskref import DEFAULT_FAMILIES

# Between the catalog's SmolLM2-360M and Qwen2.5-0.5B, which counts 494M parameters: the "0.5B" models of the SAPO
# experiments train on its nine families.
SMALL_MODEL_PARAMS = 450_000_000

_ADD_SUB = {"operators": ["+", "-"], "allow_parentheses": False, "allow_negation": False}
# Rungs, easiest first. Level 0 is what a 135M model with a worked example partly solves.
SMALL_MODEL_LADDERS: dict[str, tuple[dict, ...]] = {
    "basic_arithmetic": (
        {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1, **_ADD_SUB},
        {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2, **_ADD_SUB},
        {"min_terms": 2, "max_terms": 3, "min_digits": 2, "max_digits": 2, **_ADD_SUB},
        {"min_terms": 3, "max_terms": 4, "min_digits": 2, "max_digits": 3, **_ADD_SUB},
    ),
    "chain_sum": (
        {"min_terms": 2, "max_terms": 3, "min_digits": 1, "max_digits": 1},
        {"min_terms": 3, "max_terms": 4, "min_digits": 1, "max_digits": 1},
        {"min_terms": 2, "max_terms": 3, "min_digits": 2, "max_digits": 2},
        {"min_terms": 3, "max_terms": 5, "min_digits": 2, "max_digits": 3},
    ),
    "products": (
        {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1},
        {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 2},
        {"min_terms": 2, "max_terms": 2, "min_digits": 2, "max_digits": 2},
        {"min_terms": 3, "max_terms": 3, "min_digits": 1, "max_digits": 2},
    ),
    "gcd": (
        {"min_value": 2, "max_value": 30},
        {"min_value": 2, "max_value": 100},
        {"min_value": 10, "max_value": 1000},
        {"min_numbers": 3, "max_numbers": 3, "min_value": 10, "max_value": 1000},
    ),
    "count_bits": (
        {"min_n": 2, "max_n": 63},
        {"min_n": 64, "max_n": 1023},
        {"min_n": 1024, "max_n": 65535},
        {"min_n": 65536, "max_n": 2**31 - 1},
    ),
}


@dataclass(frozen=True)
class TaskMix:
    weights: dict[str, float]
    ladders: dict[str, tuple[dict, ...]]


# The small-model default trains on the families the bundled model learned in the README's learning measurement.
# gcd stayed at 0 and count_bits near 0.1 on held-out tasks after 40 rounds: groups without reward spread give no
# gradient, and those two took 40 % of the questions. Their ladders stay, for swarms that configure them.
SMALL_MODEL_DEFAULT_FAMILIES = ("basic_arithmetic", "chain_sum", "products")


def default_mix(params: int | None) -> TaskMix:
    """The families (and their ladders) a model of ``params`` parameters trains on when none are configured."""
    if params is not None and params >= SMALL_MODEL_PARAMS:
        return TaskMix({family: 1.0 for family in DEFAULT_FAMILIES}, {})
    return TaskMix({family: 1.0 for family in SMALL_MODEL_DEFAULT_FAMILIES}, dict(SMALL_MODEL_LADDERS))


class Curriculum:
    """The current level of each family, moved by the outcome of our own recent groups at that level."""

    def __init__(
        self, rungs: Mapping[str, int], *, window: int = 8, raise_at: float = 0.75, lower_at: float = 0.1,
        min_spread: float = 0.25, start: Mapping[str, int] | None = None,
    ) -> None:
        self._rungs = dict(rungs)
        self.window, self.raise_at, self.lower_at, self.min_spread = window, raise_at, lower_at, min_spread
        self.levels = {family: 0 for family in self._rungs}
        for family, level in (start or {}).items():
            if family in self.levels:
                self.levels[family] = min(max(int(level), 0), self._rungs[family] - 1)
        self._recent: dict[str, deque[tuple[float, bool]]] = {f: deque(maxlen=window) for f in self._rungs}

    def record(self, family: str, level: int, accuracy: float, spread: bool) -> None:
        """One local group's exact accuracy and whether its rewards differed; other levels' groups are ignored."""
        if family in self.levels and level == self.levels[family]:
            self._recent[family].append((accuracy, spread))

    def update(self) -> dict[str, int]:
        """Move families whose window is full; returns the families that changed and their new levels."""
        changed = {}
        for family, recent in self._recent.items():
            if len(recent) < self.window:
                continue
            accuracy = sum(a for a, _ in recent) / len(recent)
            spread = sum(s for _, s in recent) / len(recent)
            level = self.levels[family]
            if accuracy >= self.raise_at and level + 1 < self._rungs[family]:
                level += 1
            elif accuracy <= self.lower_at and spread < self.min_spread and level > 0:
                level -= 1
            if level != self.levels[family]:
                self.levels[family] = level
                recent.clear()
                changed[family] = level
        return changed
