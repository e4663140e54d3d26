"""LoRA (peft) training: the same GRPO step on an adapter, checkpointed as an adapter and as merged weights."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from node.learning.checkpoint import ADAPTER, Checkpointer, CheckpointState, merged_state_dict
from node.learning.grpo import Completion, GrpoLearner, LoraSettings, Policy, TrainGroup

pytest.importorskip("peft")

G = 4


def _learner(model_dir: Path, tmp_path: Path, *, adapter_dir: Path | None = None, dtype=torch.float32) -> GrpoLearner:
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    policy = Policy(model, tokenizer, generation_dtype=dtype, max_prompt_tokens=64)
    return GrpoLearner(
        policy, output_dir=tmp_path / "trl", device="cpu", mixed_bf16=False, num_generations=G, max_new_tokens=8,
        learning_rate=1e-2, beta=0.0, epsilon=0.2, epsilon_high=0.28, loss_type="grpo", max_grad_norm=1.0, seed=0,
        lora=LoraSettings(rank=4), adapter_dir=adapter_dir,
    )


def _groups(policy: Policy) -> list[TrainGroup]:
    groups = []
    for g, rewards in enumerate([(0.0, 1.0, 0.5, 0.0), (1.0, 0.0, 0.0, 0.25)]):
        prompt = policy.prompt_ids([{"role": "user", "content": f"question {g}"}])
        completions = tuple(
            Completion(ids=tuple(200 + 7 * g + c + k for k in range(3 + c)), text="", finished=c % 2 == 0)
            for c in range(G)
        )
        groups.append(TrainGroup(prompt_ids=prompt, completions=completions, rewards=rewards))
    return groups


def _logits(model, ids=((5, 17, 42, 99, 7),)) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=torch.tensor(ids)).logits.float()


def test_adapter_step_trains_only_the_adapter(tiny_model_dir, tmp_path):
    learner = _learner(tiny_model_dir, tmp_path)
    assert learner.is_adapter
    trainable = {n: p.detach().clone() for n, p in learner.model.named_parameters() if p.requires_grad}
    frozen = {n: p.detach().clone() for n, p in learner.model.named_parameters() if not p.requires_grad}
    assert trainable and all("lora_" in n for n in trainable)
    assert sum(p.numel() for p in trainable.values()) < 0.2 * sum(p.numel() for p in frozen.values())
    before = _logits(learner.model)
    learner.step(_groups(learner.policy))
    learner.step(_groups(learner.policy))  # LoRA's B starts at zero: the second step moves A too
    after = dict(learner.model.named_parameters())
    assert all(torch.equal(after[n], v) for n, v in frozen.items())
    assert all(not torch.equal(after[n], v) for n, v in trainable.items())
    assert not torch.allclose(_logits(learner.model), before)


def test_checkpoint_holds_adapter_and_merged_weights_and_resumes(tiny_model_dir, tmp_path):
    learner = _learner(tiny_model_dir, tmp_path / "a")
    for _ in range(2):
        learner.step(_groups(learner.policy))
    expected = _logits(learner.model)
    folder = Checkpointer(tmp_path / "ckpt").save(
        learner.model, learner.policy.tokenizer, learner.optimizer,
        CheckpointState(round=2, rounds_trained=2, global_step=2, model="tiny", lora_rank=4),
    )
    assert (folder / ADAPTER / "adapter_config.json").is_file()
    assert not any("lora" in p.name for p in (folder / "model").iterdir())
    merged = AutoModelForCausalLM.from_pretrained(folder / "model", dtype=torch.float32)
    torch.testing.assert_close(_logits(merged), expected, atol=1e-4, rtol=1e-4)

    resumed = _learner(tiny_model_dir, tmp_path / "b", adapter_dir=folder / ADAPTER)
    Checkpointer(tmp_path / "ckpt").load_optimizer(folder, resumed.optimizer)
    torch.testing.assert_close(_logits(resumed.model), expected, atol=1e-5, rtol=1e-5)
    assert any(p.requires_grad for p in resumed.model.parameters())
    resumed.step(_groups(resumed.policy))  # the restored optimizer state fits the restored adapter


def test_low_precision_sampler_merges_the_adapter(tiny_model_dir, tmp_path):
    from peft.tuners.lora import LoraLayer

    learner = _learner(tiny_model_dir, tmp_path, dtype=torch.bfloat16)
    for _ in range(2):
        learner.step(_groups(learner.policy))
    sampler = learner.policy.sampling_model()
    assert not any(isinstance(m, LoraLayer) for m in sampler.modules())  # plain layers, merged weights
    merged = merged_state_dict(learner.model)
    name = next(n for n, m in learner.policy.model.named_modules() if isinstance(m, LoraLayer))
    weight = sampler.get_submodule(name).weight
    assert weight.dtype == torch.bfloat16
    assert torch.equal(weight, merged[f"{name}.weight"].to(torch.bfloat16))
    assert not torch.equal(weight, dict(learner.policy.model.named_modules())[name].get_base_layer().weight.to(
        torch.bfloat16))
    torch.testing.assert_close(_logits(sampler), _logits(learner.model), atol=0.1, rtol=0.05)
