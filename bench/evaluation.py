"""What one held-out evaluation costs, with each chunk running every whole prompt (``whole``) or copying the
prefix all prompts share, run once per evaluation (``prefix``), side by side in one process.

The node's evaluation as the node runs it (:class:`node.learning.evaluation.Evaluator`): the bundled model, its
default task families and ladders, evaluation seed 0, two levels, greedy answers only, 128 new tokens (the training
default), chunks of 16 questions (``CHUNK_QUESTIONS`` here: the node's batches until bench/evaluation_chunks.py
widened greedy-only ones, kept so that the results file reruns). Each repetition runs one evaluation of the largest
``--questions`` per path, in alternating order, so a busy machine slows both paths alike; wall and CPU seconds of
``Evaluator.run`` (one torch thread), the ratio whole / prefix taken within a repetition, and whether the two paths'
greedy answers are the same tokens. The evaluation sets are nested (the first 64 of 256 questions are the
64-question set, in the same chunks, with the same shared prefix), so a smaller count's seconds are read when the
evaluation has answered that many questions (its progress callback) instead of paying for a second evaluation.

    python bench/evaluation.py --questions 64 256 --repeats 3

Writes bench/results/evaluation.json (or ``--out``) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from contextlib import nullcontext
from pathlib import Path
from unittest import mock

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results" / "evaluation.json"
PATHS = ("whole", "prefix")
CHUNK_QUESTIONS = 16


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--questions", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=str(RESULTS))
    parser.add_argument("--cache-dir", default=str(Path.home() / ".cache" / "rl-swarm-bench"))
    parser.add_argument("--load", default="", help="what else ran on the machine, recorded with the results")
    args = parser.parse_args()

    import torch

    from node.learning import evaluation, grpo, models
    from node.learning.evaluation import EvalSettings, Evaluator
    from node.tasks.curriculum import default_mix
    from node.tasks.source import TaskSource

    torch.set_num_threads(args.threads)
    resolved = models.resolve(models.BUNDLED)
    model, tokenizer = models.load(resolved, cache_dir=Path(args.cache_dir), dtype=torch.float32, device="cpu")
    policy = grpo.Policy(model, tokenizer, generation_dtype=torch.float32, max_prompt_tokens=1024)
    mix = default_mix(resolved.params)
    tasks = TaskSource(mix.weights, seed=0, ladders=mix.ladders)
    total = max(args.questions)
    if any(n % CHUNK_QUESTIONS for n in args.questions):
        parser.error(f"--questions must be multiples of {CHUNK_QUESTIONS} (whole chunks)")
    evaluator = Evaluator(policy, tasks, EvalSettings(questions=total, max_new_tokens=args.max_new_tokens))
    answers: list = []
    generate = policy.generate

    def recording(*call, **kwargs):
        groups = generate(*call, **kwargs)
        answers.extend(group[0] for group in groups)
        return groups

    policy.generate = recording
    runs, completions = [], {}
    prompts = evaluator._prompts
    for number in range(args.repeats):
        for path in PATHS if number % 2 == 0 else PATHS[::-1]:
            # today's path: no prefix is long enough, every chunk runs its whole prompts
            whole = mock.patch.object(evaluation, "MIN_SHARED_PREFIX", 10**9) if path == "whole" else nullcontext()
            answers.clear()
            gc.collect()
            marks: dict[int, tuple[float, float]] = {}
            with whole, mock.patch.object(evaluation, "CHUNK_ROWS", CHUNK_QUESTIONS):  # greedy only: 1 row each
                started, cpu_started = time.perf_counter(), time.process_time()
                # progress(done, total) comes before each chunk and at the end: the cost of the first `done` questions
                evaluator.run(round=0, rounds_trained=0, progress=lambda done, _: marks.setdefault(
                    done, (time.perf_counter() - started, time.process_time() - cpu_started)))
            completions[path, number] = [c.ids for c in answers]
            for n in args.questions:
                seconds, cpu_seconds = marks[n]
                row = {"repeat": number + 1, "questions": n, "path": path, "seconds": round(seconds, 2),
                       "cpu_seconds": round(cpu_seconds, 2),
                       "new_tokens": sum(c.length for c in answers[:n])}
                runs.append(row)
                print(json.dumps(row), file=sys.stderr, flush=True)
        _save(args, runs, completions, prompts, number + 1)  # after every repetition: a cut-short run keeps its part


def _save(args, runs: list[dict], completions: dict, prompts: list[tuple[int, ...]], repeats: int) -> None:
    import torch

    from node.learning import hardware
    from node.learning.decoding import shared_prefix

    summary = _summary(runs)
    for n in args.questions:
        summary[str(n)]["same_greedy_answers"] = all(
            completions["whole", r][:n] == completions["prefix", r][:n] for r in range(repeats))
    shared = len(shared_prefix(prompts))
    result = {
        "command": "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
        "settings": {"model": "bundled SmolLM2-135M-Instruct", "dtype": "float32", "threads": args.threads,
                     "max_new_tokens": args.max_new_tokens, "samples": 0, "repeats": repeats,
                     "chunk_questions": CHUNK_QUESTIONS, "torch": torch.__version__,
                     "prompt_tokens_min_median_max": [min(map(len, prompts)), statistics.median(map(len, prompts)),
                                                      max(map(len, prompts))],
                     "shared_prefix_tokens": shared},
        "machine": {"description": hardware.detect().describe(), "load": args.load},
        "summary": summary,
        "runs": runs,
    }
    print("| questions | path | wall s, median (range) | CPU s, median (range) | CPU whole / prefix | same greedy |")
    print("|---|---|---|---|---|---|")
    for n in args.questions:
        for path in PATHS:
            row = summary[str(n)][path]
            ratio = (f"{row['cpu_speedup_median']:.2f}x ({row['cpu_speedup_range'][0]:.2f}-"
                     f"{row['cpu_speedup_range'][1]:.2f})" if path == "prefix" else "-")
            print(f"| {n} | {path} | {_cell(row, 'seconds')} | {_cell(row, 'cpu_seconds')} | {ratio} "
                  f"| {summary[str(n)]['same_greedy_answers']} |")
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")


def _summary(runs: list[dict]) -> dict:
    """Per question count and path: median and range of wall and CPU seconds; for ``prefix``, the CPU and wall
    speed-up over ``whole`` taken within each repetition (the same machine load for both)."""
    summary: dict[str, dict] = {}
    for n in sorted({r["questions"] for r in runs}):
        mine = {path: {r["repeat"]: r for r in runs if r["questions"] == n and r["path"] == path} for path in PATHS}
        summary[str(n)] = {}
        for path, rows in mine.items():
            row: dict = {}
            for key in ("seconds", "cpu_seconds"):
                values = [r[key] for r in rows.values()]
                row[f"{key}_median"] = round(statistics.median(values), 2)
                row[f"{key}_range"] = [min(values), max(values)]
            summary[str(n)][path] = row
        for key, name in (("cpu_seconds", "cpu_speedup"), ("seconds", "wall_speedup")):
            ratios = [mine["whole"][r][key] / mine["prefix"][r][key] for r in mine["prefix"] if r in mine["whole"]]
            summary[str(n)]["prefix"][f"{name}_median"] = round(statistics.median(ratios), 3)
            summary[str(n)]["prefix"][f"{name}_range"] = [round(min(ratios), 3), round(max(ratios), 3)]
    return summary


def _cell(row: dict, key: str) -> str:
    low, high = row[f"{key}_range"]
    return f"{row[f'{key}_median']:.1f} ({low:.1f}-{high:.1f})"


if __name__ == "__main__":
    main()
