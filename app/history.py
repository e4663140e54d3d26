"""The run's per-round series as the dashboard plots them (no Qt here, so it is easy to test)."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from node.events import RoundMetrics
from node.game import STAGES

MOVING_AVERAGE_ROUNDS = 10
PHASES = ("generate", "share", "gather", "train")


def moving_average(values: list[float], window: int = MOVING_AVERAGE_ROUNDS) -> list[float]:
    """Trailing mean over the last ``window`` finite values (NaN entries, e.g. rounds without peers, are skipped)."""
    out, recent = [], []
    for value in values:
        if not math.isnan(value):
            recent.append(value)
            recent = recent[-window:]
        out.append(sum(recent) / len(recent) if recent else math.nan)
    return out


@dataclass
class RunHistory:
    rounds: list[int] = field(default_factory=list)
    reward_local: list[float] = field(default_factory=list)
    reward_external: list[float] = field(default_factory=list)  # NaN where no peer group was used
    loss: list[float] = field(default_factory=list)
    completion_length: list[float] = field(default_factory=list)
    seconds: dict[str, list[float]] = field(default_factory=lambda: {phase: [] for phase in PHASES})
    peers: list[int] = field(default_factory=list)
    groups: dict[str, list[int]] = field(default_factory=lambda: {"received": [], "used": [], "rejected": []})
    # multistage game: mean reward per stage and the share of right answers; NaN for rounds without them (SAPO)
    stage_rewards: dict[str, list[float]] = field(default_factory=lambda: {stage: [] for stage in STAGES})
    accuracy: dict[str, list[float]] = field(default_factory=lambda: {"answer": [], "swarm_final": []})
    totals: Counter = field(default_factory=Counter)
    last: RoundMetrics | None = None

    @classmethod
    def from_metrics(cls, metrics: list[RoundMetrics]) -> RunHistory:
        history = cls()
        for row in metrics:
            history.add(row)
        return history

    def add(self, m: RoundMetrics) -> None:
        self.rounds.append(m.round)
        self.reward_local.append(m.reward_local)
        self.reward_external.append(math.nan if m.reward_external is None else m.reward_external)
        self.loss.append(m.loss)
        self.completion_length.append(m.completion_length)
        for phase in PHASES:
            self.seconds[phase].append(getattr(m, f"seconds_{phase}"))
        self.peers.append(m.peers_seen)
        self.groups["received"].append(m.groups_received)
        self.groups["used"].append(m.groups_used)
        self.groups["rejected"].append(m.groups_rejected)
        for stage, values in self.stage_rewards.items():
            values.append(m.stage_rewards.get(stage, math.nan))
        for key, values in self.accuracy.items():
            values.append(m.stage_accuracy.get(key, math.nan))
        self.totals.update(
            shared=m.groups_shared, received=m.groups_received, used=m.groups_used,
            rejected=m.groups_rejected, zero_advantage=m.groups_zero_advantage, rounds=1,
        )
        self.last = m

    def reward_local_average(self) -> list[float]:
        return moving_average(self.reward_local)

    def reward_external_average(self) -> list[float]:
        return moving_average(self.reward_external)
