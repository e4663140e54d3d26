"""How far off-policy the node's samples are: per-token log-prob gap between what the bfloat16 sampler drew each
token from and what the float32 policy that is trained gives it.

The sampler's log-probs are the ones the node's decode loop (:func:`node.learning.decoding.sample`) computed while
it sampled, from its bfloat16 copy and its incrementally filled bfloat16 key/value cache: the distribution each
token was actually drawn from. The policy's come from one float32 forward over prompt and completion, as the GRPO
update computes them.

GRPO's single update per round treats the samples as on-policy (importance ratio 1). With a sampler q that is not
the policy p, each token's true weight is p/q = exp(gap); TRL's truncated importance-sampling correction for vLLM
rollouts would multiply each token's loss by it, capped. The bound this project keeps (issue 35; checked on the tiny
model by tests/test_offpolicy.py, measured on the bundled model here): mean |gap| <= 0.05 nats a token and the 99th
percentile <= 0.25, i.e. 99 % of tokens carry a weight within exp(+-0.25) = [0.78, 1.28], about GRPO's own clip
range (0.8-1.28).

    python bench/offpolicy.py --questions 4 --max-new-tokens 128
    python bench/offpolicy.py --sampler onnxruntime --questions 2 --seeds 1 --out bench/results/offpolicy_ort.json
    python bench/offpolicy.py --device cuda --out bench/results/offpolicy_cuda.json   # on an NVIDIA GPU

``--sampler onnxruntime`` measures ONNX Runtime's float32 sampler (:mod:`node.learning.ort_decoding`) instead: the
same weights, so its gap is the rounding of another kernel order. ``onnxruntime-int8`` and ``onnxruntime-int4``
measure it over the decoder layers' projections quantized per call (:mod:`bench.ort_quantized`: blocks of 32, a
scale and a zero point each; measured, not in the node).

``--device cuda`` measures the CUDA participant's path: the bfloat16 copy sampling on the GPU. There the update's own
forward runs under bfloat16 autocast over the float32 weights, so the gap to that forward, over the same
completions, is reported beside the float32 one (``result_vs_autocast``).

Writes bench/results/offpolicy.json (or ``--out``) and prints it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results" / "offpolicy.json"

from bench import ort_quantized  # noqa: E402
MEAN_ABS_GAP_BOUND = 0.05
P99_ABS_GAP_BOUND = 0.25


def sampler_policy_gaps(policy, prompts: list[tuple[int, ...]], *, num_generations: int, max_new_tokens: int,
                        seed: int, sample=None):
    """Per completion, the per-token ``log p_policy - log q_sampler`` of the tokens ``policy``'s sampler drew
    (temperature 1; the end-of-sequence token included where a completion ended)."""
    return policy_gaps(policy, drawn(policy, prompts, num_generations=num_generations, max_new_tokens=max_new_tokens,
                                     seed=seed, sample=sample))


def drawn(policy, prompts: list[tuple[int, ...]], *, num_generations: int, max_new_tokens: int, seed: int,
          sample=None) -> list[tuple[list[int], list[int], object]]:
    """What ``policy``'s sampler drew at temperature 1, per completion: its prompt, its tokens up to and with the
    end-of-sequence token, and the log-prob the sampler drew each from."""
    import torch

    from node.learning import decoding

    sampler = policy.sampling_model()
    input_ids, attention = policy._padded(prompts, sampler)
    torch.manual_seed(seed)
    result = (sample or decoding.sample)(sampler, input_ids, attention, greedy=0, sampled=num_generations,
                             max_new_tokens=max_new_tokens, temperature=1.0, top_p=1.0, eos_ids=policy.eos_ids,
                             pad_id=policy.tokenizer.pad_token_id)
    rows = []
    for row, (tokens, sampler_logps) in enumerate(zip(result.tokens.tolist(), result.logprobs, strict=True)):
        end = next((i + 1 for i, token in enumerate(tokens) if token in policy.eos_ids), len(tokens))
        if end:
            rows.append((list(prompts[row // num_generations]), tokens[:end], sampler_logps[:end]))
    return rows


def policy_gaps(policy, rows, *, autocast: bool = False):
    """Per completion of :func:`drawn`, the policy's log-prob of each token minus the sampler's, from one forward over
    prompt and completion (under bfloat16 autocast with ``autocast``, as the update runs on CUDA)."""
    import torch

    model = policy.model.eval()
    device = next(model.parameters()).device
    gaps = []
    for prompt, tokens, sampler_logps in rows:
        ids = torch.tensor([prompt + tokens], device=device)
        with torch.inference_mode(), torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
        policy_logps = logits.log_softmax(-1).gather(1, ids[0, len(prompt) :, None])[:, 0]
        gaps.append((policy_logps - sampler_logps.to(device)).cpu())
    return gaps


def summarize(gaps) -> dict:
    import torch

    flat = torch.cat(gaps)
    sequence_ratios = torch.tensor([float(g.sum()) for g in gaps]).exp()
    p50, p90, p99 = (float(q) for q in torch.quantile(flat.abs(), torch.tensor([0.5, 0.9, 0.99])))
    return {
        "tokens": int(flat.numel()),
        "sequences": len(gaps),
        "mean_abs_token_gap": round(float(flat.abs().mean()), 5),
        "mean_token_gap": round(float(flat.mean()), 5),
        "abs_token_gap_p50_p90_p99": [round(p50, 5), round(p90, 5), round(p99, 5)],
        "max_abs_token_gap": round(float(flat.abs().max()), 5),
        "token_ratio_range": [round(float(flat.exp().min()), 4), round(float(flat.exp().max()), 4)],
        "sequence_ratio_range": [round(float(sequence_ratios.min()), 4), round(float(sequence_ratios.max()), 4)],
        "within_bound": float(flat.abs().mean()) <= MEAN_ABS_GAP_BOUND and p99 <= P99_ABS_GAP_BOUND,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="bundled")
    parser.add_argument("--questions", type=int, default=4)
    parser.add_argument("-G", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--cache-dir", default=str(Path.home() / ".cache" / "rl-swarm-bench"))
    parser.add_argument("--sampler", choices=["bfloat16", *ort_quantized.SAMPLERS], default="bfloat16",
                        help="the torch loop over a bfloat16 copy, or ONNX Runtime over the float32 weights (or over "
                        "their projections quantized per call to 8 or 4 bits)")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args()

    import torch

    from node.learning import models
    from node.learning.grpo import Policy
    from node.tasks.source import TaskSource, build_messages
    from node.tasks.taskref import DEFAULT_FAMILIES

    torch.set_num_threads(1)
    model, tokenizer = models.load(models.resolve(args.model), cache_dir=Path(args.cache_dir), dtype=torch.float32,
                                   device=args.device)
    ort = args.sampler in ort_quantized.SAMPLERS
    policy = Policy(model, tokenizer, generation_dtype=torch.float32 if ort else torch.bfloat16, max_prompt_tokens=1024)
    sample = ort_quantized.sample_for(args.sampler) if ort else None
    tasks = TaskSource({family: 1.0 for family in DEFAULT_FAMILIES}, seed=1234).sample(args.questions, random.Random(0))
    prompts = [policy.prompt_ids(build_messages(task.question)) for task in tasks]
    gaps, autocast_gaps = [], []
    for seed in range(args.seeds):
        rows = drawn(policy, prompts, num_generations=args.G, max_new_tokens=args.max_new_tokens, seed=seed,
                     sample=sample)
        gaps += policy_gaps(policy, rows)
        if args.device == "cuda":  # the same completions, against the forward the update runs there
            autocast_gaps += policy_gaps(policy, rows, autocast=True)
    result = {
        "command": "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
        "model": args.model, "sampler": _described(args.sampler),
        "policy": "float32, one forward over prompt and completion",
        "bound": {"mean_abs_token_gap": MEAN_ABS_GAP_BOUND, "abs_token_gap_p99": P99_ABS_GAP_BOUND},
        "result": summarize(gaps),
    } | ({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
          "result_vs_autocast": summarize(autocast_gaps)} if autocast_gaps else {})
    print(json.dumps(result, indent=1))
    if not args.no_save:
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


def _described(sampler: str) -> str:
    if sampler == "bfloat16":
        return "bfloat16 copy, node.learning.decoding (its own log-probs)"
    bits = ort_quantized.SAMPLERS[sampler]
    weights = "float32 weights" if bits is None else (
        f"decoder projections quantized per call to {bits}-bit blocks of 32 (MatMulNBits), the rest float32")
    return f"{weights}, node.learning.ort_decoding (ONNX Runtime; its own log-probs)"


if __name__ == "__main__":
    main()
