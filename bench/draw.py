"""CPU time of one decode step's draw and log-prob recording, the decode loops' before and after the inverse-CDF draw.

The step's work after the forward, as both loops (:mod:`node.learning.decoding` and ONNX Runtime's, which share it)
do it for 8 sampled rows of the bundled model's vocabulary: ``before`` is :func:`decoding.choose` as it was at
``--reference`` (``generate()``'s draw: an exponential for every row and vocabulary entry, ``argmax(probs / noise)``)
followed by the ``log_softmax`` its loops recorded log-probs with; ``after`` is this tree's ``choose`` (one uniform a
row against a float64 running sum; the log-prob from the draw's own sums). The logits are the bundled model's at the
last position of the issue's two one-shot prompts, each repeated 4 times. One torch thread; the variants alternate in
blocks of ``--steps`` steps, ``--blocks`` times, at each ``--settings`` (temperature/top_p); CPU seconds per step.

    python bench/draw.py --out bench/results/draw.json

Prints a markdown table and writes ``--out``: per setting and variant the median and range over blocks of the
milliseconds per step, and the per-block ratio before/after.
"""

from __future__ import annotations

import argparse
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

# main before the inverse-CDF draw
REFERENCE = "aa2fb8f"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--blocks", type=int, default=7)
    parser.add_argument("--rows", type=int, default=8)
    parser.add_argument("--settings", nargs="+", default=["1.0/1.0", "0.7/0.9"], help="temperature/top_p")
    parser.add_argument("--reference", default=REFERENCE)
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "draw.json"))
    parser.add_argument("--cache-dir", default=str(Path.home() / ".cache" / "rl-swarm-bench"))
    parser.add_argument("--load", default="", help="what else ran on the machine, recorded with the results")
    args = parser.parse_args()

    import torch

    from bench.generation import reference_decoding
    from node.learning import decoding, grpo, hardware, models
    from node.tasks.source import TaskSource, build_messages
    from node.tasks.taskref import DEFAULT_FAMILIES

    torch.set_num_threads(1)
    model, tokenizer = models.load(models.resolve(models.BUNDLED), cache_dir=Path(args.cache_dir),
                                   dtype=torch.float32, device="cpu")
    policy = grpo.Policy(model, tokenizer, generation_dtype=torch.float32, max_prompt_tokens=1024)
    tasks = TaskSource({family: 1.0 for family in DEFAULT_FAMILIES}, seed=1234).sample(2, random.Random(0))
    with torch.inference_mode():
        logits = torch.cat([model(input_ids=torch.tensor([policy.prompt_ids(build_messages(t.question))])).logits[:, -1]
                            for t in tasks])
    logits = logits.repeat_interleave(args.rows // len(tasks), 0)
    rows = torch.arange(len(logits))
    before = reference_decoding(args.reference)

    def old_step(scores, warpers):
        chosen, scores = before.choose(scores, warpers, rows, drawing_rows=len(rows), batch=len(rows))
        return chosen, scores.log_softmax(-1).gather(1, chosen[:, None])[:, 0]

    def new_step(scores, warpers):
        return decoding.choose(scores, warpers, rows, drawing_rows=len(rows), batch=len(rows),
                               draw=decoding.inverse_cdf)

    variants = {"before": old_step, "after": new_step}
    results = {}
    with torch.inference_mode():
        for setting in args.settings:
            temperature, top_p = map(float, setting.split("/"))
            warpers = decoding.warpers_for(temperature, top_p)
            ms = {name: [] for name in variants}
            for block in range(args.blocks):
                for name in (list(variants) if block % 2 == 0 else list(variants)[::-1]):
                    step = variants[name]
                    cpu = time.process_time()
                    for _ in range(args.steps):
                        step(logits.clone(), warpers)  # the loops hand the draw a fresh float32 copy of the logits
                    ms[name].append(1000 * (time.process_time() - cpu) / args.steps)
            ratios = [b / a for b, a in zip(ms["before"], ms["after"], strict=True)]
            results[setting] = {
                **{name: {"ms_per_step_median": round(statistics.median(v), 3),
                          "ms_per_step_range": [round(min(v), 3), round(max(v), 3)], "blocks": v}
                   for name, v in ms.items()},
                "before_over_after_median": round(statistics.median(ratios), 2),
                "before_over_after_range": [round(min(ratios), 2), round(max(ratios), 2)],
            }
    result = {"command": "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
              "settings": {"rows": len(logits), "vocab": logits.shape[-1], "steps": args.steps, "blocks": args.blocks,
                           "threads": 1, "reference_commit": args.reference, "torch": torch.__version__},
              "machine": {"description": hardware.detect().describe(), "load": args.load,
                          "loadavg": list(os.getloadavg())},
              "results": results}
    print("| temperature/top_p | before: ms per step, median (range) | after | before/after, median (range) |")
    print("|---|---|---|---|")
    for setting, row in results.items():
        cells = [f"{row[n]['ms_per_step_median']:.2f} ({row[n]['ms_per_step_range'][0]:.2f}-"
                 f"{row[n]['ms_per_step_range'][1]:.2f})" for n in variants]
        low, high = row["before_over_after_range"]
        print(f"| {setting} | {cells[0]} | {cells[1]} | {row['before_over_after_median']:.2f}x ({low:.2f}-{high:.2f}) |")
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
