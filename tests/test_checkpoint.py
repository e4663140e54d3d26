"""Checkpoints are atomic, keep the optimizer exactly, and never unpickle."""

from __future__ import annotations

import pytest
import torch
from bitsandbytes.optim import AdamW8bit
from transformers import AutoModelForCausalLM, AutoTokenizer

from node.learning.checkpoint import Checkpointer, CheckpointState

QUANT_STATE = AdamW8bit._FSDP_WRAPPED_QUANT_STATE_KEY


def _trained(model_dir, optimizer_class=torch.optim.AdamW):
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    optimizer = optimizer_class(model.parameters(), lr=1e-3)
    loss = model(input_ids=torch.tensor([[1, 2, 3, 4]]), labels=torch.tensor([[1, 2, 3, 4]])).loss
    loss.backward()
    optimizer.step()
    return model, optimizer


@pytest.mark.parametrize("optimizer_class", [torch.optim.AdamW, AdamW8bit], ids=["float32", "8bit"])
def test_save_and_restore_model_optimizer_and_round(tiny_model_dir, tmp_path, optimizer_class):
    model, optimizer = _trained(tiny_model_dir, optimizer_class)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    checkpointer = Checkpointer(tmp_path / "ckpt")
    assert checkpointer.latest() is None
    for round_ in (3, 4, 7):
        checkpointer.save(model, tokenizer, optimizer, CheckpointState(round=round_, rounds_trained=round_ + 1,
                                                                      global_step=round_ + 1, model="tiny"))
    folder, state = checkpointer.latest()
    assert state == CheckpointState(round=7, rounds_trained=8, global_step=8, model="tiny")
    assert sorted(p.name for p in (tmp_path / "ckpt").glob("round-*")) == ["round-00000004", "round-00000007"]
    # Resuming reads the latest checkpoint: only it keeps the optimizer; the fallback before it holds the weights.
    assert (folder / "optimizer" / "state.safetensors").is_file()
    assert not (tmp_path / "ckpt" / "round-00000004" / "optimizer").exists()
    assert (tmp_path / "ckpt" / "round-00000004" / "model" / "model.safetensors").is_file()

    assert (folder / "model" / "generation_config.json").is_file()  # uploaded to the Hub with the weights
    restored = AutoModelForCausalLM.from_pretrained(folder / "model")
    for a, b in zip(model.parameters(), restored.parameters(), strict=True):
        assert torch.equal(a, b)
    fresh = optimizer_class(restored.parameters(), lr=1e-3)
    checkpointer.load_optimizer(folder, fresh)
    original, loaded = optimizer.state_dict(), fresh.state_dict()
    assert original["param_groups"] == loaded["param_groups"]
    assert original["state"].keys() == loaded["state"].keys()
    for index, values in original["state"].items():
        assert values.keys() == loaded["state"][index].keys()
        # bitsandbytes nests its quantized moments and their scales one level down
        for key, value in [*values.items(), *values.get(QUANT_STATE, {}).items()]:
            if key != QUANT_STATE:
                assert torch.equal(torch.as_tensor(value), torch.as_tensor(loaded["state"][index][key]
                                                                            if key in values else
                                                                            loaded["state"][index][QUANT_STATE][key]))


def test_moments_of_another_optimizer_kind_start_afresh(tiny_model_dir, tmp_path, caplog):
    """Switching optimizer_states between runs resumes the weights; the saved moments cannot be read as the
    other kind's (float32 exp_avg vs 8-bit state1 + absmax1), so the new optimizer starts with empty ones."""
    model, optimizer = _trained(tiny_model_dir)
    checkpointer = Checkpointer(tmp_path / "ckpt")
    folder = checkpointer.save(model, AutoTokenizer.from_pretrained(tiny_model_dir), optimizer,
                               CheckpointState(round=1, rounds_trained=1, global_step=1, model="tiny"))
    other = AdamW8bit(model.parameters(), lr=1e-3)
    checkpointer.load_optimizer(folder, other)
    assert not other.state
    assert "start afresh" in caplog.text
    model(input_ids=torch.tensor([[1, 2, 3, 4]]), labels=torch.tensor([[1, 2, 3, 4]])).loss.backward()
    other.step()
    assert other.state[model.get_input_embeddings().weight]["state1"].dtype == torch.uint8


def test_interrupted_save_leaves_previous_checkpoint(tiny_model_dir, tmp_path):
    model, optimizer = _trained(tiny_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    checkpointer = Checkpointer(tmp_path / "ckpt")
    checkpointer.save(model, tokenizer, optimizer, CheckpointState(round=1, rounds_trained=2, global_step=2, model="t"))

    class Exploding(torch.optim.AdamW):
        def state_dict(self):
            raise KeyboardInterrupt  # a kill in the middle of writing

    broken = Exploding(model.parameters())
    try:
        checkpointer.save(model, tokenizer, broken, CheckpointState(round=2, rounds_trained=3, global_step=3, model="t"))
    except KeyboardInterrupt:
        pass
    folder, state = checkpointer.latest()
    assert state.round == 1 and folder.name == "round-00000001"
    assert not (tmp_path / "ckpt" / "round-00000002").exists()
