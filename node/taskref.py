"""The name of a task instance, as it crosses the network.

A shared group never carries its ground truth: it names the task (family, the digest of the family's generator
config, dataset seed and index) and every receiver regenerates the question and answer itself.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class TaskRef:
    family: str  # reasoning-gym dataset name, e.g. "basic_arithmetic"
    config_id: str  # short hex digest of the family's generator config (see node.tasks.config_id)
    seed: int  # dataset seed of the node that sampled the task
    index: int  # index into that dataset
