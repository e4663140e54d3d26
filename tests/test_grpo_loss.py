"""The GRPO update TRL performs through our adapter, checked against a hand computation on a fixed batch."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from trl import GRPOTrainer

from node.learning import grpo, models
from node.learning.grpo import Completion, GrpoLearner, Policy, SapoGRPOTrainer, TrainGroup
from tests.overlap import count_overlap, run_at_once

G = 4
REWARDS = [(0.0, 1.0, 0.5, 0.0), (1.0, 1.0, 0.0, 0.25)]
# Measured on this test's three rounds: cosine 1.000, relative difference 0.0017.
COSINE, RELATIVE = 0.999, 0.02


def _learner(model_dir: Path, tmp_path: Path, loss_type: str, micro_batch_groups: int = 0,
             adamw_8bit: bool = False, lr_decay_rounds: int = 0, scale_rewards: str = "group") -> GrpoLearner:
    torch.manual_seed(0)
    with models.LOADING:  # learners may be set up in threads (below)
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    policy = Policy(model, tokenizer, generation_dtype=torch.float32, max_prompt_tokens=64)
    return GrpoLearner(
        policy, output_dir=tmp_path / "trl", device="cpu", mixed_bf16=False, num_generations=G, max_new_tokens=8,
        learning_rate=1e-3, beta=0.0, epsilon=0.2, epsilon_high=0.28, loss_type=loss_type, max_grad_norm=1.0, seed=0,
        micro_batch_groups=micro_batch_groups, adamw_8bit=adamw_8bit, lr_decay_rounds=lr_decay_rounds,
        scale_rewards=scale_rewards,
    )


def _batch(policy: Policy) -> list[TrainGroup]:
    """Two groups of distinct completions with different lengths; some finished (EOS appended), some cut off."""
    groups = []
    for g, rewards in enumerate(REWARDS):
        prompt = policy.prompt_ids([{"role": "user", "content": f"question {g}: what is {g} + {g}?"}])
        completions = tuple(
            Completion(ids=tuple(100 + 10 * g + c + k for k in range(2 + c)), text="", finished=c % 2 == 0)
            for c in range(G)
        )
        groups.append(TrainGroup(prompt_ids=prompt, completions=completions, rewards=rewards))
    return groups


def _hand_advantages(scale_rewards: str = "group") -> list[float]:
    advantages = []
    for rewards in REWARDS:
        r = torch.tensor(rewards)
        scale = r.std(unbiased=True) + 1e-4 if scale_rewards == "group" else 1.0
        advantages += ((r - r.mean()) / scale).tolist()
    return advantages


def _sequences(policy: Policy, groups: list[TrainGroup]) -> list[tuple[list[int], list[int]]]:
    eos = policy.eos_ids[0]
    return [
        (list(group.prompt_ids), list(c.ids) + ([eos] if c.finished else []))
        for group in groups
        for c in group.completions
    ]


def _token_logps(model, prompt: list[int], completion: list[int]) -> torch.Tensor:
    ids = torch.tensor([prompt + completion])
    logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1]
    return torch.log_softmax(logits.float(), dim=-1).gather(1, torch.tensor(completion)[:, None])[:, 0]


def _trl_loss_and_inputs(learner: GrpoLearner, groups):
    trainer = learner.trainer
    trainer.model.train()
    inputs = trainer._prepare_inputs(learner.adapter.load(groups))
    loss = trainer.compute_loss(trainer.model, inputs)
    return loss, inputs


def _rows_by_completion(policy, groups, inputs):
    """TRL shuffles rows; map each of its rows back to our (group, completion) order by its completion ids."""
    sequences = _sequences(policy, groups)
    order = []
    for row, mask in zip(inputs["completion_ids"].tolist(), inputs["completion_mask"].tolist(), strict=True):
        ids = [t for t, m in zip(row, mask, strict=True) if m]
        order.append(next(i for i, (_, completion) in enumerate(sequences) if completion == ids))
    return order


@pytest.mark.parametrize(("loss_type", "scale_rewards"),
                         [("grpo", "group"), ("dapo", "group"), ("bnpo", "group"), ("grpo", "none")])
def test_advantages_and_loss_match_hand_computation(tiny_model_dir, tmp_path, loss_type, scale_rewards):
    learner = _learner(tiny_model_dir, tmp_path, loss_type, scale_rewards=scale_rewards)
    policy = learner.policy
    groups = _batch(policy)
    loss, inputs = _trl_loss_and_inputs(learner, groups)

    expected = _hand_advantages(scale_rewards)
    order = _rows_by_completion(policy, groups, inputs)
    assert sorted(order) == list(range(len(expected)))
    got = {i: a for i, a in zip(order, inputs["advantages"].tolist(), strict=True)}
    for i, advantage in enumerate(expected):
        assert got[i] == pytest.approx(advantage, abs=1e-5)

    # First (and only) pass over the batch: the importance ratio is exactly 1, so clipping is inactive and the
    # surrogate is -A * ratio with ratio = exp(logp - logp.detach()); its value and gradient follow by hand.
    sequences = _sequences(policy, groups)
    model = policy.model
    model.zero_grad(set_to_none=True)
    per_row = []
    for (prompt, completion), advantage in zip(sequences, expected, strict=True):
        logps = _token_logps(model, prompt, completion)
        ratio = torch.exp(logps - logps.detach())
        per_row.append(-advantage * ratio)
    lengths = torch.tensor([len(c) for _, c in sequences], dtype=torch.float32)
    if loss_type == "grpo":  # mean over tokens of each sequence, then over sequences
        hand = torch.stack([row.mean() for row in per_row]).mean()
    else:  # dapo / bnpo: mean over all tokens of the batch
        hand = torch.cat(per_row).sum() / lengths.sum()
    assert loss.item() == pytest.approx(hand.item(), abs=1e-5)
    if loss_type != "grpo":
        # Length-weighted token mean: non-zero because the completions have different lengths.
        weighted = -(torch.tensor(expected) * lengths).sum() / lengths.sum()
        assert hand.item() == pytest.approx(weighted.item(), abs=1e-5)
        assert abs(hand.item()) > 1e-3

    hand.backward()
    hand_grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    model.zero_grad(set_to_none=True)
    loss.backward()
    trl_grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    assert len(hand_grads) == len(trl_grads) > 0
    for hand_grad, trl_grad in zip(hand_grads, trl_grads, strict=True):
        torch.testing.assert_close(trl_grad, hand_grad, atol=1e-6, rtol=1e-4)


def test_step_updates_weights_once_per_round(tiny_model_dir, tmp_path):
    learner = _learner(tiny_model_dir, tmp_path, "grpo")
    # Trainer.train() is never called, so the learner itself must switch TRL's activation checkpointing on.
    assert learner.trainer.model.is_activation_checkpointing
    before = [p.detach().clone() for p in learner.policy.model.parameters()]
    stats = learner.step(_batch(learner.policy))
    assert learner.global_step == 1
    assert stats.completion_length > 0
    changed = sum(not torch.equal(a, b.detach()) for a, b in zip(before, learner.policy.model.parameters(), strict=True))
    assert changed > 0
    with pytest.raises(ValueError, match="exactly 4 completions"):
        learner.step([TrainGroup(prompt_ids=(1, 2), completions=_batch(learner.policy)[0].completions[:3],
                                 rewards=(0.0, 1.0, 0.0))])


def test_learning_rate_decays_with_updates_and_continues_after_a_resume(tiny_model_dir, tmp_path):
    learner = _learner(tiny_model_dir, tmp_path, "grpo", lr_decay_rounds=2)
    batch = _batch(learner.policy)
    used = []
    for _ in range(2):
        learner.step(batch)
        used.append({group["lr"] for group in learner.optimizer.param_groups})
    learner.global_step = 6  # what a resumed run's checkpoint restores
    learner.step(batch)
    used.append({group["lr"] for group in learner.optimizer.param_groups})
    assert [pytest.approx(rates.pop()) for rates in used] == [1e-3, 1e-3 / math.sqrt(1.5), 1e-3 / 2]


def test_sampling_after_an_update_sees_the_whole_context(tiny_model_dir, tmp_path):
    """After a step the model is in train mode with activation checkpointing, which turns the KV cache off;
    sampling must not run in that mode, or every token after the first is generated without its context."""
    learner = _learner(tiny_model_dir, tmp_path, "grpo")
    policy = learner.policy
    learner.step(_batch(policy))
    assert policy.model.training
    prompts = [tuple(range(3, 40))]
    sampled = policy.generate(prompts, num_generations=1, max_new_tokens=12, temperature=1.0, top_p=1.0, seed=0,
                              greedy=True)
    policy.model.eval()
    with torch.no_grad():
        expected = policy.model.generate(torch.tensor([prompts[0]]), attention_mask=torch.ones(1, len(prompts[0]),
                                         dtype=torch.long), do_sample=False, max_new_tokens=12, min_new_tokens=12,
                                         pad_token_id=policy.tokenizer.pad_token_id, eos_token_id=None)
    assert list(sampled[0][0].ids) == expected[0, len(prompts[0]):].tolist()[: len(sampled[0][0].ids)]


def test_a_group_that_pushes_nothing_down_keeps_only_its_positive_advantages(tiny_model_dir, tmp_path):
    """A peer's group under peer_advantages = "positive": its completions below the mean get 0, not a push down."""
    learner = _learner(tiny_model_dir, tmp_path, "grpo")
    policy = learner.policy
    own, peer = _batch(policy)
    groups = [own, TrainGroup(prompt_ids=peer.prompt_ids, completions=peer.completions, rewards=peer.rewards,
                              push_down=False)]
    _, inputs = _trl_loss_and_inputs(learner, groups)

    full = _hand_advantages()
    expected = full[:G] + [max(a, 0.0) for a in full[G:]]
    assert min(full[G:]) < -0.5  # the peer group has completions below its mean, and they lose their push
    got = dict(zip(_rows_by_completion(policy, groups, inputs), inputs["advantages"].tolist(), strict=True))
    assert [got[i] for i in range(len(expected))] == pytest.approx(expected, abs=1e-5)


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo"])
def test_micro_batches_accumulate_exactly_the_whole_batch_gradient(tiny_model_dir, tmp_path, loss_type):
    grads = []
    for micro in (0, 1):
        learner = _learner(tiny_model_dir, tmp_path / str(micro), loss_type, micro_batch_groups=micro)
        optimizer = learner.trainer.optimizer
        optimizer.step = lambda *a, **k: None  # keep the accumulated gradient for inspection
        optimizer.zero_grad = lambda *a, **k: None
        learner.step(_batch(learner.policy))
        grads.append([p.grad.clone() for p in learner.policy.model.parameters() if p.grad is not None])
    whole, micro = grads
    assert len(whole) == len(micro) > 0
    for a, b in zip(whole, micro, strict=True):
        torch.testing.assert_close(b, a, atol=1e-6, rtol=1e-4)


def test_8bit_moments_move_the_weights_as_float32_moments_do(tiny_model_dir, tmp_path):
    """8-bit AdamW changes only how the moments are stored (block-wise quantized, float32 update math): over a few
    rounds on the same batches the weights move as with float32 moments, to quantization noise."""
    moved, states, alive = [], [], []
    for eight_bit in (False, True):
        learner = _learner(tiny_model_dir, tmp_path / str(eight_bit), "grpo", adamw_8bit=eight_bit)
        parameters = list(learner.policy.model.parameters())
        if eight_bit:
            update_step = learner.optimizer.update_step

            def counting(group, p, *index, update_step=update_step, parameters=parameters):
                alive.append((p.numel(), sum(q.numel() for q in parameters if q.grad is not None and q is not p)))
                update_step(group, p, *index)

            learner.optimizer.update_step = counting
        start = torch.cat([p.detach().flatten() for p in parameters])
        for _ in range(3):
            learner.step(_batch(learner.policy))
        moved.append(torch.cat([p.detach().flatten() for p in parameters]) - start)
        states.append({value.dtype for state in learner.optimizer.state.values() for value in state.values()
                       if torch.is_tensor(value) and value.numel() > 1})
    assert torch.uint8 not in states[0] and torch.uint8 in states[1]
    # Gradients are freed as their updates are applied, the largest parameter last: its float32 temporaries do not
    # come on top of the other gradients.
    largest = max(p.numel() for p in parameters)
    others_alive = [others for size, others in alive if size == largest]
    assert len(others_alive) == 3 and max(others_alive) < largest / 100
    reference, eight_bit = moved
    assert torch.nn.functional.cosine_similarity(reference, eight_bit, dim=0) > COSINE
    assert (eight_bit - reference).norm() < RELATIVE * reference.norm()


def test_generation_stops_within_a_token_of_cancellation(tiny_model_dir, tmp_path):
    policy = _learner(tiny_model_dir, tmp_path, "grpo").policy
    prompt = policy.prompt_ids([{"role": "user", "content": "Count to one hundred."}])
    calls = []

    def cancel_after_three_tokens() -> bool:
        calls.append(1)
        return len(calls) >= 3

    (group,) = policy.generate([prompt], num_generations=2, max_new_tokens=64, temperature=1.0, top_p=1.0, seed=0,
                               should_stop=cancel_after_three_tokens)
    assert all(len(c.ids) <= 3 and not c.finished for c in group)
    (full,) = policy.generate([prompt], num_generations=2, max_new_tokens=64, temperature=1.0, top_p=1.0, seed=0)
    assert max(len(c.ids) for c in full) > 3


def test_completion_only_log_probs_match_trls_fused_head(tiny_model_dir, tmp_path):
    """Our log-prob path (completion tokens only, small tiles) against TRL's own, with gradients and entropies."""
    learner = _learner(tiny_model_dir, tmp_path, "grpo")
    trainer, model = learner.trainer, learner.policy.model
    inputs = trainer._prepare_inputs(learner.adapter.load(_batch(learner.policy)))
    input_ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    keep = inputs["completion_ids"].size(1)
    weights = torch.randn(inputs["completion_ids"].shape)
    results = []
    for method in (GRPOTrainer._get_per_token_logps_and_entropies, SapoGRPOTrainer._get_per_token_logps_and_entropies):
        model.zero_grad(set_to_none=True)
        logps, entropies, _ = method(trainer, model, input_ids, attention, keep, compute_entropy=True)
        ((logps * weights).sum() + entropies.sum()).backward()
        grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
        results.append((logps.detach(), entropies.detach(), grads))
    (trl_logps, trl_entropy, trl_grads), (our_logps, our_entropy, our_grads) = results
    assert (our_logps[inputs["completion_mask"] == 0] == 0).all()
    torch.testing.assert_close(our_logps, trl_logps, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(our_entropy, trl_entropy, atol=1e-5, rtol=1e-5)
    assert len(our_grads) == len(trl_grads) > 0
    for ours, theirs in zip(our_grads, trl_grads, strict=True):
        torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-4)


def test_tiles_bound_the_vocabulary_chunk(tiny_model_dir, tmp_path, monkeypatch):
    """Tiles far smaller than the vocabulary give the same log-probs (several chunks folded online)."""
    learner = _learner(tiny_model_dir, tmp_path, "grpo")
    trainer, model = learner.trainer, learner.policy.model
    inputs = trainer._prepare_inputs(learner.adapter.load(_batch(learner.policy)))
    input_ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attention = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    keep = inputs["completion_ids"].size(1)
    with torch.no_grad():
        whole, _, _ = trainer._get_per_token_logps_and_entropies(model, input_ids, attention, keep)
        monkeypatch.setattr(grpo, "LOGIT_TILE_ELEMENTS", 1)  # 1,024-entry vocabulary chunks
        tiled, _, _ = trainer._get_per_token_logps_and_entropies(model, input_ids, attention, keep)
    assert model.config.vocab_size > 4 * 1024
    torch.testing.assert_close(tiled, whole, atol=1e-5, rtol=1e-5)


def test_bf16_sampler_is_a_cast_copy_with_tied_weights(tiny_model_dir, tmp_path):
    policy = _learner(tiny_model_dir, tmp_path, "grpo").policy  # the trainer has patched the policy's forward
    policy.generation_dtype = torch.bfloat16
    model = policy.model
    sampler = policy.sampling_model()
    with torch.inference_mode():
        assert sampler(input_ids=torch.tensor([[1, 2, 3]])).logits.dtype == torch.bfloat16
    assert sampler is not model
    assert all(p.dtype == torch.bfloat16 for p in sampler.parameters())
    assert sampler.get_output_embeddings().weight is sampler.get_input_embeddings().weight
    for (name, ours), (_, source) in zip(sampler.named_parameters(), model.named_parameters(), strict=True):
        assert torch.equal(ours, source.detach().to(torch.bfloat16)), name
        assert ours.data_ptr() != source.data_ptr()
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    fresh = policy.sampling_model()  # each generation samples from the weights as they are now
    assert torch.equal(next(fresh.parameters()), next(model.parameters()).detach().to(torch.bfloat16))
    assert not torch.equal(next(fresh.parameters()), next(sampler.parameters()))


def test_learners_set_up_in_one_process_take_turns(tiny_model_dir, tmp_path, monkeypatch):
    """accelerate's process-wide AcceleratorState is reset by every trainer set-up: two nodes setting up in threads
    at once crashed one of them ("AcceleratorState has no attribute num_processes")."""
    most = count_overlap(monkeypatch, SapoGRPOTrainer, "__init__")
    learners = run_at_once(lambda name: _learner(tiny_model_dir, tmp_path / name, "grpo"), "ab")
    assert max(most) == 1 and len(learners) == 2
