"""ONNX Runtime's sampler (:mod:`node.learning.ort_decoding`) over blockwise-quantized projections, for measuring.

The node's float32 decoder graph with every decoder layer's projection (q, k, v, o, gate, up, down) rewritten from
``FusedMatMul`` to ORT's ``MatMulNBits`` (8 or 4 bits, blocks of ``BLOCK`` inputs, one float32 scale and one
zero point each, activations quantized per block inside the kernel: ``accuracy_level`` 4); the embedding, the norms
and the (tied) head stay float32. Every session build quantizes the policy's float32 weights as they are then
(torch, counted in the round as the session build), so each call samples from that call's weights.

Measured and not kept in the node (docs/performance.md): on an AVX2 CPU with onnxruntime 1.31 the 8-bit kernel is
no faster than float32 ``FusedMatMul`` and its gap to the policy is over the project's bound; 4 bits is faster
and far over it.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from node.learning import ort_decoding

BLOCK = 32
# int8 compute for the activations: MatMulNBits' fast CPU path (levels 0-3 were 4-15x slower than float32).
ACCURACY_LEVEL = 4


def quantize(weight: torch.Tensor, bits: int) -> list[np.ndarray]:
    """``weight [out, in]`` as MatMulNBits reads it: per block of ``BLOCK`` inputs, unsigned ``bits``-bit levels
    spanning the block's range (zero included, so zero stays exact), a scale and a zero point; with 4 bits two
    levels to a byte, the first in the low half."""
    n, k = weight.shape
    levels = 2**bits - 1
    blocks = weight.detach().float().reshape(n, k // BLOCK, BLOCK)
    low, high = blocks.amin(-1).clamp(max=0), blocks.amax(-1).clamp(min=0)
    scale = ((high - low) / levels).clamp(min=torch.finfo(torch.float32).tiny)
    zero = (-low / scale).round().clamp(0, levels)
    q = (blocks / scale[..., None] + zero[..., None]).round_().clamp_(0, levels).to(torch.uint8)
    zero = zero.to(torch.uint8)
    if bits == 4:
        q = q[..., 0::2] | (q[..., 1::2] << 4)
        if zero.shape[1] % 2:
            zero = torch.nn.functional.pad(zero, (0, 1))
        zero = zero[:, 0::2] | (zero[:, 1::2] << 4)
    return [q.contiguous().numpy(), scale.reshape(-1).contiguous().numpy(), zero.reshape(-1).contiguous().numpy()]


def _quantized(name: str) -> bool:
    return name.endswith("_proj.weight")


def _names(name: str) -> list[str]:
    return [f"{name}.quantized", f"{name}.scales", f"{name}.zero_points"]


# ONNX Runtime's samplers as the benches name them: the node's float32 one, or this module's over projections
# quantized to this many bits.
SAMPLERS = {"onnxruntime": None, "onnxruntime-int8": 8, "onnxruntime-int4": 4}
_GRAPHS: dict[tuple, bytes] = {}


def graph(shape: ort_decoding.Shape, bits: int) -> bytes:
    """The node's graph for this architecture with the projections' ``FusedMatMul`` replaced by ``MatMulNBits``
    over data-less initializers each session supplies; built once per architecture and width."""
    key = (shape.key(), bits)
    if key not in _GRAPHS:
        _GRAPHS[key] = _quantized_graph(shape, bits)
    return _GRAPHS[key]


def _quantized_graph(shape: ort_decoding.Shape, bits: int) -> bytes:
    import onnx
    from onnx import TensorProto, helper

    model = onnx.load_from_string(ort_decoding.graph_for(shape))
    inits = {tensor.name: tensor for tensor in model.graph.initializer}
    per_byte = 8 // bits
    for position, node in enumerate(model.graph.node):
        if node.op_type != "FusedMatMul" or not _quantized(node.input[1]):
            continue
        name = node.input[1]
        n, k = inits.pop(name).dims
        blocks = k // BLOCK
        for part, data_type, dims in zip(_names(name), (TensorProto.UINT8, TensorProto.FLOAT, TensorProto.UINT8),
                                         ([n, blocks, BLOCK // per_byte], [n * blocks], [n * -(-blocks // per_byte)]),
                                         strict=True):
            tensor = TensorProto(name=part, data_type=data_type, dims=dims)
            tensor.data_location = TensorProto.EXTERNAL
            tensor.external_data.add(key="location", value="supplied-by-each-session")
            inits[part] = tensor
        model.graph.node[position].CopyFrom(helper.make_node(
            "MatMulNBits", [node.input[0], *_names(name)], list(node.output), name=node.name, domain="com.microsoft",
            K=k, N=n, bits=bits, block_size=BLOCK, accuracy_level=ACCURACY_LEVEL))
    del model.graph.initializer[:]
    model.graph.initializer.extend(inits.values())
    return model.SerializeToString()


@functools.cache
def session_class(bits: int) -> type:
    """An :class:`ort_decoding.Session` whose build quantizes the projections of the weights as they are now."""

    class QuantizedSession(ort_decoding.Session):
        def initializers(self, params):
            names, arrays = [], []
            for name in self.shape.weight_names():
                if _quantized(name):
                    names += _names(name)
                    arrays += quantize(params[name], bits)
                else:
                    names.append(name)
                    arrays.append(params[name].detach().numpy())
            return names, arrays

        def graph(self) -> bytes:
            return graph(self.shape, bits)

    return QuantizedSession


def prepare(model, bits: int) -> None:
    """Build the quantized graph for ``model``'s architecture now (the once-per-process export)."""
    graph(ort_decoding.Shape(model.config), bits)


def sample_for(name: str):
    """The sample function of one of :data:`SAMPLERS`."""
    bits = SAMPLERS[name]
    return ort_decoding.sample if bits is None else sampler(bits)


@functools.cache
def sampler(bits: int):
    """:func:`ort_decoding.sample` over this module's quantized sessions."""
    from unittest import mock

    quantized = session_class(bits)

    def sample(*args, **kwargs):
        with mock.patch.object(ort_decoding, "Session", quantized):
            return ort_decoding.sample(*args, **kwargs)

    return sample
