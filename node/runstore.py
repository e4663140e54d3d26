"""The run folder's append-only history: per-round metrics, rollout samples, held-out evaluations and each
evaluation's answers per question, as JSON lines.

Each line is written whole and fsynced before the round counts as done, so a crash loses at most the round in
progress; a torn last line (power loss mid-write) is skipped on reading. On resume the history is cut back to the
checkpoint's round, because rounds after the checkpoint are re-trained from the checkpoint's model: the metrics
then continue without loss or duplication.

The answers per question (:class:`HeldoutAnswers`) are for reading a fall-back of held-out accuracy after the fact
(``bench/heldout_flips.py``: which questions were gained and lost, and whether wrong answers converge on one value).
They are not an event: the app has no use for them, and an evaluation's event stays small.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from node.events import EvalFinished, RolloutSample, RoundFinished, event_from_json

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"
SAMPLES_FILE = "samples.jsonl"
EVALUATIONS_FILE = "evaluations.jsonl"
ANSWERS_FILE = "heldout_answers.jsonl"

ANSWERS_VERSION = 1
# An answer is kept to tell answers apart (a collapse repeats one value), not to read a derivation: the extracted
# <answer> content, cut like the rollout samples' texts are (node.sapo.round.SAMPLE_TEXT_CHARS), only shorter.
ANSWER_CHARS = 64
# The most questions an evaluation can have (node.config's bound on evaluation.questions), and family names as long
# as a reasoning-gym dataset name gets: what a valid line can hold, so a corrupt or hand-edited file is refused.
MAX_ANSWERS = 4096
MAX_FAMILY_CHARS = 64


@dataclass(frozen=True)
class HeldoutAnswer:
    """One held-out question's greedy answer, graded by the training verifier."""

    family: str
    answer: str | None  # the graded <answer> block's content, at most ANSWER_CHARS; None: no complete block
    correct: bool  # exactly right (accuracy, never partial credit)
    wellformed: bool

    def __post_init__(self) -> None:
        if not (isinstance(self.family, str) and 0 < len(self.family) <= MAX_FAMILY_CHARS):
            raise ValueError(f"bad family {self.family!r:.80}")
        if not (self.answer is None or (isinstance(self.answer, str) and len(self.answer) <= ANSWER_CHARS)):
            raise ValueError(f"answer longer than {ANSWER_CHARS} characters (cut it) or not text")


@dataclass(frozen=True)
class HeldoutAnswers:
    """Every question's greedy answer of one held-out evaluation, in the evaluation set's order.

    A question's key is its position in the set together with ``question_set``, a digest of the set's tasks: two
    evaluations answered the same questions at the same positions exactly when their digests are equal (a resumed run
    with other evaluation settings gets another set, and another digest).
    """

    round: int
    rounds_trained: int
    question_set: str
    answers: tuple[HeldoutAnswer, ...]

    def __post_init__(self) -> None:
        if not (_count(self.round) and _count(self.rounds_trained)):
            raise ValueError("round and rounds_trained are counts")
        if not (isinstance(self.question_set, str) and 0 < len(self.question_set) <= 64):
            raise ValueError("bad question_set")
        if len(self.answers) > MAX_ANSWERS:
            raise ValueError(f"more than {MAX_ANSWERS} answers")

    def to_json(self) -> str:
        # A table of the families once per line, then [family's index, answer, correct, well-formed] per question: a
        # question with a short answer costs ~14 bytes, against ~80 as an object with named fields.
        families = sorted({a.family for a in self.answers})
        index = {family: i for i, family in enumerate(families)}
        rows = [[index[a.family], a.answer, int(a.correct), int(a.wellformed)] for a in self.answers]
        return json.dumps({"version": ANSWERS_VERSION, "round": self.round, "rounds_trained": self.rounds_trained,
                           "question_set": self.question_set, "families": families, "answers": rows},
                          separators=(",", ":"), ensure_ascii=False)

    @classmethod
    def from_json(cls, line: str) -> HeldoutAnswers:
        """The record of one line; ValueError (or TypeError) when it is not one this version wrote."""
        data = json.loads(line)
        if not isinstance(data, dict) or data.get("version") != ANSWERS_VERSION:
            raise ValueError("not a held-out answers record of this version")
        families, rows = data.get("families"), data.get("answers")
        if not (isinstance(families, list) and len(set(families)) == len(families) and isinstance(rows, list)):
            raise ValueError("bad families or answers")
        answers = []
        for row in rows:
            if not (isinstance(row, list) and len(row) == 4 and _count(row[0]) and row[0] < len(families)
                    and _flag(row[2]) and _flag(row[3])):
                raise ValueError(f"bad answer row {row!r:.80}")
            answers.append(HeldoutAnswer(families[row[0]], row[1], bool(row[2]), bool(row[3])))
        return cls(data.get("round"), data.get("rounds_trained"), data.get("question_set"), tuple(answers))


def _count(value) -> bool:
    return type(value) is int and value >= 0


def _flag(value) -> bool:
    return type(value) is int and value in (0, 1)


class RunStore:
    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        self.metrics_path = run_dir / METRICS_FILE
        self.samples_path = run_dir / SAMPLES_FILE
        self.evaluations_path = run_dir / EVALUATIONS_FILE
        self.answers_path = run_dir / ANSWERS_FILE

    def append_round(self, metrics: RoundFinished, samples: Iterable[RolloutSample]) -> None:
        # Samples first: a crash between the two writes leaves samples of a round without metrics, which
        # truncate_after() removes on resume, never metrics that point at missing samples.
        _append_lines(self.samples_path, [sample.to_json() for sample in samples])
        _append_lines(self.metrics_path, [metrics.to_json()])

    def append_evaluation(self, result: EvalFinished, answers: HeldoutAnswers | None = None) -> None:
        # Answers first, as samples before metrics: a crash between the two writes leaves answers of an evaluation
        # that runs again (its summary is what says it ran); heldout_answers() keeps the last of the same rounds.
        if answers is not None:
            _append_lines(self.answers_path, [answers.to_json()])
        _append_lines(self.evaluations_path, [result.to_json()])

    def evaluations(self) -> list[EvalFinished]:
        return [event for event in _read_events(self.evaluations_path) if isinstance(event, EvalFinished)]

    def heldout_answers(self) -> list[HeldoutAnswers]:
        """Each evaluation's answers per question, one record per rounds trained (the last written), in order."""
        by_rounds = {record.rounds_trained: record for record in _read_lines(self.answers_path, HeldoutAnswers.from_json)}
        return [by_rounds[n] for n in sorted(by_rounds)]

    def metrics(self) -> list[RoundFinished]:
        return [event for event in _read_events(self.metrics_path) if isinstance(event, RoundFinished)]

    def samples(self, *, last: int | None = None) -> list[RolloutSample]:
        events = [event for event in _read_events(self.samples_path) if isinstance(event, RolloutSample)]
        return events[-last:] if last else events

    def truncate_after(self, round_: int | None) -> None:
        """Drop every record of rounds after ``round_`` (all of them when None)."""
        for path, read in ((self.metrics_path, _read_events), (self.samples_path, _read_events),
                           (self.evaluations_path, _read_events),
                           (self.answers_path, lambda p: _read_lines(p, HeldoutAnswers.from_json))):
            if not path.exists():
                continue
            kept = [record.to_json() for record in read(path) if round_ is not None and record.round <= round_]
            tmp = path.with_suffix(".tmp")
            with open(tmp, "w", encoding="utf-8") as f:
                f.writelines(line + "\n" for line in kept)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)


def _append_lines(path: Path, lines: list[str]) -> None:
    if not lines:
        return
    with open(path, "a", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))
        f.flush()
        os.fsync(f.fileno())


def _read_events(path: Path) -> list:
    return _read_lines(path, event_from_json)


def _read_lines(path: Path, parse: Callable[[str], object]) -> list:
    if not path.exists():
        return []
    records = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            try:
                records.append(parse(line))
            except (ValueError, TypeError, json.JSONDecodeError):
                log.warning("skipping unreadable line %d of %s", number, path)
    return records
