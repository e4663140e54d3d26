"""The name of a task instance, as it crosses the network.

A shared group never carries its ground truth: it names the task (family, the digest of the family's generator
config, dataset seed and index) and every receiver regenerates the question and answer itself.
"""

from __future__ import annotations

from dataclasses import dataclass

# The nine reasoning-gym families of the SAPO experiments (kept here, away from reasoning-gym's heavy import, so
# the config and the app can name them cheaply).
DEFAULT_FAMILIES: tuple[str, ...] = (
    "base_conversion",
    "basic_arithmetic",
    "arc_1d",
    "bf",
    "propositional_logic",
    "fraction_simplification",
    "decimal_arithmetic",
    "calendar_arithmetic",
    "binary_matrix",
)


@dataclass(frozen=True, slots=True)
class TaskRef:
    family: str  # reasoning-gym dataset name, e.g. "basic_arithmetic"
    config_id: str  # short hex digest of the family's generator config (see node.tasks.source.config_id)
    seed: int  # dataset seed of the node that sampled the task
    index: int  # index into that dataset
