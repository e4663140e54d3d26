"""bench/cuda.py's bookkeeping: its cases are the models the node recommends for each GPU tier, and its summary reads
the peaks, the steady rounds and the samplers' rates from the child's rows."""

from __future__ import annotations

import pytest

from bench import cuda
from node.learning import hardware


@pytest.mark.parametrize("case", [c for c, (_, tier) in cuda.CASES.items() if tier != cuda.DEMO])
def test_each_tier_case_measures_the_model_the_node_recommends_for_that_tier(case):
    model, tier = cuda.CASES[case]
    settings = cuda.settings_for(tier, hardware.detect())
    assert settings["recommended_model"] == model
    assert settings["max_new_tokens"] == 256 and settings["micro_batch_groups"] == 1


def test_the_demo_case_runs_the_demo_settings():
    settings = cuda.settings_for(cuda.DEMO, hardware.detect())
    assert (settings["G"], settings["I"], settings["J"], settings["max_new_tokens"]) == (4, 2, 2, 48)


def _rows(tier, device="cuda"):
    start = {"phase": "start", "case": "qwen0.5b:10", "model": "Qwen/Qwen2.5-0.5B-Instruct", "tier_gib": tier,
             "device": device, "gpu": "H", "settings": {}, "train_dtype": "bfloat16", "generation_dtype": "bfloat16",
             "adamw_8bit": True, "estimate_gib": 5.0, "context_gib": 0.5, "torch": "2"}
    ready = {"phase": "ready", "peak_allocated_gib": 2.0, "peak_reserved_gib": 2.5}

    def round_row(number, generate_s, reserved):
        return {"phase": "round", "round": number, "generate_s": generate_s, "train_s": generate_s / 2,
                "generated_tokens": 8192, "trained_tokens": 16384, "generate_peak_allocated_gib": 3.0,
                "generate_peak_reserved_gib": 3.5, "train_peak_allocated_gib": reserved - 0.5,
                "train_peak_reserved_gib": reserved}

    samplers = [{"phase": "sampler", "sampler": name, "repetition": r, "seconds": 1.0, "tokens": 10,
                 "tokens_per_s": rate}
                for r, rates in enumerate([(100.0, 50.0), (120.0, 40.0), (110.0, 60.0)])
                for name, rate in zip(("loop", "generate"), rates)]
    return [start, ready, round_row(1, 90.0, 4.0), round_row(2, 10.0, 6.0), round_row(3, 12.0, 5.0), *samplers]


def test_the_summary_takes_the_highest_peak_the_steady_rounds_and_each_samplers_median():
    summary = cuda.summarize(_rows(8))
    assert summary["peak_reserved_gib"] == 6.0 and summary["peak_allocated_gib"] == 5.5
    assert summary["peak_on_gpu_gib"] == 6.5  # the CUDA context on top of the allocator's peak
    assert summary["generate_s_median"] == 12.0  # the first round (90 s of first launches) is left out
    assert summary["sampler_tokens_per_s"]["loop"] == {"median": 110.0, "min": 100.0, "max": 120.0, "runs": 3}
    assert summary["sampler_tokens_per_s"]["generate"]["median"] == 50.0
    assert summary["fits_tier"] is True and summary["estimate_covers_peak"] is False
    rows = _rows(8)
    rows[0]["estimate_gib"] = 6.2  # above the allocator's peak, below it with the CUDA context
    assert cuda.summarize(rows)["estimate_covers_peak"] is False
    rows[0]["estimate_gib"] = 6.6
    assert cuda.summarize(rows)["estimate_covers_peak"] is True


def test_a_tier_the_peak_exceeds_is_reported_as_not_fitting():
    assert cuda.summarize(_rows(6))["fits_tier"] is False


def test_a_plumbing_check_on_the_cpu_claims_nothing_about_fit():
    summary = cuda.summarize(_rows(8, device="cpu"))
    assert "fits_tier" not in summary and "estimate_covers_peak" not in summary


def test_the_demo_case_says_whether_the_estimate_covered_the_gpu_but_has_no_tier_to_fit():
    rows = _rows(cuda.DEMO)
    rows[0]["estimate_gib"] = 6.6
    summary = cuda.summarize(rows)
    assert summary["estimate_covers_peak"] is True and "fits_tier" not in summary
