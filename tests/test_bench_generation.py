"""bench/generation.py's bookkeeping: ratios to the baseline are taken within each round (CPU seconds inverted, so
a faster sampler is above 1x), and the reference sampler is the decode loop of the commit asked for."""

from __future__ import annotations

import subprocess

import pytest

from bench.generation import ROOT, _summary, reference_decoding


def _run(number: int, sampler: str, cpu: float, tokens: int = 100) -> dict:
    return {"round": number, "sampler": sampler, "tokens": tokens, "seconds": cpu + 1, "cpu_seconds": cpu,
            "tokens_per_cpu_s": tokens / cpu}


def test_ratios_are_taken_within_each_round():
    # round 2 ran on a busier machine: both samplers slowed, their ratio did not
    runs = [_run(1, "old", 10.0), _run(1, "new", 8.0), _run(2, "old", 20.0), _run(2, "new", 16.0),
            _run(3, "old", 10.0), _run(3, "new", 10.0)]
    summary = _summary(runs, ["old", "new"], "old")
    assert summary["new"]["vs_baseline_median"] == summary["new"]["cpu_s_vs_baseline_median"] == 1.25
    assert summary["new"]["vs_baseline_range"] == [1.0, 1.25]
    assert summary["new"]["cpu_s_median"] == 10.0 and summary["new"]["cpu_s_range"] == [8.0, 16.0]
    assert summary["old"]["vs_baseline_range"] == [1.0, 1.0]


def test_the_reference_sampler_is_the_loop_at_that_commit():
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode:
        pytest.skip("not a git checkout")
    module = reference_decoding(head.stdout.strip())
    source = (ROOT / "node" / "learning" / "decoding.py").read_text()
    assert callable(module.sample) and module.sample.__doc__ in source
