"""The run folder's append-only history: per-round metrics, rollout samples and held-out evaluations as JSON lines.

Each line is written whole and fsynced before the round counts as done, so a crash loses at most the round in
progress; a torn last line (power loss mid-write) is skipped on reading. On resume the history is cut back to the
checkpoint's round, because rounds after the checkpoint are re-trained from the checkpoint's model: the metrics
then continue without loss or duplication.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path

from node.events import EvalFinished, RolloutSample, RoundFinished, event_from_json

log = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"
SAMPLES_FILE = "samples.jsonl"
EVALUATIONS_FILE = "evaluations.jsonl"


class RunStore:
    def __init__(self, run_dir: Path) -> None:
        self.run_dir = run_dir
        run_dir.mkdir(parents=True, exist_ok=True)
        self.metrics_path = run_dir / METRICS_FILE
        self.samples_path = run_dir / SAMPLES_FILE
        self.evaluations_path = run_dir / EVALUATIONS_FILE

    def append_round(self, metrics: RoundFinished, samples: Iterable[RolloutSample]) -> None:
        # Samples first: a crash between the two writes leaves samples of a round without metrics, which
        # truncate_after() removes on resume, never metrics that point at missing samples.
        _append_lines(self.samples_path, [sample.to_json() for sample in samples])
        _append_lines(self.metrics_path, [metrics.to_json()])

    def append_evaluation(self, result: EvalFinished) -> None:
        _append_lines(self.evaluations_path, [result.to_json()])

    def evaluations(self) -> list[EvalFinished]:
        return [event for event in _read_events(self.evaluations_path) if isinstance(event, EvalFinished)]

    def metrics(self) -> list[RoundFinished]:
        return [event for event in _read_events(self.metrics_path) if isinstance(event, RoundFinished)]

    def samples(self, *, last: int | None = None) -> list[RolloutSample]:
        events = [event for event in _read_events(self.samples_path) if isinstance(event, RolloutSample)]
        return events[-last:] if last else events

    def truncate_after(self, round_: int | None) -> None:
        """Drop every record of rounds after ``round_`` (all of them when None)."""
        for path in (self.metrics_path, self.samples_path, self.evaluations_path):
            if not path.exists():
                continue
            kept = [event.to_json() for event in _read_events(path) if round_ is not None and event.round <= round_]
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
    if not path.exists():
        return []
    events = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            try:
                events.append(event_from_json(line))
            except (ValueError, TypeError, json.JSONDecodeError):
                log.warning("skipping unreadable line %d of %s", number, path)
    return events
