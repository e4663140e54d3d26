"""The three stages' prompts and the parsers of what the model (or a peer) wrote back.

Formats (tags are matched exactly, case-sensitive; the parsers never raise on hostile text):

- answer: ``<answer>...</answer>``, optionally after one ``<think>...</think>``. Stage 1 asks with SAPO's own chat
  (:meth:`node.tasks.source.TaskSource.messages`: a worked example of the same family), the one a small model follows
- critique: ``<correct>A, C</correct><why>...</why>``, the letters of every answer judged correct, or
  ``<correct>none</correct>``
- revise: ``<majority>...</majority><think>...</think><answer>...</answer>``, the majority being the answer value
  most critics judged correct (or ``none``)

Peers' answers are shown to the model by their value and a short excerpt of their reasoning, under letters that
are shuffled per prompt, never with their author: a critic must judge the answer, not the peer. Answer values are
compared after :func:`canonical`, so ``1,000``, ``1000.0`` and `` 1000 `` are the same answer.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from node.tasks.source import extract_answer

LETTERS = "ABCDEFGH"  # at most this many answers are shown to a critic
NONE = "none"
MAX_VALUE_CHARS = 64  # an answer value longer than this is not a short answer a critic can compare
MAX_WHY_CHARS = 300  # "a short justification"
MAX_CRITIQUE_CHARS = 1500  # a longer critique is not read at all
EXCERPT_CHARS = 160  # of a peer's reasoning, shown beside its answer
_MAX_EXPONENT = 30  # numbers beyond 1e30 are compared as text (and cannot blow up the normalized form)

_TAG = re.compile(r"</?[A-Za-z_]+>")
_LIST_SPLIT = re.compile(r"[\s,;/]+|\band\b")

CRITIQUE_SYSTEM = (
    "You check other solvers' answers. Work out the right answer yourself, then name the letters of every "
    "correct answer inside <correct>...</correct> (or <correct>none</correct> if none is correct), and give one "
    "short sentence of justification inside <why>...</why>."
)
REVISE_SYSTEM = (
    "You improve on other solvers' work. Read their answers and the critics' verdicts. First write the answer most "
    "critics judged correct inside <majority>...</majority> (or <majority>none</majority>), then think briefly "
    "inside <think>...</think> and give your own final answer inside <answer>...</answer>."
)

# One worked example per stage, in the chat before the real question: small models learn the format from it.
_CRITIQUE_EXAMPLE = (
    "Question:\nWhat is 6 * 3?\n\nAnswers:\nA: 18 (6 * 3 = 18)\nB: 9 (6 + 3 = 9)\n\nWhich answers are correct?",
    "<correct>A</correct>\n<why>6 * 3 is 18; B added instead of multiplying.</why>",
)
_REVISE_EXAMPLE = (
    "Question:\nWhat is 9 - 4?\n\nAnswers:\nA: 5 (9 - 4 = 5)\nB: 13 (9 + 4)\n\n"
    "Critics:\nCritic 1 judged correct: 5. Why: 9 - 4 = 5.\nCritic 2 judged correct: 5. Why: B added.\n\n"
    "Which answer did most critics judge correct, and what is your final answer?",
    "<majority>5</majority>\n<think>9 - 4 = 5, the critics are right.</think>\n<answer>5</answer>",
)


@dataclass(frozen=True)
class ShownAnswer:
    """A peer's answer as a critic sees it: its value as written (None: it gave none), an excerpt of its reasoning."""

    value: str | None
    excerpt: str


@dataclass(frozen=True)
class Critique:
    """A parsed critique: the letters it judged correct (empty with ``none``) and its justification."""

    correct: frozenset[str]
    why: str
    well_formed: bool  # exactly the fixed format, with a justification of at most MAX_WHY_CHARS


@dataclass(frozen=True)
class CriticView:
    """A critique as a reviser sees it: the answer values it judged correct (canonical; empty: none)."""

    favoured: frozenset[str]
    why: str


def canonical(value: str | None) -> str | None:
    """The form in which two answers are compared: numbers normalized, text lowercased and trimmed; None if empty."""
    if value is None:
        return None
    text = " ".join(value.split()).rstrip(".").strip()
    if not text or len(text) > MAX_VALUE_CHARS:
        return None
    try:
        number = Decimal(text.replace(",", ""))
    except InvalidOperation:
        return text.lower()
    if not number.is_finite() or abs(number.adjusted()) > _MAX_EXPONENT:
        return text.lower()
    normalized = format(number.normalize(), "f")
    return "0" if normalized in ("-0", "0") else normalized


def answer_value(completion: str) -> str | None:
    """A completion's final answer as written (trimmed), None when it has none short enough to compare."""
    value = extract_answer(completion)
    if value is None:
        return None
    value = " ".join(value.split())
    return value if len(value) <= MAX_VALUE_CHARS else None


def excerpt(completion: str) -> str:
    """A short, tag-free piece of a completion's reasoning (the text before its answer)."""
    cut = completion.rfind("<answer>")
    text = _TAG.sub(" ", completion if cut < 0 else completion[:cut])
    text = " ".join(text.split())
    return text if len(text) <= EXCERPT_CHARS else text[: EXCERPT_CHARS - 1] + "…"


# --------------------------------------------------------------------------------------------------- prompts
def critique_messages(question: str, shown: Sequence[ShownAnswer]) -> list[dict[str, str]]:
    if not 0 < len(shown) <= len(LETTERS):
        raise ValueError(f"a critic sees 1 to {len(LETTERS)} answers, not {len(shown)}")
    body = f"Question:\n{question}\n\nAnswers:\n{_answer_lines(shown)}\n\nWhich answers are correct?"
    return _chat(CRITIQUE_SYSTEM, _CRITIQUE_EXAMPLE, body)


def revise_messages(question: str, shown: Sequence[ShownAnswer], critics: Sequence[CriticView]) -> list[dict[str, str]]:
    if critics:
        lines = [
            f"Critic {i}: judged correct: {', '.join(sorted(view.favoured)) or NONE}. Why: {view.why or '-'}"
            for i, view in enumerate(critics, 1)
        ]
        verdicts = "Critics:\n" + "\n".join(lines)
    else:
        verdicts = "Critics:\nNo critic judged these answers."
    body = (
        f"Question:\n{question}\n\nAnswers:\n{_answer_lines(shown)}\n\n{verdicts}\n\n"
        "Which answer did most critics judge correct, and what is your final answer?"
    )
    return _chat(REVISE_SYSTEM, _REVISE_EXAMPLE, body)


def _answer_lines(shown: Sequence[ShownAnswer]) -> str:
    lines = []
    for letter, answer in zip(LETTERS, shown, strict=False):
        value = answer.value if answer.value is not None else "(no answer)"
        lines.append(f"{letter}: {value}" + (f" ({answer.excerpt})" if answer.excerpt else ""))
    return "\n".join(lines)


def _chat(system: str, example: tuple[str, str], user: str) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": system},
        {"role": "user", "content": example[0]},
        {"role": "assistant", "content": example[1]},
        {"role": "user", "content": user},
    ]


# --------------------------------------------------------------------------------------------------- parsers
def parse_critique(text: str, answers: int) -> Critique | None:
    """The verdict of a critique of ``answers`` answers; None when it cannot be read as one.

    Unreadable: longer than MAX_CRITIQUE_CHARS, not exactly one ``<correct>`` block, a letter that names no shown
    answer, or ``none`` together with letters. A critique cannot hedge by writing several verdicts.
    """
    if not isinstance(text, str) or len(text) > MAX_CRITIQUE_CHARS:
        return None
    verdict = _single_block(text, "correct")
    if verdict is None:
        return None
    tokens = [t for t in _LIST_SPLIT.split(verdict.strip()) if t]
    if not tokens:
        return None
    if len(tokens) == 1 and tokens[0].lower() == NONE:
        correct: frozenset[str] = frozenset()
    else:
        valid = LETTERS[:answers]
        if any(len(t) != 1 or t.upper() not in valid for t in tokens):
            return None
        correct = frozenset(t.upper() for t in tokens)
    why = _single_block(text, "why")
    why_text = " ".join((why or "").split())
    well_formed = (
        why is not None
        and 0 < len(why_text) <= MAX_WHY_CHARS
        and text.find("<correct>") < text.find("<why>")
    )
    return Critique(correct=correct, why=why_text[:MAX_WHY_CHARS], well_formed=well_formed)


def critic_view(critique: Critique, shown_values: Sequence[str | None]) -> CriticView:
    """Translate a critique's letters into the answer values it judged correct (letters differ per critic)."""
    favoured = {canonical(shown_values[LETTERS.index(letter)]) for letter in critique.correct}
    return CriticView(favoured=frozenset(v for v in favoured if v is not None), why=critique.why)


def majority(critics: Sequence[CriticView]) -> str | None:
    """The value most critics judged correct (``none`` when most judged none correct); None on a tie or no critic.

    Each critic has one vote per answer value it names; "none" is a vote of its own. A strict plurality is needed.
    """
    votes: Counter[str] = Counter()
    for view in critics:
        votes.update(view.favoured or {NONE})
    ranked = votes.most_common(2)
    if not ranked or (len(ranked) == 2 and ranked[0][1] == ranked[1][1]):
        return None
    return ranked[0][0]


def stated_majority(text: str) -> str | None:
    """The canonical value a revision names as the critics' majority, ``none``, or None when it names nothing."""
    block = _single_block(text, "majority")
    value = canonical(block)
    return NONE if value == NONE else value


def answer_well_formed(text: str) -> bool:
    """One answer block, after one thinking block if there is one (small models answer without)."""
    shape = ("think", "answer") if "<think>" in text or "</think>" in text else ("answer",)
    return _in_order(text, shape) and extract_answer(text) is not None


def revise_well_formed(text: str) -> bool:
    return (
        _in_order(text, ("majority", "think", "answer"))
        and stated_majority(text) is not None
        and extract_answer(text) is not None
    )


def _single_block(text: str, tag: str) -> str | None:
    """The content of the only ``<tag>...</tag>`` block; None when there is not exactly one."""
    opening, closing = f"<{tag}>", f"</{tag}>"
    if text.count(opening) != 1 or text.count(closing) != 1:
        return None
    start, end = text.find(opening) + len(opening), text.find(closing)
    return text[start:end] if start <= end else None


def _in_order(text: str, tags: Sequence[str]) -> bool:
    """Each tag's block occurs exactly once, and the blocks follow one another in this order."""
    position = -1
    for tag in tags:
        if _single_block(text, tag) is None:
            return False
        start = text.find(f"<{tag}>")
        if start < position:
            return False
        position = text.find(f"</{tag}>")
    return True
