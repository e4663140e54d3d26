"""bench/ort_quantized.py, the 8- and 4-bit ONNX Runtime sampler measured in docs/performance.md: ORT's
``MatMulNBits`` reads the weights as :func:`quantize` packs them, and on the tiny model the 8-bit sampler's log-probs
are the policy's to within :data:`MEAN_GAP_8_BIT`/:data:`P99_GAP_8_BIT`, from the weights as they are at each
call."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from bench import ort_quantized  # noqa: E402
from bench.offpolicy import MEAN_ABS_GAP_BOUND, P99_ABS_GAP_BOUND, sampler_policy_gaps, summarize  # noqa: E402
from node.learning.grpo import Policy  # noqa: E402
from tests.test_generate_prompt_once import QUESTIONS  # noqa: E402
from tests.test_offpolicy import _policy  # noqa: E402

# Twice the project's bound for reduced-precision sampling: 8 bits sits at that bound (mean |gap| 0.053 nats on this
# tiny model, 0.0515 on the bundled one, against 0.05), which is why the node does not sample with it; held here so
# that a packing or staleness error, which moves the gap by nats, fails.
MEAN_GAP_8_BIT = 2 * MEAN_ABS_GAP_BOUND
P99_GAP_8_BIT = 2 * P99_ABS_GAP_BOUND


def _dequantized(packed: list[np.ndarray], n: int, k: int, bits: int) -> np.ndarray:
    q, scales, zeros = packed
    if bits == 4:  # two levels a byte, the first in the low half
        q = np.stack([q & 15, q >> 4], -1).reshape(n, k // ort_quantized.BLOCK, ort_quantized.BLOCK)
        zeros = np.stack([zeros & 15, zeros >> 4], -1).reshape(n, -1)
    zeros = zeros.reshape(n, -1)[:, : k // ort_quantized.BLOCK]
    levels = q.astype(np.float32) - zeros[..., None].astype(np.float32)
    return (levels * scales.reshape(n, -1, 1)).reshape(n, k)


@pytest.mark.parametrize("bits", [8, 4])
def test_matmulnbits_computes_with_the_weights_quantize_packed(bits):
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    n, k, rows = 96, 192, 8
    generator = torch.Generator().manual_seed(0)
    weight, x = torch.randn(n, k, generator=generator) * 0.02, torch.randn(rows, k, generator=generator)
    packed = ort_quantized.quantize(weight, bits)
    dequantized = _dequantized(packed, n, k, bits)
    step = (weight.reshape(n, -1, ort_quantized.BLOCK).amax(-1) - weight.reshape(n, -1, ort_quantized.BLOCK).amin(-1))
    step = (step / (2**bits - 1)).repeat_interleave(ort_quantized.BLOCK, 1).numpy()
    assert np.all(np.abs(dequantized - weight.numpy()) <= 0.51 * step + 1e-9)  # rounded to the nearest level
    node = helper.make_node("MatMulNBits", ["x", "q", "scales", "zeros"], ["y"], domain="com.microsoft", K=k, N=n,
                            bits=bits, block_size=ort_quantized.BLOCK, accuracy_level=ort_quantized.ACCURACY_LEVEL)
    inits = [numpy_helper.from_array(a, name) for a, name in zip(packed, ["q", "scales", "zeros"], strict=True)]
    model = helper.make_model(
        helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, k])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, n])], initializer=inits),
        opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)], ir_version=8)
    y = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x.numpy()})[0]
    expected = x.numpy() @ dequantized.T
    # Only the kernel's int8 rounding of the activations (accuracy_level 4) is left: about 1 % of the outputs' scale.
    assert np.abs(y - expected).max() <= 0.02 * np.abs(expected).max()


def _summary(policy: Policy) -> dict:
    prompts = [policy.prompt_ids([{"role": "user", "content": q}]) for q in QUESTIONS]
    return summarize(sampler_policy_gaps(policy, prompts, num_generations=4, max_new_tokens=24, seed=0,
                                         sample=ort_quantized.sampler(8)))


def test_the_8_bit_sampler_keeps_the_bound_with_the_weights_of_each_call(tiny_model_dir):
    policy = _policy(tiny_model_dir, torch.float32)
    summary = _summary(policy)
    assert summary["tokens"] >= 100
    assert summary["max_abs_token_gap"] > 1e-3  # sampled from quantized weights, not the float32 ones
    assert summary["mean_abs_token_gap"] <= MEAN_GAP_8_BIT
    assert summary["abs_token_gap_p50_p90_p99"][2] <= P99_GAP_8_BIT
    # New weights in place between calls, at the same scale: the next call quantizes them (sampling from the old ones
    # would be nats off this policy).
    with torch.no_grad(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(5)
        for parameter in policy.model.parameters():
            if parameter.dim() == 2:
                parameter.normal_(0.0, 0.2)
    summary = _summary(policy)
    assert summary["mean_abs_token_gap"] <= MEAN_GAP_8_BIT
    assert summary["abs_token_gap_p50_p90_p99"][2] <= P99_GAP_8_BIT
