"""Checkpoints are atomic, keep the optimizer exactly, and never unpickle."""

from __future__ import annotations

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from node.checkpoint import Checkpointer, CheckpointState


def _trained(model_dir):
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loss = model(input_ids=torch.tensor([[1, 2, 3, 4]]), labels=torch.tensor([[1, 2, 3, 4]])).loss
    loss.backward()
    optimizer.step()
    return model, optimizer


def test_save_and_restore_model_optimizer_and_round(tiny_model_dir, tmp_path):
    model, optimizer = _trained(tiny_model_dir)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    checkpointer = Checkpointer(tmp_path / "ckpt")
    assert checkpointer.latest() is None
    for round_ in (3, 4, 7):
        checkpointer.save(model, tokenizer, optimizer, CheckpointState(round=round_, rounds_trained=round_ + 1,
                                                                      global_step=round_ + 1, model="tiny"))
    folder, state = checkpointer.latest()
    assert state == CheckpointState(round=7, rounds_trained=8, global_step=8, model="tiny")
    assert sorted(p.name for p in (tmp_path / "ckpt").glob("round-*")) == ["round-00000004", "round-00000007"]

    assert (folder / "model" / "generation_config.json").is_file()  # uploaded to the Hub with the weights
    restored = AutoModelForCausalLM.from_pretrained(folder / "model")
    for a, b in zip(model.parameters(), restored.parameters(), strict=True):
        assert torch.equal(a, b)
    fresh = torch.optim.AdamW(restored.parameters(), lr=1e-3)
    checkpointer.load_optimizer(folder, fresh)
    original, loaded = optimizer.state_dict(), fresh.state_dict()
    assert original["param_groups"] == loaded["param_groups"]
    for index, values in original["state"].items():
        for key, value in values.items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(loaded["state"][index][key]))


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
