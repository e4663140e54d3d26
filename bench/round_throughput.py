"""Seconds per round by phase and generation throughput: our round vs plain TRL vs the reference loop.

Side by side in one run, on the same model, prompts and sampling settings:

- ``ours (fp32 / bf16 generation)``: the node's round: all I x G completions in one batched ``generate`` call,
  a real (solo) hivemind publish + gather, and one step of the long-lived GRPOTrainer through the adapter;
- ``plain TRL``: ``GRPOTrainer.train()`` generating with its own transformers path, I x G completions per step;
- ``reference gen loop``: the reference implementation's generation, one ``generate`` call per completion
  (training is the same TRL step, so only generation is timed).

    python bench/round_throughput.py --rounds 3 --max-new-tokens 128

Prints a markdown table; speedups are ratios against the reference loop measured in the same run.
"""

from __future__ import annotations

import argparse
import copy
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch  # noqa: E402
from datasets import Dataset  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

from node.learning import models  # noqa: E402
from node.learning.grpo import GrpoLearner, Policy, TrainGroup  # noqa: E402
from node.swarm.dht import DhtExchange  # noqa: E402
from node.swarm.identity import load_or_create  # noqa: E402
from node.swarm.records import RoundRecord, SharedGroup  # noqa: E402
from node.tasks.source import TaskSource, build_messages, score  # noqa: E402
from node.tasks.taskref import DEFAULT_FAMILIES  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=models.BUNDLED)
    parser.add_argument("--rounds", type=int, default=3, help="measured rounds per variant (after one warm-up)")
    parser.add_argument("-I", "--questions", type=int, default=2)
    parser.add_argument("-G", "--generations", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)

    work = Path(tempfile.mkdtemp(prefix="rl-swarm-bench-"))
    base, tokenizer = models.load(
        models.resolve(args.model), cache_dir=Path.home() / ".cache" / "rl-swarm-bench", dtype=torch.float32,
        device="cpu",
    )
    tasks = TaskSource({family: 1.0 for family in DEFAULT_FAMILIES}, seed=1234)
    rounds = [tasks.sample(args.questions, random.Random(r)) for r in range(args.rounds + 1)]
    settings = dict(num_generations=args.generations, max_new_tokens=args.max_new_tokens)
    print(f"model {args.model}, I={args.questions} G={args.generations} max_new_tokens={args.max_new_tokens}, "
          f"{torch.get_num_threads()} threads, {args.rounds} measured rounds after 1 warm-up\n")

    results = {
        "ours (fp32 generation)": ours(base, tokenizer, rounds, work, torch.float32, **settings),
        "ours (bf16 generation)": ours(base, tokenizer, rounds, work, torch.bfloat16, **settings),
        "plain TRL GRPOTrainer": plain_trl(base, tokenizer, rounds, work, **settings),
        "reference gen loop (1 completion / call)": reference_generation(base, tokenizer, rounds, **settings),
    }
    reference_tps = results["reference gen loop (1 completion / call)"]["tokens_per_s"]
    print("| variant | s/round | generate s | share s | gather s | train s | gen tokens/s | gen speedup vs reference |")
    print("|---|---|---|---|---|---|---|---|")
    for name, r in results.items():
        cells = [_cell(r.get(key)) for key in ("total", "generate", "share", "gather", "train")]
        print(f"| {name} | " + " | ".join(cells) + f" | {r['tokens_per_s']:.1f} | {r['tokens_per_s'] / reference_tps:.2f}x |")


def ours(base, tokenizer, rounds, work: Path, generation_dtype, *, num_generations, max_new_tokens) -> dict:
    policy = Policy(copy.deepcopy(base), tokenizer, generation_dtype=generation_dtype, max_prompt_tokens=1024)
    learner = GrpoLearner(
        policy, output_dir=work / "ours", device="cpu", mixed_bf16=False, num_generations=num_generations,
        max_new_tokens=max_new_tokens, learning_rate=1e-6, beta=0.0, epsilon=0.2, epsilon_high=0.28,
        loss_type="grpo", max_grad_norm=1.0, seed=0,
    )
    identity = load_or_create(work / f"identity-{generation_dtype}".replace("torch.", ""))
    swarm = DhtExchange(identity, swarm_name="bench", host="127.0.0.1")
    swarm.start()
    rows = []
    try:
        for number, tasks in enumerate(rounds):
            t0 = time.perf_counter()
            prompts = [policy.prompt_ids(build_messages(task.question)) for task in tasks]
            groups = policy.generate(prompts, num_generations=num_generations, max_new_tokens=max_new_tokens,
                                     temperature=1.0, top_p=1.0, seed=number)
            t1 = time.perf_counter()
            swarm.publish(RoundRecord(peer_id=identity.peer_id, round=number, groups=tuple(
                SharedGroup(task=task.ref, question=task.question, completions=tuple(c.text for c in group),
                            finished=tuple(c.finished for c in group))
                for task, group in zip(tasks, groups, strict=True))))
            t2 = time.perf_counter()
            swarm.gather(number)
            t3 = time.perf_counter()
            learner.step([
                TrainGroup(prompt_ids=prompt, completions=tuple(group),
                           rewards=tuple(score(task, c.text) for c in group))
                for task, prompt, group in zip(tasks, prompts, groups, strict=True)
            ])
            t4 = time.perf_counter()
            tokens = sum(len(c.ids) for group in groups for c in group)
            rows.append(dict(generate=t1 - t0, share=t2 - t1, gather=t3 - t2, train=t4 - t3, total=t4 - t0,
                             tokens=tokens))
    finally:
        swarm.shutdown()
    return _summarize(rows[1:])


def plain_trl(base, tokenizer, rounds, work: Path, *, num_generations, max_new_tokens) -> dict:
    per_step = len(rounds[0])
    prompts = [build_messages(task.question) for tasks in rounds for task in tasks]
    by_question = {task.question: task for tasks in rounds for task in tasks}

    def reward(prompts, completions, **kwargs):
        return [score(by_question[p[-1]["content"]], c[0]["content"]) for p, c in zip(prompts, completions, strict=True)]

    args = GRPOConfig(
        output_dir=str(work / "trl"), report_to=[], use_cpu=True, bf16=False, num_generations=num_generations,
        per_device_train_batch_size=per_step * num_generations, max_completion_length=max_new_tokens,
        learning_rate=1e-6, beta=0.0, epsilon=0.2, epsilon_high=0.28, loss_type="grpo", optim="adamw_torch",
        max_steps=len(rounds), logging_steps=1, save_strategy="no", shuffle_dataset=False, temperature=1.0,
        top_p=1.0, seed=0, disable_dropout=True,
    )
    trainer = GRPOTrainer(model=copy.deepcopy(base), reward_funcs=[reward], args=args,
                          train_dataset=Dataset.from_dict({"prompt": prompts}), processing_class=tokenizer)
    rows: list[dict] = []
    generate = trainer._generate_single_turn

    def timed_generate(*a, **k):
        t0 = time.perf_counter()
        out = generate(*a, **k)
        rows.append(dict(generate=time.perf_counter() - t0, tokens=sum(len(ids) for ids in out[0]), start=t0))
        return out

    trainer._generate_single_turn = timed_generate
    ends = []

    from transformers import TrainerCallback

    class StepClock(TrainerCallback):
        def on_step_end(self, *a, **k):
            ends.append(time.perf_counter())

    trainer.add_callback(StepClock())
    started = time.perf_counter()
    trainer.train()
    for i, row in enumerate(rows):
        begin = started if i == 0 else ends[i - 1]
        row["total"] = ends[i] - begin
        row["train"] = row["total"] - row["generate"]
    return _summarize(rows[1:])


@torch.inference_mode()
def reference_generation(base, tokenizer, rounds, *, num_generations, max_new_tokens) -> dict:
    policy = Policy(base, tokenizer, generation_dtype=torch.float32, max_prompt_tokens=1024)
    rows = []
    for number, tasks in enumerate(rounds):
        t0 = time.perf_counter()
        tokens = 0
        for task in tasks:
            prompt = policy.prompt_ids(build_messages(task.question))
            for g in range(num_generations):
                (group,) = policy.generate([prompt], num_generations=1, max_new_tokens=max_new_tokens,
                                           temperature=1.0, top_p=1.0, seed=number * 1000 + g)
                tokens += len(group[0].ids)
        rows.append(dict(generate=time.perf_counter() - t0, tokens=tokens))
    return _summarize(rows[1:])


def _summarize(rows: list[dict]) -> dict:
    summary = {key: statistics.mean(r[key] for r in rows) for key in rows[0] if key not in ("tokens", "start")}
    summary["tokens_per_s"] = sum(r["tokens"] for r in rows) / sum(r["generate"] for r in rows)
    return summary


def _cell(value) -> str:
    return "-" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    main()
