"""Generation seconds, tokens/s and peak RSS of ``Policy.generate`` with each prompt prefilled once vs once per
completion (generate()'s own ``num_return_sequences`` expansion).

The bundled model, the node's one-shot prompts (:class:`node.tasks.source.TaskSource`, as ``bench/throughput.py`` builds
them), I questions x G completions, the sampler dtype the node picks, in one process. Each round's prompts are
generated twice with the same seed, once per path, in alternating order, so a busy machine slows both alike; the
two must sample the same completions, so both time the same tokens. Seconds are counted on the wall clock and in
the process's CPU time: with one thread on a machine shared with other work, CPU time moves far less with the
machine's load.

    python bench/generate_prompt_once.py --rounds 3 --max-new-tokens 48 128

Writes bench/results/generate_prompt_once.json and prints a markdown table.
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
RESULTS = ROOT / "bench" / "results" / "generate_prompt_once.json"
GB = 1e9
PATHS = ("prompt per completion", "prompt once")


def main() -> None:
    from bench.memory import PeakSampler

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("-I", type=int, default=2)
    parser.add_argument("-G", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, nargs="+", default=[48, 128])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cache-dir", default=str(Path.home() / ".cache" / "rl-swarm-bench"))
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args()

    sampler = PeakSampler()
    import torch

    from node.learning import grpo, hardware, models
    from node.tasks.source import TaskSource, build_messages
    from node.tasks.taskref import DEFAULT_FAMILIES

    torch.set_num_threads(args.threads)
    model, tokenizer = models.load(models.resolve(models.BUNDLED), cache_dir=Path(args.cache_dir),
                                   dtype=torch.float32, device="cpu")
    dtype = torch.bfloat16 if hardware.auto_bf16(hardware.detect(), "cpu", sampling=True) else torch.float32
    policy = grpo.Policy(model, tokenizer, generation_dtype=dtype, max_prompt_tokens=1024)
    tasks = TaskSource({family: 1.0 for family in DEFAULT_FAMILIES}, seed=1234)
    exact = grpo._prompt_sharing_is_exact
    runs = []
    for max_new_tokens in args.max_new_tokens:
        for number in range(args.rounds):
            prompts = [policy.prompt_ids(build_messages(task.question))
                       for task in tasks.sample(args.I, random.Random(number))]
            completions = {}
            for once in (False, True) if number % 2 == 0 else (True, False):
                grpo._prompt_sharing_is_exact = exact if once else lambda causal_lm: False
                gc.collect()
                sampler.take()
                started, cpu = time.perf_counter(), time.process_time()
                groups = policy.generate(prompts, num_generations=args.G, max_new_tokens=max_new_tokens,
                                         temperature=1.0, top_p=1.0, seed=number)
                seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
                completions[once] = groups
                tokens = sum(len(c.ids) for group in groups for c in group)
                row = {"max_new_tokens": max_new_tokens, "round": number + 1, "path": PATHS[once],
                       "generate_s": round(seconds, 2), "generate_cpu_s": round(cpu, 2), "tokens": tokens,
                       "tokens_per_s": round(tokens / seconds, 2), "tokens_per_cpu_s": round(tokens / cpu, 2),
                       "peak_rss_gb": round(sampler.take() / GB, 3), "prompt_tokens": [len(p) for p in prompts]}
                runs.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
            runs[-1]["same_completions"] = runs[-2]["same_completions"] = completions[False] == completions[True]
    grpo._prompt_sharing_is_exact = exact
    sampler.close()

    summary = []
    for max_new_tokens in args.max_new_tokens:
        mine = [r for r in runs if r["max_new_tokens"] == max_new_tokens]
        row = {"max_new_tokens": max_new_tokens}
        for path in PATHS:
            these = [r for r in mine if r["path"] == path]
            tokens = sum(r["tokens"] for r in these)
            row[path] = {"generate_s_median": statistics.median(r["generate_s"] for r in these),
                         "generate_cpu_s_median": statistics.median(r["generate_cpu_s"] for r in these),
                         "tokens_per_s": round(tokens / sum(r["generate_s"] for r in these), 2),
                         "tokens_per_cpu_s": round(tokens / sum(r["generate_cpu_s"] for r in these), 2),
                         "peak_rss_gb_max": max(r["peak_rss_gb"] for r in these)}
        # Each round's two paths ran back to back: the per-round ratio cancels most of the machine's noise.
        pairs = list(zip([r for r in mine if r["path"] == PATHS[0]], [r for r in mine if r["path"] == PATHS[1]],
                         strict=True))
        for key in ("generate_s", "generate_cpu_s"):
            row[f"speedup_{key}_median"] = round(statistics.median(a[key] / b[key] for a, b in pairs), 2)
        row["same_completions"] = all(r["same_completions"] for r in mine)
        summary.append(row)
    result = {"settings": {"model": "bundled", "I": args.I, "G": args.G, "threads": args.threads,
                           "rounds": args.rounds, "sampler_dtype": str(dtype).removeprefix("torch.")},
              "summary": summary, "runs": runs}
    print("| max new tokens | path | generate s | CPU s | tokens/s | tokens/CPU s | peak RSS GB "
          "| speedup: wall | CPU |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in summary:
        for path in PATHS:
            r, once = row[path], path == PATHS[1]
            speedups = [f"{row[key]:.2f}x" if once else "-" for key in ("speedup_generate_s_median",
                                                                      "speedup_generate_cpu_s_median")]
            print(f"| {row['max_new_tokens']} | {path} | {r['generate_s_median']:.1f} "
                  f"| {r['generate_cpu_s_median']:.1f} | {r['tokens_per_s']:.1f} | {r['tokens_per_cpu_s']:.1f} "
                  f"| {r['peak_rss_gb_max']:.2f} | "
                  + " | ".join(speedups) + " |")
    if not args.no_save:
        RESULTS.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
