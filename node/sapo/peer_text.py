"""Limits on what a peer's completion can carry beyond its verifiable answer.

Our verifier checks a peer completion's graded ``<answer>`` block (the last complete one,
:func:`node.tasks.source.answer_span`); everything else (the reasoning, and any other ``<answer>`` block, which nobody
grades) is unverifiable text we would train on. A correct answer wrapped in a long payload ("ignore all previous
instructions ...") scores 1.0, so the text outside the answer block is capped relative to what our own policy writes: a
group with any completion beyond ``ratio`` times our longest such text (plus a small allowance for a policy that still
writes little) is dropped and counted. A completion rewarded below its group's mean is exempt: its advantage is
negative, so the update can only make its text less likely, and a policy that rambles without an answer beside peers
that answer is no attack. A group without reward spread is checked in full: it trains nothing, and a payload in it marks
its sender.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Sequence

from node.sapo.scoring import REWARD_TIE
from node.tasks.source import answer_span

MIN_ALLOWANCE_CHARS = 200  # a fresh policy may write almost nothing around its answer


def outside_answer_chars(text: str) -> int:
    """Characters of ``text`` outside its graded ``<answer>...</answer>`` block, whitespace excluded: text in an
    earlier block is graded by nobody, so it counts like any other text around the answer."""
    span = answer_span(text)
    outside = text if span is None else text[: span[0]] + text[span[1] :]
    return sum(1 for ch in outside if not ch.isspace())


def outside_text_limit(own_completions: Iterable[str], ratio: float) -> int:
    longest = max((outside_answer_chars(t) for t in own_completions), default=0)
    return int(ratio * longest) + MIN_ALLOWANCE_CHARS


def within_limit(texts: Sequence[str], rewards: Sequence[float], limit: int) -> bool:
    """Whether every completion the update could reinforce (not below its group's mean reward) keeps within
    ``limit``."""
    mean = statistics.fmean(rewards)
    return all(reward < mean - REWARD_TIE or outside_answer_chars(t) <= limit
               for t, reward in zip(texts, rewards, strict=True))
