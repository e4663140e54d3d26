"""8-bit vs float32 AdamW moments on the bundled model: step seconds, and whether the weights move the same way.

Two learners start from the same weights, one with torch's AdamW (float32 moments), one with bitsandbytes' 8-bit
AdamW (block-wise quantized moments, float32 update math), and train on the same demo rounds
(:func:`node.cli.demo.demo_config`: I local questions x G completions sampled by the float32 learner's policy and
scored by the verifier, J "peer" groups of the same texts under other questions), in alternating order so a busy
machine slows both alike. After every round it reports each step's seconds, the optimizer step's own seconds, and
how the two learners' total weight movement since the start compares (cosine similarity, relative difference).
Peak RSS per optimizer is ``bench/memory.py --optimizer-states``' job: it needs a process of its own.

    MALLOC_ARENA_MAX=2 MALLOC_MMAP_THRESHOLD_=131072 python bench/adamw_8bit.py --rounds 10

Writes bench/results/adamw_8bit.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import copy
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
RESULTS = ROOT / "bench" / "results" / "adamw_8bit.json"
VARIANTS = ("float32", "8bit")


def main() -> None:
    from bench.memory import (
        add_demo_round_arguments,
        demo_round_groups,
        demo_task_source,
    )

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=10)
    add_demo_round_arguments(parser)
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args()

    import torch

    from node.cli.demo import demo_config
    from node.learning import models
    from node.learning.grpo import GrpoLearner, Policy

    torch.set_num_threads(args.threads)
    cfg = demo_config(Path(tempfile.gettempdir()), 0, model="bundled", threads=args.threads)
    train = cfg.training
    resolved = models.resolve(models.BUNDLED)
    model, tokenizer = models.load(resolved, cache_dir=Path(args.cache_dir), dtype=torch.float32, device="cpu")
    # float64: the rounds move each weight by ~1e-5, and sums over 135 M elements in float32 lose the cosine.
    start = _flat(model)
    learners, optimizer_seconds = {}, {variant: [] for variant in VARIANTS}
    for variant in VARIANTS:
        policy = Policy(model if variant == "float32" else copy.deepcopy(model), tokenizer,
                        generation_dtype=torch.float32, max_prompt_tokens=train.max_prompt_tokens)
        learner = GrpoLearner(
            policy, output_dir=Path(tempfile.mkdtemp(prefix=f"rl-swarm-adamw-{variant}-")) / "trl", device="cpu",
            mixed_bf16=False, num_generations=args.G, max_new_tokens=train.max_new_tokens,
            learning_rate=train.learning_rate, beta=train.beta, epsilon=train.epsilon,
            epsilon_high=train.epsilon_high, loss_type=train.loss_type, max_grad_norm=train.max_grad_norm, seed=0,
            micro_batch_groups=train.micro_batch_groups, adamw_8bit=variant == "8bit",
        )
        learner.optimizer.step = _timed(learner.optimizer.step, optimizer_seconds[variant])
        learners[variant] = learner
    source = learners["float32"].policy
    tasks = demo_task_source(resolved.params)

    rounds = []
    for number in range(args.rounds):
        groups = demo_round_groups(source, tasks, number, local=args.I, peer=args.J, generations=args.G,
                                   max_new_tokens=train.max_new_tokens, temperature=train.temperature,
                                   top_p=train.top_p)
        row = {"round": number + 1, "groups_with_spread": sum(len(set(g.rewards)) > 1 for g in groups)}
        for variant in (VARIANTS if number % 2 == 0 else VARIANTS[::-1]):
            started = time.perf_counter()
            learners[variant].step(groups)
            row[f"{variant}_step_s"] = round(time.perf_counter() - started, 2)
            row[f"{variant}_optimizer_s"] = round(optimizer_seconds[variant][-1], 2)
        moved = {variant: _flat(learner.policy.model) - start for variant, learner in learners.items()}
        reference, quantized = moved["float32"], moved["8bit"]
        row["cosine"] = round(float(torch.nn.functional.cosine_similarity(reference, quantized, dim=0)), 4)
        row["relative_difference"] = round(float((quantized - reference).norm() / reference.norm()), 4)
        rounds.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)

    summary = {variant: {"step_s_median": statistics.median(r[f"{variant}_step_s"] for r in rounds),
                         "optimizer_s_median": statistics.median(r[f"{variant}_optimizer_s"] for r in rounds)}
               for variant in VARIANTS}
    summary["after_last_round"] = {"cosine": rounds[-1]["cosine"],
                                   "relative_difference": rounds[-1]["relative_difference"]}
    result = {
        "settings": {"I": args.I, "J": args.J, "G": args.G, "max_new_tokens": train.max_new_tokens,
                     "micro_batch_groups": train.micro_batch_groups, "learning_rate": train.learning_rate,
                     "threads": args.threads, "rounds": args.rounds,
                     "malloc": {k: os.environ.get(k) for k in ("MALLOC_ARENA_MAX", "MALLOC_MMAP_THRESHOLD_")}},
        "summary": summary,
        "rounds": rounds,
    }
    print("| AdamW moments | step seconds (median) | optimizer step seconds (median) |\n|---|---|---|")
    for variant in VARIANTS:
        print(f"| {variant} | {summary[variant]['step_s_median']:.1f} | {summary[variant]['optimizer_s_median']:.2f} |")
    last = summary["after_last_round"]
    print(f"weight movement after {args.rounds} rounds: cosine {last['cosine']}, "
          f"relative difference {last['relative_difference']}")
    if not args.no_save:
        RESULTS.write_text(json.dumps(result, indent=1) + "\n")


def _flat(model):
    import torch

    return torch.cat([p.detach().flatten().double() for p in model.parameters()])


def _timed(step, seconds: list[float]):
    def timed(*args, **kwargs):
        started = time.perf_counter()
        result = step(*args, **kwargs)
        seconds.append(time.perf_counter() - started)
        return result

    return timed


if __name__ == "__main__":
    main()
