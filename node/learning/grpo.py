"""Policy sampling and one long-lived TRL ``GRPOTrainer`` stepped once per swarm round.

The SAPO round loop owns generation, sharing and scoring; TRL owns the GRPO objective (advantages, clipping, KL,
loss types) and the optimizer. The seam between them is :class:`RoundAdapter`, TRL's ``rollout_func``: the round's
groups, local and external, are handed to the trainer already tokenized and scored, so TRL generates nothing and
the verifier runs exactly once per completion.
"""

from __future__ import annotations

import copy
import inspect
import logging
import math
import os
import threading
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from datasets import Dataset
from transformers import StoppingCriteria, StoppingCriteriaList

os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
from accelerate.utils import is_peft_model  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402
from trl.kernels import ChunkedLogProbFunction  # noqa: E402

from node.learning import decoding, ort_decoding, vllm_decoding  # noqa: E402

log = logging.getLogger(__name__)


def silence_known_deprecations() -> None:
    """TRL 1.16 still calls transformers' old activation-checkpointing names (``gradient_checkpointing_enable`` and
    kin, in ``trl.models.utils``), which transformers 5.2x answers with a FutureWarning at every node start: a user
    can do nothing about it, so it must not reach the Logs tab as a warning. Only those messages, from that module."""
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"transformers\.modeling_utils",
                            message=r"`(is_)?gradient_checkpointing\w*` is deprecated")


silence_known_deprecations()

# The trainer is stepped by hand, one optimizer step per round, so no schedule length is needed; a constant
# learning rate keeps a swarm's late joiners and early members on the same footing.
_SCHEDULE_STEPS = 10**9

# Sampling pads its batch of prompts to a width that is a multiple of this (Policy._padded), so that a run sees a few
# prompt widths, not a new one every round. Every new shape of the prefill's matrix products makes oneDNN (torch's
# bfloat16 kernels on a CPU with AVX512-BF16 or AMX) compile kernels that it and torch cache and keep: about 2 MiB of
# resident memory per new width with the tiny test model, without end on a node whose questions have ever-new
# lengths (tests/test_memory.py, docs/performance.md). The padding is masked and moves no position, so it changes
# what is sampled only by rounding; it costs at most PROMPT_WIDTH_STEP - 1 more tokens a prompt in the prefill.
# ONNX Runtime and vLLM take the prompts without their padding.
PROMPT_WIDTH_STEP = 32


def padded_width(longest: int) -> int:
    """The width of a batch of prompts whose longest has ``longest`` tokens: the next multiple of PROMPT_WIDTH_STEP."""
    return -(-longest // PROMPT_WIDTH_STEP) * PROMPT_WIDTH_STEP


@dataclass(frozen=True)
class Completion:
    ids: tuple[int, ...]  # without the end-of-sequence token
    text: str
    finished: bool  # ended with end-of-sequence (False: cut at max_new_tokens)

    @property
    def length(self) -> int:
        """Its tokens as the update sees them: the end-of-sequence token included where it finished (the length
        every round reports)."""
        return len(self.ids) + self.finished


@dataclass(frozen=True)
class TrainGroup:
    """One question and its G scored completions, ready for the update."""

    prompt_ids: tuple[int, ...]
    completions: tuple[Completion, ...]
    rewards: tuple[float, ...]
    # False: completions below the group's mean get advantage 0 instead of a negative one (a peer's text, which our
    # policy did not sample); those above it are trained as usual.
    push_down: bool = True


@dataclass(frozen=True)
class LoraSettings:
    """Train a low-rank adapter (peft LoRA) instead of every weight: the same GRPO update on fewer parameters."""

    rank: int
    alpha: float | None = None  # None: 2 x rank
    target_modules: str = "all-linear"  # or comma-separated module names

    def peft_config(self):
        from peft import LoraConfig

        targets = self.target_modules
        return LoraConfig(
            r=self.rank,
            lora_alpha=self.alpha or 2 * self.rank,
            lora_dropout=0.0,  # GRPO's importance ratio needs the same function in every forward
            target_modules=targets if targets == "all-linear" else [t.strip() for t in targets.split(",") if t.strip()],
            task_type="CAUSAL_LM",
        )


@dataclass(frozen=True)
class StepStats:
    loss: float
    kl: float | None
    completion_length: float
    seconds: float
    grad_norm: float | None = None  # before clipping
    entropy: float | None = None  # mean per-token entropy of the policy on the completions its passes ran on
    mean_abs_advantage: float = 0.0  # over the trained completions, as TRL computed them (after the peer clamp)


class Policy:
    """The model being trained, and how completions are sampled from it.

    With a ``generation_dtype`` other than the model's, each :meth:`generate` call samples from a fresh cast copy
    (adapters merged in) that is dropped when it returns: casting costs a fraction of a second per round, where a
    copy kept alive would sit in memory through the training step, the round's peak.
    """

    def __init__(self, model, tokenizer, *, generation_dtype: torch.dtype, max_prompt_tokens: int,
                 preallocated_cache: bool = True, sampler: str = "torch",
                 vllm_gpu_memory_utilization: float = vllm_decoding.DEFAULT_GPU_MEMORY_UTILIZATION) -> None:
        """``preallocated_cache=False`` samples through ``generate()`` for every model (the reference path that
        :mod:`node.learning.decoding` is checked and measured against). ``sampler="onnxruntime"`` runs that loop's
        forwards in ONNX Runtime (:mod:`node.learning.ort_decoding`) where it is installed and the sampling model is
        one it runs (float32 Llama on the CPU); elsewhere the torch loop samples, as with ``"torch"``, and a warning
        says why. ``"auto"`` does the same without the warning: the torch loop is its choice where ONNX Runtime
        cannot sample."""
        self.model = model
        self.preallocated_cache = preallocated_cache
        self.sampler = sampler
        self.vllm_gpu_memory_utilization = vllm_gpu_memory_utilization
        self._vllm: vllm_decoding.Engine | None = None
        self._fallbacks: set[str] = set()
        self.tokenizer = tokenizer
        self.max_prompt_tokens = max_prompt_tokens
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token
        self.eos_ids = _eos_ids(model, tokenizer)
        self.generation_dtype = generation_dtype

    def prompt_ids(self, messages: list[dict[str, str]]) -> tuple[int, ...]:
        ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
        return tuple(int(i) for i in ids[-self.max_prompt_tokens :])

    def encode_completion(self, text: str, *, finished: bool, max_new_tokens: int) -> Completion:
        """Tokenize a peer's completion text for our model (peers may use another tokenizer)."""
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"][:max_new_tokens]
        truncated = len(ids) == max_new_tokens and not finished
        return Completion(ids=tuple(ids), text=text, finished=finished and not truncated)

    @torch.inference_mode()
    def generate(
        self, prompts: list[tuple[int, ...]], *, num_generations: int, max_new_tokens: int, temperature: float,
        top_p: float, seed: int, should_stop: Callable[[], bool] = lambda: False, greedy: bool = False,
        prefix: decoding.Prefix | None = None,
    ) -> list[list[Completion]]:
        """All G completions of all prompts in one batch, each prompt run once: over a cache allocated once
        (:func:`node.learning.decoding.sample`) where the model allows it, else in one left-padded ``generate`` call
        (each prompt run once where :func:`_prompt_sharing_is_exact`).

        ``should_stop`` is polled after every token, so a cancelled node does not sit out a long generation.
        ``greedy`` decodes the most likely token instead of sampling (held-out evaluation's pass@1). ``prefix``
        (:meth:`prefill`, every prompt longer than it and starting with it) is copied instead of run again.
        """
        sampler = self.sampling_model()
        try:
            if self._preallocates(sampler):
                copies = (num_generations, 0) if greedy else (0, num_generations)
                return self._sample(sampler, prompts, *copies, max_new_tokens, temperature, top_p, seed, should_stop,
                                    prefix)
            input_ids, attention = self._padded(prompts, sampler)
            cache = None
            if num_generations > 1 and _shares_prompts(sampler, input_ids):
                # generate() repeats each prompt G times before its prefill, so every prompt would run G times; here
                # it runs once and generate() continues every copy from its cache (only the last prompt token is new).
                cache = _prompt_cache(sampler, input_ids, attention)
                cache.batch_repeat_interleave(num_generations)
            return self._decode(sampler, input_ids, attention, cache, num_generations, max_new_tokens, temperature,
                                top_p, seed, should_stop, greedy)
        finally:
            del sampler

    @torch.inference_mode()
    def greedy_and_sampled(
        self, prompts: list[tuple[int, ...]], *, samples: int, max_new_tokens: int, temperature: float, top_p: float,
        seed: int, should_stop: Callable[[], bool] = lambda: False, prefix: decoding.Prefix | None = None,
    ) -> tuple[list[Completion], list[list[Completion]]]:
        """Each prompt's greedy answer and ``samples`` sampled ones: what a greedy and a sampled :meth:`generate`
        return, with the prompts prefilled once for both where the model allows it, in one batch where
        :func:`node.learning.decoding.supports` it (held-out evaluation answers every question both ways);
        ``prefix`` as in :meth:`generate`."""
        if samples < 1:
            raise ValueError("greedy_and_sampled needs at least one sample a prompt; use generate(greedy=True)")
        sampler = self.sampling_model()
        try:
            if self._preallocates(sampler):  # one batch: each prompt's greedy row, then its sampled ones
                rows = self._sample(sampler, prompts, 1, samples, max_new_tokens, temperature, top_p, seed,
                                    should_stop, prefix)
                return [group[0] for group in rows], [group[1:] for group in rows]
            input_ids, attention = self._padded(prompts, sampler)
            greedy_cache = sampled_cache = None
            if _shares_prompts(sampler, input_ids):
                greedy_cache = _prompt_cache(sampler, input_ids, attention)
                sampled_cache = copy.deepcopy(greedy_cache)  # generate() appends to the cache it is given
                sampled_cache.batch_repeat_interleave(samples)
            greedy = self._decode(sampler, input_ids, attention, greedy_cache, 1, max_new_tokens, 1.0, 1.0, 0,
                                  should_stop, True)
            sampled = self._decode(sampler, input_ids, attention, sampled_cache, samples, max_new_tokens, temperature,
                                   top_p, seed, should_stop, False)
            return [group[0] for group in greedy], sampled
        finally:
            del sampler

    def prefill(self, ids: tuple[int, ...]) -> decoding.Prefix | None:
        """``ids``' keys and values, for later generations whose every prompt starts with ``ids`` to copy instead of
        computing them again; valid until the weights change. None where the sampler would not use them: models
        on ``generate()``, and ONNX Runtime, which runs its own per-prompt prefill in the session it builds per call."""
        sampler = self.sampling_model()
        try:
            uses_prefix = self._sample_function(sampler, positions=len(ids)) is decoding.sample
            if not self._preallocates(sampler) or not uses_prefix:
                return None
            return decoding.prefill(sampler, ids)
        finally:
            del sampler

    def sampling_model(self):
        """The model to sample from: the policy itself, or a copy in ``generation_dtype`` with adapters merged (vLLM
        is handed the policy itself: it casts and merges into its own copy of the weights)."""
        if self.generation_dtype == self.model.dtype or self.sampler == "vllm":
            # The learner leaves the model in train mode, where activation checkpointing switches the KV cache
            # off: generate() would then feed one token per step with no context and sample word salad.
            return self.model.eval()
        sampler = _low_precision_copy(self.model, self.generation_dtype)
        # TRL patches the policy's forward per instance (its fused LM head) with a closure over the original
        # model's forward: the copy must use its class's forward, or it would silently run the float32 weights.
        vars(sampler).pop("forward", None)
        _merge_adapters(sampler, self.model)
        return sampler.eval()

    def _preallocates(self, sampler) -> bool:
        return self.sampler == "vllm" or (self.preallocated_cache and decoding.supports(sampler))

    def _sample(self, sampler, prompts, greedy, sampled, max_new_tokens, temperature, top_p, seed, should_stop,
                prefix) -> list[list[Completion]]:
        """Each prompt's ``greedy`` + ``sampled`` completions from :func:`node.learning.decoding.sample`, the
        ``prefix`` copied where it is given and that loop samples."""
        sample = self._sample_function(sampler, positions=max(len(p) for p in prompts) + max_new_tokens)
        shared = {}
        if prefix is not None and sample is decoding.sample:
            start = len(prefix.ids)
            if any(len(p) <= start or p[:start] != prefix.ids for p in prompts):
                raise ValueError("every prompt must start with the prefix and go on after it")
            prompts, shared = [p[start:] for p in prompts], {"prefix": prefix}
        input_ids, attention = self._padded(prompts, sampler, after=len(shared["prefix"].ids) if shared else 0)
        torch.manual_seed(seed)
        result = sample(
            sampler, input_ids, attention, greedy=greedy, sampled=sampled, max_new_tokens=max_new_tokens,
            temperature=temperature, top_p=top_p, eos_ids=self.eos_ids, pad_id=self.tokenizer.pad_token_id,
            should_stop=should_stop, **shared,
        )
        rows, copies = result.tokens.tolist(), greedy + sampled
        return [[self._completion(row) for row in rows[start : start + copies]]
                for start in range(0, len(rows), copies)]

    def _sample_function(self, sampler, *, positions: int) -> Callable[..., decoding.Sampled]:
        """ONNX Runtime's loop where ``self.sampler`` allows it and it can run ``sampler`` for sequences of
        ``positions`` tokens, else the torch loop (saying why, once, where ``onnxruntime`` was asked for); vLLM's
        where it was asked for."""
        if self.sampler == "vllm":
            return self._vllm_engine(sampler).sample
        if self.sampler in ("auto", "onnxruntime"):
            if not ort_decoding.available():
                why = "onnxruntime is not installed (pip install onnxruntime onnx)"
            elif not ort_decoding.supports(sampler):
                why = "it runs float32 Llama-type models on the CPU only"
            elif positions > ort_decoding.max_positions(sampler):
                why = "prompt and completion are longer than its rotary table (the model's position limit)"
            else:
                return ort_decoding.sample
            if self.sampler == "onnxruntime":
                self._fall_back(why)
        return decoding.sample

    def _vllm_engine(self, sampler) -> vllm_decoding.Engine:
        if self._vllm is None:  # once per process: vLLM sizes its share of the GPU when it starts
            self._vllm = vllm_decoding.Engine(
                sampler, dtype=self.generation_dtype, max_model_len=self.max_prompt_tokens + vllm_decoding.MAX_NEW_TOKENS,
                gpu_memory_utilization=self.vllm_gpu_memory_utilization,
            )
        return self._vllm

    def _fall_back(self, why: str) -> None:
        if why not in self._fallbacks:  # once: every round would say the same
            self._fallbacks.add(why)
            log.warning("sampler 'onnxruntime' asked for, sampling with torch instead: %s", why)

    def _padded(self, prompts: list[tuple[int, ...]], sampler, *, after: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """The prompts as one left-padded batch: token ids and attention mask. With the ``after`` tokens of a copied
        prefix before it, the batch is as wide as the whole prompts would be (:func:`padded_width`), so that a prefix
        changes no shape but the prefill's, and samples what the whole prompts do."""
        device = next(sampler.parameters()).device
        width = padded_width(after + max(len(p) for p in prompts)) - after
        pad = self.tokenizer.pad_token_id
        input_ids = torch.tensor([[pad] * (width - len(p)) + list(p) for p in prompts], device=device)
        attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], device=device)
        return input_ids, attention

    def _decode(self, sampler, input_ids, attention, cache, num_generations, max_new_tokens, temperature, top_p, seed,
                should_stop, greedy) -> list[list[Completion]]:
        """G completions of each padded prompt; with ``cache`` (:func:`_prompt_cache`, already repeated G times per
        prompt) generate() continues every copy from it instead of prefilling each."""
        width = input_ids.size(1)
        shared = {}
        if cache is not None:
            shared[decoding.CACHE_KWARG] = cache
            input_ids = input_ids.repeat_interleave(num_generations, dim=0)
            attention = attention.repeat_interleave(num_generations, dim=0)
        torch.manual_seed(seed)
        output = sampler.generate(
            input_ids=input_ids,
            attention_mask=attention,
            **({"do_sample": False} if greedy else {"do_sample": True, "temperature": temperature, "top_p": top_p, "top_k": 0}),
            max_new_tokens=max_new_tokens,
            num_return_sequences=1 if shared else num_generations,
            pad_token_id=self.tokenizer.pad_token_id,
            eos_token_id=list(self.eos_ids),
            stopping_criteria=StoppingCriteriaList([_Cancelled(should_stop)]),
            **shared,
        )
        rows = output[:, width:].tolist()
        groups = []
        for start in range(0, len(rows), num_generations):
            groups.append([self._completion(row) for row in rows[start : start + num_generations]])
        return groups

    @torch.inference_mode()
    def completion_logprobs(self, prompt_ids: tuple[int, ...], completions: Sequence[Completion]) -> list[float]:
        """Mean per-token log-prob of each completion's tokens after ``prompt_ids`` under the current policy
        (temperature 1); 0 for an empty completion.

        This judges peer text by how likely our own policy finds it, so it must cost little: the prompt runs once
        and its KV cache serves every completion, and only the hidden states that predict a completion token go
        through the LM head, in the trainer's bounded tiles.
        """
        rows = [list(c.ids) for c in completions]
        width = max(map(len, rows), default=0)
        if width == 0:
            return [0.0] * len(rows)
        # eval: the learner leaves the model in train mode, where activation checkpointing switches the cache off
        model = self.model.eval()
        device = next(model.parameters()).device
        prompt = model.base_model(input_ids=torch.tensor([prompt_ids], device=device), use_cache=True)
        cache = prompt.past_key_values
        cache.batch_repeat_interleave(len(rows))
        pad = self.tokenizer.pad_token_id
        ids = torch.tensor([row + [pad] * (width - len(row)) for row in rows], device=device)
        mask = torch.tensor([[True] * len(row) + [False] * (width - len(row)) for row in rows], device=device)
        attention = torch.cat([mask.new_ones(len(rows), len(prompt_ids)), mask], dim=1).long()
        hidden = model.base_model(input_ids=ids, attention_mask=attention, past_key_values=cache,
                                  use_cache=True).last_hidden_state
        # Position t predicts token t + 1; the prompt's last state predicts every completion's first token.
        first = prompt.last_hidden_state[:, -1:].expand(len(rows), 1, -1)
        hidden = torch.cat([first, hidden[:, :-1]], dim=1)
        logps, _ = _tiled_logprobs(model, hidden[mask], ids[mask], 1.0)
        return [float(row.mean()) if row.numel() else 0.0 for row in logps.split([len(r) for r in rows])]

    def _completion(self, row: list[int]) -> Completion:
        end = next((i for i, token in enumerate(row) if token in self.eos_ids), None)
        ids = row if end is None else row[:end]
        return Completion(ids=tuple(ids), text=self.tokenizer.decode(ids, skip_special_tokens=True), finished=end is not None)


def _low_precision_copy(model, dtype: torch.dtype):
    """``copy.deepcopy(model).to(dtype)`` without the float32 deep copy in between.

    Copying the float32 weights first and casting them afterwards briefly doubles the model in memory and leaves
    the freed float32 copy behind as heap fragmentation; here each tensor is cast straight into the copy, shared
    (tied) weights stay shared.
    """
    memo: dict[int, object] = {}
    for tensor in [*model.parameters(), *model.buffers()]:
        if id(tensor) not in memo:
            cast = tensor.detach().to(dtype) if tensor.is_floating_point() else tensor.detach().clone()
            memo[id(tensor)] = torch.nn.Parameter(cast, requires_grad=False) if isinstance(
                tensor, torch.nn.Parameter
            ) else cast
    return copy.deepcopy(model, memo).to(dtype)


def _merge_adapters(copy_: torch.nn.Module, source: torch.nn.Module) -> None:
    """Replace the LoRA layers of a sampling copy by plain layers holding ``source``'s merged weights.

    The merge is done in the source's float32 and cast once, as the merged upload is, not in the copy's bfloat16.
    """
    try:
        from peft.tuners.lora import LoraLayer
    except ImportError:
        return
    originals = {name: m for name, m in source.named_modules() if isinstance(m, LoraLayer)}
    for name, module in list(copy_.named_modules()):
        if not isinstance(module, LoraLayer):
            continue
        original, plain = originals[name], module.get_base_layer()
        with torch.no_grad():
            weight = original.get_base_layer().weight.detach().clone()
            for adapter in original.active_adapters:
                if adapter in original.lora_A:
                    weight += original.get_delta_weight(adapter).to(weight.dtype)
            plain.weight.copy_(weight)
        parent, _, child = name.rpartition(".")
        setattr(copy_.get_submodule(parent) if parent else copy_, child, plain)


class _Cancelled(StoppingCriteria):
    def __init__(self, should_stop: Callable[[], bool]) -> None:
        self.should_stop = should_stop

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        return torch.full((input_ids.shape[0],), self.should_stop(), dtype=torch.bool, device=input_ids.device)


class RoundAdapter:
    """TRL ``rollout_func`` + reward function that replay the round's prepared groups.

    TRL passes each prompt G times in a row; the adapter checks that they are the prompts it was loaded with, in
    order, and returns the stored token ids. The rewards reach TRL's reward function as an extra field.
    """

    __name__ = "round_rewards"  # TRL logs reward functions by name; the rewards were computed before the step

    def __init__(self, eos_id: int) -> None:
        self._eos_id = eos_id
        self._rows: list[tuple[str, tuple[int, ...], Completion, float]] = []
        self.push_down: list[bool] = []  # per row of the loaded groups: whether a negative advantage is kept

    def load(self, groups: list[TrainGroup]) -> list[dict[str, str]]:
        self.push_down = [group.push_down for group in groups for _ in group.completions]
        self._rows = [
            (f"sapo-{g}-{c}", group.prompt_ids, completion, reward)
            for g, group in enumerate(groups)
            for c, (completion, reward) in enumerate(zip(group.completions, group.rewards, strict=True))
        ]
        # TRL treats each row's "prompt" as opaque text here; the key ties a row back to its group.
        return [{"prompt": key} for key, *_ in self._rows]

    def rollout(self, prompts: list[str], trainer: GRPOTrainer) -> dict[str, list]:
        keys = [key for key, *_ in self._rows]
        if list(prompts) != keys:
            raise RuntimeError("TRL reordered the round's rollouts; the adapter cannot match them to their groups")
        return {
            "prompt_ids": [list(prompt) for _, prompt, _, _ in self._rows],
            # A finished completion keeps its end-of-sequence token so the model learns where to stop.
            "completion_ids": [list(c.ids) + ([self._eos_id] if c.finished else []) for _, _, c, _ in self._rows],
            "logprobs": None,
            "sapo_reward": [reward for *_, reward in self._rows],
        }

    def __call__(self, prompts, completions, sapo_reward, **kwargs) -> list[float]:
        return list(sapo_reward)


# Elements of one [tokens, vocabulary] logits tile: bounds the log-prob pass's temporaries (~8 tiles at its backward
# peak) whatever the round's size, where TRL's CPU path tiles 4,096 tokens x 32,768 vocabulary entries. Measured on
# the bundled model's head (200 tokens): 1 Mi elements leaves 145 MiB of backward temporaries (113 of them the head's
# weight gradient) against 256 MiB with 4 Mi, at the same speed; 0.5 Mi saves little more and is slower.
LOGIT_TILE_ELEMENTS = 2**20
# Config fields that rescale logits (Granite, Falcon-H1, ...): such models keep TRL's own log-prob path.
_LOGIT_SCALES = ("logit_scale", "output_multiplier", "lm_head_multiplier", "logits_scaling")


# accelerate keeps one AcceleratorState per process, which every TrainingArguments and Trainer resets and rebuilds:
# two learners set up at once in one process (nodes in threads) can catch it half rebuilt. Set-ups take turns.
SETTING_UP = threading.Lock()


class SapoGRPOTrainer(GRPOTrainer):
    """TRL's GRPOTrainer with the per-token log-probs computed over the completion tokens only, in bounded tiles.

    TRL 1.16 scores every position of every sequence (prompt and padding included) through its fused LM head
    whenever Triton cannot run (CPU, MPS), with [4,096 x 32,768] float32 tiles and a dozen tile-sized
    temporaries in the backward: ~2.3 MB per trained token on CPU. Here the backbone runs as usual, then only the
    hidden states that predict a completion token go through the same TRL kernel (same online log-sum-exp, same
    entropy) with tiles of :data:`LOGIT_TILE_ELEMENTS`, so the result matches TRL's to float rounding.

    The G rows of a group share their prompt, most of each row's tokens: where the model allows it, each distinct
    prompt goes through the backbone once, packed with its rows' completions (:func:`_packed_group_states`).
    """

    round_adapter: RoundAdapter | None = None  # set by GrpoLearner: which rows keep their negative advantages
    abs_advantages: list[float] | None = None  # set by GrpoLearner.step: |advantage| of every row it trains

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        push_down = self.round_adapter.push_down if self.round_adapter is not None else []
        if not all(push_down):
            advantages = output["advantages"]
            keep = torch.tensor(push_down, dtype=torch.bool, device=advantages.device)
            output["advantages"] = torch.where(keep, advantages, advantages.clamp(min=0.0))
        if self.abs_advantages is not None:
            self.abs_advantages += output["advantages"].abs().tolist()
        return output

    def _get_per_token_logps_and_entropies(
        self, model, input_ids, attention_mask, logits_to_keep, batch_size=None, compute_entropy=False,
        compute_aux_loss=False, **multimodal,
    ):
        causal_lm = self.accelerator.unwrap_model(model)
        if is_peft_model(causal_lm):
            causal_lm = causal_lm.get_base_model()
        config = causal_lm.config.get_text_config()
        if (
            compute_aux_loss
            or any(value is not None for value in multimodal.values())
            or any(getattr(config, name, None) is not None for name in _LOGIT_SCALES)
        ):
            return super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, batch_size, compute_entropy, compute_aux_loss,
                **multimodal,
            )
        outputs = ("log_probs", "entropy") if compute_entropy else ("log_probs",)
        batch_size = batch_size or input_ids.size(0)
        all_logps, all_entropies = [], []
        for start in range(0, input_ids.size(0), batch_size):
            ids = input_ids[start : start + batch_size]
            attention = attention_mask[start : start + batch_size]
            with self.accelerator.autocast():
                hidden = self._predicting_states(causal_lm, ids, attention, logits_to_keep)
            targets = ids[:, -logits_to_keep:]
            mask = attention[:, -logits_to_keep:].bool()
            logps, entropy = _tiled_logprobs(causal_lm, hidden[mask], targets[mask], self.temperature, outputs)
            all_logps.append(logps.new_zeros(mask.shape).masked_scatter(mask, logps))
            if compute_entropy:
                all_entropies.append(entropy.new_zeros(mask.shape).masked_scatter(mask, entropy))
        entropies = torch.cat(all_entropies) if compute_entropy else None
        return torch.cat(all_logps), entropies, None

    def _predicting_states(self, causal_lm, ids, attention, logits_to_keep) -> torch.Tensor:
        """The last hidden states before each of the last ``logits_to_keep`` tokens of every row (position t predicts
        token t + 1): through :func:`_packed_group_states` where rows share prompts and the model allows it."""
        if _packing_is_exact(causal_lm):
            hidden = _packed_group_states(causal_lm, ids, attention, logits_to_keep)
            if hidden is not None:
                return hidden
        hidden = causal_lm.base_model(input_ids=ids, attention_mask=attention, use_cache=False).last_hidden_state
        return hidden[:, -logits_to_keep - 1 : -1]


def _packing_is_exact(causal_lm) -> bool:
    """Whether :func:`_packed_group_states` computes what the plain forward does, for this model as it is set up.

    The packed rows need the attention to take an explicit boolean [query, key] mask and explicit positions: SDPA
    does (eager attention adds a mask as a float bias; flash attention takes none), and so do positional models
    that accept ``position_ids``. A sliding window (or any attention pattern other than full) would be replaced by
    the explicit mask.
    """
    return (
        getattr(causal_lm.config.get_text_config(), "_attn_implementation", None) == "sdpa"
        and _full_attention_only(causal_lm)
        and "position_ids" in inspect.signature(causal_lm.base_model.forward).parameters
    )


def _full_attention_only(causal_lm) -> bool:
    """Whether every layer attends to all earlier tokens (no sliding window, chunked or linear attention)."""
    config = causal_lm.config.get_text_config()
    sliding = getattr(config, "sliding_window", None) is not None and getattr(config, "use_sliding_window", True)
    return not sliding and set(getattr(config, "layer_types", None) or ["full_attention"]) == {"full_attention"}


def _prompt_sharing_is_exact(causal_lm) -> bool:
    """Whether ``generate()`` continues from :func:`_prompt_cache` exactly as from its own prefill of every row.

    The repeated cache must be generate()'s own kind, a dynamic cache of full-attention layers whose rows are plain
    per-token keys and values (a sliding window, linear-attention state or a configured static or quantized cache
    are not, and generate() refuses a cache next to a ``cache_implementation``); the prefill must number the
    left-padded tokens as generate() does, so the model must take ``position_ids``.
    """
    return (
        not causal_lm.config.is_encoder_decoder
        and causal_lm._supports_default_dynamic_cache()
        and causal_lm.generation_config.cache_implementation is None
        and _full_attention_only(causal_lm)
        and "position_ids" in inspect.signature(causal_lm.base_model.forward).parameters
    )


def _shares_prompts(sampler, input_ids: torch.Tensor) -> bool:
    """Whether to prefill these padded prompts once (:func:`_prompt_cache`): the model allows it, and the batch is
    wider than the one token generate() must be given to start from."""
    return input_ids.size(1) > 1 and _prompt_sharing_is_exact(sampler)


def _prompt_cache(causal_lm, input_ids: torch.Tensor, attention: torch.Tensor):
    """The KV cache of each left-padded prompt but its last token, computed once; repeat it (``batch_repeat_interleave``)
    for G completions of each prompt, row i's copies next to each other, as generate() orders ``num_return_sequences``.

    The last token is left out so generate() has a token to start from, whose forward gives the first sampled
    token's logits. Positions are numbered as generate() numbers them (from each row's first real token).
    """
    positions = (attention.cumsum(-1) - 1).masked_fill(attention == 0, 0)
    return causal_lm.base_model(input_ids=input_ids[:, :-1], attention_mask=attention[:, :-1],
                                position_ids=positions[:, :-1], use_cache=True).past_key_values


def _packed_group_states(causal_lm, ids, attention, logits_to_keep) -> torch.Tensor | None:
    """:meth:`SapoGRPOTrainer._predicting_states` with each distinct prompt run once (packing) and no padding run.

    A GRPO group is G rows with the same (left-padded) prompt. Here each distinct prompt is run once in a packed row,
    followed by the real tokens of its rows' completions one after another, with a mask that lets each completion see
    its prompt and itself (causally) and nothing else. Neither the prompts' left padding nor the completions' right
    padding (up to the batch's longest completion) is run: a round whose completions are mostly short pays for its long
    ones only. One forward, so the gradient from all G completions flows into one prompt's activations, and each
    weight is used once (its gradient is not held back until a second pass's arrives). Rows are matched by content,
    not by order (TRL shuffles them).

    Where only relative positions matter (:func:`_renumbering_is_exact`), prompts also share a packed row, and the
    head their real tokens have in common (the chat template, system prompt and worked example, often half a prompt)
    runs once for all of them; every token is then numbered from its prompt's first real token, so each pair of query
    and key is as far apart as in the plain forward. Elsewhere every token keeps the position it has in the plain
    forward (transformers numbers a padded row from its first column, the left padding included), one prompt a row.
    Returns None where no row shares its prompt or its head with another, or a completion's mask is not a run of real
    tokens then padding.
    """
    width, device = ids.size(1) - logits_to_keep, ids.device
    prompts, rows = torch.unique(torch.cat([ids[:, :width], attention[:, :width].to(ids.dtype)], dim=1), dim=0,
                                 return_inverse=True)
    real = attention[:, width:].bool()
    if (real[:, 1:] & ~real[:, :-1]).any():
        return None
    prompt_tokens = [prompt[:width][prompt[width:].bool()].tolist() for prompt in prompts]
    rows, completion_length = rows.tolist(), real.sum(1).tolist()
    renumber = _renumbering_is_exact(causal_lm)
    packing = _pack_prompts(prompt_tokens, [sum(n for r, n in zip(rows, completion_length, strict=True) if r == p)
                                            for p in range(len(prompt_tokens))], share_heads=renumber)
    if len(packing) == len(rows):  # a packed row per row: nothing shared
        return None
    # Per packed row, per token: id, position, segment (-1: the shared head, -3 - p: prompt p's own tokens, i: row
    # i's completion) and the prompt it belongs to (-1: the head, which every prompt of the row sees).
    columns = {name: [[] for _ in packing] for name in ("ids", "positions", "segment", "prompt")}
    last_prompt_slot, completion_start, packed_row_of = {}, {}, {}

    def put(packed: int, token: int, position: int, segment: int, prompt: int) -> int:
        for name, value in zip(columns, (token, position, segment, prompt), strict=True):
            columns[name][packed].append(value)
        return len(columns["ids"][packed]) - 1

    for packed, (members, head) in enumerate(packing):
        first = width - len(prompt_tokens[members[0]])  # where a lone prompt's real tokens start in the plain forward
        for position, token in enumerate(prompt_tokens[members[0]][:head]):
            put(packed, token, position if renumber else first + position, -1, -1)
        for p in members:
            base = 0 if renumber else width - len(prompt_tokens[p])
            for position in range(head, len(prompt_tokens[p])):
                last_prompt_slot[p] = put(packed, prompt_tokens[p][position], base + position, -3 - p, p)
            packed_row_of[p] = packed
    for row, p in enumerate(rows):  # each completion after the prompts of its packed row
        packed, base = packed_row_of[p], len(prompt_tokens[p]) if renumber else width
        completion_start[row] = len(columns["ids"][packed])
        for offset, token in enumerate(ids[row, width : width + completion_length[row]].tolist()):
            put(packed, token, base + offset, row, p)
    longest = max(len(tokens) for tokens in columns["ids"])
    padding = {"ids": 0, "positions": 0, "segment": -2, "prompt": -2}  # -2: padding after a short packed row
    packed_ids, positions, segment, owner = (
        torch.tensor([values + [padding[name]] * (longest - len(values)) for values in columns[name]], device=device)
        for name in columns)
    index = torch.arange(longest, device=device)
    sees = (index[None, None, :] <= index[None, :, None]) & (
        (segment[:, None, :] == -1) | (segment[:, None, :] == segment[:, :, None])
        | ((segment[:, None, :] <= -3) & (owner[:, None, :] == owner[:, :, None])))
    # A padding query sees itself too, so no row of the softmax is empty; no real token sees a padding key.
    mask = (sees | torch.eye(longest, dtype=torch.bool, device=device))[:, None]
    hidden = causal_lm.base_model(input_ids=packed_ids.to(ids.dtype), attention_mask=mask, position_ids=positions,
                                  use_cache=False).last_hidden_state
    # The prompt's last state predicts a completion's first token; each completion token predicts the next. Padded
    # targets (masked out by the caller) take any state.
    keep = torch.arange(logits_to_keep, device=device)
    first_target = torch.tensor([last_prompt_slot[p] for p in rows], device=device)
    starts = torch.tensor([completion_start[row] for row in range(len(rows))], device=device)
    predicting = torch.where(keep == 0, first_target[:, None], starts[:, None] + keep - 1)
    predicting = torch.where(keep < torch.tensor(completion_length, device=device)[:, None], predicting, 0)
    return hidden[torch.tensor([packed_row_of[p] for p in rows], device=device)[:, None], predicting]


# Tokens a packed row grows to by taking in more prompts: every query is scored against every key of its row (the
# mask only zeroes what it may not see), so past this the attention spent on other prompts' keys outgrows what their
# shared head saves. A single prompt with its completions may be longer.
PACKED_ROW_TOKENS = 1024


def _pack_prompts(prompt_tokens: list[list[int]], completion_tokens: list[int], *,
                  share_heads: bool) -> list[tuple[list[int], int]]:
    """Which prompts share a packed row, and how many leading tokens of theirs (the head) it runs once: in order,
    each prompt joins the row before it while their common head keeps the row within :data:`PACKED_ROW_TOKENS`.
    Every prompt keeps at least its last token of its own, whose state predicts its completions' first tokens."""
    packing: list[tuple[list[int], int]] = []
    for p, tokens in enumerate(prompt_tokens):
        alone = ([p], len(tokens) - 1)
        if share_heads and packing:
            members = packing[-1][0]
            head = len(decoding.shared_prefix([prompt_tokens[m] for m in [*members, p]]))
            length = head + sum(len(prompt_tokens[m]) - head + completion_tokens[m] for m in [*members, p])
            if head > 0 and length <= PACKED_ROW_TOKENS:
                packing[-1] = ([*members, p], head)
                continue
        packing.append(alone)
    return packing


def _renumbering_is_exact(causal_lm) -> bool:
    """Whether the model sees positions only relative to each other, so a token may be numbered from its prompt's
    first real token rather than its padded row's first column: rotary embeddings whose frequencies do not change with
    the positions seen (dynamic NTK and longrope rescale past a length) and no absolute position embedding."""
    base = causal_lm.base_model
    config = causal_lm.config.get_text_config()
    rope = getattr(config, "rope_parameters", None) or {}
    kinds = {rope.get("rope_type")} | {value.get("rope_type") for value in rope.values() if isinstance(value, dict)}
    absolute = any(isinstance(module, torch.nn.Embedding) and module is not base.get_input_embeddings()
                   for module in base.modules())
    return hasattr(base, "rotary_emb") and not absolute and not kinds & {"dynamic", "longrope"}


def _tiled_logprobs(causal_lm, hidden: torch.Tensor, targets: torch.Tensor, temperature: float,
                    outputs: tuple[str, ...] = ("log_probs",)) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-prob of each target token (and the entropy, if asked) from the hidden states that predict it, through
    the LM head in tiles of :data:`LOGIT_TILE_ELEMENTS`: [tokens, vocabulary] logits never exist at once."""
    lm_head = causal_lm.get_output_embeddings()
    vocab_chunk = max(1024, LOGIT_TILE_ELEMENTS // max(1, min(hidden.size(0), 4096)))
    logps, entropy, *_ = ChunkedLogProbFunction.apply(
        hidden.to(lm_head.weight.device), lm_head.weight, lm_head.bias, targets, temperature, vocab_chunk,
        getattr(causal_lm.config.get_text_config(), "final_logit_softcapping", None), 1.0, outputs,
    )
    return logps, entropy


class GrpoLearner:
    """A GRPOTrainer built once and advanced by exactly one optimizer step per call of :meth:`step`."""

    def __init__(
        self, policy: Policy, *, output_dir: Path, device: str, mixed_bf16: bool, num_generations: int,
        max_new_tokens: int, learning_rate: float, beta: float, epsilon: float, epsilon_high: float, loss_type: str,
        max_grad_norm: float, seed: int, micro_batch_groups: int = 0, lora: LoraSettings | None = None,
        adapter_dir: Path | None = None, adamw_8bit: bool = False, lr_decay_rounds: int = 0,
        anchor_decay: float = 0.0, starting_weights: Mapping[str, torch.Tensor] | None = None,
        scale_rewards: str = "group",
    ) -> None:
        """``lora`` trains an adapter; ``adapter_dir`` resumes one saved by :meth:`save_adapter`.

        ``scale_rewards`` is TRL's: "group" divides each group's centred rewards by their standard deviation, "none"
        keeps them as they are (exact under ``micro_batch_groups`` too: advantages stay per group either way).

        ``lr_decay_rounds`` N > 0 scales the learning rate of update k by 1 / sqrt(1 + k / N); 0 keeps it constant.

        ``anchor_decay`` > 0 pulls every weight back toward its starting value after each optimizer step, by the
        learning rate that step used times ``anchor_decay`` of the distance (decoupled decay toward the start
        instead of toward zero, L2-SP). The start is ``starting_weights`` (parameter name -> tensor: a resumed run's
        original model, not its checkpoint), or the policy's weights as the learner finds them. Full fine-tuning
        only: see :func:`_refuse_anchor_on_adapters`.

        ``beta`` > 0 with full fine-tuning keeps a reference model for the KL: TRL loads it from the policy's folder,
        and ``starting_weights`` replace its weights (a resumed run's folder is its checkpoint). The pull toward the
        start then uses the reference's weights, so the starting model is held once.

        ``adamw_8bit`` keeps AdamW's two moments block-wise quantized to 8 bits (bitsandbytes; the update itself is
        computed in float32): 2 bytes per parameter instead of 8, the largest item of a full fine-tune.
        """
        self.policy = policy
        self.micro_batch_groups = micro_batch_groups
        self.lr_decay_rounds = lr_decay_rounds
        if anchor_decay < 0:
            raise ValueError(f"anchor_decay must be >= 0, got {anchor_decay}")
        if anchor_decay and (lora is not None or adapter_dir is not None):
            _refuse_anchor_on_adapters()
        self.anchor_decay = anchor_decay
        self.adapter = RoundAdapter(eos_id=policy.eos_ids[0])
        with SETTING_UP:
            args = GRPOConfig(
                output_dir=str(output_dir),
                report_to=[],
                use_cpu=device == "cpu",
                bf16=mixed_bf16,
                activation_checkpointing=True,  # TRL's default, under the name that does not warn
                per_device_train_batch_size=num_generations,
                num_generations=num_generations,
                steps_per_generation=1,
                gradient_accumulation_steps=1,
                num_iterations=1,
                max_completion_length=max_new_tokens,
                learning_rate=learning_rate,
                lr_scheduler_type="constant",
                max_grad_norm=max_grad_norm,
                beta=beta,
                epsilon=epsilon,
                epsilon_high=epsilon_high,
                loss_type=loss_type,
                scale_rewards=scale_rewards,
                optim="adamw_bnb_8bit" if adamw_8bit else "adamw_torch",
                disable_dropout=True,
                save_strategy="no",
                logging_steps=1,
                seed=seed,
            )
            model, peft_config = policy.model, None
            if adapter_dir is not None:
                from peft import PeftModel

                model = PeftModel.from_pretrained(policy.model, adapter_dir, is_trainable=True)
            elif lora is not None:
                peft_config = lora.peft_config()
            self.trainer = SapoGRPOTrainer(
                model=model,
                peft_config=peft_config,
                reward_funcs=[self.adapter],
                args=args,
                train_dataset=Dataset.from_dict({"prompt": ["unused: rounds are fed by the adapter"]}),
                processing_class=policy.tokenizer,
                rollout_func=self.adapter.rollout,
            )
            self.trainer.round_adapter = self.adapter
            # Trainer.train() would switch activation checkpointing on (TRL's default); without it every layer's
            # activations of the whole pass stay alive for the backward: ~13 GB instead of ~3 for a bundled round.
            if args.activation_checkpointing:
                self.trainer.model.activation_checkpointing_enable(
                    activation_checkpointing_kwargs=args.activation_checkpointing_kwargs or None
                )
            self.trainer.create_optimizer_and_scheduler(num_training_steps=_SCHEDULE_STEPS)
            if adamw_8bit:
                _release_gradients_as_applied(self.trainer.optimizer)
            # Trainer.train() would set this; step() sets it per forward/backward pass.
            self.trainer.current_gradient_accumulation_steps = 1
        self.num_generations = num_generations
        reference = self.trainer.ref_model
        if reference is not None:
            if starting_weights is not None:
                _load_weights(reference, starting_weights)
            starting_weights = dict(reference.named_parameters())
        self.starting_weights = _anchor(self.trainer.model, starting_weights) if anchor_decay else {}

    @property
    def model(self):
        """What is trained: the policy, or a peft model wrapping it (the policy then holds the adapter layers)."""
        return self.trainer.model

    @property
    def is_adapter(self) -> bool:
        return is_peft_model(self.trainer.model)

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self.trainer.optimizer

    @property
    def global_step(self) -> int:
        return self.trainer.state.global_step

    @global_step.setter
    def global_step(self, value: int) -> None:
        self.trainer.state.global_step = value

    def learning_rate_factor(self, updates_done: int) -> float:
        """The configured learning rate's multiplier for the update after ``updates_done`` earlier ones."""
        return 1.0 if not self.lr_decay_rounds else 1.0 / math.sqrt(1.0 + updates_done / self.lr_decay_rounds)

    def step(self, groups: list[TrainGroup]) -> StepStats:
        started = time.perf_counter()
        if any(len(g.completions) != self.num_generations for g in groups):
            raise ValueError(f"every group needs exactly {self.num_generations} completions")
        trainer = self.trainer
        trainer._metrics["train"].clear()
        trainer.abs_advantages = []
        trainer.model.train()
        # Groups without reward spread run no pass (every group only where none has spread, as before).
        passes = [g for g in groups if not _gives_no_gradient(g, trainer)] or groups
        size = self.micro_batch_groups or len(passes)
        loss = 0.0
        for start in range(0, len(passes), size):
            chunk = passes[start : start + size]
            # GRPO divides each pass's loss by this; weighting a pass by its share of the round's groups (those
            # left out included) makes the accumulated gradient exactly the whole-batch one for grpo / dr_grpo
            # (advantages are per group either way); bnpo / dapo token means become per-pass means, as in TRL's
            # own accumulation.
            trainer.current_gradient_accumulation_steps = len(groups) / len(chunk)
            loss += float(trainer.training_step(trainer.model, self.adapter.load(chunk), None).item())
        trainer.abs_advantages += [0.0] * (len(groups) - len(passes)) * self.num_generations
        norm = torch.nn.utils.clip_grad_norm_(trainer.model.parameters(), trainer.args.max_grad_norm or math.inf)
        # Set from the update count rather than stepped by the scheduler, so a run resumed from a checkpoint (which
        # restores global_step) continues the decay where it stopped.
        factor = self.learning_rate_factor(trainer.state.global_step)
        for group, base in zip(trainer.optimizer.param_groups, trainer.lr_scheduler.base_lrs, strict=True):
            group["lr"] = base * factor
        trainer.optimizer.step()
        if self.anchor_decay:
            self._pull_toward_start()
        trainer.optimizer.zero_grad(set_to_none=True)
        trainer.state.global_step += 1
        metrics = trainer._metrics["train"]
        kl = _mean(metrics.get("kl")) if trainer.beta else None
        return StepStats(
            loss=loss,
            kl=kl,
            # Over every group, those that ran no pass included; a finished completion with its end-of-sequence.
            completion_length=_mean([c.length for g in groups for c in g.completions]) or 0.0,
            seconds=time.perf_counter() - started,
            grad_norm=float(norm) if math.isfinite(float(norm)) else None,
            entropy=_mean(metrics.get("entropy")),
            mean_abs_advantage=_mean(trainer.abs_advantages) or 0.0,
        )

    @torch.no_grad()
    def _pull_toward_start(self) -> None:
        """theta <- theta - lr * anchor_decay * (theta - theta0) for every trained weight, in place, with each
        parameter group's learning rate as this step used it (the decayed one under ``lr_decay_rounds``).

        AdamW moves every coordinate by about the learning rate whatever its gradient's signal-to-noise, so with a
        few noisy groups a round the weights random-walk; nothing else pulls back a weight that no consistent
        signal holds where it went. Applied after the optimizer, outside its moments, as AdamW's own decay is."""
        for group in self.optimizer.param_groups:
            share = group["lr"] * self.anchor_decay
            for parameter in group["params"]:
                start = self.starting_weights.get(parameter)
                if start is not None:
                    parameter.lerp_(start, share)  # theta + share * (theta0 - theta)


def _gives_no_gradient(group: TrainGroup, trainer: GRPOTrainer) -> bool:
    """Whether ``group``'s forward and backward would add exactly nothing to the update, so need not run.

    Completions that all scored the same have advantages of zero; with no KL term (beta 0) their loss is then zero
    too, and under grpo and dr_grpo, whose passes are weighted by the round's group count (GrpoLearner.step), the
    update is the same with or without them. bnpo and dapo divide by the tokens of a pass, which such rows add to.
    """
    return trainer.beta == 0.0 and trainer.loss_type in ("grpo", "dr_grpo") and max(group.rewards) == min(group.rewards)


def _refuse_anchor_on_adapters() -> None:
    """An adapter starts as no change at all (LoRA's B is zero), so the pull that would make sense there is plain
    decay of the adapter toward zero, a different regulariser; and its A matrices' random start is not kept in a
    checkpoint, so a resumed run could not pull toward it. Refused rather than half-done."""
    raise ValueError("anchor_decay pulls all weights toward the starting model and works with full fine-tuning only; "
                     "set anchor_decay = 0 to train a LoRA adapter, or lora_rank = 0 to train all weights")


def _anchor(model, given: Mapping[str, torch.Tensor] | None) -> dict[torch.Tensor, torch.Tensor]:
    """theta0 of every trained parameter, keyed by the parameter: ``given`` by name, else a copy of the weights now.

    Kept in the parameter's own dtype on its device. Full fine-tuning keeps float32 master weights on every device
    (node.learning.models.weights_dtype), so theta0 is exact: a bfloat16 copy would halve its memory, but bfloat16's
    spacing near 1 (the norm layers' weights) is 2^-7, so rounding would move their anchor by up to 0.004, hundreds
    of steps at the learning rates used here, in a fixed direction the pull would then hold them to.
    """
    anchor = {}
    for name, parameter in model.named_parameters():  # tied weights are listed once
        if not parameter.requires_grad:
            continue
        if given is None:
            anchor[parameter] = parameter.detach().clone()
            continue
        anchor[parameter] = _matching(given, name, parameter).detach().to(device=parameter.device,
                                                                            dtype=parameter.dtype)
    return anchor


def _matching(weights: Mapping[str, torch.Tensor], name: str, parameter: torch.Tensor) -> torch.Tensor:
    start = weights.get(name)
    if start is None or start.shape != parameter.shape:
        found = "missing" if start is None else f"of shape {tuple(start.shape)}"
        raise ValueError(f"the starting weights do not match the model: {name} {tuple(parameter.shape)} is {found}")
    return start


@torch.no_grad()
def _load_weights(model, weights: Mapping[str, torch.Tensor]) -> None:
    """Copy ``weights`` (parameter name -> tensor) into ``model``'s parameters in place: the model keeps its tied
    weights, device, dtype and whatever its trainer patched into it."""
    for name, parameter in model.named_parameters():
        parameter.copy_(_matching(weights, name, parameter))


def _release_gradients_as_applied(optimizer) -> None:
    """Free each gradient as soon as bitsandbytes has applied its parameter's update, the largest parameters last.

    bitsandbytes updates one parameter at a time through float32 temporaries a few times that parameter's size. The
    vocabulary embedding, the largest, comes first in the model's order: its temporaries came on top of every other
    gradient, still alive, and made the optimizer step the round's peak. The update is the same: the gradient norm
    is clipped before the step starts, and gradients are zeroed after it anyway.
    """
    for group in optimizer.param_groups:
        group["params"].sort(key=lambda p: p.numel())  # stable: equal sizes keep the model's order
    update_step = optimizer.update_step

    def update_and_release(group, p, gindex, pindex):
        update_step(group, p, gindex, pindex)
        p.grad = None

    optimizer.update_step = update_and_release


def _mean(values) -> float | None:
    values = [v for v in (values or []) if not math.isnan(v)]
    return sum(values) / len(values) if values else None


def _eos_ids(model, tokenizer) -> tuple[int, ...]:
    ids = []
    config_eos = getattr(model.generation_config, "eos_token_id", None)
    for candidate in ([config_eos] if isinstance(config_eos, int) else list(config_eos or [])) + [tokenizer.eos_token_id]:
        if candidate is not None and candidate not in ids:
            ids.append(int(candidate))
    if not ids:
        raise ValueError("the tokenizer has no end-of-sequence token")
    return tuple(ids)
