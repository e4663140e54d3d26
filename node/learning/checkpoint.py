"""Atomic checkpoints of the policy, its optimizer and the round counter.

A checkpoint is written into a temporary folder, fsynced, renamed into place and only then named in
``latest.json`` (itself replaced atomically): a kill at any moment leaves the previous checkpoint intact.
Optimizer state is stored as safetensors plus JSON, so loading a checkpoint never unpickles anything. Only the latest
checkpoint keeps it (resuming reads the latest); the one kept before it, a fallback, holds the weights alone: with the
8-bit moments of the bundled model that is a third of its size.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from accelerate.utils import is_peft_model
from safetensors.torch import load_file, save_file

log = logging.getLogger(__name__)

LATEST = "latest.json"
KEEP = 2


@dataclass(frozen=True)
class CheckpointState:
    round: int  # the last swarm round whose update is in the weights
    rounds_trained: int
    global_step: int
    model: str
    lora_rank: int = 0  # > 0: the run trains an adapter, saved in the checkpoint's "adapter" folder


ADAPTER = "adapter"  # a peft adapter folder beside "model" when the run trains one


class Checkpointer:
    def __init__(self, root: Path) -> None:
        self.root = root

    def latest(self) -> tuple[Path, CheckpointState] | None:
        pointer = self.root / LATEST
        if not pointer.exists():
            return None
        try:
            info = json.loads(pointer.read_text(encoding="utf-8"))
            folder = self.root / info["folder"]
            state = CheckpointState(**json.loads((folder / "state.json").read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("ignoring unreadable checkpoint pointer %s: %s", pointer, exc)
            return None
        return folder, state

    def save(self, model, tokenizer, optimizer: torch.optim.Optimizer, state: CheckpointState) -> Path:
        started = time.perf_counter()
        self.root.mkdir(parents=True, exist_ok=True)
        name = f"round-{state.round:08d}"
        tmp = self.root / f".tmp-{name}"
        shutil.rmtree(tmp, ignore_errors=True)
        if is_peft_model(model):
            # The adapter alone (to resume and to upload as an adapter) and the merged weights (a plain model folder,
            # what the upload and a resume without peft read).
            model.save_pretrained(tmp / ADAPTER, safe_serialization=True)
            tokenizer.save_pretrained(tmp / ADAPTER)
            base = model.get_base_model()
            base.save_pretrained(tmp / "model", state_dict=merged_state_dict(model), safe_serialization=True)
        else:
            model.save_pretrained(tmp / "model", safe_serialization=True)
        tokenizer.save_pretrained(tmp / "model")
        _save_optimizer(optimizer, tmp / "optimizer")
        (tmp / "state.json").write_text(json.dumps(asdict(state)), encoding="utf-8")
        _fsync_tree(tmp)
        final = self.root / name
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        _write_atomic(self.root / LATEST, json.dumps({"folder": name}))
        self._prune(keep=final)
        log.info("checkpoint of round %d saved in %.1f s", state.round, time.perf_counter() - started)
        return final

    def load_optimizer(self, folder: Path, optimizer: torch.optim.Optimizer) -> None:
        if not (folder / "optimizer" / "meta.json").is_file():
            log.warning("the checkpoint %s holds no optimizer state: its moments start afresh", folder.name)
            return
        _load_optimizer(optimizer, folder / "optimizer")

    def _prune(self, keep: Path) -> None:
        folders = sorted(p for p in self.root.glob("round-*") if p.is_dir())
        for old in folders[:-KEEP]:
            if old != keep:
                shutil.rmtree(old, ignore_errors=True)
        for fallback in folders[-KEEP:]:
            if fallback != keep:  # resuming reads the latest: an older checkpoint's moments are never needed
                shutil.rmtree(fallback / "optimizer", ignore_errors=True)
        for stale in self.root.glob(".tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)


def merged_state_dict(peft_model) -> dict[str, torch.Tensor]:
    """The base model's state dict with every active LoRA adapter folded in, without touching the live model."""
    from peft.tuners.lora import LoraLayer

    base = peft_model.get_base_model()
    lora_modules = {name: m for name, m in base.named_modules() if isinstance(m, LoraLayer)}
    merged: dict[str, torch.Tensor] = {}
    with torch.no_grad():
        for name, module in lora_modules.items():
            layer = module.get_base_layer()
            weight = layer.weight.detach().clone()
            for adapter in module.active_adapters:
                if adapter in module.lora_A:
                    weight += module.get_delta_weight(adapter).to(weight.dtype)
            merged[f"{name}.weight"] = weight
            if getattr(layer, "bias", None) is not None:
                merged[f"{name}.bias"] = layer.bias.detach()
        for key, value in base.state_dict().items():
            owner = next((n for n in lora_modules if key.startswith(f"{n}.")), None)
            if owner is None:
                merged[key] = value
    return merged


def _save_optimizer(optimizer: torch.optim.Optimizer, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    state_dict = optimizer.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, float]] = {}
    storages: set[int] = set()
    for index, param_state in state_dict["state"].items():
        for key, value in _flat(param_state).items():
            if isinstance(value, torch.Tensor):
                tensor = value.detach().contiguous().cpu()
                if tensor.untyped_storage().data_ptr() in storages:
                    tensor = tensor.clone()  # safetensors refuses shared storage: bitsandbytes shares its 256-entry maps
                storages.add(tensor.untyped_storage().data_ptr())
                tensors[f"{index}.{key}"] = tensor
            else:
                scalars.setdefault(str(index), {})[key] = value
    save_file(tensors, folder / "state.safetensors")
    meta = {"param_groups": state_dict["param_groups"], "scalars": scalars, "optimizer": _kind(optimizer)}
    (folder / "meta.json").write_text(json.dumps(meta), encoding="utf-8")


def _load_optimizer(optimizer: torch.optim.Optimizer, folder: Path) -> None:
    meta = json.loads((folder / "meta.json").read_text(encoding="utf-8"))
    # Checkpoints written before the kind was recorded hold torch's AdamW. Another kind's moments (8-bit vs float32
    # after optimizer_states changed) cannot be loaded: the weights resume, the moments start afresh like a new run's.
    saved = meta.get("optimizer", "torch.optim.adamw.AdamW")
    if saved != _kind(optimizer):
        log.warning("the checkpoint's optimizer is %s, this run's is %s: its moments start afresh", saved, _kind(optimizer))
        return
    state: dict[int, dict] = {}
    for name, tensor in load_file(folder / "state.safetensors").items():
        index, key = name.split(".", 1)
        state.setdefault(int(index), {})[key] = tensor
    for index, values in meta["scalars"].items():
        state.setdefault(int(index), {}).update(values)
    # JSON turned tuples such as Adam's betas into lists; restore them so the state is exactly as saved.
    groups = [
        {key: tuple(value) if isinstance(value, list) and key != "params" else value for key, value in group.items()}
        for group in meta["param_groups"]
    ]
    optimizer.load_state_dict({"state": state, "param_groups": groups})


def _flat(param_state: dict) -> dict:
    """bitsandbytes nests its quantization state (8-bit moments, scales) in a dict; its load_state_dict takes it flat."""
    flat = {key: value for key, value in param_state.items() if not isinstance(value, dict)}
    for nested in (value for value in param_state.values() if isinstance(value, dict)):
        flat.update(nested)
    return flat


def _kind(optimizer: torch.optim.Optimizer) -> str:
    return f"{type(optimizer).__module__}.{type(optimizer).__qualname__}"


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _fsync_tree(folder: Path) -> None:
    for path in folder.rglob("*"):
        if path.is_file():
            with open(path, "rb") as f:
                os.fsync(f.fileno())
