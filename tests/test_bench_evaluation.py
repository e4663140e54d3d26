"""bench/evaluation.py's and bench/evaluation_chunks.py's bookkeeping: medians and ranges, and each speed-up taken
within a repetition (so a busier repetition slows both sides alike)."""

from __future__ import annotations

from bench.evaluation import _summary


def _run(repeat: int, questions: int, path: str, cpu: float) -> dict:
    return {"repeat": repeat, "questions": questions, "path": path, "seconds": cpu + 1.0, "cpu_seconds": cpu}


def test_speed_ups_are_taken_within_each_repetition():
    # repetition 2 ran on a busier machine: both paths slowed, their ratio did not
    runs = [_run(1, 64, "whole", 12.0), _run(1, 64, "prefix", 10.0), _run(2, 64, "whole", 24.0),
            _run(2, 64, "prefix", 20.0), _run(3, 64, "whole", 10.0), _run(3, 64, "prefix", 10.0),
            _run(1, 256, "whole", 40.0), _run(1, 256, "prefix", 32.0)]
    summary = _summary(runs)
    assert summary["64"]["prefix"]["cpu_speedup_median"] == 1.2
    assert summary["64"]["prefix"]["cpu_speedup_range"] == [1.0, 1.2]
    assert summary["64"]["whole"]["cpu_seconds_median"] == 12.0
    assert summary["64"]["whole"]["cpu_seconds_range"] == [10.0, 24.0]
    assert summary["64"]["prefix"]["seconds_median"] == 11.0
    assert summary["256"]["prefix"]["cpu_speedup_median"] == 1.25
    assert summary["256"]["prefix"]["wall_speedup_median"] == round(41 / 33, 3)
    assert "cpu_speedup_median" not in summary["64"]["whole"]


def _chunk_run(repeat: int, rows: int, cpu: float, answers: str = "a", workload: str = "greedy") -> dict:
    return {"repeat": repeat, "workload": workload, "rows": rows, "questions_per_chunk": rows or 16,
            "seconds": cpu + 1.0, "cpu_seconds": cpu, "peak_rss_mb": 1000 + rows, "accuracy_greedy": 0.25,
            "greedy_answers": answers}


def test_wider_batches_are_compared_with_16_questions_within_each_repetition():
    """bench/evaluation_chunks.py: the speed-up over ``before`` (16 questions a batch) is taken within a repetition,
    and a batching whose greedy answers differ from ``before``'s in any repetition is reported as such."""
    from bench.evaluation_chunks import BEFORE, summarize

    runs = [_chunk_run(1, BEFORE, 12.0), _chunk_run(1, 64, 10.0), _chunk_run(2, BEFORE, 24.0),
            _chunk_run(2, 64, 16.0, answers="b"), _chunk_run(1, BEFORE, 9.0, workload="demo"),
            _chunk_run(1, 64, 9.0, workload="demo")]
    summary = summarize(runs, [BEFORE, 64])
    assert summary["greedy"]["64"]["cpu_speedup_over_first"] == {"median": 1.35, "range": [1.2, 1.5]}
    assert summary["greedy"]["64"]["cpu_seconds"] == {"median": 13.0, "range": [10.0, 16.0]}
    assert summary["greedy"]["64"]["peak_rss_mb"]["median"] == 1064
    assert summary["greedy"]["before"]["questions_per_chunk"] == 16
    assert summary["greedy"]["before"]["same_greedy_answers_as_first"] is True
    assert summary["greedy"]["64"]["same_greedy_answers_as_first"] is False
    assert summary["demo"]["64"]["same_greedy_answers_as_first"] is True
    assert summary["demo"]["64"]["cpu_speedup_over_first"]["median"] == 1.0
