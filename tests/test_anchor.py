"""The pull toward the starting weights (``training.anchor_decay``): its arithmetic in the learner, off leaves the
update as it was, and a resumed run is pulled toward the model it started from, not toward its checkpoint."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from node.learning import models
from node.learning.checkpoint import Checkpointer
from node.learning.grpo import Completion, GrpoLearner, LoraSettings, Policy, TrainGroup
from node.runner import SwarmNode
from tests.nodes import tiny_config

G = 4
LR = 1e-3


def make_learner(model_dir, tmp_path, *, anchor_decay: float = 0.0, lr_decay_rounds: int = 0, beta: float = 0.0,
                 **extra) -> GrpoLearner:
    """A learner over the tiny model, full fine-tuning unless ``extra`` says otherwise."""
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    policy = Policy(model, AutoTokenizer.from_pretrained(model_dir), generation_dtype=torch.float32,
                    max_prompt_tokens=64)
    return GrpoLearner(
        policy, output_dir=tmp_path / "trl", device="cpu", mixed_bf16=False, num_generations=G, max_new_tokens=8,
        learning_rate=LR, beta=beta, epsilon=0.2, epsilon_high=0.28, loss_type="grpo", max_grad_norm=1.0, seed=0,
        lr_decay_rounds=lr_decay_rounds, anchor_decay=anchor_decay, **extra,
    )


def _batch(policy: Policy, rewards) -> list[TrainGroup]:
    groups = []
    for g, scores in enumerate(rewards):
        prompt = policy.prompt_ids([{"role": "user", "content": f"question {g}: what is {g} + {g}?"}])
        completions = tuple(Completion(ids=tuple(100 + 10 * g + c + k for k in range(2 + c)), text="",
                                       finished=c % 2 == 0) for c in range(G))
        groups.append(TrainGroup(prompt_ids=prompt, completions=completions, rewards=scores))
    return groups


SPREAD = [(0.0, 1.0, 0.5, 0.0), (1.0, 1.0, 0.0, 0.25)]
NO_SPREAD = [(1.0, 1.0, 1.0, 1.0), (0.0, 0.0, 0.0, 0.0)]  # every advantage 0: no gradient, AdamW moves nothing


def _weights(learner: GrpoLearner) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in learner.model.named_parameters()}


def _after_the_optimizer(learner: GrpoLearner) -> dict[str, torch.Tensor]:
    """Filled with the weights as the optimizer's step leaves them, before anything after it in the update."""
    seen: dict[str, torch.Tensor] = {}
    step = learner.optimizer.step

    def recording(*args, **kwargs):
        result = step(*args, **kwargs)
        seen.update(_weights(learner))
        return result

    learner.optimizer.step = recording
    return seen


def test_a_step_without_gradient_moves_every_weight_toward_the_start_by_the_decayed_lr_times_anchor_decay(
        tiny_model_dir, tmp_path):
    anchor_decay = 50.0
    learner = make_learner(tiny_model_dir, tmp_path, anchor_decay=anchor_decay, lr_decay_rounds=2)
    start = _weights(learner)
    torch.manual_seed(1)
    with torch.no_grad():  # weights that drifted away from where the run started
        for p in learner.model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    drifted = _weights(learner)
    learner.global_step = 6  # the learning rate is now LR / sqrt(1 + 6 / 2) = LR / 2
    learner.step(_batch(learner.policy, NO_SPREAD))
    share = LR / 2 * anchor_decay
    after = _weights(learner)
    assert set(after) == set(start) and len(after) > 5
    for name, theta in after.items():
        expected = drifted[name] + share * (start[name] - drifted[name])
        torch.testing.assert_close(theta, expected, rtol=0, atol=1e-6, msg=name)
        # a fixed share of the distance: 0.1-sized drift, 0.025 of it taken back, far above the tolerance
        assert (drifted[name] - theta).abs().max() > 1e-3


def test_the_pull_comes_after_the_optimizer_step_and_uses_its_learning_rate(tiny_model_dir, tmp_path):
    anchor_decay = 20.0
    learner = make_learner(tiny_model_dir, tmp_path, anchor_decay=anchor_decay)
    start = _weights(learner)
    adam = _after_the_optimizer(learner)
    for _ in range(2):  # the second step starts away from the start: a pull toward it is visible
        learner.step(_batch(learner.policy, SPREAD))
    after = _weights(learner)
    share = LR * anchor_decay
    moved = 0
    for name, theta in after.items():
        torch.testing.assert_close(theta, adam[name] + share * (start[name] - adam[name]), rtol=0, atol=1e-6,
                                   msg=name)
        moved += not torch.equal(theta, adam[name])
    assert moved > 5


def test_off_the_update_is_the_optimizer_step_bit_for_bit_and_no_copy_is_kept(tiny_model_dir, tmp_path):
    learner = make_learner(tiny_model_dir, tmp_path, anchor_decay=0.0)
    assert learner.starting_weights == {}
    adam = _after_the_optimizer(learner)
    before = _weights(learner)
    for _ in range(2):
        learner.step(_batch(learner.policy, SPREAD))
    after = _weights(learner)
    assert any(not torch.equal(after[name], before[name]) for name in after)  # the step did train
    assert all(torch.equal(after[name], adam[name]) for name in after)


def test_the_starting_copy_is_float32_beside_float32_weights_and_given_weights_must_match(tiny_model_dir, tmp_path):
    learner = make_learner(tiny_model_dir, tmp_path, anchor_decay=1.0)
    parameters = list(learner.model.parameters())
    assert len(learner.starting_weights) == len(parameters)  # the tied embedding once
    for p in parameters:
        copy = learner.starting_weights[p]
        assert copy.dtype == torch.float32 and copy.data_ptr() != p.data_ptr() and torch.equal(copy, p)
    with pytest.raises(ValueError, match="do not match the model: model.norm.weight"):
        make_learner(tiny_model_dir, tmp_path, anchor_decay=1.0, starting_weights={
            name: w for name, w in _weights(learner).items() if name != "model.norm.weight"})


def test_an_adapter_with_the_pull_is_refused(tiny_model_dir, tmp_path):
    with pytest.raises(ValueError, match="full fine-tuning only.*anchor_decay = 0"):
        make_learner(tiny_model_dir, tmp_path, anchor_decay=1.0, lora=LoraSettings(rank=4))


def resumed_from_a_changed_checkpoint(model_dir, tmp_path, **training):
    """A node run for one round, its checkpoint's weights then changed as training would have changed them, and the
    node resumed from it: (the resumed node, the checkpoint's weights, the weights of the model the run started from)."""
    config = tiny_config(model_dir, tmp_path, run={"rounds": 1}, evaluation={"every_rounds": 0}, training=training)
    SwarmNode(config).run()
    folder, _ = Checkpointer(config.run_dir / "checkpoints").latest()
    trained = AutoModelForCausalLM.from_pretrained(folder / "model", dtype=torch.float32)
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(0.25)
    trained.save_pretrained(folder / "model")

    node = SwarmNode(config)
    node.run()  # resumes, then stops at once: the one round wanted is trained already
    assert node.rounds_trained == 1
    original = dict(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).named_parameters())
    return node, dict(trained.named_parameters()), original


@pytest.mark.slow
def test_a_resumed_run_is_pulled_toward_the_model_it_started_from_not_its_checkpoint(tiny_model_dir, tmp_path):
    node, resumed, original = resumed_from_a_changed_checkpoint(tiny_model_dir, tmp_path, anchor_decay=10.0)
    anchor = node.learner.starting_weights
    for name, p in node.learner.model.named_parameters():
        assert torch.equal(p, resumed[name]), name  # trains on from the checkpoint
        assert torch.equal(anchor[p], original[name]), name  # pulled toward the model it started from
        assert anchor[p].dtype == torch.float32


def test_the_fit_estimate_counts_the_starting_copy(tiny_model_dir):
    params = models.CATALOG[models.BUNDLED].params
    args = {"train_dtype": "float32", "num_sequences": 16, "seq_len": 304, "adamw_8bit": True,
            "vocab_size": models.CATALOG[models.BUNDLED].vocab_size}
    without = models.estimate_training_bytes(params, **args)
    assert models.estimate_training_bytes(params, **args, starting_copy=True) - without == 4 * params
    between = without + 2 * params
    fit = {k: v for k, v in args.items() if k != "vocab_size"}
    models.check_fits(models.resolve(models.BUNDLED), available_bytes=between, **fit)
    with pytest.raises(models.NodeError, match="needs ~") as caught:
        models.check_fits(models.resolve(models.BUNDLED), available_bytes=between, **fit,
                          starting_copy=("anchor_decay",))
    assert "anchor_decay = 0" in caught.value.hint and "beta = 0" not in caught.value.hint
