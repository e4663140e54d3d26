"""bench/generation.py's bookkeeping: ratios to the baseline are taken within each round (CPU seconds inverted, so
a faster sampler is above 1x), and the reference sampler is the decode loop of the commit asked for."""

from __future__ import annotations

import subprocess
import sys
from unittest import mock

import pytest

from bench.generation import ROOT, _summary, available_samplers, reference_decoding


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


def test_on_a_gpu_ratios_are_taken_by_wall_clock_seconds():
    runs = [{**_run(1, "torch", 10.0), "seconds": 4.0, "tokens_per_s": 25.0},
            {**_run(1, "vllm", 10.0), "seconds": 1.0, "tokens_per_s": 100.0}]
    summary = _summary(runs, ["torch", "vllm"], "torch", wall=True)
    assert summary["vllm"]["vs_baseline_median"] == summary["vllm"]["wall_s_vs_baseline_median"] == 4.0
    assert summary["vllm"]["tokens_per_s_median"] == 100.0 and "tokens_per_cpu_s_median" not in summary["vllm"]


def test_vllm_samplers_are_skipped_where_vllm_does_not_import(capsys):
    with mock.patch.dict(sys.modules, {"vllm": None}):  # None: importing it raises ImportError
        kept = available_samplers(["preallocated/bfloat16", "vllm/bfloat16"])
    assert kept == ["preallocated/bfloat16"]
    said = capsys.readouterr().err
    assert "skipping vllm/bfloat16: vllm does not import" in said and "bench/gpu_vllm.sh" in said
