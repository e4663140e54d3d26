"""Tokens per CPU-second of the node's samplers, side by side in one process.

The workload of issue 35: the bundled model, the node's real one-shot prompts (:class:`node.tasks.source.TaskSource`,
seed 1234, 2 questions), G=4 completions each, 128 new tokens, temperature 1.0, top_p 1.0, with no token ending a
completion (end-of-sequence is an ordinary token here), so every row runs to the limit and every sampler does
the same work. Each round runs every sampler once, in a rotating order, so a busy machine slows them alike; the
process's CPU time is the measure (one torch thread), wall seconds are kept too.

Samplers (all from the same float32 policy; a bfloat16 one samples from a cast copy made per call, as the node does,
the cast counted):

* ``generate/float32``: today's path, ``transformers`` ``generate()`` with its growing (``torch.cat``) cache;
* ``preallocated/float32``: :mod:`node.learning.decoding`, the cache allocated once, no attention to empty slots;
* ``generate/bfloat16`` and ``preallocated/bfloat16``: the same from a bfloat16 copy (fast only where the CPU has
  native bfloat16: avx512_bf16 or AMX; emulated elsewhere).

    python bench/generation.py --rounds 5

Writes bench/results/generation.json (settings, the machine, every run, median and range per sampler and its ratio
to today's path) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import sys
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results" / "generation.json"
BASELINE = "generate/float32"
SAMPLERS = ("generate/float32", "preallocated/float32", "generate/bfloat16", "preallocated/bfloat16")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("-I", type=int, default=2)
    parser.add_argument("-G", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--samplers", nargs="+", default=list(SAMPLERS), choices=SAMPLERS)
    parser.add_argument("--cache-dir", default=str(Path.home() / ".cache" / "rl-swarm-bench"))
    parser.add_argument("--load", default="", help="what else ran on the machine, recorded with the results")
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args()

    import torch

    from node.learning import grpo, hardware, models
    from node.tasks.source import TaskSource, build_messages
    from node.tasks.taskref import DEFAULT_FAMILIES

    torch.set_num_threads(args.threads)
    model, tokenizer = models.load(models.resolve(models.BUNDLED), cache_dir=Path(args.cache_dir),
                                   dtype=torch.float32, device="cpu")
    policies = {}
    for name in args.samplers:
        path, dtype = name.split("/")
        policy = grpo.Policy(model, tokenizer, generation_dtype=getattr(torch, dtype), max_prompt_tokens=1024,
                             preallocated_cache=path == "preallocated")
        policy.eos_ids = (model.config.vocab_size,)  # no token ends a completion: every row runs to the limit
        policies[name] = policy
    tasks = TaskSource({family: 1.0 for family in DEFAULT_FAMILIES}, seed=1234).sample(args.I, random.Random(0))
    prompts = [policies[args.samplers[0]].prompt_ids(build_messages(task.question)) for task in tasks]
    hw = hardware.detect()
    runs = []
    for number in range(args.rounds):
        shift = number % len(args.samplers)
        for name in args.samplers[shift:] + args.samplers[:shift]:
            gc.collect()
            started, cpu = time.perf_counter(), time.process_time()
            groups = policies[name].generate(prompts, num_generations=args.G, max_new_tokens=args.max_new_tokens,
                                             temperature=1.0, top_p=1.0, seed=number)
            seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
            tokens = sum(len(c.ids) for group in groups for c in group)
            row = {"round": number + 1, "sampler": name, "tokens": tokens, "seconds": round(seconds, 3),
                   "cpu_seconds": round(cpu, 3), "tokens_per_cpu_s": round(tokens / cpu, 2)}
            runs.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)

    summary = {}
    base = {r["round"]: r["tokens_per_cpu_s"] for r in runs if r["sampler"] == BASELINE}
    for name in args.samplers:
        mine = [r for r in runs if r["sampler"] == name]
        rates = [r["tokens_per_cpu_s"] for r in mine]
        summary[name] = {
            "tokens_per_cpu_s_median": round(statistics.median(rates), 1),
            "tokens_per_cpu_s_range": [min(rates), max(rates)],
            "wall_s_median": round(statistics.median(r["seconds"] for r in mine), 2),
        }
        if base:  # the ratio of each round's pair: what the machine's load did to both cancels
            ratios = [r["tokens_per_cpu_s"] / base[r["round"]] for r in mine]
            summary[name]["vs_today_median"] = round(statistics.median(ratios), 2)
            summary[name]["vs_today_range"] = [round(min(ratios), 2), round(max(ratios), 2)]
    result = {
        "command": "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
        "settings": {"model": "bundled SmolLM2-135M-Instruct", "I": args.I, "G": args.G, "threads": args.threads,
                     "max_new_tokens": args.max_new_tokens, "rounds": args.rounds,
                     "prompt_tokens": [len(p) for p in prompts], "torch": torch.__version__},
        "machine": {"description": hw.describe(), "cpu_bf16": hardware.cpu_bf16_report(), "load": args.load},
        "summary": summary,
        "runs": runs,
    }
    print("| sampler | tokens per CPU-second, median (range) | vs today, median (range) | wall s |")
    print("|---|---|---|---|")
    for name, row in summary.items():
        low, high = row["tokens_per_cpu_s_range"]
        ratio = f"{row['vs_today_median']:.2f}x ({row['vs_today_range'][0]:.2f}-{row['vs_today_range'][1]:.2f})" \
            if "vs_today_median" in row else "-"
        print(f"| {name} | {row['tokens_per_cpu_s_median']:.1f} ({low:.1f}-{high:.1f}) | {ratio} "
              f"| {row['wall_s_median']:.1f} |")
    if not args.no_save:
        RESULTS.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
