"""bench/evaluation.py's bookkeeping: medians and ranges per question count and path, and the prefix path's
speed-up over the whole-prompt path taken within each repetition (so a busier repetition slows both alike)."""

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
