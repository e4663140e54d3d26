"""The node's own decode loop (:mod:`node.learning.decoding`) against transformers' ``generate()``: drawing as
``generate()`` draws (:mod:`tests.generate_draw`), the same completions, greedy and sampled with the same seed
(left-padded prompts of different lengths, rows ending mid-batch, float32 and the bfloat16 sampling copy), from
key/value buffers allocated once per generation, of which each step attends to the filled part only, computing only
the rows that have not ended; with its own draw, the log-probs of what each row drew (the draw's distribution:
tests/test_draw.py)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from node.learning import decoding
from node.learning.grpo import PROMPT_WIDTH_STEP, Policy, padded_width
from tests.generate_draw import draw_as_generate
from tests.test_generate_prompt_once import (
    G,
    MAX_NEW_TOKENS,
    _assert_policy_logprobs,
    _Embedded,
    _end_mid_completion,
    _prompts,
    _sharpen,
)


def _policies(model_dir, dtype) -> tuple[Policy, Policy]:
    """The loop's policy and generate()'s, on one model."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    _sharpen(model)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    return (Policy(model, tokenizer, generation_dtype=dtype, max_prompt_tokens=256),
            Policy(model, tokenizer, generation_dtype=dtype, max_prompt_tokens=256, preallocated_cache=False))


@pytest.mark.parametrize("greedy", [True, False])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_loop_samples_what_generate_samples(tiny_model_dir, dtype, greedy, monkeypatch):
    draw_as_generate(monkeypatch)
    loop, reference = _policies(tiny_model_dir, dtype)
    assert decoding.supports(loop.sampling_model())
    prompts = _prompts(loop)
    _end_mid_completion(loop, prompts, greedy=greedy)
    reference.eos_ids = loop.eos_ids
    kwargs = {"num_generations": G, "max_new_tokens": MAX_NEW_TOKENS, "temperature": 1.0, "top_p": 1.0, "seed": 7,
              "greedy": greedy}
    embedded = _Embedded(loop.model)
    try:
        groups = loop.generate(prompts, **kwargs)
    finally:
        embedded.remove()
    assert groups == reference.generate(prompts, **kwargs)
    assert {c.finished for group in groups for c in group} == {True, False}  # rows ended at different steps
    # Each step ran the rows that had not ended before it, and no others: an ended row left the batch.
    last_steps = [len(c.ids) if c.finished else MAX_NEW_TOKENS - 1 for group in groups for c in group]
    steps = max(last_steps) + 1
    assert embedded.shapes[1:] == [(sum(last >= step for last in last_steps), 1) for step in range(steps)]
    assert embedded.shapes[-1][0] < embedded.shapes[1][0]
    if not greedy:
        assert loop.generate(prompts, **{**kwargs, "seed": 8}) != groups  # the seed mattered


def test_temperature_and_top_p_draw_as_generate_draws(tiny_model_dir, monkeypatch):
    draw_as_generate(monkeypatch)
    loop, reference = _policies(tiny_model_dir, torch.float32)
    prompts = _prompts(loop)
    kwargs = {"num_generations": G, "max_new_tokens": MAX_NEW_TOKENS, "temperature": 0.7, "top_p": 0.9, "seed": 3}
    assert loop.generate(prompts, **kwargs) == reference.generate(prompts, **kwargs)
    assert loop.generate(prompts, **kwargs) != loop.generate(prompts, **{**kwargs, "top_p": 1.0, "temperature": 1.3})


def test_greedy_and_sampled_rows_in_one_batch_match_generate(tiny_model_dir, monkeypatch):
    draw_as_generate(monkeypatch)
    loop, reference = _policies(tiny_model_dir, torch.float32)
    prompts = _prompts(loop)
    kwargs = {"samples": G, "max_new_tokens": MAX_NEW_TOKENS, "temperature": 1.0, "top_p": 1.0, "seed": 5}
    assert loop.greedy_and_sampled(prompts, **kwargs) == reference.greedy_and_sampled(prompts, **kwargs)


def test_buffers_are_allocated_once_and_only_filled_slots_are_attended(tiny_model_dir, monkeypatch):
    """Every layer's keys and values live in one storage for the whole generation, and what a step attends to is
    exactly the prompt's (padded) width plus the tokens generated before it: no copy per step, no empty slot."""
    loop, _ = _policies(tiny_model_dir, torch.float32)
    prompts = _prompts(loop)
    seen: dict[int, list[tuple[int, int, int]]] = {}
    update = decoding.PreallocatedLayer.update

    def recording(layer, keys, values, *args, **kwargs):
        attended_keys, attended_values = update(layer, keys, values, *args, **kwargs)
        seen.setdefault(id(layer), []).append((layer.keys.untyped_storage().data_ptr(),
                                               layer.values.untyped_storage().data_ptr(), attended_keys.shape[-2]))
        assert attended_values.shape[-2] == attended_keys.shape[-2]
        return attended_keys, attended_values

    monkeypatch.setattr(decoding.PreallocatedLayer, "update", recording)
    loop.eos_ids = (len(loop.tokenizer) + 1,)  # no row ends: every step runs
    loop.generate(prompts, num_generations=G, max_new_tokens=MAX_NEW_TOKENS, temperature=1.0, top_p=1.0, seed=1)
    width = padded_width(max(map(len, prompts)))  # the batch's width, padding included
    assert len(seen) == loop.model.config.num_hidden_layers
    for calls in seen.values():
        assert len({(k, v) for k, v, _ in calls}) == 1  # one key and one value storage a layer, never reallocated
        # the prefill (all but the last prompt token), then one more position a step
        assert [length for *_, length in calls] == [width - 1 + step for step in range(1 + MAX_NEW_TOKENS)]


def test_prompts_are_padded_to_a_few_widths(tiny_model_dir):
    """A batch of prompts is left-padded to a multiple of PROMPT_WIDTH_STEP tokens, so that the sampler's matrix
    products take a few shapes over a run, not a new one for every new prompt length (each new shape keeps kernels
    compiled for it in memory: tests/test_memory.py)."""
    loop, _ = _policies(tiny_model_dir, torch.float32)
    pad = loop.tokenizer.pad_token_id
    widths = set()
    for longest in range(1, 3 * PROMPT_WIDTH_STEP + 2):
        prompts = [tuple(range(5, 5 + longest)), (7,)]
        input_ids, attention = loop._padded(prompts, loop.model)
        widths.add(input_ids.shape[1])
        for row, mask, prompt in zip(input_ids.tolist(), attention.tolist(), prompts, strict=True):
            assert row[len(row) - len(prompt):] == list(prompt) and set(row[: len(row) - len(prompt)]) <= {pad}
            assert mask == [0] * (len(row) - len(prompt)) + [1] * len(prompt)
    assert widths == {PROMPT_WIDTH_STEP * n for n in range(1, 5)}
    # after a copied prefix of 5 tokens, as wide as the whole prompts would be
    assert loop._padded([(7,) * 40], loop.model, after=5)[0].shape[1] == 2 * PROMPT_WIDTH_STEP - 5


def test_a_write_past_the_buffers_is_refused():
    layer = decoding.PreallocatedLayer(capacity=4, rows=2)
    layer.update(torch.zeros(1, 2, 3, 8), torch.zeros(1, 2, 3, 8))
    with pytest.raises(RuntimeError, match="holds 4 positions"):
        layer.update(torch.zeros(2, 2, 2, 8), torch.zeros(2, 2, 2, 8))


def test_generation_settings_that_add_logits_processors_keep_generate(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    assert decoding.supports(model)
    model.generation_config.repetition_penalty = 1.3
    assert not decoding.supports(model)


def test_rows_that_end_leave_the_batch_with_the_log_probs_of_what_each_row_drew(tiny_model_dir):
    """Greedy and sampled rows ending at different steps: each row's log-probs are the policy's own log-probs of
    the tokens that row drew (its end-of-sequence token included), position by position, and nothing after its end."""
    loop, _ = _policies(tiny_model_dir, torch.float32)
    prompts = _prompts(loop)
    _end_mid_completion(loop, prompts, greedy=False)
    # and the sixth token of the last prompt's last completion: rows end at several steps
    last = loop.generate(prompts, num_generations=G, max_new_tokens=MAX_NEW_TOKENS, temperature=1.0, top_p=1.0,
                         seed=7)[-1][-1]
    if not last.finished:
        loop.eos_ids = (*loop.eos_ids, last.ids[5])
    sampler = loop.sampling_model()
    input_ids, attention = loop._padded(prompts, sampler)
    torch.manual_seed(7)
    drawn = decoding.sample(sampler, input_ids, attention, greedy=1, sampled=G, max_new_tokens=MAX_NEW_TOKENS,
                            temperature=1.0, top_p=1.0, eos_ids=loop.eos_ids, pad_id=loop.tokenizer.pad_token_id)
    ends = _assert_policy_logprobs(loop, prompts, drawn, atol=1e-4)
    assert len(set(ends)) > 2 and max(ends) == MAX_NEW_TOKENS  # rows ended at several steps, some ran to the limit


def test_a_kept_row_keeps_its_own_keys_and_values_in_the_same_buffers():
    """Rows 1 and 3 of four kept: they become rows 0 and 1 with their own keys and values, the next token is
    written to them, and the buffers are the ones allocated first."""
    layer = decoding.PreallocatedLayer(capacity=4, rows=4)
    states = torch.arange(4.0)[:, None, None, None].expand(4, 2, 2, 3).clone()  # row i holds i everywhere
    layer.update(states, states + 10)
    storage = layer.keys.untyped_storage().data_ptr()
    layer.batch_select_indices(torch.tensor([1, 3]))
    assert layer.keys.shape == layer.values.shape == (2, 2, 2, 3)
    assert layer.keys[:, 0, :, 0].tolist() == [[1.0, 1.0], [3.0, 3.0]]
    assert layer.values[:, 0, :, 0].tolist() == [[11.0, 11.0], [13.0, 13.0]]
    new = torch.tensor([5.0, 7.0])[:, None, None, None].expand(2, 2, 1, 3)
    keys, values = layer.update(new, new + 10)
    assert keys[:, 0, :, 0].tolist() == [[1.0, 1.0, 5.0], [3.0, 3.0, 7.0]]
    assert values[:, 0, :, 0].tolist() == [[11.0, 11.0, 15.0], [13.0, 13.0, 17.0]]
    layer.batch_select_indices(torch.tensor([0]))  # the first row stays where it is
    assert layer.keys[:, 0, :, 0].tolist() == [[1.0, 1.0, 5.0]]
    assert layer.keys.untyped_storage().data_ptr() == storage
