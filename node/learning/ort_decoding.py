"""Sampling through ONNX Runtime from the policy's own float32 weights, the same draws as :mod:`.decoding`.

The decoder graph is built once per architecture (layer count, widths, heads, vocabulary, rotary settings) from the
model's config, with every weight an initializer named as in the torch ``state_dict`` but holding no data; each
:func:`sample` call builds an ``InferenceSession`` that is handed the policy's current tensors as those initializers
(``SessionOptions.add_external_initializers``, OrtValues wrapping the torch storage), so the weights of the round
are what is sampled from and nothing is exported per round. ORT takes its own copy of those initializers and
prepacks every matrix for its GEMM kernels while the session is built (a fraction of a second, and about 1 GB
more memory for the bundled model while sampling, given back when the call returns): binding the torch tensors as
plain graph inputs instead copies nothing but leaves the weights unpacked, and its decode steps were 1.5-1.8x
slower.

The graph is ORT's fused decoder: ``SkipSimplifiedLayerNormalization`` (residual + RMSNorm), ``FusedMatMul`` with
the weight transposed in place (the torch layout ``[out, in]``), ``GroupQueryAttention`` with rotary embedding and a
key/value cache shared between its past and present (written in place, one buffer per layer for the whole
generation, each row attending only to its own filled positions). The tokens all prompts start with (a round's
system prompt) run once and their cache is copied to every prompt; each prompt's own tokens then run once and its
cache is copied to its rows; a row that has ended leaves the batch (its buffers' rows are compacted).

The draw is :mod:`.decoding`'s (its warpers and its draw from the global torch generator), applied to ORT's
logits: what is sampled follows the policy's distribution up to float32 rounding of a different kernel order.

Only a plain Llama-shaped decoder (``LlamaForCausalLM`` without biases, rope scaling or sliding windows) is built
(:func:`supports`); anything else keeps the torch sampler.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from node.learning import decoding, hardware

_OPSET = 17
_MS = "com.microsoft"
_IR_VERSION = 8  # what ONNX Runtime releases back to 1.14 read


available = hardware.onnxruntime_installed


def max_positions(causal_lm) -> int:
    """The longest prompt plus completion the graph can run: its rotary table's length, the model's own limit."""
    return Shape(causal_lm.config).positions


def supports(causal_lm) -> bool:
    """Whether :func:`graph` describes this model exactly."""
    config = causal_lm.config
    rope = getattr(config, "rope_parameters", None) or {"rope_type": "default"}
    return (
        type(causal_lm).__name__ == "LlamaForCausalLM"
        and decoding.supports(causal_lm)
        and not getattr(config, "attention_bias", False)
        and not getattr(config, "mlp_bias", False)
        and rope.get("rope_type", "default") == "default"
        and getattr(config, "hidden_act", "silu") == "silu"
        and getattr(config, "pretraining_tp", 1) == 1
        and next(causal_lm.parameters()).dtype == torch.float32
        and next(causal_lm.parameters()).device.type == "cpu"
    )


class Shape:
    """What the graph depends on: the architecture, not the weights."""

    def __init__(self, config) -> None:
        self.layers = config.num_hidden_layers
        self.hidden = config.hidden_size
        self.intermediate = config.intermediate_size
        self.heads = config.num_attention_heads
        self.kv_heads = config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or self.hidden // self.heads
        self.vocab = config.vocab_size
        self.eps = float(config.rms_norm_eps)
        rope = getattr(config, "rope_parameters", None) or {}
        self.theta = float(rope.get("rope_theta", getattr(config, "rope_theta", 10000.0)))
        self.positions = int(config.max_position_embeddings)
        self.tied = bool(getattr(config, "tie_word_embeddings", False))

    def key(self) -> tuple:
        return tuple(sorted(vars(self).items()))

    def weight_names(self) -> list[str]:
        names = ["model.embed_tokens.weight", "model.norm.weight"]
        for i in range(self.layers):
            names += [f"model.layers.{i}.{part}.weight" for part in (
                "input_layernorm", "post_attention_layernorm", "self_attn.q_proj", "self_attn.k_proj",
                "self_attn.v_proj", "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")]
        if not self.tied:
            names.append("lm_head.weight")
        return names


def graph(shape: Shape) -> bytes:
    """The decoder as a serialized ONNX model: ``input_ids [B, S]``, ``seqlens_k [B]`` (each row's length after
    this step, less one), ``total_sequence_length`` (the longest row's) and per layer
    ``past_key_i``/``past_value_i [B, kv_heads, capacity, head_dim]`` in; the last position's ``logits [B, vocab]``
    and ``present_key_i``/``present_value_i`` (bound to the same buffers: written in place) out. The weights are
    initializers without data that each session is handed (:class:`Session`)."""
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits = [], []
    h, d, inner = shape.hidden, shape.head_dim, shape.intermediate

    def weight(name: str, dims: list[int]) -> str:
        # Data-less: every session supplies it; a session missing one fails to build rather than run on stale data.
        tensor = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=dims)
        tensor.data_location = TensorProto.EXTERNAL
        tensor.external_data.add(key="location", value="supplied-by-each-session")
        inits.append(tensor)
        return name

    def node(op: str, inputs: list[str], outputs: list[str], domain: str = "", **attrs) -> list[str]:
        nodes.append(helper.make_node(op, inputs, outputs, name=outputs[0] + "_node", domain=domain, **attrs))
        return outputs

    def linear(x: str, w: str, out: str) -> str:
        # x @ w.T with w in torch's [out, in] layout, so the torch tensor is handed over as it is.
        return node("FusedMatMul", [x, w], [out], domain=_MS, transB=1)[0]

    # Rotary tables as transformers computes them (LlamaRotaryEmbedding, default rope type).
    inv_freq = 1.0 / (shape.theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
    freqs = torch.arange(shape.positions, dtype=torch.int64).float()[:, None] * inv_freq[None, :]
    inits += [numpy_helper.from_array(freqs.cos().numpy(), "cos_cache"),
              numpy_helper.from_array(freqs.sin().numpy(), "sin_cache"),
              numpy_helper.from_array(np.array([-1], np.int64), "last_start"),
              numpy_helper.from_array(np.array([np.iinfo(np.int64).max], np.int64), "last_end"),
              numpy_helper.from_array(np.array([1], np.int64), "last_axis"),
              numpy_helper.from_array(np.array([0, shape.vocab], np.int64), "logits_shape")]

    embed = weight("model.embed_tokens.weight", [shape.vocab, h])
    residual = node("Gather", [embed, "input_ids"], ["embeds"], axis=0)[0]
    normed = node("SimplifiedLayerNormalization", [residual, weight("model.layers.0.input_layernorm.weight", [h])],
                  ["normed_0"], axis=-1, epsilon=shape.eps, stash_type=1)[0]
    inputs = [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "sequence"]),
              helper.make_tensor_value_info("seqlens_k", TensorProto.INT32, ["batch"]),
              helper.make_tensor_value_info("total_sequence_length", TensorProto.INT32, [])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", shape.vocab])]
    cache_dims = ["batch", shape.kv_heads, "capacity", d]
    for i in range(shape.layers):
        p = f"model.layers.{i}."
        q = linear(normed, weight(p + "self_attn.q_proj.weight", [shape.heads * d, h]), f"q_{i}")
        k = linear(normed, weight(p + "self_attn.k_proj.weight", [shape.kv_heads * d, h]), f"k_{i}")
        v = linear(normed, weight(p + "self_attn.v_proj.weight", [shape.kv_heads * d, h]), f"v_{i}")
        for kind in ("key", "value"):
            inputs.append(helper.make_tensor_value_info(f"past_{kind}_{i}", TensorProto.FLOAT, cache_dims))
            outputs.append(helper.make_tensor_value_info(f"present_{kind}_{i}", TensorProto.FLOAT, cache_dims))
        attended = node("GroupQueryAttention",
                        [q, k, v, f"past_key_{i}", f"past_value_{i}", "seqlens_k", "total_sequence_length",
                         "cos_cache", "sin_cache"],
                        [f"attn_{i}", f"present_key_{i}", f"present_value_{i}"], domain=_MS,
                        num_heads=shape.heads, kv_num_heads=shape.kv_heads, do_rotary=1, rotary_interleaved=0)[0]
        projected = linear(attended, weight(p + "self_attn.o_proj.weight", [h, shape.heads * d]), f"o_{i}")
        normed, _, _, residual = node(
            "SkipSimplifiedLayerNormalization", [projected, residual, weight(p + "post_attention_layernorm.weight", [h])],
            [f"post_normed_{i}", f"post_mean_{i}", f"post_inv_{i}", f"post_residual_{i}"], domain=_MS,
            epsilon=shape.eps)
        gate = linear(normed, weight(p + "mlp.gate_proj.weight", [inner, h]), f"gate_{i}")
        up = linear(normed, weight(p + "mlp.up_proj.weight", [inner, h]), f"up_{i}")
        silu = node("Mul", [gate, node("Sigmoid", [gate], [f"sigmoid_{i}"])[0]], [f"silu_{i}"])[0]
        activated = node("Mul", [silu, up], [f"act_{i}"])[0]
        down = linear(activated, weight(p + "mlp.down_proj.weight", [h, inner]), f"down_{i}")
        norm = f"model.layers.{i + 1}.input_layernorm.weight" if i + 1 < shape.layers else "model.norm.weight"
        normed, _, _, residual = node(
            "SkipSimplifiedLayerNormalization", [down, residual, weight(norm, [h])],
            [f"normed_{i + 1}", f"mean_{i + 1}", f"inv_{i + 1}", f"residual_{i + 1}"], domain=_MS, epsilon=shape.eps)
    last = node("Slice", [normed, "last_start", "last_end", "last_axis"], ["last_hidden"])[0]
    head = embed if shape.tied else weight("lm_head.weight", [shape.vocab, h])
    node("Reshape", [linear(last, head, "last_logits"), "logits_shape"], ["logits"])
    model = helper.make_model(helper.make_graph(nodes, "decoder", inputs, outputs, initializer=inits),
                              opset_imports=[helper.make_opsetid("", _OPSET), helper.make_opsetid(_MS, 1)],
                              ir_version=_IR_VERSION)
    return model.SerializeToString()


_GRAPHS: dict[tuple, bytes] = {}


def graph_for(shape: Shape) -> bytes:
    """:func:`graph`, built once per architecture in a process."""
    if shape.key() not in _GRAPHS:
        _GRAPHS[shape.key()] = graph(shape)
    return _GRAPHS[shape.key()]


def session_options(threads: int):
    """ORT's options for a sampler session: ``threads`` for each operator, one operator at a time, and no spinning
    threads (they would hold a core between steps that the node's training needs)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


class Session:
    """An ``InferenceSession`` of the model's graph over its current weights (no copy of them is made here)."""

    def __init__(self, causal_lm, *, threads: int) -> None:
        import onnxruntime as ort

        self.shape = Shape(causal_lm.config)
        options = session_options(threads)
        names, arrays = self.initializers(dict(causal_lm.named_parameters()))
        # ``self._weights`` keeps the arrays referenced while the session lives.
        self._weights = [ort.OrtValue.ortvalue_from_numpy(array) for array in arrays]
        options.add_external_initializers(names, self._weights)
        self.session = ort.InferenceSession(self.graph(), options, providers=["CPUExecutionProvider"])
        self._ort = ort

    def initializers(self, params: dict[str, torch.Tensor]) -> tuple[list[str], list[np.ndarray]]:
        """The graph's data-less initializers and what this session supplies for them: the torch storage itself."""
        names = self.shape.weight_names()
        return names, [params[name].detach().numpy() for name in names]

    def graph(self) -> bytes:
        return graph_for(self.shape)

    def bind(self, keys: np.ndarray, values: np.ndarray, logits: np.ndarray) -> None:
        """Run the next forwards over the rows whose caches are ``keys``/``values`` (``[layers, B, kv_heads,
        capacity, head_dim]``, each layer's rows contiguous), into ``logits [B, vocab]``: the new positions are
        written into the caches in place (GroupQueryAttention's past and present are the same buffer)."""
        ort = self._ort
        self._binding = self.session.io_binding()
        for i in range(self.shape.layers):
            for kind, buffer in (("key", keys[i]), ("value", values[i])):
                wrapped = ort.OrtValue.ortvalue_from_numpy(buffer)
                self._binding.bind_ortvalue_input(f"past_{kind}_{i}", wrapped)
                self._binding.bind_ortvalue_output(f"present_{kind}_{i}", wrapped)
        self._binding.bind_ortvalue_output("logits", ort.OrtValue.ortvalue_from_numpy(logits))

    def run(self, ids: np.ndarray, lengths: np.ndarray) -> None:
        """One forward of ``ids [B, S]`` for the bound rows, whose caches hold ``lengths`` positions."""
        total = lengths + ids.shape[1]
        self._binding.bind_cpu_input("input_ids", np.ascontiguousarray(ids, dtype=np.int64))
        self._binding.bind_cpu_input("seqlens_k", (total - 1).astype(np.int32))
        self._binding.bind_cpu_input("total_sequence_length", np.array(total.max(), dtype=np.int32))
        self.session.run_with_iobinding(self._binding)


@torch.inference_mode()
def sample(
    causal_lm, input_ids: torch.Tensor, attention: torch.Tensor, *, greedy: int, sampled: int, max_new_tokens: int,
    temperature: float, top_p: float, eos_ids: tuple[int, ...], pad_id: int,
    should_stop: Callable[[], bool] = lambda: False, draw: decoding.Draw = decoding.inverse_cdf,
) -> decoding.Sampled:
    """:func:`node.learning.decoding.sample` (same arguments, same rows, same draws) with the forwards run by ONNX
    Runtime over ``causal_lm``'s current weights; the session is built per call, so a call after an update samples
    from the updated weights."""
    prompts = [row[mask.bool()].tolist() for row, mask in zip(input_ids, attention, strict=True)]
    capacity = max(len(p) for p in prompts) + max_new_tokens
    if capacity > max_positions(causal_lm):
        raise ValueError(f"{capacity} positions do not fit the rotary table; check max_positions() first")
    session = Session(causal_lm, threads=torch.get_num_threads())
    shape = session.shape
    copies = greedy + sampled
    rows = len(prompts) * copies
    keys = np.empty((shape.layers, rows, shape.kv_heads, capacity, shape.head_dim), np.float32)
    values = np.empty_like(keys)
    logits = np.empty((rows, shape.vocab), np.float32)
    lengths = np.zeros(rows, np.int64)
    # The tokens every prompt starts with (a round's system prompt) run once, into the first row; each prompt's
    # first row starts from a copy of their cache, and only the rest of the prompt runs.
    shared = len(decoding.shared_prefix(prompts))
    if shared:
        session.bind(keys[:, :1], values[:, :1], logits[:1])
        session.run(np.array([prompts[0][:shared]]), np.zeros(1, np.int64))
    for number, prompt in enumerate(prompts):
        first = number * copies
        if first:
            keys[:, first, :, :shared] = keys[:, 0, :, :shared]
            values[:, first, :, :shared] = values[:, 0, :, :shared]
        session.bind(keys[:, first : first + 1], values[:, first : first + 1], logits[first : first + 1])
        session.run(np.array([prompt[shared:]]), np.full(1, shared, np.int64))
        # The prompt runs once; its rows start from copies of its cache and its next-token logits.
        keys[:, first + 1 : first + copies, :, : len(prompt)] = keys[:, first : first + 1, :, : len(prompt)]
        values[:, first + 1 : first + copies, :, : len(prompt)] = values[:, first : first + 1, :, : len(prompt)]
        logits[first + 1 : first + copies] = logits[first]
        lengths[first : first + copies] = len(prompt)
    session.bind(keys, values, logits)

    def advance(chosen: torch.Tensor, live: torch.Tensor, kept: torch.Tensor | None) -> None:
        nonlocal lengths
        if kept is not None:  # ended rows leave the batch: the live rows move up in the same buffers
            _keep_rows(keys, values, lengths, kept.numpy())
            lengths = lengths[: len(kept)]
            session.bind(keys[:, : len(live)], values[:, : len(live)], logits[: len(live)])
        session.run(chosen[:, None].numpy(), lengths)
        lengths = lengths + 1

    # The draw reads a step's logits before the next forward overwrites them: no copy is needed.
    return decoding.drive(lambda n: torch.from_numpy(logits[:n]), advance, prompts=len(prompts),
                          greedy=greedy, sampled=sampled, max_new_tokens=max_new_tokens, temperature=temperature,
                          top_p=top_p, eos_ids=eos_ids, pad_id=pad_id, should_stop=should_stop, draw=draw)


def _keep_rows(keys: np.ndarray, values: np.ndarray, lengths: np.ndarray, kept: np.ndarray) -> None:
    """Move the live rows ``kept`` (ascending) to the front of the same buffers, their filled part only."""
    moved = np.flatnonzero(kept != np.arange(len(kept)))
    if not len(moved):
        return
    start = int(moved[0])
    filled = int(lengths[kept].max())
    for buffer in (keys, values):
        buffer[:, start : len(kept), :, :filled] = buffer[:, kept[start:], :, :filled]
    lengths[start : len(kept)] = lengths[kept[start:]]
