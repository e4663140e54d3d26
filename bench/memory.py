"""Peak and kept RSS per round of the node's own round (generate, score, one GRPO step), over many rounds.

Each model and mode runs in its own child process, started with the node's environment
(:func:`node.launch.node_environment`: the allocator settings a node gets), so one measurement cannot inherit
another's heap. A sampling thread reads the child's RSS every few milliseconds; per round it reports the peak of
the generation phase, the peak of the training step and the RSS kept after the round.

The round is the demo's round (:func:`node.cli.demo.demo_config`: I local questions x G completions generated here with
the node's prompts and worked examples, and J "peer" groups made of the same completion texts re-tokenized under
other questions, as a peer's texts are), so it needs no swarm.

    python bench/memory.py                               # catalog models that fit here, full and LoRA, 20 rounds
    python bench/memory.py --models bundled --modes full --rounds 3 --no-save
    python bench/memory.py --models Qwen/Qwen2.5-0.5B-Instruct --twin --rounds 3   # Hub models, offline

``--twin`` measures Hub catalog models as their shape twins (:mod:`bench.shape_twin`: the architecture with random
weights, whose completions all run to the token limit). Rows go into bench/results/memory.json, replacing earlier rows
of the same model and mode; a markdown table is printed.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import shape_twin

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

RESULTS = ROOT / "bench" / "results" / "memory.json"
GB = 1e9


class PeakSampler:
    """Polls this process's RSS in a thread; :meth:`take` returns the highest value since the last call."""

    def __init__(self, interval_s: float = 0.005) -> None:
        import psutil

        self._process = psutil.Process()
        self._interval = interval_s
        self._peak = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            rss = self._process.memory_info().rss
            with self._lock:
                self._peak = max(self._peak, rss)
            time.sleep(self._interval)

    def rss(self) -> int:
        return self._process.memory_info().rss

    def take(self) -> int:
        rss = self.rss()
        with self._lock:
            peak, self._peak = max(self._peak, rss), rss
        return peak

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def child(model_ref: str, mode: str, rounds: int, args: argparse.Namespace) -> None:
    """Run ``rounds`` node rounds in this process and print one JSON line per phase and round."""
    sampler = PeakSampler()

    import torch

    from node import allocator
    from node.learning import hardware, models
    from node.learning.grpo import GrpoLearner, LoraSettings, Policy
    torch.set_num_threads(args.threads)

    def emit(**row) -> None:
        print(json.dumps(row), flush=True)

    emit(phase="start", rss_gb=sampler.rss() / GB)
    resolved = models.resolve(model_ref)
    model, tokenizer = models.load(
        resolved, cache_dir=Path(args.cache_dir), dtype=torch.float32, device="cpu"
    )
    gc.collect()
    emit(phase="loaded", rss_gb=sampler.rss() / GB, peak_gb=sampler.take() / GB)
    hw = hardware.detect()
    generation_dtype = torch.bfloat16 if hardware.auto_bf16(hw, "cpu", sampling=True) else torch.float32
    if args.generation_dtype != "auto":
        generation_dtype = getattr(torch, args.generation_dtype)
    lora = LoraSettings(rank=args.lora_rank) if mode == "lora" else None
    policy = Policy(model, tokenizer, generation_dtype=generation_dtype, max_prompt_tokens=1024, sampler=args.sampler)
    work = Path(tempfile.mkdtemp(prefix="rl-swarm-memory-"))
    learner = GrpoLearner(
        policy, output_dir=work / "trl", device="cpu", mixed_bf16=False, num_generations=args.G,
        max_new_tokens=args.max_new_tokens, learning_rate=5e-6, beta=0.0, epsilon=0.2, epsilon_high=0.28,
        loss_type="grpo", max_grad_norm=1.0, seed=0, micro_batch_groups=args.micro_batch_groups, lora=lora,
        adamw_8bit=models.uses_adamw_8bit(args.optimizer_states, lora=lora is not None, device="cpu"),
    )
    gc.collect()
    emit(phase="ready", rss_gb=sampler.rss() / GB, peak_gb=sampler.take() / GB,
         generation_dtype=str(generation_dtype).removeprefix("torch."))

    tasks = demo_task_source(resolved.params)
    deadline = time.monotonic() + args.max_minutes * 60 if args.max_minutes else None
    for number in range(rounds):
        if deadline is not None and number >= 2 and time.monotonic() > deadline:
            break  # out of time on a busy machine: report the rounds done
        started = time.perf_counter()
        groups = demo_round_groups(policy, tasks, number, local=args.I, peer=args.J, generations=args.G,
                                   max_new_tokens=args.max_new_tokens)
        generate_s = time.perf_counter() - started  # scoring and tokenizing take milliseconds of it
        generate_peak = sampler.take()
        t0 = time.perf_counter()
        learner.step(groups)
        train_s = time.perf_counter() - t0
        train_peak = sampler.take()
        gc.collect()
        if not args.no_trim:
            allocator.trim_heap()  # as the node does after every round
        emit(
            phase="round", round=number + 1, generate_peak_gb=generate_peak / GB, train_peak_gb=train_peak / GB,
            kept_gb=sampler.rss() / GB, generate_s=generate_s, train_s=train_s,
            trained_tokens=sum(c.length for g in groups for c in g.completions),
            prompt_tokens=sum(len(g.prompt_ids) * len(g.completions) for g in groups),
        )
    sampler.close()


def add_demo_round_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of every bench that trains demo rounds (:func:`demo_round_groups`): their shape, the torch
    threads, and where the converted model is cached."""
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("-I", type=int, default=2, help="local questions per round")
    parser.add_argument("-J", type=int, default=2, help="peer groups per round")
    parser.add_argument("-G", type=int, default=4, help="completions per question")
    parser.add_argument("--cache-dir", default=str(Path.home() / ".cache" / "rl-swarm-bench"))


def demo_task_source(params: int | None):
    """The questions of the demo's rounds for a model of ``params`` parameters, from one fixed seed, so every bench
    (and every run of it) trains on the same ones."""
    from node.runner import task_mix
    from node.tasks.source import TaskSource

    mix = task_mix(_demo_config(), params)
    return TaskSource(mix.weights, seed=1234, ladders=mix.ladders)


def demo_round_groups(policy, tasks, number: int, *, local: int, peer: int, generations: int, max_new_tokens: int,
                      temperature: float = 1.0, top_p: float = 1.0) -> list:
    """One demo round's training groups, made here without a swarm: ``local`` questions x ``generations``
    completions sampled by ``policy`` and scored by the verifier, and ``peer`` "peer" groups made of the same
    completion texts re-tokenized under other questions, as a peer's texts are, with rewards that alternate so every
    such group has a gradient. Round ``number`` seeds both the questions and the sampling."""
    from node.learning.grpo import TrainGroup
    from node.tasks.source import grade

    rng = random.Random(number)
    questions = tasks.sample(local, rng)
    prompts = [policy.prompt_ids(tasks.messages(task)) for task in questions]
    generated = policy.generate(prompts, num_generations=generations, max_new_tokens=max_new_tokens,
                                temperature=temperature, top_p=top_p, seed=number)
    groups = [
        TrainGroup(prompt, tuple(completions), tuple(grade(task, c.text, finished=c.finished).reward for c in completions))
        for task, prompt, completions in zip(questions, prompts, generated, strict=True)
    ]
    for task, completions in zip(tasks.sample(peer, rng), generated * peer, strict=False):
        encoded = tuple(policy.encode_completion(c.text, finished=c.finished, max_new_tokens=max_new_tokens)
                        for c in completions)
        groups.append(TrainGroup(policy.prompt_ids(tasks.messages(task)), encoded,
                                 tuple(float(i % 2) for i in range(len(encoded)))))
    return groups


def run_child(model: str, mode: str, args: argparse.Namespace) -> list[dict]:
    from node.launch import node_environment

    env = node_environment()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    if args.env:
        env.update(dict(item.split("=", 1) for item in args.env))
    command = [sys.executable, __file__, "--child", model, mode, "--rounds", str(args.rounds),
               "--threads", str(args.threads), "-I", str(args.I), "-J", str(args.J), "-G", str(args.G),
               "--max-new-tokens", str(args.max_new_tokens), "--micro-batch-groups", str(args.micro_batch_groups),
               "--lora-rank", str(args.lora_rank), "--cache-dir", args.cache_dir,
               "--generation-dtype", args.generation_dtype, "--sampler", args.sampler,
               "--optimizer-states", args.optimizer_states,
               "--max-minutes", str(args.max_minutes), *(["--no-trim"] if args.no_trim else [])]
    return child_rows(command, f"{model} {mode}", env=env)


def child_rows(command: list[str], label: str, *, env: dict | None = None) -> list[dict]:
    """Run a bench child that prints one JSON object per line; echo each row to stderr under ``label`` as it
    comes, return them all, raise if the child failed."""
    rows = []
    with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True) as process:
        for line in process.stdout:
            row = json.loads(line)
            rows.append(row)
            print(f"  {label}: {row}", file=sys.stderr, flush=True)
    if process.returncode:
        raise RuntimeError(f"{label} failed with exit code {process.returncode}")
    return rows


def _demo_config():
    from node.cli.demo import demo_config

    return demo_config(Path(tempfile.gettempdir()), 0, model="bundled", threads=1)


def summarize(model: str, mode: str, rows: list[dict], requested: int) -> dict:
    rounds = [r for r in rows if r["phase"] == "round"]
    ready = next(r for r in rows if r["phase"] == "ready")
    peaks = [max(r["generate_peak_gb"], r["train_peak_gb"]) for r in rounds]
    return {
        "model": model,
        "mode": mode,
        "peak_rss_gb": round(max(peaks + [ready["peak_gb"]]), 3),
        "kept_rss_gb_round1": round(rounds[0]["kept_gb"], 3),
        "kept_rss_gb_round20": round(rounds[19]["kept_gb"], 3) if len(rounds) >= 20 else None,
        "kept_rss_gb_last_round": round(rounds[-1]["kept_gb"], 3),
        "rss_after_load_gb": round(ready["rss_gb"], 3),
        "generate_peak_gb_max": round(max(r["generate_peak_gb"] for r in rounds), 3),
        "train_peak_gb_max": round(max(r["train_peak_gb"] for r in rounds), 3),
        "train_s_median": round(sorted(r["train_s"] for r in rounds)[len(rounds) // 2], 2),
        "generate_s_median": round(sorted(r["generate_s"] for r in rounds)[len(rounds) // 2], 2),
        "trained_tokens_per_round": round(sum(r["trained_tokens"] for r in rounds) / len(rounds)),
        "rounds": len(rounds),
        "kept_rss_gb_per_round": [round(r["kept_gb"], 3) for r in rounds],
        "peak_rss_gb_per_round": [round(p, 3) for p in peaks],
        **({"note": f"partial: {len(rounds)} of {requested} rounds in the time allowed (--max-minutes)"}
           if len(rounds) < requested else {}),
    }


def save(row: dict) -> None:
    """Put ``row`` into the results file in place of an earlier row of the same model and mode."""
    saved = json.loads(RESULTS.read_text(encoding="utf-8"))["rows"] if RESULTS.is_file() else []
    rows = [r for r in saved if (r["model"], r["mode"]) != (row["model"], row["mode"])] + [row]
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"rows": rows}, indent=1) + "\n", encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--child", nargs=2, metavar=("MODEL", "MODE"), help=argparse.SUPPRESS)
    parser.add_argument("--models", nargs="+", default=["bundled"])
    parser.add_argument("--modes", nargs="+", default=["full", "lora"], choices=["full", "lora"])
    parser.add_argument("--rounds", type=int, default=20)
    add_demo_round_arguments(parser)
    parser.add_argument("--max-new-tokens", type=int, default=None, help="default: the demo's")
    parser.add_argument("--micro-batch-groups", type=int, default=None, help="default: the demo's")
    parser.add_argument("--lora-rank", type=int, default=16)
    parser.add_argument("--generation-dtype", default=None, choices=["auto", "float32", "bfloat16"],
                        help="default: the demo's")
    parser.add_argument("--sampler", default=None, choices=["auto", "torch", "onnxruntime"], help="default: the demo's")
    parser.add_argument("--optimizer-states", default="auto", choices=["auto", "float32", "8bit"])
    parser.add_argument("--max-minutes", type=float, default=0,
                        help="stop a model's rounds after this long (0 = never); the rounds done are reported")
    parser.add_argument("--env", nargs="*", help="extra KEY=VALUE for the children (e.g. to compare allocators)")
    parser.add_argument("--no-trim", action="store_true",
                        help="skip the heap trim the node does after every round (node.allocator.trim_heap)")
    parser.add_argument("--twin", action="store_true",
                        help="measure Hub catalog models as their shape twins (random weights, same architecture)")
    parser.add_argument("--no-save", action="store_true")
    args = parser.parse_args()
    demo = _demo_config().training
    for name in ("max_new_tokens", "micro_batch_groups", "generation_dtype", "sampler"):
        if getattr(args, name) is None:
            setattr(args, name, getattr(demo, name))
    if args.child:
        child(*args.child, args.rounds, args)
        return
    rows = []
    settings = {k: getattr(args, k) for k in ("rounds", "threads", "I", "J", "G", "max_new_tokens", "micro_batch_groups",
                                              "lora_rank", "generation_dtype", "sampler", "optimizer_states",
                                              "max_minutes")}
    for model in args.models:
        source = str(shape_twin.build(model, Path(args.cache_dir))) if args.twin else model
        for mode in args.modes:
            row = summarize(model, mode, run_child(source, mode, args), args.rounds)
            row["weights"] = "random, shape twin (bench/shape_twin.py)" if args.twin else "the model's own"
            row["settings"] = settings
            rows.append(row)
            if not args.no_save:
                save(row)
    print("| model | mode | rounds | peak RSS GB | kept RSS GB round 1 | kept RSS GB last round | train s/round |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['model']} | {r['mode']} | {r['rounds']} | {r['peak_rss_gb']:.2f} | {r['kept_rss_gb_round1']:.2f} | "
              f"{r['kept_rss_gb_last_round']:.2f} | {r['train_s_median']:.1f} |")


if __name__ == "__main__":
    main()
