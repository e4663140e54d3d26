"""Seconds and peak RSS of the GRPO training step with each group's prompt run once vs once per completion.

The demo's round (:func:`node.cli.demo.demo_config`: I local questions x G completions generated here with the node's
prompts and worked examples, J "peer" groups of the same texts re-tokenized under other questions, the demo's
``max_new_tokens``, ``micro_batch_groups`` and float32 sampling), in one process. Each round's groups are trained
twice, once per forward, in alternating order, so a busy machine slows both alike; the peak RSS of each step is
sampled every few milliseconds.

    MALLOC_ARENA_MAX=2 MALLOC_MMAP_THRESHOLD_=131072 python bench/prompt_once.py --rounds 3

Writes bench/results/prompt_once.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results" / "prompt_once.json"
GB = 1e9


def main() -> None:
    from bench.memory import (
        PeakSampler,
        add_demo_round_arguments,
        demo_round_groups,
        demo_task_source,
    )

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    add_demo_round_arguments(parser)
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args()

    sampler = PeakSampler()
    import torch

    from node.cli.demo import demo_config
    from node.learning import grpo, models
    from node.learning.grpo import GrpoLearner, Policy

    torch.set_num_threads(args.threads)
    cfg = demo_config(Path(tempfile.gettempdir()), 0, model="bundled", threads=args.threads)
    max_new_tokens, micro = cfg.training.max_new_tokens, cfg.training.micro_batch_groups
    resolved = models.resolve(models.BUNDLED)
    model, tokenizer = models.load(resolved, cache_dir=Path(args.cache_dir), dtype=torch.float32, device="cpu")
    policy = Policy(model, tokenizer, generation_dtype=torch.float32, max_prompt_tokens=1024)
    learner = GrpoLearner(
        policy, output_dir=Path(tempfile.mkdtemp(prefix="rl-swarm-prompt-once-")) / "trl", device="cpu",
        mixed_bf16=False, num_generations=args.G, max_new_tokens=max_new_tokens, learning_rate=5e-6, beta=0.0,
        epsilon=0.2, epsilon_high=0.28, loss_type="grpo", max_grad_norm=1.0, seed=0, micro_batch_groups=micro,
    )
    tasks = demo_task_source(resolved.params)
    steps, exact = [], grpo._packing_is_exact
    for number in range(args.rounds):
        groups = demo_round_groups(policy, tasks, number, local=args.I, peer=args.J, generations=args.G,
                                   max_new_tokens=max_new_tokens)
        order = (False, True) if number % 2 == 0 else (True, False)
        for prompt_once in order:
            grpo._packing_is_exact = exact if prompt_once else lambda causal_lm: False
            gc.collect()
            before = sampler.rss()
            sampler.take()
            started = time.perf_counter()
            learner.step(groups)
            row = {
                "round": number + 1, "prompt_once": prompt_once, "train_s": round(time.perf_counter() - started, 2),
                "peak_rss_gb": round(sampler.take() / GB, 3), "rss_before_gb": round(before / GB, 3),
                "prompt_tokens": sum(len(g.prompt_ids) for g in groups),
                "completion_tokens": sum(len(c.ids) + c.finished for g in groups for c in g.completions),
            }
            steps.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    sampler.close()

    summary = {}
    for prompt_once, name in ((False, "prompt per completion"), (True, "prompt once per group")):
        mine = [s for s in steps if s["prompt_once"] is prompt_once]
        summary[name] = {"train_s_median": statistics.median(s["train_s"] for s in mine),
                         "peak_rss_gb_max": max(s["peak_rss_gb"] for s in mine)}
    result = {
        "settings": {"I": args.I, "J": args.J, "G": args.G, "max_new_tokens": max_new_tokens,
                     "micro_batch_groups": micro, "threads": args.threads, "rounds": args.rounds,
                     "malloc": {k: os.environ.get(k) for k in ("MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_")}},
        "summary": summary,
        "steps": steps,
    }
    print("| training forward | step seconds (median) | step peak RSS GB (max) |\n|---|---|---|")
    for name, row in summary.items():
        print(f"| {name} | {row['train_s_median']:.1f} | {row['peak_rss_gb_max']:.2f} |")
    if not args.no_save:
        RESULTS.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
