"""When a node saves a checkpoint: after so many minutes of training and at the moments that need one, never merely
because a number of rounds went by.

A checkpoint of the bundled model is about a gigabyte (weights plus optimizer moments, fsynced). Saved every few
rounds, a node on a laptop wrote tens of gigabytes an hour; saved by training time it writes a few, and a checkpoint
taken when training pauses, stops or quits, or before an upload, loses nothing the user could notice. Time spent
paused or evaluating does not count as training: a node paused overnight does not save in the morning for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

# Why a checkpoint was written, as the checkpoint_saved event tells it
CheckpointReason = Literal["time", "rounds", "pause", "stop", "upload", "requested"]


@dataclass
class CheckpointPolicy:
    every_s: float  # seconds of training between two checkpoints
    every_rounds: int | None = None  # also every N rounds (tests, servers with disk to spare)
    trained_s: float = 0.0  # training time since the last checkpoint
    rounds: int = 0  # rounds trained since the last checkpoint

    def round_trained(self, seconds: float) -> None:
        self.trained_s += max(seconds, 0.0)
        self.rounds += 1

    @property
    def unsaved(self) -> bool:
        """Whether rounds were trained since the last checkpoint (a checkpoint now would hold something new)."""
        return self.rounds > 0

    def due(self) -> CheckpointReason | None:
        """The reason a checkpoint is due after the round just trained, or None."""
        if not self.unsaved:
            return None
        if self.trained_s >= self.every_s:
            return "time"
        if self.every_rounds is not None and self.rounds >= self.every_rounds:
            return "rounds"
        return None

    def saved(self) -> None:
        self.trained_s = 0.0
        self.rounds = 0
