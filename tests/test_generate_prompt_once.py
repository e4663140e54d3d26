"""Sampling runs each prompt once: ``Policy.generate`` prefills the I distinct prompts, repeats their KV cache for
the G completions of each, and samples exactly the completions of a plain ``generate`` over the I x G repeated
prompts (greedy and sampled, left-padded prompts of different lengths, end-of-sequence mid-batch, float32 and the
bfloat16 sampling copy, a live LoRA adapter); a model the shared cache would not be exact for runs the plain path."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, MistralConfig, MistralForCausalLM

from node.learning import grpo
from node.learning.grpo import GrpoLearner, LoraSettings, Policy
from tests.generate_draw import draw_as_generate

G = 3
QUESTIONS = ("What is 2 + 2?", "A farmer has 17 sheep and buys 5 more, then sells 9. How many sheep are left now?",
             "Spell 'cat' backwards.")
MAX_NEW_TOKENS = 10


@pytest.fixture(autouse=True)
def _draw_as_generate(monkeypatch):
    """The comparisons here are token for token between batches of other shapes: they draw as ``generate()`` does
    (:mod:`tests.generate_draw`), which float32 rounding of another shape moves far more rarely than it moves the
    node's inverse-CDF draw."""
    draw_as_generate(monkeypatch)


def _sharpen(model) -> None:
    """Redraw the matrices larger: a freshly initialised model's greedy choice just repeats the prompt's last token,
    whatever the context; with these weights every token depends on the whole context, so a cache that is wrong
    anywhere changes the completions."""
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        for parameter in model.parameters():
            if parameter.dim() == 2:
                parameter.normal_(0.0, 0.3)


def _policy(model_dir: Path, dtype: torch.dtype) -> Policy:
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    _sharpen(model)
    return Policy(model, AutoTokenizer.from_pretrained(model_dir), generation_dtype=dtype, max_prompt_tokens=256)


def _prompts(policy: Policy) -> list[tuple[int, ...]]:
    prompts = [policy.prompt_ids([{"role": "user", "content": q}]) for q in QUESTIONS]
    assert len(set(map(len, prompts))) == len(QUESTIONS)  # different lengths: left padding differs per prompt
    return prompts


class _Embedded:
    """Shapes of the token batches the backbone embeds, in order: tells which path ran. The hook is copied with
    the model into a bfloat16 sampling copy."""

    def __init__(self, model) -> None:
        self.shapes: list[tuple[int, ...]] = []
        self._hook = model.get_input_embeddings().register_forward_hook(
            lambda module, args, output: self.shapes.append(tuple(args[0].shape)))

    def remove(self) -> None:
        self._hook.remove()


def _generate(policy: Policy, prompts, *, greedy: bool):
    embedded = _Embedded(policy.model)
    try:
        groups = policy.generate(prompts, num_generations=G, max_new_tokens=MAX_NEW_TOKENS, temperature=1.0,
                                 top_p=1.0, seed=7, greedy=greedy)
    finally:
        embedded.remove()
    return groups, embedded.shapes


def _reference(policy: Policy, prompts, *, greedy: bool):
    """The plain path's completions: every prompt repeated G times, one completion each, as generate() expands
    ``num_return_sequences`` (the same rows in the same order, so the same random draws)."""
    rows = policy.generate([p for p in prompts for _ in range(G)], num_generations=1, max_new_tokens=MAX_NEW_TOKENS,
                           temperature=1.0, top_p=1.0, seed=7, greedy=greedy)
    return [[row[0] for row in rows[start : start + G]] for start in range(0, len(rows), G)]


def _assert_prompts_ran_once(shapes, prompts) -> None:
    width = grpo.padded_width(max(map(len, prompts)))  # the batch's width, padding included
    assert shapes[0] == (len(prompts), width - 1)  # each prompt once, all but its last token
    # then one token a row: the last prompt token, new tokens; rows that have ended leave the batch
    assert shapes[1] == (len(prompts) * G, 1)
    assert all(rows >= later_rows and tokens == 1 for (rows, tokens), (later_rows, _) in zip(shapes[1:], shapes[2:]))


def _end_mid_completion(policy: Policy, prompts, *, greedy: bool) -> None:
    """Make the third token of the first prompt's first completion an end-of-sequence token, so rows end at
    different steps."""
    first, _ = _generate(policy, prompts, greedy=greedy)
    policy.eos_ids = (*policy.eos_ids, first[0][0].ids[2])


def _assert_policy_logprobs(policy: Policy, prompts, drawn, *, atol: float) -> list[int]:
    """Each row of a sampler's draw (``decoding.Sampled``: 1 greedy + G sampled rows per prompt): its log-probs
    are the policy's full-forward log-probs of the tokens it drew, within ``atol``, and after its end only padding
    with no log-prob. Returns the rows' lengths."""
    ends = []
    for row, (tokens, logps) in enumerate(zip(drawn.tokens.tolist(), drawn.logprobs, strict=True)):
        prompt = list(prompts[row // (1 + G)])
        end = next((i + 1 for i, token in enumerate(tokens) if token in policy.eos_ids), len(tokens))
        ends.append(end)
        ids = torch.tensor([prompt + tokens[:end]])
        with torch.inference_mode():
            logits = policy.model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
        expected = logits.log_softmax(-1).gather(1, ids[0, len(prompt) :, None])[:, 0]
        torch.testing.assert_close(logps[:end], expected, atol=atol, rtol=0)
        assert set(tokens[end:]) <= {policy.tokenizer.pad_token_id}
        assert not logps[end:].any()
    return ends


@pytest.mark.parametrize("greedy", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_prompts_run_once_and_completions_match_the_plain_path(tiny_model_dir, dtype, greedy):
    policy = _policy(tiny_model_dir, dtype)
    prompts = _prompts(policy)
    _end_mid_completion(policy, prompts, greedy=greedy)
    groups, shapes = _generate(policy, prompts, greedy=greedy)
    _assert_prompts_ran_once(shapes, prompts)
    assert groups == _reference(policy, prompts, greedy=greedy)
    completions = [c for group in groups for c in group]
    assert [len(group) for group in groups] == [G] * len(prompts)
    assert {c.finished for c in completions} == {True, False}
    assert all(len(c.ids) == MAX_NEW_TOKENS for c in completions if not c.finished)
    assert all(not set(c.ids) & set(policy.eos_ids) for c in completions)
    if greedy:  # G equal completions per prompt, different between prompts: the context mattered
        assert all(len(set(group)) == 1 for group in groups)
        assert len({group[0].ids for group in groups}) == len(prompts)
    else:
        assert all(len(set(group)) > 1 for group in groups)


def test_a_live_lora_adapter_samples_through_the_shared_prompt(tiny_model_dir, tmp_path):
    """Sampling from the policy itself (no cast copy) with its adapter layers in place: the prompt's cache must
    come through the adapters as every later token does."""
    policy = _policy(tiny_model_dir, torch.float32)
    learner = GrpoLearner(
        policy, output_dir=tmp_path / "trl", device="cpu", mixed_bf16=False, num_generations=G,
        max_new_tokens=MAX_NEW_TOKENS, learning_rate=1e-3, beta=0.0, epsilon=0.2, epsilon_high=0.28,
        loss_type="grpo", max_grad_norm=1.0, seed=0, lora=LoraSettings(rank=4),
    )
    assert learner.is_adapter
    with torch.no_grad(), torch.random.fork_rng(devices=[]):  # a trained adapter: B is zero when it starts
        torch.manual_seed(2)
        for name, parameter in policy.model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(0.0, 0.3)
    prompts = _prompts(policy)
    groups, shapes = _generate(policy, prompts, greedy=False)
    _assert_prompts_ran_once(shapes, prompts)
    assert groups == _reference(policy, prompts, greedy=False)
    with learner.trainer.model.disable_adapter():  # the adapter changes what is sampled
        assert _generate(policy, prompts, greedy=False)[0] != groups


def test_a_sliding_window_model_samples_on_the_plain_path(tiny_model_dir, tmp_path):
    """A sliding-window model is not one the shared cache is checked for: it prefills every row, as before."""
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    config = MistralConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=4, sliding_window=16,
                           eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = MistralForCausalLM(config)
    _sharpen(model)
    assert not grpo._prompt_sharing_is_exact(model)
    policy = Policy(model, tokenizer, generation_dtype=torch.float32, max_prompt_tokens=256)
    prompts = _prompts(policy)
    groups, shapes = _generate(policy, prompts, greedy=False)
    assert shapes[0] == (len(prompts) * G, grpo.padded_width(max(map(len, prompts))))
    assert groups == _reference(policy, prompts, greedy=False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_greedy_and_sampled_answers_share_one_prefill(tiny_model_dir, dtype):
    """Held-out evaluation answers each question greedily and G times sampled: both from one prefill of the prompts,
    in one batch, and exactly the completions of a greedy and a sampled generate()."""
    policy = _policy(tiny_model_dir, dtype)
    prompts = _prompts(policy)
    embedded = _Embedded(policy.model)
    try:
        greedy, sampled = policy.greedy_and_sampled(prompts, samples=G, max_new_tokens=MAX_NEW_TOKENS,
                                                    temperature=1.0, top_p=1.0, seed=7)
    finally:
        embedded.remove()
    width = grpo.padded_width(max(map(len, prompts)))
    assert embedded.shapes[0] == (len(prompts), width - 1)  # the one prefill, all but the last prompt token
    assert set(embedded.shapes[1:]) == {(len(prompts) * (1 + G), 1)}  # then one token a row, greedy and sampled
    assert greedy == [group[0] for group in policy.generate(prompts, num_generations=1, max_new_tokens=MAX_NEW_TOKENS,
                                                            temperature=1.0, top_p=1.0, seed=0, greedy=True)]
    assert sampled == _reference(policy, prompts, greedy=False)
    assert len({c.ids for c in greedy}) == len(prompts)  # the context mattered
