"""What one held-out evaluation costs with batches of 16 questions (the node up to 2026-11-27) and of a number of rows
(questions x (1 + samples), the node since), and what it answers.

The node's evaluation as the node runs it (:class:`node.learning.evaluation.Evaluator`): the bundled model, its default
task families and ladders, evaluation seed 0, two levels, 48 new tokens (the demo's), with batches of 16 questions
(``before``) and with ``evaluation.CHUNK_ROWS`` set to each of ``--rows``. Two workloads: the sweeps' (``--questions``
greedy answers, no samples) and the demo's (64 questions, the greedy answer and 2 sampled ones). ``--sampler`` picks the
loop that answers (the node's ``training.sampler``: ``torch``, or ``onnxruntime``, the demo's on a CPU where it is
installed); ``--device cuda`` runs it on a GPU (the sweeps' float32 sampling there), where the peak of the GPU memory
torch reserved is reported too. Each measurement is a process of its own, so its peak RSS is its own; a repetition runs
every (workload, batching) once, in an order that alternates between repetitions, so a busy machine slows them alike.
Reported per workload and batching: wall and CPU seconds of ``Evaluator.run`` (one torch thread), the peak RSS of the
process (the model loaded), the accuracy, and whether every batching gave the same greedy answers (question by question)
as ``before``.

    python bench/evaluation_chunks.py --rows 48 64 --repeats 3
    python bench/evaluation_chunks.py --rows 48 64 --repeats 3 --sampler onnxruntime \\
        --out bench/results/evaluation_chunks_ort.json

Writes bench/results/evaluation_chunks.json (or ``--out``) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path
from unittest import mock

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results" / "evaluation_chunks.json"
MAX_NEW_TOKENS = 48
DEMO = {"questions": 64, "samples": 2}
BEFORE_QUESTIONS = 16  # the node's batches up to 2026-11-27, whatever their samples
BEFORE = 0  # stands for those batches where a row count goes


def measure(rows: int, questions: int, samples: int, sampler: str, device: str, cache_dir: Path) -> dict:
    """One evaluation in this process, ``rows`` a batch (``BEFORE``: ``BEFORE_QUESTIONS``): seconds, peak RSS,
    answers."""
    import torch

    from node.learning import evaluation, grpo, models
    from node.learning.evaluation import EvalSettings, Evaluator
    from node.tasks.curriculum import default_mix
    from node.tasks.source import TaskSource

    torch.set_num_threads(1)
    resolved = models.resolve(models.BUNDLED)
    model, tokenizer = models.load(resolved, cache_dir=cache_dir, dtype=torch.float32, device=device)
    policy = grpo.Policy(model, tokenizer, generation_dtype=torch.float32, max_prompt_tokens=1024, sampler=sampler)
    mix = default_mix(resolved.params)
    tasks = TaskSource(mix.weights, seed=0, ladders=mix.ladders)
    settings = EvalSettings(questions=questions, samples=samples, max_new_tokens=MAX_NEW_TOKENS)
    evaluator = Evaluator(policy, tasks, settings)
    batching = (mock.patch.object(evaluation, "questions_per_chunk", lambda samples: BEFORE_QUESTIONS)
                if rows == BEFORE
                else mock.patch.object(evaluation, "CHUNK_ROWS", rows))
    with batching:
        chunk = evaluation.questions_per_chunk(samples)
        started, cpu_started = time.perf_counter(), time.process_time()
        result = evaluator.run(round=0, rounds_trained=0)
        seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    greedy = [[a.family, a.answer, a.correct] for a in result.answers.answers]
    return {"rows": rows, "questions": questions, "samples": samples, "questions_per_chunk": chunk,
            "seconds": round(seconds, 2), "cpu_seconds": round(cpu_seconds, 2),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
            "peak_gpu_mb": round(torch.cuda.max_memory_reserved() / 2**20) if device == "cuda" else None,
            "accuracy_greedy": result.summary.accuracy_greedy, "exact_mean": result.summary.exact_mean,
            "greedy_answers": hashlib.sha256(json.dumps(greedy).encode()).hexdigest()[:16]}


def _cell(spread: dict) -> str:
    return f"{spread['median']:.1f} ({spread['range'][0]:.1f}-{spread['range'][1]:.1f})"


def summarize(runs: list[dict], rows: list[int]) -> dict:
    """Per workload and batching: median and range of seconds, CPU seconds and peak RSS; the CPU-seconds ratio of
    ``before`` over each, taken within a repetition; whether the greedy answers matched ``before``'s."""
    summary: dict[str, dict] = {}
    for workload in sorted({r["workload"] for r in runs}):
        mine = [r for r in runs if r["workload"] == workload]
        first = {r["repeat"]: r for r in mine if r["rows"] == rows[0]}
        summary[workload] = {}
        for count in rows:
            these = [r for r in mine if r["rows"] == count]
            entry = {key: {"median": statistics.median(r[key] for r in these),
                           "range": [min(r[key] for r in these), max(r[key] for r in these)]}
                     for key in ("seconds", "cpu_seconds", "peak_rss_mb")}
            ratios = [first[r["repeat"]]["cpu_seconds"] / r["cpu_seconds"] for r in these if r["repeat"] in first]
            entry["cpu_speedup_over_first"] = {"median": round(statistics.median(ratios), 3),
                                               "range": [round(min(ratios), 3), round(max(ratios), 3)]}
            entry["questions_per_chunk"] = these[0]["questions_per_chunk"]
            entry["accuracy_greedy"] = sorted({r["accuracy_greedy"] for r in these})
            entry["same_greedy_answers_as_first"] = all(
                r["greedy_answers"] == first[r["repeat"]]["greedy_answers"] for r in these if r["repeat"] in first)
            summary[workload]["before" if count == BEFORE else str(count)] = entry
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, nargs="+", default=[48], help="rows a batch, each beside 16 questions")
    parser.add_argument("--questions", type=int, default=200, help="questions of the greedy-only workload")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--sampler", choices=["torch", "onnxruntime"], default="torch")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--cache-dir", type=Path, default=Path.home() / ".cache" / "rl-swarm-bench")
    parser.add_argument("--load", default="", help="what else ran on the machine, recorded with the results")
    parser.add_argument("--one", nargs=3, type=int, metavar=("ROWS", "QUESTIONS", "SAMPLES"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(*args.one, sampler=args.sampler, device=args.device, cache_dir=args.cache_dir)))
        return

    from node.learning import hardware

    workloads = {"greedy": (args.questions, 0), "demo": (DEMO["questions"], DEMO["samples"])}
    rows = [BEFORE, *args.rows]
    runs: list[dict] = []
    for repeat in range(1, args.repeats + 1):
        order = [(w, r) for w in workloads for r in rows]
        for workload, count in order if repeat % 2 else order[::-1]:
            questions, samples = workloads[workload]
            command = [sys.executable, __file__, "--one", str(count), str(questions), str(samples),
                       "--sampler", args.sampler, "--device", args.device, "--cache-dir", str(args.cache_dir)]
            out = subprocess.run(command, check=True, capture_output=True, text=True)
            run = {"repeat": repeat, "workload": workload, **json.loads(out.stdout.strip().splitlines()[-1])}
            runs.append(run)
            print(json.dumps(run), file=sys.stderr, flush=True)
    import torch

    summary = summarize(runs, rows)
    result = {
        "command": "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
        "settings": {"model": "bundled SmolLM2-135M-Instruct", "dtype": "float32", "threads": 1,
                     "sampler": args.sampler, "device": args.device,
                     "max_new_tokens": MAX_NEW_TOKENS, "workloads": {w: {"questions": q, "samples": s}
                                                                     for w, (q, s) in workloads.items()},
                     "rows": args.rows, "before_questions": BEFORE_QUESTIONS, "repeats": args.repeats,
                     "torch": torch.__version__},
        "machine": {"description": hardware.detect().describe(), "load": args.load},
        "summary": summary,
        "runs": runs,
    }
    print("| workload | batches | questions a batch | wall s | CPU s | CPU speed-up | peak RSS MB | same greedy |")
    print("|---|---|---|---|---|---|---|---|")
    for workload, by_rows in summary.items():
        for count, e in by_rows.items():
            speedup = e["cpu_speedup_over_first"]
            print(f"| {workload} | {count} | {e['questions_per_chunk']} | {_cell(e['seconds'])} "
                  f"| {_cell(e['cpu_seconds'])} | {speedup['median']:.2f}x "
                  f"({speedup['range'][0]:.2f}-{speedup['range'][1]:.2f}) "
                  f"| {_cell(e['peak_rss_mb'])} | {e['same_greedy_answers_as_first']} |")
    args.out.write_text(json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
