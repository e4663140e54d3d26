"""Measured peak RSS of one round at the recommended settings vs the fit estimator, per catalog model.

The Hugging Face Hub is unreachable here, so the catalog's Hub models are built with random weights from their
published architectures (layers, widths, vocabulary): memory does not depend on the weights' values, and random
weights never stop early, so every completion runs to ``max_new_tokens`` (the worst case the estimator budgets).
The bundled model is the real one. Each case runs in its own child process with the node's environment:
one generation of I x G completions from the bfloat16 sampler, then one GRPO step on full-length groups.

    python bench/fit.py                                   # every case that fits this machine
    python bench/fit.py --cases bundled:full bundled:lora --sequences 16

Writes bench/results/fit.json (tests/test_memory.py checks the estimator against it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))
import shape_twin  # noqa: E402
from memory import GB, ROOT, PeakSampler  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "fit.json"
LORA_RANK = 16
PROMPT_TOKENS = 256  # node.learning.hardware.PROMPT_TOKENS: the estimator's prompt budget

def build(model_id: str, cache_dir: Path):
    import torch

    from node.learning import models

    bundled, tokenizer = models.load(models.resolve(models.BUNDLED), cache_dir=cache_dir, dtype=torch.float32,
                                     device="cpu")
    if model_id == models.BUNDLED:
        return bundled, tokenizer
    del bundled
    return shape_twin.twin_model(model_id, tokenizer, torch.float32), tokenizer


def child(model_id: str, mode: str, args: argparse.Namespace) -> dict:
    sampler = PeakSampler()
    import random

    import torch

    from node.learning.grpo import Completion, GrpoLearner, LoraSettings, Policy, TrainGroup

    torch.set_num_threads(args.threads)
    model, tokenizer = build(model_id, Path(args.cache_dir))
    policy = Policy(model, tokenizer, generation_dtype=torch.bfloat16, max_prompt_tokens=PROMPT_TOKENS)
    learner = GrpoLearner(
        policy, output_dir=Path(tempfile.mkdtemp()) / "trl", device="cpu", mixed_bf16=False, num_generations=args.G,
        max_new_tokens=args.max_new_tokens, learning_rate=1e-6, beta=0.0, epsilon=0.2, epsilon_high=0.28,
        loss_type="grpo", max_grad_norm=1.0, seed=0, micro_batch_groups=0,
        lora=LoraSettings(LORA_RANK) if mode == "lora" else None,
    )
    rng = random.Random(0)
    vocab = min(tokenizer.vocab_size, model.config.vocab_size) - 1
    groups_n = args.sequences // args.G

    def prompt() -> tuple[int, ...]:
        return tuple(rng.randrange(10, vocab) for _ in range(PROMPT_TOKENS))

    sampler.take()
    t0 = time.perf_counter()
    policy.generate([prompt() for _ in range(args.I)], num_generations=args.G, max_new_tokens=args.max_new_tokens,
                    temperature=1.0, top_p=1.0, seed=0)
    generate_s = time.perf_counter() - t0
    generate_peak = sampler.take()
    groups = [
        TrainGroup(prompt(), tuple(
            Completion(tuple(rng.randrange(10, vocab) for _ in range(args.max_new_tokens)), "", False)
            for _ in range(args.G)), tuple(float(i % 2) for i in range(args.G)))
        for _ in range(groups_n)
    ]
    t0 = time.perf_counter()
    learner.step(groups)  # the first step allocates the optimizer states
    train_s = time.perf_counter() - t0
    train_peak = sampler.take()
    policy.generate([prompt() for _ in range(args.I)], num_generations=args.G, max_new_tokens=8,
                    temperature=1.0, top_p=1.0, seed=1)  # sampling again, now beside the optimizer states
    generate_peak = max(generate_peak, sampler.take())
    sampler.close()
    return dict(generate_peak_gb=generate_peak / GB, train_peak_gb=train_peak / GB, generate_s=generate_s,
                train_s=train_s, params=sum(p.numel() for p in policy.model.parameters()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--cases", nargs="+", default=["bundled:full", "bundled:lora"],
                        help="MODEL:MODE pairs (MODE full or lora)")
    parser.add_argument("--sequences", type=int, default=16, help="sequences per forward/backward pass ((I+J) x G)")
    parser.add_argument("-I", type=int, default=2)
    parser.add_argument("-G", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cache-dir", default=str(Path.home() / ".cache" / "rl-swarm-bench"))
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(*args.child, args)), flush=True)
        return

    from node.launch import node_environment
    from node.learning import models

    previous = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {"rows": []}
    rows = {(r["model"], r["mode"]): r for r in previous["rows"]}
    for case in args.cases:
        model_id, mode = case.rsplit(":", 1)
        env = {**node_environment(), "PYTHONPATH": str(ROOT)}
        command = [sys.executable, __file__, "--child", model_id, mode, "--sequences", str(args.sequences),
                   "-I", str(args.I), "-G", str(args.G), "--max-new-tokens", str(args.max_new_tokens),
                   "--threads", str(args.threads), "--cache-dir", args.cache_dir]
        out = subprocess.run(command, env=env, stdout=subprocess.PIPE, text=True, check=True)
        measured = json.loads(out.stdout.strip().splitlines()[-1])
        spec = models.CATALOG[model_id]
        estimate = models.estimate_training_bytes(
            spec.params, train_dtype="float32", num_sequences=args.sequences,
            seq_len=PROMPT_TOKENS + args.max_new_tokens, vocab_size=spec.vocab_size,
            lora_rank=LORA_RANK if mode == "lora" else 0, sampling_copy=True,  # the child samples in bfloat16
        )
        peak = max(measured["generate_peak_gb"], measured["train_peak_gb"])
        rows[(model_id, mode)] = {
            "model": model_id, "mode": mode, "lora_rank": LORA_RANK if mode == "lora" else 0,
            "sequences": args.sequences, "seq_len": PROMPT_TOKENS + args.max_new_tokens,
            "measured_peak_gb": round(peak, 3), "estimate_gb": round(estimate / GB, 3),
            "ratio": round(estimate / GB / peak, 3), "optimizer_states": "float32", "generation_dtype": "bfloat16",
            **{k: round(v, 3) for k, v in measured.items()},
        }
        print(json.dumps(rows[(model_id, mode)]), flush=True)
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps({"rows": list(rows.values())}, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
