"""The KL's reference model (``training.beta`` > 0, full fine-tuning): it holds the weights the run started from, in
a fresh run and in a resumed one (not the checkpoint's), and the round's memory estimate counts it."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from node.learning import models
from node.learning.checkpoint import Checkpointer
from node.learning.grpo import GrpoLearner, LoraSettings, Policy
from node.runner import SwarmNode
from tests.nodes import tiny_config
from tests.test_anchor import SPREAD, _batch, _weights

G = 4


def _learner(model_dir, tmp_path, **extra) -> GrpoLearner:
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    policy = Policy(model, AutoTokenizer.from_pretrained(model_dir), generation_dtype=torch.float32,
                    max_prompt_tokens=64)
    return GrpoLearner(
        policy, output_dir=tmp_path / "trl", device="cpu", mixed_bf16=False, num_generations=G, max_new_tokens=8,
        learning_rate=1e-3, beta=0.04, epsilon=0.2, epsilon_high=0.28, loss_type="grpo", max_grad_norm=1.0, seed=0,
        **extra,
    )


def _original(model_dir) -> dict[str, torch.Tensor]:
    return dict(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).named_parameters())


def test_a_fresh_runs_reference_is_the_starting_model_and_stays_it_while_the_policy_trains(tiny_model_dir, tmp_path):
    learner = _learner(tiny_model_dir, tmp_path)
    reference = learner.trainer.ref_model
    assert reference is not None and not reference.training
    start = _weights(learner)
    for _ in range(2):
        learner.step(_batch(learner.policy, SPREAD))
    trained = _weights(learner)
    assert any(not torch.equal(trained[name], start[name]) for name in start)  # the policy did train
    references = dict(reference.named_parameters())
    assert set(references) == set(start)
    for name, weight in start.items():
        assert torch.equal(references[name], weight), name


def test_given_starting_weights_become_the_reference_and_the_anchor_shares_them(tiny_model_dir, tmp_path):
    torch.manual_seed(2)
    given = {name: w + 0.1 * torch.randn_like(w) for name, w in _original(tiny_model_dir).items()}
    learner = _learner(tiny_model_dir, tmp_path, anchor_decay=1.0, starting_weights=given)
    references = dict(learner.trainer.ref_model.named_parameters())
    for name, p in learner.model.named_parameters():
        assert torch.equal(references[name], given[name]), name
        assert not torch.equal(p, given[name]), name  # the policy trains on from its own weights
        # the pull toward the start reads the reference's weights: the starting model is held once
        assert learner.starting_weights[p].data_ptr() == references[name].data_ptr(), name


def test_an_adapters_reference_is_its_base_model_without_a_copy(tiny_model_dir, tmp_path):
    learner = _learner(tiny_model_dir, tmp_path, lora=LoraSettings(rank=4))
    assert learner.is_adapter and learner.trainer.ref_model is None


@pytest.mark.slow
def test_a_resumed_runs_reference_is_the_model_it_started_from_not_its_checkpoint(tiny_model_dir, tmp_path):
    config = tiny_config(tiny_model_dir, tmp_path, run={"rounds": 1}, evaluation={"every_rounds": 0},
                         training={"beta": 0.04})
    SwarmNode(config).run()
    folder, _ = Checkpointer(config.run_dir / "checkpoints").latest()
    # The checkpoint's weights made different from the model's, as training would have made them.
    trained = AutoModelForCausalLM.from_pretrained(folder / "model", dtype=torch.float32)
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(0.25)
    trained.save_pretrained(folder / "model")

    node = SwarmNode(config)
    node.run()  # resumes, then stops at once: the one round wanted is trained already
    assert node.rounds_trained == 1
    original = _original(tiny_model_dir)
    resumed = dict(trained.named_parameters())
    references = dict(node.learner.trainer.ref_model.named_parameters())
    assert set(references) == set(original)
    for name, p in node.learner.model.named_parameters():
        assert torch.equal(p, resumed[name]), name  # trains on from the checkpoint
        assert torch.equal(references[name], original[name]), name  # the KL pulls toward the model it started from
        assert not torch.equal(references[name], resumed[name]), name
        assert references[name].dtype == torch.float32


def test_the_fit_estimate_counts_the_reference_model_for_full_fine_tuning_only():
    spec = models.CATALOG[models.BUNDLED]
    args = {"train_dtype": "float32", "num_sequences": 16, "seq_len": 304, "adamw_8bit": True,
            "vocab_size": spec.vocab_size}
    without = models.estimate_training_bytes(spec.params, **args)
    assert models.estimate_training_bytes(spec.params, **args, reference_model=True) - without == 4 * spec.params
    # with the pull toward the start too, both read the one copy the reference model holds
    both = models.estimate_training_bytes(spec.params, **args, reference_model=True, starting_copy=True)
    assert both - without == 4 * spec.params
    adapter = {**args, "lora_rank": 16, "adamw_8bit": False}
    assert models.estimate_training_bytes(spec.params, **adapter, reference_model=True) == \
        models.estimate_training_bytes(spec.params, **adapter)

    between = without + 2 * spec.params
    fit = {k: v for k, v in args.items() if k != "vocab_size"}
    models.check_fits(models.resolve(models.BUNDLED), available_bytes=between, **fit)
    with pytest.raises(models.NodeError, match="needs ~") as caught:
        models.check_fits(models.resolve(models.BUNDLED), available_bytes=between, **fit, reference_model=True)
    assert "beta = 0" in caught.value.hint
