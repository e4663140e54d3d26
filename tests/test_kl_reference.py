"""The KL's reference model (``training.beta`` > 0, full fine-tuning): it holds the weights the run started from, in
a fresh run and in a resumed one (not the checkpoint's), and the round's memory estimate counts it."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from node.learning import models
from node.learning.grpo import LoraSettings
from tests.test_anchor import SPREAD, _batch, _weights, make_learner, resumed_from_a_changed_checkpoint

BETA = 0.04


def _original(model_dir) -> dict[str, torch.Tensor]:
    return dict(AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).named_parameters())


def test_a_fresh_runs_reference_is_the_starting_model_and_stays_it_while_the_policy_trains(tiny_model_dir, tmp_path):
    learner = make_learner(tiny_model_dir, tmp_path, beta=BETA)
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
    learner = make_learner(tiny_model_dir, tmp_path, beta=BETA, anchor_decay=1.0, starting_weights=given)
    references = dict(learner.trainer.ref_model.named_parameters())
    for name, p in learner.model.named_parameters():
        assert torch.equal(references[name], given[name]), name
        assert not torch.equal(p, given[name]), name  # the policy trains on from its own weights
        # the pull toward the start reads the reference's weights: the starting model is held once
        assert learner.starting_weights[p].data_ptr() == references[name].data_ptr(), name


def test_an_adapters_reference_is_its_base_model_without_a_copy(tiny_model_dir, tmp_path):
    learner = make_learner(tiny_model_dir, tmp_path, beta=BETA, lora=LoraSettings(rank=4))
    assert learner.is_adapter and learner.trainer.ref_model is None


@pytest.mark.slow
def test_a_resumed_runs_reference_is_the_model_it_started_from_not_its_checkpoint(tiny_model_dir, tmp_path):
    node, resumed, original = resumed_from_a_changed_checkpoint(tiny_model_dir, tmp_path, beta=BETA)
    references = dict(node.learner.trainer.ref_model.named_parameters())
    assert set(references) == set(original)
    for name, p in node.learner.model.named_parameters():
        assert torch.equal(p, resumed[name]), name  # trains on from the checkpoint
        assert torch.equal(references[name], original[name]), name  # the KL pulls toward the model it started from
        assert not torch.equal(references[name], resumed[name]), name
        assert references[name].dtype == torch.float32


def test_the_fit_estimate_counts_the_copy_of_the_starting_weights_for_full_fine_tuning_only():
    spec = models.CATALOG[models.BUNDLED]
    args = {"train_dtype": "float32", "num_sequences": 16, "seq_len": 304, "adamw_8bit": True,
            "vocab_size": spec.vocab_size}
    without = models.estimate_training_bytes(spec.params, **args)
    assert models.estimate_training_bytes(spec.params, **args, starting_copy=True) - without == 4 * spec.params
    adapter = {**args, "lora_rank": 16, "adamw_8bit": False}
    assert models.estimate_training_bytes(spec.params, **adapter, starting_copy=True) == \
        models.estimate_training_bytes(spec.params, **adapter)


@pytest.mark.parametrize(("kept_by", "hint"), [
    (("beta",), "turn off the KL penalty, which keeps a copy of the starting weights (~"),
    (("anchor_decay",), "turn off the pull toward the starting weights, which keeps a copy of the starting weights (~"),
    # one copy for both: the hint must name both, since turning off either alone frees nothing
    (("anchor_decay", "beta"), "turn off both the pull toward the starting weights and the KL penalty, which share a "
                               "copy of the starting weights (~"),
])
def test_a_machine_that_fits_only_without_the_starting_copy_is_told_to_turn_off_what_keeps_it(kept_by, hint):
    spec = models.CATALOG[models.BUNDLED]
    fit = {"train_dtype": "float32", "num_sequences": 16, "seq_len": 304, "adamw_8bit": True}
    without = models.estimate_training_bytes(spec.params, **fit, vocab_size=spec.vocab_size)
    between = without + 2 * spec.params
    models.check_fits(models.resolve(models.BUNDLED), available_bytes=between, **fit)
    with pytest.raises(models.NodeError, match="needs ~") as caught:
        models.check_fits(models.resolve(models.BUNDLED), available_bytes=between, **fit, starting_copy=kept_by)
    assert caught.value.hint.startswith(hint)
    keys = " and ".join(f"{key} = 0" for key in kept_by)
    assert f"; {keys} in the config file), or " in caught.value.hint
    assert caught.value.hint.count(" = 0") == len(kept_by)
    assert not models.fits(models.resolve(models.BUNDLED), available_bytes=between, **fit, starting_copy=kept_by)
    assert models.fits(models.resolve(models.BUNDLED), available_bytes=between, **fit, starting_copy=())


@pytest.mark.parametrize(("training", "kept_by"), [
    ({}, ()), ({"beta": 0.04}, ("beta",)), ({"anchor_decay": 3000.0}, ("anchor_decay",)),
    ({"anchor_decay": 3000.0, "beta": 0.04}, ("anchor_decay", "beta")), ({"beta": 0.04, "lora_rank": 16}, ()),
])
def test_the_settings_name_what_keeps_a_copy_of_the_starting_weights(training, kept_by):
    # One derivation for the node's fit check, its loading of the starting weights and the app's memory figure.
    from node.config import NodeConfig

    assert NodeConfig.build({"training": training}).training.starting_copy == kept_by
