"""ONNX Runtime's sampler (:mod:`node.learning.ort_decoding`) against the torch loop and the policy on the tiny
model: the same tokens from the same seed (greedy and sampled rows, rows ending at different steps, grouped
key/value heads; ``generate()``'s own where both draw as it draws), each token's log-prob the policy's own within
1e-4 nats, the weights of the moment sampled from at every call, and the torch loop wherever onnxruntime is
missing."""

from __future__ import annotations

import logging

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaForCausalLM

from node.learning import decoding, ort_decoding
from node.learning.grpo import Policy
from tests.generate_draw import draw_as_generate, multinomial
from tests.test_generate_prompt_once import (
    G,
    MAX_NEW_TOKENS,
    _assert_policy_logprobs,
    _end_mid_completion,
    _prompts,
    _sharpen,
)

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

# Per-token |log-prob gap| between what the ONNX Runtime sampler drew each token from and the float32 policy's
# full forward: float32 rounding of another kernel order, nothing more.
LOGPROB_BOUND = 1e-4


def _model(model_dir, kv_heads: int | None):
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    if kv_heads is not None:  # grouped-query attention: fewer key/value heads than query heads, as in SmolLM2
        config = model.config
        config.num_key_value_heads = kv_heads
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            model = LlamaForCausalLM(config)
    _sharpen(model)
    return model.eval()


def _policy(model, model_dir, sampler: str) -> Policy:
    return Policy(model, AutoTokenizer.from_pretrained(model_dir), generation_dtype=torch.float32,
                  max_prompt_tokens=256, sampler=sampler)


def _draw(policy: Policy, prompts, sample, *, seed: int = 7, draw: decoding.Draw = decoding.inverse_cdf
          ) -> decoding.Sampled:
    sampler = policy.sampling_model()
    input_ids, attention = policy._padded(prompts, sampler)
    torch.manual_seed(seed)
    return sample(sampler, input_ids, attention, greedy=1, sampled=G, max_new_tokens=MAX_NEW_TOKENS, temperature=1.0,
                  top_p=1.0, eos_ids=policy.eos_ids, pad_id=policy.tokenizer.pad_token_id, draw=draw)


@pytest.mark.parametrize("kv_heads", [None, 2])
def test_onnxruntime_draws_the_torch_loops_tokens_with_the_policys_log_probs(tiny_model_dir, kv_heads, monkeypatch):
    # Token for token, drawing as generate() does: the inverse-CDF draw is as exact, but a uniform can sit within
    # float32 rounding of two tokens' boundary, so two kernel orders may part on a near-flat distribution.
    draw_as_generate(monkeypatch)
    model = _model(tiny_model_dir, kv_heads)
    policy = _policy(model, tiny_model_dir, "onnxruntime")
    assert ort_decoding.supports(policy.sampling_model())
    prompts = _prompts(policy)
    _end_mid_completion(policy, prompts, greedy=False)
    torch_drawn = _draw(policy, prompts, decoding.sample, draw=multinomial)
    ort_drawn = _draw(policy, prompts, ort_decoding.sample, draw=multinomial)
    assert torch.equal(ort_drawn.tokens, torch_drawn.tokens)
    ends = _assert_policy_logprobs(policy, prompts, ort_drawn, atol=LOGPROB_BOUND)
    assert len(set(ends)) > 1 and max(ends) == MAX_NEW_TOKENS  # rows left the batch at different steps
    # The node's own draw: each token's log-prob the policy's, whichever tokens it drew.
    _assert_policy_logprobs(policy, prompts, _draw(policy, prompts, ort_decoding.sample), atol=LOGPROB_BOUND)
    kwargs = {"num_generations": G, "max_new_tokens": MAX_NEW_TOKENS, "temperature": 0.7, "top_p": 0.9, "seed": 3}
    built = []
    session = ort_decoding.Session.__init__

    def counted(self, *args, **kw):
        built.append(1)
        session(self, *args, **kw)

    # Through the policy: generate()'s own completions.
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ort_decoding.Session, "__init__", counted)
        groups = policy.generate(prompts, **kwargs)
    assert built == [1]  # ONNX Runtime sampled them
    reference = _policy(model, tiny_model_dir, "torch")
    reference.preallocated_cache = False
    assert groups == reference.generate(prompts, **kwargs)


def test_each_call_samples_from_the_weights_as_they_are_then(tiny_model_dir):
    """An optimizer step changes the weights in place between rounds: the next call samples from the new ones."""
    model = _model(tiny_model_dir, None)
    policy = _policy(model, tiny_model_dir, "onnxruntime")
    prompts = _prompts(policy)
    before = _draw(policy, prompts, ort_decoding.sample, draw=multinomial)
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(5)
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.1)
    after = _draw(policy, prompts, ort_decoding.sample, draw=multinomial)
    assert not torch.equal(after.tokens, before.tokens)
    assert torch.equal(after.tokens, _draw(policy, prompts, decoding.sample, draw=multinomial).tokens)
    _assert_policy_logprobs(policy, prompts, after, atol=LOGPROB_BOUND)


def test_the_start_every_prompt_shares_runs_once_and_samples_what_each_prompts_own_prefill_would(tiny_model_dir,
                                                                                                   monkeypatch):
    """The prompts' common start (a round's system prompt) runs once; every prompt's rows then continue from a copy
    of its cache: the same tokens and log-probs as prefilling each prompt whole."""
    model = _model(tiny_model_dir, 2)
    policy = _policy(model, tiny_model_dir, "onnxruntime")
    prompts = _prompts(policy)
    shared = len(decoding.shared_prefix(prompts))
    assert shared > 1 and all(p[:shared] == prompts[0][:shared] for p in prompts)
    ran = []
    run = ort_decoding.Session.run

    def counted(self, ids, lengths):
        ran.append((ids.shape, lengths.tolist()))
        run(self, ids, lengths)

    monkeypatch.setattr(ort_decoding.Session, "run", counted)
    once = _draw(policy, prompts, ort_decoding.sample, draw=multinomial)
    prefills = [(shape, lengths) for shape, lengths in ran if shape[1] > 1]
    assert prefills == [((1, shared), [0])] + [((1, len(p) - shared), [shared]) for p in prompts]
    monkeypatch.setattr(decoding, "shared_prefix", lambda prompts: ())
    whole = _draw(policy, prompts, ort_decoding.sample, draw=multinomial)
    assert torch.equal(once.tokens, whole.tokens)
    torch.testing.assert_close(once.logprobs, whole.logprobs, rtol=0, atol=1e-5)
    _assert_policy_logprobs(policy, prompts, once, atol=LOGPROB_BOUND)


@pytest.mark.parametrize("missing", ["onnxruntime", "positions"])
def test_where_onnxruntime_cannot_sample_the_torch_loop_does_and_says_why_once(tiny_model_dir, monkeypatch, caplog,
                                                                                missing):
    model = _model(tiny_model_dir, None)
    calls = []
    torch_sample = decoding.sample
    monkeypatch.setattr(decoding, "sample", lambda *a, **kw: calls.append(1) or torch_sample(*a, **kw))
    monkeypatch.setattr(ort_decoding, "sample", lambda *a, **kw: pytest.fail("onnxruntime sampled"))
    kwargs = {"num_generations": G, "max_new_tokens": 4, "temperature": 1.0, "top_p": 1.0, "seed": 3}
    policy = _policy(model, tiny_model_dir, "onnxruntime")
    prompts = _prompts(policy)
    if missing == "onnxruntime":
        monkeypatch.setattr(ort_decoding, "available", lambda: False)
        reason = "onnxruntime is not installed"
    else:  # the longest prompt and its completion run one position past the graph's rotary table
        model.config.max_position_embeddings = max(len(p) for p in prompts) + kwargs["max_new_tokens"] - 1
        reason = "longer than its rotary table"
    with caplog.at_level(logging.WARNING, logger="node.learning.grpo"):
        policy.generate(prompts, **kwargs)
        policy.generate(prompts, **kwargs)
    warned = [r for r in caplog.records if reason in r.getMessage()]
    assert len(calls) == 2 and len(warned) == 1


def test_the_default_sampler_is_onnxruntime_where_it_runs_and_torch_silently_elsewhere(tiny_model_dir, monkeypatch,
                                                                                       caplog):
    from node.config import TrainingSettings

    assert TrainingSettings().sampler == "auto"
    built = []
    session = ort_decoding.Session.__init__
    monkeypatch.setattr(ort_decoding.Session, "__init__", lambda self, *a, **kw: built.append(1) or session(self, *a, **kw))
    policy = _policy(_model(tiny_model_dir, None), tiny_model_dir, TrainingSettings().sampler)
    kwargs = {"num_generations": G, "max_new_tokens": 4, "temperature": 1.0, "top_p": 1.0, "seed": 3}
    policy.generate(_prompts(policy), **kwargs)
    assert built == [1]
    monkeypatch.setattr(ort_decoding, "available", lambda: False)
    with caplog.at_level(logging.INFO, logger="node.learning.grpo"):
        policy.generate(_prompts(policy), **kwargs)
    said = [r for r in caplog.records if r.name.startswith("node.learning")]
    assert built == [1] and not said  # the torch loop, as chosen: nothing to warn about


def test_auto_samples_with_onnxruntime_only_where_its_copy_of_the_weights_fits(monkeypatch):
    """The round's memory estimate decides: between the torch loop's and ONNX Runtime's, auto takes the torch loop
    (and the node starts) where an explicit onnxruntime is refused by the fit check; elsewhere than float32 on the
    CPU with onnxruntime installed, the torch loop."""
    from node.learning.models import BUNDLED, CATALOG, check_fits, estimate_training_bytes, resolve
    from node.runner import pick_sampler

    monkeypatch.setattr(ort_decoding, "available", lambda: True)
    args = {"train_dtype": "float32", "num_sequences": 4, "seq_len": 304, "adamw_8bit": True}
    sizes = {"vocab_size": CATALOG[BUNDLED].vocab_size}
    torch_loop = estimate_training_bytes(CATALOG[BUNDLED].params, **args, **sizes)
    with_ort = estimate_training_bytes(CATALOG[BUNDLED].params, **args, **sizes, onnxruntime_sampler=True)
    model = resolve(BUNDLED)

    def pick(setting="auto", available=2 * with_ort, device="cpu", dtype=torch.float32):
        return pick_sampler(setting, model, device=device, generation_dtype=dtype,
                            fit={**args, "available_bytes": available})

    between = (torch_loop + with_ort) // 2
    assert pick() == "auto"
    assert pick(available=between) == "torch"
    check_fits(model, available_bytes=between, **args)  # the torch loop's round fits there
    assert pick("onnxruntime", available=between) == "onnxruntime"  # asked for: check_fits says it won't fit
    assert pick("torch") == "torch"
    assert pick(device="cuda") == pick(dtype=torch.bfloat16) == "torch"
    monkeypatch.setattr(ort_decoding, "available", lambda: False)
    assert pick() == "torch"


def test_models_it_does_not_run_keep_the_torch_loop(tiny_model_dir):
    model = _model(tiny_model_dir, None)
    assert ort_decoding.supports(model)
    assert not ort_decoding.supports(model.to(torch.bfloat16))
    model = _model(tiny_model_dir, None)
    model.config.attention_bias = True  # Qwen2-style biases: a graph without them would be wrong
    assert not ort_decoding.supports(model)
