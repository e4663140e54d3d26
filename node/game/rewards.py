"""Rewards of the three stages, all computed from the task we regenerated ourselves, never from a peer's word.

Weights follow one rule: the stage's main objective (a correct answer; a correct judgement) is worth 1, and all
other terms together are worth less than 1, so an output that gets the objective right always outranks one that
gets it wrong, whatever its format or agreement. Within that, each term teaches one thing:

- format (0.25, every stage): output a parser can read, the smallest term, a tie-breaker;
- consensus (0.5, revise only): naming the critics' majority, paid only when that majority is right by our ground
  truth, so reading the critics is learned where it leads to the truth and agreeing on a wrong answer earns nothing.

The critique's judgement is the balanced accuracy of its verdict over the shown answers: the share of correct
answers it named and the share of wrong answers it did not name, averaged. Naming every answer, or none, scores at
most 0.5, what a coin would; only telling right from wrong scores more. When every answer is wrong, "none" is the
only perfect verdict. An answer counts as correct when our verifier finds it exactly right (partial credit is not
right).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from node.game import CONSENSUS_WEIGHT, CORRECTNESS_WEIGHT, FORMAT_WEIGHT
from node.game.prompts import (
    LETTERS, NONE, answer_well_formed, canonical, parse_critique, revise_well_formed, stated_majority,
)
from node.tasks.source import Task, grade



def correctness(task: Task, completion: str) -> float:
    """Our verifier's credit in [0, 1] for a completion's final answer: exact for numbers, the family's own score
    (partial credit included) for other answers (see :func:`node.tasks.source.grade`)."""
    return grade(task, completion).reward


def is_exact(task: Task, completion: str) -> bool:
    """Whether a completion's final answer is exactly right (what accuracy counts)."""
    return grade(task, completion).exact


def value_is_correct(task: Task, value: str | None) -> bool:
    """Whether an answer value is exactly right by our verifier."""
    return value is not None and grade(task, f"<answer>{value}</answer>").exact


def answer_reward(task: Task, completion: str) -> float:
    return CORRECTNESS_WEIGHT * correctness(task, completion) + FORMAT_WEIGHT * answer_well_formed(completion)


@dataclass(frozen=True)
class CritiqueScore:
    judgement: float  # balanced accuracy in [0, 1]; 0 when the critique cannot be read
    well_formed: bool

    @property
    def reward(self) -> float:
        return CORRECTNESS_WEIGHT * self.judgement + FORMAT_WEIGHT * self.well_formed


def critique_score(completion: str, truth: Sequence[bool]) -> CritiqueScore:
    """Score a critique of answers whose correctness (by our verifier, in shown order) is ``truth``."""
    critique = parse_critique(completion, len(truth))
    if critique is None:
        return CritiqueScore(judgement=0.0, well_formed=False)
    named = [letter in critique.correct for letter in LETTERS[: len(truth)]]
    right = [n for n, t in zip(named, truth, strict=True) if t]
    wrong = [n for n, t in zip(named, truth, strict=True) if not t]
    if right:
        found = sum(right) / len(right)
    else:  # nothing was correct: the only way to "find" it is to say none
        found = 1.0 if not critique.correct else 0.0
    if wrong:
        rejected = (len(wrong) - sum(wrong)) / len(wrong)
    else:  # nothing was wrong: "none" wrongly rejects everything
        rejected = 1.0 if critique.correct else 0.0
    return CritiqueScore(judgement=(found + rejected) / 2, well_formed=critique.well_formed)


def critique_reward(completion: str, truth: Sequence[bool]) -> float:
    return critique_score(completion, truth).reward


def majority_is_right(task: Task, majority_value: str | None, shown_values: Sequence[str | None]) -> bool:
    """Whether the critics' majority is true: its value is correct, or it is "none" and no shown answer is."""
    if majority_value is None:
        return False
    if majority_value == NONE:
        return not any(value_is_correct(task, v) for v in shown_values)
    # The verifier judges answers as written ("1.50" may be right where "1.5" is not): a majority is right when any
    # shown answer it stands for is.
    spelled = [v for v in shown_values if canonical(v) == majority_value]
    return any(value_is_correct(task, v) for v in spelled) or value_is_correct(task, majority_value)


def revise_reward(task: Task, completion: str, *, majority_value: str | None, majority_right: bool) -> float:
    """Final correctness + consensus (only with a right majority that the revision names) + format.

    ``majority_value`` is the critics' majority as computed by :func:`node.game.prompts.majority` from the
    critiques we received; ``majority_right`` comes from :func:`majority_is_right` (our ground truth).
    """
    consensus = (
        majority_right and majority_value is not None and stated_majority(completion) == canonical(majority_value)
    )
    return (
        CORRECTNESS_WEIGHT * correctness(task, completion)
        + CONSENSUS_WEIGHT * consensus
        + FORMAT_WEIGHT * revise_well_formed(completion)
    )
