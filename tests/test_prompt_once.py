"""The training forward runs each GRPO group's prompt once, and the head all prompts share once: same log-probs,
entropies and gradients as running the prompt again for every completion, on a batch shaped like a real round (TRL's
shuffled rows, left-padded prompts of different lengths, right-padded completions of different lengths), with
activation checkpointing as the learner sets it up, with and without micro-batches, full and LoRA; one prompt a
packed row at its plain positions where a model's positions are not only relative."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2Config, LlamaConfig

from node.learning import grpo
from node.learning.grpo import Completion, GrpoLearner, LoraSettings, Policy, TrainGroup

G = 4
QUESTIONS = ("What is 2 + 2?", "A farmer has 17 sheep and buys 5 more, then sells 9. How many sheep are left now?",
             "Spell 'cat' backwards.")


def _learner(model_dir: Path, tmp_path: Path, *, lora: bool = False, micro_batch_groups: int = 0,
             loss_type: str = "grpo") -> GrpoLearner:
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    policy = Policy(model, tokenizer, generation_dtype=torch.float32, max_prompt_tokens=256)
    return GrpoLearner(
        policy, output_dir=tmp_path / "trl", device="cpu", mixed_bf16=False, num_generations=G, max_new_tokens=8,
        learning_rate=1e-3, beta=0.0, epsilon=0.2, epsilon_high=0.28, loss_type=loss_type, max_grad_norm=1.0, seed=0,
        micro_batch_groups=micro_batch_groups, lora=LoraSettings(rank=4) if lora else None,
    )


def _groups(policy: Policy) -> list[TrainGroup]:
    """Prompts of different lengths (left padding differs per group); completions of 1 to 8 tokens, some finished."""
    groups = []
    for g, question in enumerate(QUESTIONS):
        completions = tuple(
            Completion(ids=tuple(200 + 31 * g + 7 * c + k for k in range(1 + (3 * c + g) % 8)), text="",
                       finished=(c + g) % 2 == 0)
            for c in range(G)
        )
        groups.append(TrainGroup(prompt_ids=policy.prompt_ids([{"role": "user", "content": question}]),
                                 completions=completions, rewards=(0.0, 1.0, 0.5, float(g % 2))))
    return groups


class _TokenCount:
    """Tokens fed to the backbone (its input embedding's inputs): tells which path ran."""

    def __init__(self, model) -> None:
        self.tokens = 0
        self._hook = model.get_input_embeddings().register_forward_hook(self._count)

    def _count(self, module, args, output) -> None:
        self.tokens += args[0].numel()


def _plain(monkeypatch) -> None:
    """Every row runs its prompt (the forward as it was before prompts ran once)."""
    monkeypatch.setattr(grpo, "_packing_is_exact", lambda causal_lm: False)


def _unshared(monkeypatch) -> None:
    """Each prompt in a packed row of its own, at its plain positions (as for a model with absolute positions)."""
    monkeypatch.setattr(grpo, "_renumbering_is_exact", lambda causal_lm: False)


def _packed_tokens(order: list, prompt_lengths: list, completion_lengths: list, batch_size: int) -> int:
    """Tokens of the packed forward, one prompt a row: per chunk, one row per distinct prompt, as long as the longest
    of its prompts' real tokens followed by the real tokens of that prompt's completions in the chunk (no padding)."""
    total = 0
    for start in range(0, len(order), batch_size):
        packed = {}
        for row in range(start, min(start + batch_size, len(order))):
            packed[order[row]] = packed.get(order[row], prompt_lengths[row]) + completion_lengths[row]
        total += len(packed) * max(packed.values())
    return total


def _shared_head_tokens(prompts: list, completion_lengths: list, batch_size: int) -> int:
    """Tokens of the packed forward with shared heads (short prompts: one row a chunk): per chunk, the leading tokens
    all its distinct prompts have in common once, the rest of each distinct prompt once, every completion once."""
    total = 0
    for start in range(0, len(prompts), batch_size):
        chunk = range(start, min(start + batch_size, len(prompts)))
        distinct = list({prompts[row]: None for row in chunk})
        head = min(len(p) for p in distinct) - 1
        while any(p[:head] != distinct[0][:head] for p in distinct):
            head -= 1
        total += head + sum(len(p) - head for p in distinct) + sum(completion_lengths[row] for row in chunk)
    return total


def _logps_and_grads(learner: GrpoLearner, inputs, *, batch_size: int | None):
    trainer, model = learner.trainer, learner.model
    input_ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    keep = inputs["completion_ids"].size(1)
    weights = torch.linspace(-1.0, 1.0, inputs["completion_ids"].numel()).view(inputs["completion_ids"].shape)
    model.zero_grad(set_to_none=True)
    counter = _TokenCount(model)
    logps, entropies, _ = trainer._get_per_token_logps_and_entropies(
        model, input_ids, attention, keep, batch_size=batch_size, compute_entropy=True)
    ((logps * weights).sum() + entropies.sum()).backward()
    counter._hook.remove()
    grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    return logps.detach(), entropies.detach(), grads, counter.tokens


@pytest.mark.parametrize(("lora", "batch_size", "share_heads"),
                         [(False, None, True), (False, 5, True), (True, None, True), (False, None, False),
                          (False, 5, False)])
def test_prompt_once_gives_the_plain_forwards_log_probs_and_gradients(tiny_model_dir, tmp_path, lora, batch_size,
                                                                      share_heads, monkeypatch):
    learner = _learner(tiny_model_dir, tmp_path, lora=lora)
    assert learner.model.is_activation_checkpointing
    assert grpo._renumbering_is_exact(learner.model.get_base_model() if lora else learner.model)
    if not share_heads:
        _unshared(monkeypatch)
    groups = _groups(learner.policy)
    learner.model.train()
    inputs = learner.trainer._prepare_inputs(learner.adapter.load(groups))
    prompt_mask, completion_mask = inputs["prompt_mask"], inputs["completion_mask"]
    # The batch exercises what could go wrong: left padding that differs between groups, right padding that
    # differs between rows, and rows of a group not next to each other.
    assert len(set(prompt_mask.sum(1).tolist())) == len(QUESTIONS) and (prompt_mask == 0).any()
    assert len(set(completion_mask.sum(1).tolist())) > 3 and (completion_mask == 0).any()
    order = [tuple(row) for row in inputs["prompt_ids"].tolist()]
    assert any(order[i] == order[i + 2] != order[i + 1] for i in range(len(order) - 2))

    once = _logps_and_grads(learner, inputs, batch_size=batch_size)
    with pytest.MonkeyPatch.context() as patch:
        _plain(patch)
        plain = _logps_and_grads(learner, inputs, batch_size=batch_size)

    rows, width, keep = len(order), prompt_mask.size(1), completion_mask.size(1)
    assert plain[3] == rows * (width + keep)
    lengths = (prompt_mask.sum(1).tolist(), completion_mask.sum(1).tolist())
    if share_heads:  # the chat template's head once for all prompts of a chunk, then each prompt's own tokens once
        real = [tuple(t for t, m in zip(row, mask, strict=True) if m)
                for row, mask in zip(inputs["prompt_ids"].tolist(), prompt_mask.tolist(), strict=True)]
        assert once[3] == _shared_head_tokens(real, lengths[1], batch_size or rows) < _packed_tokens(
            order, *lengths, batch_size or rows)
    elif batch_size is None:  # each prompt once, every completion once, no padding: rows as long as the longest
        longest_group = max(lengths[0][i] + sum(lengths[1][j] for j in range(rows) if order[j] == order[i])
                            for i in range(rows))
        assert once[3] == _packed_tokens(order, *lengths, rows) == len(QUESTIONS) * longest_group
        assert longest_group < width + G * keep  # less than the padded prompt and G padded completions
    else:  # each chunk runs each of its distinct prompts once; a group split between chunks runs it in both
        assert once[3] == _packed_tokens(order, *lengths, batch_size) < plain[3]
        assert any(len(set(order[i : i + batch_size])) > 1 for i in range(0, rows, batch_size))
    torch.testing.assert_close(once[0], plain[0], atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(once[1], plain[1], atol=1e-5, rtol=1e-5)
    assert (once[0][completion_mask == 0] == 0).all()
    assert once[2].keys() == plain[2].keys() and len(once[2]) > 0
    if lora:
        assert all("lora_" in name for name in once[2])
    for name, grad in once[2].items():
        torch.testing.assert_close(grad, plain[2][name], atol=1e-6, rtol=1e-4, msg=name)


@pytest.mark.parametrize("micro_batch_groups", [0, 1])
def test_a_learner_step_accumulates_the_plain_forwards_gradient(tiny_model_dir, tmp_path, micro_batch_groups,
                                                                monkeypatch):
    grads, tokens = [], []
    for prompt_once in (False, True):
        if not prompt_once:
            _plain(monkeypatch)
        learner = _learner(tiny_model_dir, tmp_path / str(prompt_once), micro_batch_groups=micro_batch_groups)
        optimizer = learner.optimizer
        optimizer.step = lambda *a, **k: None  # keep the accumulated gradient for inspection
        optimizer.zero_grad = lambda *a, **k: None
        counter = _TokenCount(learner.model)
        learner.step(_groups(learner.policy))
        tokens.append(counter.tokens)
        grads.append([p.grad.clone() for p in learner.policy.model.parameters() if p.grad is not None])
        monkeypatch.undo()
    assert tokens[1] < tokens[0] / 2
    assert len(grads[0]) == len(grads[1]) > 0
    for plain, once in zip(*grads, strict=True):
        torch.testing.assert_close(once, plain, atol=1e-6, rtol=1e-4)


def _accumulated(learner: GrpoLearner, groups: list[TrainGroup]):
    """The step's statistics, its gradient before the optimizer would apply it, and the tokens its passes ran."""
    learner.optimizer.step = lambda *a, **k: None
    learner.optimizer.zero_grad = lambda *a, **k: None
    counter = _TokenCount(learner.model)
    stats = learner.step(groups)
    counter._hook.remove()
    return stats, [p.grad.clone() for p in learner.policy.model.parameters() if p.grad is not None], counter.tokens


@pytest.mark.parametrize(("loss_type", "micro_batch_groups", "skipped"),
                         [("grpo", 0, True), ("dr_grpo", 1, True), ("bnpo", 0, False)])
def test_a_group_whose_completions_all_scored_the_same_runs_no_pass_and_the_update_is_unchanged(
        tiny_model_dir, tmp_path, monkeypatch, loss_type, micro_batch_groups, skipped):
    learner = _learner(tiny_model_dir, tmp_path, micro_batch_groups=micro_batch_groups, loss_type=loss_type)
    groups = _groups(learner.policy)
    flat = TrainGroup(learner.policy.prompt_ids([{"role": "user", "content": "Name a colour."}]),
                      groups[1].completions, (1.0,) * G)
    groups.insert(1, flat)
    left_out, grads, tokens = _accumulated(learner, groups)  # the weights stay as they were: no optimizer step
    learner.model.zero_grad(set_to_none=True)
    monkeypatch.setattr(grpo, "_gives_no_gradient", lambda group, trainer: False)
    ran, plain_grads, plain_tokens = _accumulated(learner, groups)
    assert (tokens < plain_tokens) is skipped
    assert len(grads) == len(plain_grads) > 0
    for grad, plain in zip(grads, plain_grads, strict=True):
        torch.testing.assert_close(grad, plain, atol=1e-6, rtol=1e-4)
    assert left_out.grad_norm == pytest.approx(ran.grad_norm, rel=1e-5)  # before clipping, which hides a scale
    assert left_out.loss == pytest.approx(ran.loss, abs=1e-6)
    assert left_out.mean_abs_advantage == pytest.approx(ran.mean_abs_advantage)
    assert left_out.completion_length == pytest.approx(ran.completion_length)


def test_with_a_kl_term_or_some_spread_a_group_still_runs():
    completions = tuple(Completion(ids=(5, 6), text="", finished=True) for _ in range(G))
    flat, spread = (TrainGroup((1, 2, 3), completions, rewards) for rewards in ((0.5,) * G, (0.5, 0.5, 0.5, 0.6)))
    trainer = SimpleNamespace(beta=0.0, loss_type="grpo")
    assert grpo._gives_no_gradient(flat, trainer) and not grpo._gives_no_gradient(spread, trainer)
    trainer.beta = 0.04  # the KL term pulls every row toward the reference, advantage or not
    assert not grpo._gives_no_gradient(flat, trainer)


def test_models_and_batches_it_does_not_fit_take_the_plain_forward(tiny_model_dir, tmp_path, monkeypatch):
    learner = _learner(tiny_model_dir, tmp_path)
    learner.model.train()
    groups = _groups(learner.policy)
    inputs = learner.trainer._prepare_inputs(learner.adapter.load(groups))
    rows = inputs["prompt_ids"].size(0)
    plain_tokens = rows * (inputs["prompt_ids"].size(1) + inputs["completion_ids"].size(1))
    config = learner.policy.model.config

    def tokens() -> int:
        return _logps_and_grads(learner, inputs, batch_size=None)[3]

    assert tokens() < plain_tokens
    # A sliding window would be replaced by the packed rows' explicit mask.
    monkeypatch.setattr(config, "sliding_window", 16, raising=False)
    assert tokens() == plain_tokens
    monkeypatch.undo()
    # Eager attention adds the mask as a float bias: a boolean mask would be added as 0 / 1.
    learner.policy.model.set_attn_implementation("eager")
    assert tokens() == plain_tokens
    learner.policy.model.set_attn_implementation("sdpa")
    assert tokens() < plain_tokens
    # Rotary frequencies that change with the positions seen: prompts keep their plain positions, one a row.
    shared = tokens()
    rope = dict(config.rope_parameters)
    monkeypatch.setattr(config, "rope_parameters", {**rope, "rope_type": "dynamic", "factor": 2.0})
    assert shared < tokens() < plain_tokens
    monkeypatch.setattr(config, "rope_parameters", rope)
    assert tokens() == shared
    # No two rows share a prompt, nor a head (they differ from the first token): nothing to save.
    single = learner.trainer._prepare_inputs(learner.adapter.load(groups[:1]))
    single = {**single, "prompt_ids": single["prompt_ids"].clone()}
    single["prompt_ids"][:, -1] = torch.arange(G)
    width = single["prompt_ids"].size(1) + single["completion_ids"].size(1)
    assert _logps_and_grads(learner, single, batch_size=None)[3] < G * width  # the head shared
    single["prompt_ids"][:, 0] = torch.arange(G)
    assert _logps_and_grads(learner, single, batch_size=None)[3] == G * width


def test_shared_heads_need_relative_positions_only_and_rows_of_bounded_length(monkeypatch):
    llama = AutoModelForCausalLM.from_config(LlamaConfig(
        vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1, num_attention_heads=2))
    gpt2 = AutoModelForCausalLM.from_config(GPT2Config(vocab_size=64, n_embd=16, n_layer=1, n_head=2))
    assert grpo._renumbering_is_exact(llama) and not grpo._renumbering_is_exact(gpt2)  # GPT-2 adds wpe[position]
    llama.config.rope_parameters = {**llama.config.rope_parameters, "rope_type": "longrope"}
    assert not grpo._renumbering_is_exact(llama)
    # Prompts join the row before them while it stays within the bound; each keeps its last token of its own.
    prompts = [[1, 2, 3, 4], [1, 2, 3, 5, 6], [1, 2, 7], [8, 9]]
    assert grpo._pack_prompts(prompts, [10, 10, 10, 10], share_heads=True) == [([0, 1, 2], 2), ([3], 1)]
    assert grpo._pack_prompts(prompts[:2], [10, 10], share_heads=False) == [([0], 3), ([1], 4)]
    assert grpo._pack_prompts([[1, 2, 3], [1, 2, 3]], [1, 1], share_heads=True) == [([0, 1], 2)]
    monkeypatch.setattr(grpo, "PACKED_ROW_TOKENS", 2 + 2 + 10 + 3 + 10)
    assert grpo._pack_prompts(prompts, [10, 10, 10, 10], share_heads=True) == [([0, 1], 3), ([2], 2), ([3], 1)]
