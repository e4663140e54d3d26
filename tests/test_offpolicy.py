"""The sampler-vs-policy log-prob gap of bfloat16 sampling stays within the bound the project states
(bench/offpolicy.py), and the decode loop's own log-probs are those of the distribution each token was drawn from."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from bench.offpolicy import MEAN_ABS_GAP_BOUND, P99_ABS_GAP_BOUND, sampler_policy_gaps, summarize
from node.learning.grpo import Policy
from tests.test_generate_prompt_once import QUESTIONS


def _policy(model_dir, dtype) -> Policy:
    """The tiny model with weights drawn ten times its initial scale: peaked next-token distributions that depend on
    the context, where bfloat16's rounding moves log-probs the most."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        for parameter in model.parameters():
            if parameter.dim() == 2:
                parameter.normal_(0.0, 0.2)
    return Policy(model, AutoTokenizer.from_pretrained(model_dir), generation_dtype=dtype, max_prompt_tokens=256)


def _gaps(policy: Policy):
    prompts = [policy.prompt_ids([{"role": "user", "content": q}]) for q in QUESTIONS]
    return sampler_policy_gaps(policy, prompts, num_generations=4, max_new_tokens=24, seed=0)


def test_bf16_sampling_stays_within_the_stated_gap_bound(tiny_model_dir):
    gaps = _gaps(_policy(tiny_model_dir, torch.bfloat16))
    summary = summarize(gaps)
    assert summary["tokens"] >= 100
    assert summary["mean_abs_token_gap"] <= MEAN_ABS_GAP_BOUND
    assert summary["abs_token_gap_p50_p90_p99"][2] <= P99_ABS_GAP_BOUND
    assert summary["within_bound"]
    assert summary["max_abs_token_gap"] > 0  # it did sample in bfloat16


def test_a_float32_sampler_reports_the_policys_own_log_probs(tiny_model_dir):
    """Sampled in float32, the loop's log-prob of each drawn token is the policy's to float rounding: the log-probs
    are the drawn tokens', position by position, and the token distributions here are far from uniform."""
    policy = _policy(tiny_model_dir, torch.float32)
    gaps = _gaps(policy)
    assert float(torch.cat(gaps).abs().max()) < 1e-3
