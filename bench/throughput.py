"""Generation tokens/s, seconds per round and peak RSS: our node's round vs the reference implementation (genrl)
and a plain TRL GRPOTrainer, one run, same model, same prompts, same settings, same machine.

- ``ours``: the node's parts: one batched ``Policy.generate`` of all I x G completions (bfloat16 sampler where the
  CPU has bfloat16) and one step of the long-lived GRPO learner;
- ``trl``: ``GRPOTrainer.train()`` with its own generation (transformers ``generate``), I x G completions a step;
- ``genrl``: gensyn-genrl from PyPI (the reference implementation's GRPO trainer and generation: one ``generate``
  call per completion index), installed by this script into its own virtualenv that reuses this interpreter's
  torch and transformers (so no second torch is downloaded and the versions are equal).

Every variant is solo (no peer groups), float32 training, Adam(W) at the same learning rate, one optimizer step
per round, each in its own child process with the node's environment; the first round is a warm-up. Generation is
also counted per second of the process's CPU time: with one thread, on a machine shared with other work, that
moves far less with the machine's load than tokens per wall-clock second do.

    python bench/throughput.py --rounds 2
    python bench/throughput.py --variants ours trl          # without genrl

Writes bench/results/throughput.json and prints a markdown table with ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import site
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from memory import GB, ROOT, PeakSampler  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "throughput.json"
GENRL = "gensyn-genrl==0.3.0"
GENRL_EXTRAS = ("wandb", "tensorboard")  # imported by genrl's trainer module; neither depends on torch


def reward(task, text: str) -> float:
    """The verifier's score plus a tiny length term: never all-equal in a group, so every variant trains every
    round (genrl skips the update when all rewards are 0, and a bundled model's early rewards often are)."""
    from node.tasks.source import score

    return score(task, text) + 1e-3 * min(len(text), 1000) / 1000


def questions(args) -> list[list]:
    from node.tasks.source import TaskSource
    from node.tasks.taskref import DEFAULT_FAMILIES

    tasks = TaskSource({family: 1.0 for family in DEFAULT_FAMILIES}, seed=1234)
    return [tasks.sample(args.I, random.Random(r)) for r in range(args.rounds + 1)]


def load(args):
    import torch

    from node.learning import models

    return models.load(models.resolve(args.model), cache_dir=Path(args.cache_dir), dtype=torch.float32, device="cpu")


def run_ours(args, sampler: PeakSampler) -> list[dict]:
    import torch

    from node.learning import hardware
    from node.learning.grpo import GrpoLearner, Policy, TrainGroup
    from node.tasks.source import build_messages

    model, tokenizer = load(args)
    dtype = torch.bfloat16 if hardware.auto_bf16(hardware.detect(), "cpu", sampling=True) else torch.float32
    policy = Policy(model, tokenizer, generation_dtype=dtype, max_prompt_tokens=1024)
    learner = GrpoLearner(
        policy, output_dir=Path(tempfile.mkdtemp()) / "trl", device="cpu", mixed_bf16=False, num_generations=args.G,
        max_new_tokens=args.max_new_tokens, learning_rate=args.lr, beta=0.0, epsilon=0.2, epsilon_high=0.28,
        loss_type="grpo", max_grad_norm=1.0, seed=0,
    )
    rows = []
    for number, tasks in enumerate(questions(args)):
        t0, c0 = time.perf_counter(), time.process_time()
        prompts = [policy.prompt_ids(build_messages(task.question)) for task in tasks]
        groups = policy.generate(prompts, num_generations=args.G, max_new_tokens=args.max_new_tokens,
                                 temperature=1.0, top_p=1.0, seed=number)
        t1, c1 = time.perf_counter(), time.process_time()
        learner.step([
            TrainGroup(prompt, tuple(group), tuple(reward(task, c.text) for c in group))
            for task, prompt, group in zip(tasks, prompts, groups, strict=True)
        ])
        rows.append(dict(generate_s=t1 - t0, generate_cpu_s=c1 - c0, round_s=time.perf_counter() - t0,
                         tokens=sum(len(c.ids) for g in groups for c in g), peak=sampler.take()))
    return rows


def run_trl(args, sampler: PeakSampler) -> list[dict]:
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from node.tasks.source import build_messages

    model, tokenizer = load(args)
    rounds = questions(args)
    by_question = {task.question: task for tasks in rounds for task in tasks}

    def rewards(prompts, completions, **kwargs):
        return [reward(by_question[p[-1]["content"]], c[0]["content"]) for p, c in zip(prompts, completions, strict=True)]

    config = GRPOConfig(
        output_dir=tempfile.mkdtemp(), report_to=[], use_cpu=True, bf16=False, num_generations=args.G,
        per_device_train_batch_size=args.I * args.G, max_completion_length=args.max_new_tokens,
        learning_rate=args.lr, beta=0.0, epsilon=0.2, epsilon_high=0.28, loss_type="grpo", optim="adamw_torch",
        max_steps=len(rounds), logging_steps=1, save_strategy="no", shuffle_dataset=False, temperature=1.0,
        top_p=1.0, seed=0, disable_dropout=True,
    )
    prompts = [build_messages(task.question) for tasks in rounds for task in tasks]
    trainer = GRPOTrainer(model=model, reward_funcs=[rewards], args=config,
                          train_dataset=Dataset.from_dict({"prompt": prompts}), processing_class=tokenizer)
    rows: list[dict] = []
    generate = trainer._generate_single_turn

    def timed_generate(*a, **k):
        t0, c0 = time.perf_counter(), time.process_time()
        out = generate(*a, **k)
        rows.append(dict(generate_s=time.perf_counter() - t0, generate_cpu_s=time.process_time() - c0,
                         tokens=sum(len(ids) for ids in out[0])))
        return out

    trainer._generate_single_turn = timed_generate
    ends = []

    class Clock(TrainerCallback):
        def on_step_end(self, *a, **k):
            ends.append(time.perf_counter())
            rows[len(ends) - 1]["peak"] = sampler.take()

    trainer.add_callback(Clock())
    started = time.perf_counter()
    trainer.train()
    for i, row in enumerate(rows):
        row["round_s"] = ends[i] - (started if i == 0 else ends[i - 1])
    return rows


def run_genrl(args, sampler: PeakSampler) -> list[dict]:
    """The reference trainer driven with the smallest stand-ins for its game state, data and reward managers."""
    import torch
    from genrl.trainer.grpo_trainer import GRPOLanguageTrainerModule, GRPOTrainerConfig

    from node.tasks.source import build_messages

    model, tokenizer = load(args)
    config = GRPOTrainerConfig(
        epsilon=0.2, epsilon_high=0.28, beta=0.0, temperature=1.0, dtype="float32", max_new_tokens=args.max_new_tokens,
        num_generations=args.G, learning_rate=args.lr, minibatch_size=args.I * args.G,  # one optimizer step a round
    )
    trainer = GRPOLanguageTrainerModule([model], config, processing_class=tokenizer, log_dir=tempfile.mkdtemp())
    rows = []
    for number, tasks in enumerate(questions(args)):
        torch.manual_seed(number)
        t0, c0 = time.perf_counter(), time.process_time()
        inputs = [{"prompt": build_messages(task.question)} for task in tasks]
        rollout, rollout_ids = trainer.generate(inputs, return_completion_ids=True)
        t1, c1 = time.perf_counter(), time.process_time()
        tokens = sum(int((ids != tokenizer.pad_token_id).sum()) for group in rollout_ids for ids in group)
        scores = [[[reward(task, text) for text in group]] for task, group in zip(tasks, rollout, strict=True)]
        stage = _GenrlStage(inputs, rollout, scores)
        trainer.model.train()
        trainer.step(0, stage, stage, stage, trainer.global_step)
        trainer.model.eval()
        rows.append(dict(generate_s=t1 - t0, generate_cpu_s=c1 - c0, round_s=time.perf_counter() - t0, tokens=tokens,
                         peak=sampler.take()))
    return rows


class _GenrlStage:
    """One agent, one batch: the game state, data manager and reward manager genrl's ``step`` reads."""

    def __init__(self, inputs, rollout, rewards) -> None:
        self.inputs, self.rollout, self.rewards = inputs, rollout, rewards

    def get_stage_state(self, stage):
        return self.inputs

    def prepare_input(self, stage_inputs, stage):
        return stage_inputs, [(i, 0, 0) for i in range(len(stage_inputs))]

    def get_stage_actions(self, stage):
        return [[[group]] for group in self.rollout]

    def __getitem__(self, stage):
        return [[[group[0]]] for group in self.rewards]


def child(variant: str, args: argparse.Namespace) -> None:
    sampler = PeakSampler()
    import torch

    torch.set_num_threads(args.threads)
    rows = {"ours": run_ours, "trl": run_trl, "genrl": run_genrl}[variant](args, sampler)
    measured = rows[1:] or rows  # the first round warms up
    print(json.dumps({
        "variant": variant,
        "gen_tokens_per_s": round(sum(r["tokens"] for r in measured) / sum(r["generate_s"] for r in measured), 2),
        "gen_tokens_per_cpu_s": round(
            sum(r["tokens"] for r in measured) / sum(r["generate_cpu_s"] for r in measured), 2),
        "seconds_per_round": round(sum(r["round_s"] for r in measured) / len(measured), 2),
        "peak_rss_gb": round(max(r["peak"] for r in rows) / GB, 3),
        "generate_s": round(sum(r["generate_s"] for r in measured) / len(measured), 2),
        "tokens_per_round": round(sum(r["tokens"] for r in measured) / len(measured)),
        "measured_rounds": len(measured),
    }), flush=True)


def genrl_python(venv: Path) -> Path:
    """A virtualenv with gensyn-genrl that sees this interpreter's packages (torch, transformers) through a .pth."""
    python = venv / "bin" / "python"
    if not python.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        ours = [p for p in site.getsitepackages() if p.endswith("site-packages")]
        version = f"python{sys.version_info.major}.{sys.version_info.minor}"
        (venv / "lib" / version / "site-packages" / "rl_swarm_shared.pth").write_text("\n".join(ours) + "\n")
        pip = [str(python), "-m", "pip", "install", "-q"]
        subprocess.run([*pip, "--no-deps", GENRL], check=True)  # its own deps list torch: never let pip touch it
        subprocess.run([*pip, *GENRL_EXTRAS], check=True)
    return python


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--variants", nargs="+", default=["ours", "trl", "genrl"])
    parser.add_argument("--model", default="bundled")
    parser.add_argument("--rounds", type=int, default=2, help="measured rounds per variant, after one warm-up")
    parser.add_argument("-I", type=int, default=2, help="questions per round")
    parser.add_argument("-G", type=int, default=4, help="completions per question")
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--lr", type=float, default=5e-6)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--cache-dir", default=str(Path.home() / ".cache" / "rl-swarm-bench"))
    parser.add_argument("--genrl-venv", default=str(Path.home() / ".cache" / "rl-swarm-bench" / "genrl-venv"))
    args = parser.parse_args()
    if args.child:
        child(args.child, args)
        return

    from node.launch import node_environment

    rows, failures = [], {}
    for variant in args.variants:
        python = sys.executable
        if variant == "genrl":
            try:
                python = str(genrl_python(Path(args.genrl_venv)))
            except subprocess.CalledProcessError as exc:
                failures[variant] = f"could not install {GENRL}: {exc}"
                continue
        command = [python, __file__, "--child", variant, "--model", args.model, "--rounds", str(args.rounds),
                   "-I", str(args.I), "-G", str(args.G), "--max-new-tokens", str(args.max_new_tokens),
                   "--lr", str(args.lr), "--threads", str(args.threads), "--cache-dir", args.cache_dir]
        out = subprocess.run(command, env={**node_environment(), "PYTHONPATH": str(ROOT)}, stdout=subprocess.PIPE,
                             text=True)
        if out.returncode:
            failures[variant] = f"exit code {out.returncode}"
            continue
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
        settings = {k: getattr(args, k) for k in ("model", "rounds", "I", "G", "max_new_tokens", "lr", "threads")}
        RESULTS.parent.mkdir(parents=True, exist_ok=True)
        RESULTS.write_text(json.dumps({"settings": settings, "rows": rows, "failures": failures}, indent=1) + "\n")
    ours = next((r for r in rows if r["variant"] == "ours"), None)
    print("| variant | gen tokens/s | gen tokens/CPU s | s/round | peak RSS GB | ours vs it: tokens/s | tokens/CPU s "
          "| s/round | peak RSS |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ratios = ["-"] * 4
        if ours and r is not ours:
            ratios = [f"{ours[key] / r[key]:.2f}x"
                      for key in ("gen_tokens_per_s", "gen_tokens_per_cpu_s", "seconds_per_round", "peak_rss_gb")]
        print(f"| {r['variant']} | {r['gen_tokens_per_s']:.1f} | {r['gen_tokens_per_cpu_s']:.1f} | "
              f"{r['seconds_per_round']:.1f} | {r['peak_rss_gb']:.2f} | " + " | ".join(ratios) + " |")
    for variant, why in failures.items():
        print(f"{variant}: {why}")


if __name__ == "__main__":
    main()
