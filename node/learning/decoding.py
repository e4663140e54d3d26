"""Batched sampling over a key/value cache allocated once per generation, computing only the rows still running.

transformers' default cache grows by ``torch.cat`` at every step, copying every layer's keys and values each time
(a quadratic cost that was a fifth of a decode step on the bundled model). Here each layer writes into buffers
sized for the whole generation and attends to the filled part only, a view: nothing is copied and no empty slot is
attended. A row that has ended leaves the batch: its cache rows, mask, position and sampling state are dropped
(the live rows move up in the same buffers), so a step costs what its live rows cost, where ``generate()`` runs
every row until the longest one ends.

The sampling is ``generate()``'s distribution: the same logits warpers (temperature, top-p), then one token per
row drawn by :func:`inverse_cdf` (one uniform a row against the cumulative sum of the row's probabilities), where
``generate()``'s ``torch.multinomial`` draws an exponential for every row and vocabulary entry and takes
``argmax(probs / noise)``: the same distribution for far less work, but not the same tokens for a seed. The
draw is a parameter of :func:`sample` (:data:`Draw`), so a caller can draw as it likes (the tests draw exactly as
``generate()`` does, to check the cache and the logits token for token against it). Each token's log-prob comes
from the sums the draw computed, not from a second pass over the vocabulary.

Used for decoder-only models whose every layer attends to all earlier tokens (:func:`supports`); anything else
(sliding windows, linear attention, generation settings that add logits processors) keeps ``generate()``.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from transformers import TemperatureLogitsWarper, TopPLogitsWarper
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer
from transformers.generation import utils as generation_utils

# Generation settings whose neutral value adds no logits processor: with any other value generate() would change
# the distribution in a way this loop does not, so the model keeps generate().
_NEUTRAL_SETTINGS = {
    "repetition_penalty": (None, 1.0),
    "encoder_repetition_penalty": (None, 1.0),
    "no_repeat_ngram_size": (None, 0),
    "encoder_no_repeat_ngram_size": (None, 0),
    "bad_words_ids": (None,),
    "min_length": (None, 0),
    "min_new_tokens": (None, 0),
    "typical_p": (None, 1.0),
    "epsilon_cutoff": (None, 0.0),
    "eta_cutoff": (None, 0.0),
    "min_p": (None, 0.0),
    "top_h": (None,),
    "suppress_tokens": (None,),
    "begin_suppress_tokens": (None,),
    "forced_bos_token_id": (None,),
    "forced_eos_token_id": (None,),
    "sequence_bias": (None,),
    "guidance_scale": (None, 1.0),
    "exponential_decay_length_penalty": (None,),
    "renormalize_logits": (None, False),
    "watermarking_config": (None,),
}


# generate()'s and the forward's name for a key/value cache (``past_key_values`` warns from transformers 5.2x on)
CACHE_KWARG = "cache" if "cache" in getattr(generation_utils, "ALL_CACHE_NAMES", ()) else "past_key_values"


def supports(causal_lm) -> bool:
    """Whether :func:`sample` generates what ``generate()`` would for this model as it is configured."""
    config = causal_lm.config.get_text_config()
    sliding = getattr(config, "sliding_window", None) is not None and getattr(config, "use_sliding_window", True)
    generation = causal_lm.generation_config
    return (
        not causal_lm.config.is_encoder_decoder
        and causal_lm._supports_default_dynamic_cache()
        and generation.cache_implementation is None
        and not sliding
        and set(getattr(config, "layer_types", None) or ["full_attention"]) == {"full_attention"}
        and {"position_ids", "logits_to_keep"} <= set(inspect.signature(causal_lm.forward).parameters)
        and all(getattr(generation, name, None) in neutral for name, neutral in _NEUTRAL_SETTINGS.items())
    )


class PreallocatedLayer(DynamicLayer):
    """One layer's keys and values in buffers of ``capacity`` positions for ``rows`` sequences, filled in place.

    ``keys``/``values`` are views of the filled part of the live rows, so everything that reads a dynamic layer (its
    length, the attention mask's size, the attention itself) sees exactly the tokens written so far. An update with
    fewer rows (a shared prefix, the shared prompts) is written to each of its ``rows // batch`` copies, row i's
    copies next to each other. :meth:`batch_select_indices` keeps some rows, moved to the front of the same buffers.
    """

    def __init__(self, capacity: int, rows: int) -> None:
        super().__init__()
        self.capacity, self.rows, self.length = capacity, rows, 0

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        heads, dim = key_states.shape[1], key_states.shape[3]
        self._key_buffer = key_states.new_empty(self.rows, heads, self.capacity, dim)
        self._value_buffer = value_states.new_empty(self.rows, heads, self.capacity, value_states.shape[3])
        self.device = key_states.device
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.shape[-2]
        if end > self.capacity:
            raise RuntimeError(f"the key/value cache holds {self.capacity} positions, {end} were written")
        for buffer, states in ((self._key_buffer, key_states), (self._value_buffer, value_states)):
            batch = states.shape[0]
            target = buffer[: self.rows].view(batch, self.rows // batch, *buffer.shape[1:])[:, :, :, self.length : end]
            target.copy_(states[:, None])
        self.length = end
        self._view()
        # The shared prompts attend to their own rows: the first copy of each.
        copies = self.rows // key_states.shape[0]
        return self.keys[::copies], self.values[::copies]

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep the live rows ``indices`` (ascending), in that order, in the first rows of the same buffers.

        Rows before the first one that moves stay where they are; the others are gathered (a copy of their filled
        part, once per change of the batch, never per step)."""
        in_place = indices == torch.arange(len(indices), device=indices.device)
        moved = len(indices) if bool(in_place.all()) else int((~in_place).int().argmax())
        if self.is_initialized and moved < len(indices):
            for buffer in (self._key_buffer, self._value_buffer):
                buffer[moved : len(indices), :, : self.length] = buffer[indices[moved:], :, : self.length]
        self.rows = len(indices)
        if self.is_initialized:
            self._view()

    def _view(self) -> None:
        self.keys = self._key_buffer[: self.rows, :, : self.length]
        self.values = self._value_buffer[: self.rows, :, : self.length]

    def get_seq_length(self) -> int:
        return self.length

    def reset(self) -> None:
        self.length = 0
        super().reset()


class PreallocatedCache(DynamicCache):
    """A dynamic cache of :class:`PreallocatedLayer` s: ``capacity`` positions for ``rows`` sequences per layer."""

    def __init__(self, causal_lm, *, capacity: int, rows: int) -> None:
        layers = causal_lm.config.get_text_config().num_hidden_layers
        Cache.__init__(self, layers=[PreallocatedLayer(capacity, rows) for _ in range(layers)])


@dataclass(frozen=True)
class Prefix:
    """The keys and values of tokens that every prompt of several generations starts with, computed once: each
    generation copies them into every row instead of running them again (:func:`prefill`). Valid for the weights
    they were computed with."""

    ids: tuple[int, ...]
    layers: tuple[tuple[torch.Tensor, torch.Tensor], ...]  # per layer: keys, values [1, kv heads, len(ids), head dim]


@torch.inference_mode()
def prefill(causal_lm, ids: tuple[int, ...]) -> Prefix:
    """``ids``' keys and values under ``causal_lm``, at positions 0.., as :func:`sample`'s prefill computes them."""
    cache = PreallocatedCache(causal_lm, capacity=len(ids), rows=1)
    device = next(causal_lm.parameters()).device
    causal_lm.base_model(input_ids=torch.tensor([ids], device=device),
                         position_ids=torch.arange(len(ids), device=device)[None], use_cache=True, **{CACHE_KWARG: cache})
    return Prefix(tuple(ids), tuple((layer.keys, layer.values) for layer in cache.layers))


# Tokens a block in :func:`inverse_cdf_at`: a draw sums whole blocks and runs through one.
BLOCK = 256

# A draw: from the warped float32 ``scores`` [rows, vocab] of the rows that sample, where each of those rows sits
# among the generation's sampled rows (``rows``, of ``batch``: rows that ended included), one token a row and its
# log-prob under ``scores.softmax(-1)``.
Draw = Callable[[torch.Tensor, torch.Tensor, int], tuple[torch.Tensor, torch.Tensor]]


def inverse_cdf(scores: torch.Tensor, rows: torch.Tensor, batch: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One token per row of ``scores.softmax(-1)`` from one uniform a row (:data:`Draw`; ``rows`` and ``batch`` do
    not matter to it), from the global torch generator."""
    if scores.device.type == "mps":  # Apple's GPU has no float64: a step's scores are drawn from on the CPU
        tokens, logprobs = inverse_cdf(scores.cpu(), rows, batch)
        return tokens.to(scores.device), logprobs.to(scores.device)
    return inverse_cdf_at(scores, torch.rand(len(scores), 1, dtype=torch.float64, device=scores.device))


def inverse_cdf_at(scores: torch.Tensor, uniforms: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The tokens at ``uniforms [rows, 1]`` (float64 in [0, 1)) of each row's cumulative distribution, and their
    log-probs.

    In two levels, so that no running sum over the whole vocabulary is needed: the row's unnormalized
    probabilities ``exp(scores - max)`` are summed per block of :data:`BLOCK` tokens, the uniform scaled by their
    total picks a block on the blocks' running sum, and what is left of it picks a token on the running sum of
    that block's probabilities. The sums are float64: in float32 a token whose probability is under the rounding
    of a large vocabulary's running sum would be drawn with probability 0 or one rounding step. A float64 uniform
    is below 1 by at least 2**-53, so the scaled one is below the total, exactly. At either level the pick is the
    first running sum above the target: a block or token of probability 0 (cut by top-p, or underflowing) adds
    nothing to the sum and can never be that first one, and the last block or token of positive probability is
    reachable.
    """
    rows, vocab = scores.shape
    top = scores.amax(-1, keepdim=True)
    weights = (scores - top).exp_()
    if vocab % BLOCK:
        weights = torch.nn.functional.pad(weights, (0, BLOCK - vocab % BLOCK))  # weight 0: never drawn
    weights = weights.view(rows, -1, BLOCK)
    sums = weights.sum(-1, dtype=torch.float64)
    ends = sums.cumsum(-1)
    total = ends[:, -1:]
    target = uniforms * total
    block = torch.searchsorted(ends, target, right=True)
    start = torch.where(block > 0, ends.gather(1, (block - 1).clamp(min=0)), 0.0)
    running = weights.gather(1, block[..., None].expand(-1, -1, BLOCK))[:, 0].cumsum(-1, dtype=torch.float64)
    # The target's place within its block, on the block's own running sum (the same sum in another order).
    inner = (target - start) / sums.gather(1, block) * running[:, -1:]
    # Rounding may put it at the block's very end: the block's last token of positive probability then.
    last = (running < running[:, -1:]).sum(-1, keepdim=True)
    tokens = (block * BLOCK + torch.minimum(torch.searchsorted(running, inner, right=True), last))[:, 0]
    logprobs = scores.gather(1, tokens[:, None])[:, 0] - top[:, 0] - total[:, 0].log().float()
    return tokens, logprobs


@dataclass(frozen=True)
class Sampled:
    tokens: torch.Tensor  # [rows, new tokens]; pad after a row's end-of-sequence token
    logprobs: torch.Tensor  # [rows, new tokens] float32: each token's log-prob under the distribution it was drawn from


@torch.inference_mode()
def sample(
    causal_lm, input_ids: torch.Tensor, attention: torch.Tensor, *, greedy: int, sampled: int, max_new_tokens: int,
    temperature: float, top_p: float, eos_ids: tuple[int, ...], pad_id: int,
    should_stop: Callable[[], bool] = lambda: False, prefix: Prefix | None = None, draw: Draw = inverse_cdf,
) -> Sampled:
    """``greedy`` most-likely and then ``sampled`` sampled continuations of each left-padded prompt, one batch, a
    prompt's rows next to each other. Each prompt but its last token runs once; its cache serves all its rows.
    With ``prefix``, each prompt is ``prefix.ids`` followed by its row of ``input_ids`` (at least one token): the
    prefix's keys and values are copied into every row, and only the rest of each prompt runs.

    The greedy rows are ``generate(do_sample=False)``'s; the sampled rows sample ``generate(do_sample=True,
    temperature, top_p, top_k=0, num_return_sequences=sampled)``'s distribution, each step's tokens by ``draw`` for
    the sampled rows alone, in their order, as if the greedy rows were not there. A row ends at an
    ``eos_ids`` token and leaves the batch; generation stops when every row has ended, after ``max_new_tokens``,
    or after a token at which ``should_stop()`` is true.
    """
    prompts, width = input_ids.shape
    copies = greedy + sampled
    rows = prompts * copies
    device = input_ids.device
    shared = len(prefix.ids) if prefix else 0
    cache = PreallocatedCache(causal_lm, capacity=shared + width + max_new_tokens, rows=rows)
    if prefix:
        for layer, (keys, values) in zip(cache.layers, prefix.layers, strict=True):
            layer.update(keys, values)  # one row: written to every row
    # The attention mask of the whole generation, prompt padding included; each step reads its filled part. With a
    # prefix a row's padding sits between the prefix and the rest of its prompt, masked as at the left.
    mask = attention.new_ones(rows, shared + width + max_new_tokens)
    mask[:, shared : shared + width] = attention.repeat_interleave(copies, dim=0)
    # Positions count a row's real tokens, as generate() numbers them, so padding does not shift them.
    positions = (shared + attention.cumsum(-1) - 1).masked_fill(attention == 0, 0)
    if width > 1:
        causal_lm.base_model(input_ids=input_ids[:, :-1], attention_mask=mask[::copies, : shared + width - 1],
                             position_ids=positions[:, :-1], use_cache=True, **{CACHE_KWARG: cache})
    step_positions = positions[:, -1:].repeat_interleave(copies, dim=0)
    filled = shared + width  # the positions the next forward's attention mask covers

    def forward(ids: torch.Tensor) -> torch.Tensor:
        logits = causal_lm(input_ids=ids, attention_mask=mask[:, :filled], position_ids=step_positions,
                           use_cache=True, logits_to_keep=1, **{CACHE_KWARG: cache}).logits[:, -1, :]
        return logits.to(dtype=torch.float32, copy=True)  # the warpers may change it in place

    # Each prompt's last token runs in every one of its rows, which then go their own ways.
    latest = forward(input_ids[:, -1:].repeat_interleave(copies, dim=0))

    def advance(chosen: torch.Tensor, live: torch.Tensor, kept: torch.Tensor | None) -> None:
        nonlocal latest, mask, step_positions, filled
        if kept is not None:  # ended rows leave the batch: cache, mask and positions keep the live rows only
            cache.batch_select_indices(kept)
            mask, step_positions = mask[kept], step_positions[kept]
        step_positions = step_positions + 1
        filled += 1
        latest = forward(chosen[:, None])

    return drive(lambda n: latest, advance, prompts=prompts, greedy=greedy, sampled=sampled,
                 max_new_tokens=max_new_tokens, temperature=temperature, top_p=top_p, eos_ids=eos_ids, pad_id=pad_id,
                 should_stop=should_stop, draw=draw, device=device)


def drive(
    logits: Callable[[int], torch.Tensor], advance: Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None], None],
    *, prompts: int, greedy: int, sampled: int, max_new_tokens: int, temperature: float, top_p: float,
    eos_ids: tuple[int, ...], pad_id: int, should_stop: Callable[[], bool], draw: Draw,
    device: torch.device | str = "cpu",
) -> Sampled:
    """The step loop of :func:`sample` and of the samplers whose forwards run elsewhere (ONNX Runtime, llama.cpp):
    the rows, the draws, ended rows leaving, the stop. Each prompt's ``greedy + sampled`` rows are already
    prefilled: ``logits(n)`` gives the ``n`` live rows' next-token float32 logits (the draw may change them in
    place), ``advance(chosen, live, kept)`` runs the live rows' ``chosen`` tokens, the rows that ended dropped
    first (``live``: the rows still running, as rows of the output; ``kept``: their places among the rows live
    before, or None when none ended). The loop's own tensors live on ``device``, the logits' device."""
    copies = greedy + sampled
    rows = prompts * copies
    # The live rows: each one's row in the output, and its row among the sampled ones (-1: a greedy row), which the
    # draw is told.
    live = torch.arange(rows, device=device)
    is_sampled = (live % copies) >= greedy
    sampled_row = torch.where(is_sampled, is_sampled.cumsum(0) - 1, -1)
    drawing_rows = prompts * sampled
    warpers = warpers_for(temperature, top_p)
    tokens = torch.full((rows, max_new_tokens), pad_id, dtype=torch.long, device=device)
    logprobs = torch.zeros(rows, max_new_tokens, dtype=torch.float32, device=device)
    eos = torch.tensor(eos_ids, device=device)
    produced = 0
    for step in range(max_new_tokens):
        chosen, logprobs[live, step] = choose(logits(len(live)), warpers, sampled_row, drawing_rows=drawing_rows,
                                              batch=prompts * sampled, draw=draw)
        tokens[live, step] = chosen
        produced = step + 1
        running = ~torch.isin(chosen, eos)
        still = int(running.sum())  # the step's one read back from the device
        if not still or should_stop() or produced == max_new_tokens:
            break
        kept = None
        if still < len(live):
            kept = running.nonzero()[:, 0]
            live, sampled_row, chosen = live[kept], sampled_row[kept], chosen[kept]
            drawing_rows = int((sampled_row >= 0).sum())
        advance(chosen, live, kept)
    return Sampled(tokens[:, :produced], logprobs[:, :produced])


def choose(scores: torch.Tensor, warpers: list, sampled_row: torch.Tensor, *, drawing_rows: int, batch: int,
           draw: Draw) -> tuple[torch.Tensor, torch.Tensor]:
    """One step's tokens for the live rows from their float32 ``scores`` (the warpers may change them in place), and
    each token's log-prob under the distribution it was drawn from: greedy rows (``sampled_row`` -1) take the most
    likely token, sampled rows ``draw`` as row ``sampled_row`` of the ``batch`` sampled rows, after ``warpers``."""
    if drawing_rows == len(sampled_row):
        return draw(_warp(warpers, scores), sampled_row, batch)
    if not drawing_rows:  # greedy rows only, or every sampled row has ended
        return _most_likely(scores)
    drawing = sampled_row >= 0
    chosen, logprobs = torch.empty_like(sampled_row), scores.new_empty(len(scores))
    chosen[~drawing], logprobs[~drawing] = _most_likely(scores[~drawing])
    chosen[drawing], logprobs[drawing] = draw(_warp(warpers, scores[drawing]), sampled_row[drawing], batch)
    return chosen, logprobs


def _most_likely(scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    top, chosen = scores.max(-1)
    return chosen, top - scores.logsumexp(-1)


def _warp(warpers: list, scores: torch.Tensor) -> torch.Tensor:
    for warper in warpers:
        scores = warper(None, scores)
    return scores


def warpers_for(temperature: float, top_p: float) -> list:
    """generate()'s warpers for these settings, in its order (a neutral value adds none, as there)."""
    warpers = []
    if temperature != 1.0:
        warpers.append(TemperatureLogitsWarper(temperature))
    if top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p))
    return warpers


def shared_prefix(prompts: Sequence[Sequence[int]]) -> Sequence[int]:
    """The longest run of token ids every prompt starts with, leaving each prompt at least one token of its own."""
    shortest = min(map(len, prompts), default=1)
    length = next((i for i in range(shortest - 1) if len({p[i] for p in prompts}) > 1), shortest - 1)
    return prompts[0][:length] if prompts else ()
