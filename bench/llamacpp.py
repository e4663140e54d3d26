"""llama.cpp as issue 35's anchor: the node's sampling workload decoded by llama.cpp, the draw left to the node.

An anchor, not a dependency: ``llama_cpp`` (llama-cpp-python) is built from source (PyPI ships only an sdist) and is
imported only here, by bench/generation.py's ``llamacpp/*`` samplers, which are skipped where it does not import.

The policy's float32 weights are written once per process into a GGUF file (:func:`write_gguf`): the bundled GGUF's
metadata (architecture, tokenizer, chat template) with each tensor taken from the torch model, in llama.cpp's
layout, stored as ``bf16`` (the issue's anchor), ``f32`` or ``q8_0``; the norms stay float32, as llama.cpp's own
converter keeps them. :class:`Sampler` then stands in for :func:`node.learning.decoding.sample` (same arguments,
same rows): every prompt is prefilled once into its first row's sequence and copied to its other rows
(``llama_memory_seq_cp``), then each step decodes all live rows as one ``llama_batch`` with one sequence id per
row, and the 8 rows' logits go to :func:`node.learning.decoding.choose`, the torch loop's own warpers and draw from
the global torch generator, so only the forwards differ between the samplers compared.
"""

from __future__ import annotations

import ctypes
import importlib
import logging
from pathlib import Path

import gguf
import numpy as np
import torch

from node.learning import decoding

# The weight formats a sampler can be asked for: bench/generation.py's ``llamacpp/<format>``.
FORMATS = {"bf16": gguf.GGMLQuantizationType.BF16, "f32": gguf.GGMLQuantizationType.F32,
           "q8_0": gguf.GGMLQuantizationType.Q8_0}
_FILE_TYPES = {"bf16": gguf.LlamaFileType.MOSTLY_BF16, "f32": gguf.LlamaFileType.ALL_F32,
               "q8_0": gguf.LlamaFileType.MOSTLY_Q8_0}


def unavailable() -> str | None:
    """Why ``llama_cpp`` cannot be used here, or None where it imports."""
    try:
        importlib.import_module("llama_cpp")
    except (ImportError, OSError) as exc:  # OSError: the package is there but its shared library does not load
        return f"llama_cpp does not import ({str(exc).splitlines()[0]})"
    return None


def to_gguf_rows(weight: np.ndarray, heads: int) -> np.ndarray:
    """A query or key projection's output rows in llama.cpp's order: transformers keeps each head's rotary halves
    apart, llama.cpp interleaves them in pairs (what its ``convert_hf_to_gguf.py`` does; transformers' GGUF loader
    undoes it)."""
    return weight.reshape(heads, 2, weight.shape[0] // heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(
        weight.shape)


def write_gguf(causal_lm, source: Path, target: Path, weights: str) -> None:
    """``causal_lm``'s current weights as a GGUF file at ``target`` in format ``weights``, with ``source``'s (the
    GGUF the model was loaded from) metadata and tensor names."""
    reader = gguf.GGUFReader(source)
    arch = reader.fields["general.architecture"].contents()
    if arch != "llama":
        raise ValueError(f"only llama GGUF files are rewritten here, not {arch}")
    config = causal_lm.config
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, config.num_hidden_layers)
    state = {}
    for name, tensor in causal_lm.state_dict().items():
        if name == "lm_head.weight" and config.tie_word_embeddings:
            continue  # the embedding, which llama.cpp reuses as the output layer when output.weight is absent
        array = tensor.detach().to(torch.float32).numpy()
        if name.endswith("self_attn.q_proj.weight"):
            array = to_gguf_rows(array, config.num_attention_heads)
        elif name.endswith("self_attn.k_proj.weight"):
            array = to_gguf_rows(array, config.num_key_value_heads)
        state[names.get_name(name, try_suffixes=(".weight", ".bias"))] = array
    expected = [tensor.name for tensor in reader.tensors]
    if sorted(state) != sorted(expected):
        raise ValueError(f"the model's tensors {sorted(set(state) ^ set(expected))} do not match {source.name}'s")
    writer = gguf.GGUFWriter(target, arch)
    for field in reader.fields.values():
        if field.name.startswith("GGUF.") or field.name in ("general.architecture", "general.file_type"):
            continue
        array_of = field.types[-1] if field.types[0] == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(field.name, field.contents(), field.types[0], sub_type=array_of)
    writer.add_file_type(_FILE_TYPES[weights])
    for name in expected:
        array = state[name]
        kind = FORMATS[weights] if array.ndim > 1 else gguf.GGMLQuantizationType.F32
        writer.add_tensor(name, gguf.quants.quantize(array, kind), raw_dtype=kind)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


class Sampler:
    """One llama.cpp model and context for up to ``rows`` sequences of ``positions`` tokens each, ``threads``
    threads for decoding and prefill; :meth:`sample` is :func:`node.learning.decoding.sample` through it."""

    def __init__(self, path: Path, *, rows: int, positions: int, threads: int) -> None:
        import llama_cpp

        logging.getLogger("llama-cpp-python").setLevel(logging.ERROR)  # its load and context reports
        self._llama = llama_cpp
        llama_cpp.llama_backend_init()
        self._model = llama_cpp.llama_model_load_from_file(str(path).encode(), llama_cpp.llama_model_default_params())
        if not self._model:
            raise RuntimeError(f"llama.cpp could not load {path}")
        params = llama_cpp.llama_context_default_params()
        # Each sequence its own cache stream (kv_unified false, the default): a row attends to its own cells only.
        params.n_seq_max, params.n_ctx = rows, rows * positions
        params.n_batch = params.n_ubatch = max(positions, rows)
        params.n_threads = params.n_threads_batch = threads
        params.no_perf = True
        self._context = llama_cpp.llama_init_from_model(self._model, params)
        if not self._context:
            raise RuntimeError("llama.cpp could not create its context")
        self.rows, self.positions = rows, positions
        self.vocab = llama_cpp.llama_vocab_n_tokens(llama_cpp.llama_model_get_vocab(self._model))
        self._batch = llama_cpp.llama_batch_init(params.n_batch, 0, 1)

    def close(self) -> None:
        self._llama.llama_batch_free(self._batch)
        self._llama.llama_free(self._context)
        self._llama.llama_model_free(self._model)

    def sample(self, causal_lm, input_ids: torch.Tensor, attention: torch.Tensor, *, greedy: int, sampled: int,
               max_new_tokens: int, temperature: float, top_p: float, eos_ids: tuple[int, ...], pad_id: int,
               should_stop=lambda: False, draw: decoding.Draw = decoding.inverse_cdf) -> decoding.Sampled:
        """:func:`node.learning.decoding.sample`'s rows and draws from llama.cpp's logits (``causal_lm`` unused:
        the weights are the file's)."""
        llama = self._llama
        prompts = [row[mask.bool()].tolist() for row, mask in zip(input_ids, attention, strict=True)]
        copies = greedy + sampled
        rows = len(prompts) * copies
        if rows > self.rows or max(len(p) for p in prompts) + max_new_tokens > self.positions:
            raise ValueError(f"{rows} rows of up to {max(len(p) for p in prompts) + max_new_tokens} positions "
                             f"do not fit this sampler's {self.rows} x {self.positions}")
        memory = llama.llama_get_memory(self._context)
        llama.llama_memory_clear(memory, True)
        logits = np.empty((rows, self.vocab), np.float32)
        lengths = np.zeros(rows, np.int64)
        for number, prompt in enumerate(prompts):
            first = number * copies
            self._decode([(token, position, first) for position, token in enumerate(prompt)], logits[first:first + 1])
            for row in range(first + 1, first + copies):  # the prompt runs once; its rows start from its cache
                llama.llama_memory_seq_cp(memory, first, row, -1, -1)
            logits[first + 1 : first + copies] = logits[first]
            lengths[first : first + copies] = len(prompt)

        def advance(chosen: torch.Tensor, live: torch.Tensor, kept: torch.Tensor | None) -> None:
            # Each row is its own sequence: ended rows' cells stay until the next call.
            self._decode([(token, int(lengths[row]), row) for token, row in zip(chosen.tolist(), live.tolist(),
                                                                                strict=True)],
                         logits[: len(live)])
            lengths[live.numpy()] += 1

        return decoding.drive(lambda n: torch.from_numpy(logits[:n]).clone(), advance, prompts=len(prompts),
                              greedy=greedy, sampled=sampled, max_new_tokens=max_new_tokens, temperature=temperature,
                              top_p=top_p, eos_ids=eos_ids, pad_id=pad_id, should_stop=should_stop, draw=draw)

    def _decode(self, entries: list[tuple[int, int, int]], out: np.ndarray) -> None:
        """One ``llama_decode`` of (token, position, sequence) ``entries``; the logits of the last ``len(out)`` of
        them into ``out``."""
        batch = self._batch
        batch.n_tokens = len(entries)
        first_output = len(entries) - len(out)
        for i, (token, position, sequence) in enumerate(entries):
            batch.token[i], batch.pos[i], batch.n_seq_id[i] = token, position, 1
            batch.seq_id[i][0] = sequence
            batch.logits[i] = i >= first_output
        status = self._llama.llama_decode(self._context, batch)
        if status:
            raise RuntimeError(f"llama_decode returned {status}")
        # The outputs, in batch order, one vocabulary row each.
        pointer = self._llama.llama_get_logits(self._context)
        out[:] = np.ctypeslib.as_array(ctypes.cast(pointer, ctypes.POINTER(ctypes.c_float)), shape=out.shape)
