"""The run's per-round series as the dashboard plots them (no Qt here, so it is easy to test)."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from app.swarm_help import SwarmGiven
from node.events import EvalFinished, RoundFinished
from node.game import STAGE_MAX_REWARD, STAGES

MOVING_AVERAGE_ROUNDS = 10
PHASES = ("generate", "share", "gather", "train")
# Received peer groups by fate, in the order the dashboard stacks them; they add up to groups_received.
FATES = ("used", "dropped", "not_needed", "rejected")
# After this many rounds in a row without reward spread the dashboard explains why nothing is learned.
FLAT_ROUNDS_WARNING = 3


def moving_average(values: list[float], window: int = MOVING_AVERAGE_ROUNDS) -> list[float]:
    """Trailing mean over the last ``window`` finite values (NaN entries, e.g. rounds without peers, are skipped)."""
    out, recent = [], []
    for value in values:
        if not math.isnan(value):
            recent.append(value)
            recent = recent[-window:]
        out.append(sum(recent) / len(recent) if recent else math.nan)
    return out


def _nan(value: float | None) -> float:
    return math.nan if value is None else float(value)


@dataclass
class RunHistory:
    rounds: list[int] = field(default_factory=list)
    reward_local: list[float] = field(default_factory=list)
    reward_external: list[float] = field(default_factory=list)  # NaN where no peer group was used
    completion_length: list[float] = field(default_factory=list)
    wellformed: list[float] = field(default_factory=list)
    accuracy_local: list[float] = field(default_factory=list)
    groups_with_spread: list[float] = field(default_factory=list)
    mean_abs_advantage: list[float] = field(default_factory=list)
    grad_norm: list[float] = field(default_factory=list)  # NaN where the update was skipped or not measured
    entropy: list[float] = field(default_factory=list)
    seconds: dict[str, list[float]] = field(default_factory=lambda: {phase: [] for phase in PHASES})
    peers: list[int] = field(default_factory=list)
    groups: dict[str, list[int]] = field(default_factory=lambda: {fate: [] for fate in ("received", *FATES)})
    # multistage game: each stage's mean reward as a share of its maximum, and the share of questions answered
    # exactly right by this node's first answers and by the swarm's final answers; NaN in rounds without them (SAPO)
    stage_rewards: dict[str, list[float]] = field(default_factory=lambda: {stage: [] for stage in STAGES})
    stage_accuracy: dict[str, list[float]] = field(default_factory=lambda: {"answer": [], "swarm_final": []})
    totals: Counter = field(default_factory=Counter)
    # SAPO: mean and oldest age (seconds) of the peer groups trained on; NaN in rounds without any
    peer_age_s: list[float] = field(default_factory=list)
    peer_age_s_max: list[float] = field(default_factory=list)
    evaluations: list[EvalFinished] = field(default_factory=list)
    last: RoundFinished | None = None
    # SAPO: peer groups trained on with reward spread on a family where this node's own groups had none; NaN in
    # rounds that did not count it (the game, older run folders)
    peer_spread_lacked: list[float] = field(default_factory=list)
    given: SwarmGiven = field(default_factory=SwarmGiven)  # what the swarm gave over the run (app.swarm_help)

    @classmethod
    def from_metrics(cls, metrics: list[RoundFinished], evaluations: list[EvalFinished] = ()) -> RunHistory:
        history = cls()
        for row in metrics:
            history.add(row)
        for result in evaluations:
            history.add_evaluation(result)
        return history

    def add(self, m: RoundFinished) -> None:
        self.rounds.append(m.round)
        self.reward_local.append(m.reward_local)
        self.reward_external.append(_nan(m.reward_external))
        self.completion_length.append(m.completion_length)
        self.wellformed.append(m.wellformed_rate)
        self.accuracy_local.append(m.accuracy_local)
        self.groups_with_spread.append(m.groups_with_spread)
        self.mean_abs_advantage.append(m.mean_abs_advantage)
        self.grad_norm.append(math.nan if m.update_skipped else _nan(m.grad_norm))
        self.entropy.append(_nan(m.entropy))
        for phase in PHASES:
            self.seconds[phase].append(getattr(m, f"seconds_{phase}"))
        self.peers.append(m.peers_seen)
        fates = fates_of(m)
        self.groups["received"].append(m.groups_received)
        for fate in FATES:
            self.groups[fate].append(fates[fate])
        for stage, values in self.stage_rewards.items():
            values.append(m.stage_rewards[stage] / STAGE_MAX_REWARD[stage] if stage in m.stage_rewards else math.nan)
        for key, values in self.stage_accuracy.items():
            values.append(m.stage_accuracy.get(key, math.nan))
        self.totals.update(shared=m.groups_shared, received=m.groups_received, rounds=1, **fates)
        self.peer_age_s.append(_nan(m.peer_group_age_s_mean))
        self.peer_age_s_max.append(_nan(m.peer_group_age_s_max))
        self.peer_spread_lacked.append(_nan(m.peer_groups_spread_we_lacked))
        self.given = self.given.plus(m)
        if m.external_groups_wanted:
            self.totals.update(j_rounds=1, j_filled=int(m.groups_used >= m.external_groups_wanted))
        self.last = m

    def add_evaluation(self, result: EvalFinished) -> None:
        if self.evaluations and result.round <= self.evaluations[-1].round:
            return  # a replay of one we have (history loaded after the event was queued)
        self.evaluations.append(result)

    def reward_local_average(self) -> list[float]:
        return moving_average(self.reward_local)

    def reward_external_average(self) -> list[float]:
        return moving_average(self.reward_external)

    @property
    def baseline(self) -> EvalFinished | None:
        """The first held-out evaluation (before any training when the run started fresh)."""
        return self.evaluations[0] if self.evaluations else None

    def skipped_rounds(self) -> list[tuple[int, int]]:
        """Runs of round numbers (first, last) this node never played: it joined the swarm's later round instead
        (the node logs "catching up with the swarm" when it does)."""
        return [(a + 1, b - 1) for a, b in zip(self.rounds, self.rounds[1:]) if b - a > 1]

    def peer_groups_text(self) -> str:
        """How fresh the peer groups trained on were and how often a round filled its J slots ("" before any round
        that asks for peer groups)."""
        rounds, filled = self.totals["j_rounds"], self.totals["j_filled"]
        if not rounds:
            return ""
        ages = [a for a in self.peer_age_s if not math.isnan(a)]
        oldest = [a for a in self.peer_age_s_max if not math.isnan(a)]
        age = f"{sum(ages) / len(ages):.0f} s old on average, oldest {max(oldest):.0f} s; " if ages else ""
        return f"Peer groups trained on: {age}J filled in {filled} of {rounds} rounds ({filled / rounds:.0%})."

    def flat_rounds(self) -> int:
        """Rounds in a row, up to the last one, in which no trained group had reward spread."""
        count = 0
        for spread in reversed(self.groups_with_spread):
            if spread > 0:
                break
            count += 1
        return count

    def flat_explanation(self) -> str:
        """One line saying why nothing is learned and what to do, or "" while groups have reward spread."""
        flat = self.flat_rounds()
        if flat < FLAT_ROUNDS_WARNING or self.last is None:
            return ""
        m = self.last
        why = f"No learning signal for {flat} rounds: every completion of a question scored the same, so GRPO has " \
              "nothing to compare."
        if m.wellformed_rate < 0.2:
            advice = (f" The model wrote a complete <answer> block in only {m.wellformed_rate:.0%} of its answers; "
                      "the curriculum keeps tasks easy, or pick a larger model in Settings.")
        elif m.accuracy_local >= 0.9:
            advice = " Every answer is right: the tasks are too easy; the curriculum raises the difficulty by itself."
        else:
            advice = (" Every answer is wrong: the tasks are too hard for this model; the curriculum lowers the "
                      "difficulty, or raise completions per question in Settings.")
        return why + advice


def fates_of(m: RoundFinished) -> dict[str, int]:
    """Received peer groups by fate; whatever the node did not account for counts as not needed."""
    known = {"used": m.groups_used, "dropped": m.groups_zero_advantage, "rejected": m.groups_rejected}
    not_needed = max(m.groups_not_needed, m.groups_received - sum(known.values()))
    return {**known, "not_needed": not_needed}
