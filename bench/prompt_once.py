"""Seconds, CPU seconds, backbone tokens and peak RSS of the GRPO training step, five ways on the same groups.

- every row runs its prompt: TRL's forward, G copies of each prompt, padded to the longest completion;
- packed, every group: each group's prompt once, followed by its completions' real tokens (no padding), every
  group run, one prompt a packed row;
- packed, flat groups left out: the same, without a pass for the groups whose completions all scored the same (zero
  advantage, zero gradient without a KL term);
- packed, one pass: the same groups left out, the rest in one forward/backward (``micro_batch_groups`` 0), one
  prompt a packed row;
- shared heads, one pass: the same, with the prompts in one packed row that runs the head they have in common (chat
  template, worked example) once (the node's step; the demo's setting).

The demo's round (:func:`node.cli.demo.demo_config`: I local questions x G completions generated here with the node's
prompts and worked examples, scored by the node's grader; J "peer" groups of the same texts re-tokenized under other
questions, with rewards that alternate, as the groups a node picks from peers have spread), its ``max_new_tokens``,
and float32 sampling, in one process (the first three ways with ``micro_batch_groups`` 1, a group a pass). Each
round's groups are trained once per way, in an order that rotates from round to round, so a busy machine slows all
alike; the peak RSS of each step is sampled every few milliseconds. ``padded_layout_tokens`` is what the packed
forward ran before it left the padding out: each group's prompt plus G slots as long as its longest completion.

    MALLOC_ARENA_MAX=2 MALLOC_MMAP_THRESHOLD_=131072 python bench/prompt_once.py --rounds 6

Writes bench/results/prompt_once.json (``--out``) and prints a markdown table.
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
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args()

    sampler = PeakSampler()
    import torch

    from node.cli.demo import demo_config
    from node.learning import grpo, models
    from node.learning.grpo import GrpoLearner, Policy

    torch.set_num_threads(args.threads)
    cfg = demo_config(Path(tempfile.gettempdir()), 0, model="bundled", threads=args.threads)
    max_new_tokens = cfg.training.max_new_tokens
    resolved = models.resolve(models.BUNDLED)
    adamw_8bit = models.uses_adamw_8bit(cfg.training.optimizer_states, lora=False, device="cpu")
    model, tokenizer = models.load(resolved, cache_dir=Path(args.cache_dir), dtype=torch.float32, device="cpu")
    policy = Policy(model, tokenizer, generation_dtype=torch.float32, max_prompt_tokens=1024)
    learner = GrpoLearner(
        policy, output_dir=Path(tempfile.mkdtemp(prefix="rl-swarm-prompt-once-")) / "trl", device="cpu",
        mixed_bf16=False, num_generations=args.G, max_new_tokens=max_new_tokens, learning_rate=5e-6, beta=0.0,
        epsilon=0.2, epsilon_high=0.28, loss_type="grpo", max_grad_norm=1.0, seed=0,
        adamw_8bit=adamw_8bit,
    )
    tasks = demo_task_source(resolved.params)
    exact, no_gradient, renumber = grpo._packing_is_exact, grpo._gives_no_gradient, grpo._renumbering_is_exact
    never = lambda *args: False  # noqa: E731
    ways = {"every row runs its prompt": (never, never, never, 1),
            "packed, every group": (exact, never, never, 1),
            "packed, flat groups left out": (exact, no_gradient, never, 1),
            "packed, one pass": (exact, no_gradient, never, 0),
            "shared heads, one pass": (exact, no_gradient, renumber, 0)}
    tokens = [0]
    model.get_input_embeddings().register_forward_hook(lambda module, inputs, output: tokens.__setitem__(
        0, tokens[0] + inputs[0].numel()))
    steps = []
    for number in range(args.rounds):
        groups = demo_round_groups(policy, tasks, number, local=args.I, peer=args.J, generations=args.G,
                                   max_new_tokens=max_new_tokens)
        names = list(ways)
        for name in names[number % len(names):] + names[: number % len(names)]:
            grpo._packing_is_exact, grpo._gives_no_gradient, grpo._renumbering_is_exact, learner.micro_batch_groups = (
                ways[name])
            gc.collect()
            before = sampler.rss()
            sampler.take()
            tokens[0] = 0
            started, cpu = time.perf_counter(), time.process_time()
            learner.step(groups)
            row = {
                "round": number + 1, "way": name, "train_s": round(time.perf_counter() - started, 2),
                "cpu_s": round(time.process_time() - cpu, 2), "backbone_tokens": tokens[0],
                "peak_rss_gb": round(sampler.take() / GB, 3), "rss_before_gb": round(before / GB, 3),
                "flat_groups": sum(no_gradient(g, learner.trainer) for g in groups), "groups": len(groups),
                "prompt_tokens": sum(len(g.prompt_ids) for g in groups),
                "completion_tokens": sum(c.length for g in groups for c in g.completions),
                "padded_layout_tokens": sum(len(g.prompt_ids) + args.G * max(c.length for c in g.completions)
                                            for g in groups),
            }
            steps.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
    grpo._packing_is_exact, grpo._gives_no_gradient, grpo._renumbering_is_exact = exact, no_gradient, renumber
    sampler.close()

    summary = {}
    for name in ways:
        mine = [s for s in steps if s["way"] == name]
        summary[name] = {"train_s_median": statistics.median(s["train_s"] for s in mine),
                         "train_s_range": [min(s["train_s"] for s in mine), max(s["train_s"] for s in mine)],
                         "cpu_s_median": statistics.median(s["cpu_s"] for s in mine),
                         "backbone_tokens_median": statistics.median(s["backbone_tokens"] for s in mine),
                         "peak_rss_gb_max": max(s["peak_rss_gb"] for s in mine)}
    result = {
        "settings": {"I": args.I, "J": args.J, "G": args.G, "max_new_tokens": max_new_tokens,
                     "micro_batch_groups": {name: way[3] for name, way in ways.items()}, "adamw_8bit": adamw_8bit, "threads": args.threads,
                     "rounds": args.rounds,
                     "malloc": {k: os.environ.get(k) for k in ("MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_")}},
        "summary": summary,
        "steps": steps,
    }
    print("| training step | seconds (median, range) | CPU s (median) | backbone tokens (median) | peak RSS GB (max) |\n"
          "|---|---|---|---|---|")
    for name, row in summary.items():
        low, high = row["train_s_range"]
        print(f"| {name} | {row['train_s_median']:.1f} ({low:.1f}-{high:.1f}) | {row['cpu_s_median']:.1f} | "
              f"{row['backbone_tokens_median']:.0f} | {row['peak_rss_gb_max']:.2f} |")
    if not args.no_save:
        args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
