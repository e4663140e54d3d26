"""The multi-stage game with a real model: N players in one process (in-memory exchange), R rounds.

What it answers: does the model write answers, critiques and revisions our parsers can read, what does each stage
reward, how often is the swarm's final answer right compared with a player's first answers, and what a round
costs. It is not the held-out learning measurement (solo vs swarm on unseen tasks), which needs hours here.

    MALLOC_ARENA_MAX=2 MALLOC_MMAP_THRESHOLD_=131072 nice -n 5 python bench/game_play.py --players 2 --rounds 3

Prints one line per player and round, then a markdown table of means over all of them.

``--probe N`` measures generation only, with one model and no training: N questions, each asked as an answer
prompt, as a critique of two answers (the right one and a wrong one, in random order) and as a revision with two
critics favouring the right answer; it reports per stage the share of completions our parsers can read, the mean
reward and the share exactly right. It tells whether a model can play the game's formats at all, in minutes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch  # noqa: E402

from node.config import NodeConfig  # noqa: E402
from node.events import EventBus  # noqa: E402
from node.game import GAME_FAMILIES, STAGES  # noqa: E402
from node.game.driver import GameDriver, GameSettings, game_tasks  # noqa: E402
from node.game.exchange import InMemoryGameHub  # noqa: E402
from node.game.prompts import answer_well_formed, parse_critique, revise_well_formed  # noqa: E402
from node.learning import models  # noqa: E402
from node.learning.grpo import GrpoLearner, Policy  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default=models.BUNDLED)
    parser.add_argument("--players", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("-I", "--questions", type=int, default=2)
    parser.add_argument("-G", "--generations", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--learning-rate", type=float, default=5e-6)
    parser.add_argument("--max-prompt-tokens", type=int, default=1024)
    parser.add_argument("--micro-batch-groups", type=int, default=1, help="groups per forward/backward pass")
    parser.add_argument("--probe", type=int, default=0, metavar="N", help="generation-only probe on N questions")
    args = parser.parse_args()
    torch.set_num_threads(1)  # one core per player
    if args.probe:
        probe(args)
        return

    work = Path(tempfile.mkdtemp(prefix="rl-swarm-game-bench-"))
    config = NodeConfig.build({"swarm": {"swarm_name": "bench"}})  # the game's default families and seed
    hub = InMemoryGameHub()
    drivers = []
    for index in range(args.players):
        model, tokenizer = models.load(models.resolve(args.model), cache_dir=Path.home() / ".cache" / "rl-swarm-bench",
                                       dtype=torch.float32, device="cpu")
        policy = Policy(model, tokenizer, generation_dtype=torch.float32, max_prompt_tokens=args.max_prompt_tokens)
        learner = GrpoLearner(
            policy, output_dir=work / f"p{index}", device="cpu", mixed_bf16=False, num_generations=args.generations,
            max_new_tokens=args.max_new_tokens, learning_rate=args.learning_rate, beta=0.0, epsilon=0.2,
            epsilon_high=0.28, loss_type="grpo", max_grad_norm=1.0, seed=index,
            micro_batch_groups=args.micro_batch_groups,
        )
        drivers.append(GameDriver(
            settings=GameSettings(questions=args.questions, num_generations=args.generations,
                                  max_new_tokens=args.max_new_tokens, temperature=1.0, top_p=1.0,
                                  gather_timeout_s=1800.0, seed=index),
            policy=policy, learner=learner,
            tasks=game_tasks(config),
            exchange=hub.exchange(f"player-{index}"), bus=EventBus(),
        ))

    rows = []
    last: list[int | None] = [None] * len(drivers)
    for round_ in range(args.rounds):
        results: dict[int, tuple] = {}

        def play(index: int) -> None:
            started = time.perf_counter()
            outcome = drivers[index].play_round(last[index], round_)
            metrics, samples = outcome.metrics, outcome.samples
            results[index] = (metrics, samples, time.perf_counter() - started)

        threads = [threading.Thread(target=play, args=(i,)) for i in range(len(drivers))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        for index, (metrics, samples, seconds) in sorted(results.items()):
            last[index] = metrics.round
            own = {stage: [s for s in samples if s.local and s.stage == stage] for stage in STAGES}
            readable = {
                "answer": [answer_well_formed(s.completion) for s in own["answer"]],
                "critique": [parse_critique(s.completion, 8) is not None for s in own["critique"]],
                "revise": [revise_well_formed(s.completion) for s in own["revise"]],
            }
            row = {
                "player": index, "round": metrics.round, "seconds": seconds,
                **{f"reward_{s}": metrics.stage_rewards.get(s) for s in STAGES},
                **{f"readable_{s}": _mean(v) for s, v in readable.items()},
                "right_first": metrics.stage_accuracy.get("answer"),
                "right_revised": metrics.stage_accuracy.get("revise"),
                "right_swarm_final": metrics.stage_accuracy.get("swarm_final"),
            }
            rows.append(row)
            print({k: round(v, 3) if isinstance(v, float) else v for k, v in row.items()}, flush=True)

    keys = [k for k in rows[0] if k not in ("player", "round")]
    print(f"\n{args.players} players x {args.rounds} rounds, model {args.model}, I={args.questions} "
          f"G={args.generations}, {args.max_new_tokens} new tokens, families {', '.join(GAME_FAMILIES)}\n")
    print("| measure | mean over players and rounds |\n|---|---|")
    for key in keys:
        values = [r[key] for r in rows if r[key] is not None]
        print(f"| {key} | {statistics.mean(values):.3f} |" if values else f"| {key} | - |")


def probe(args) -> None:
    import random

    from node.game.prompts import (
        CriticView, ShownAnswer, canonical, critique_messages, revise_messages,
    )
    from node.game.rewards import answer_reward, critique_reward, is_exact, majority_is_right, revise_reward

    config = NodeConfig.build({"swarm": {"swarm_name": "bench"}})
    tasks = game_tasks(config)
    model, tokenizer = models.load(models.resolve(args.model), cache_dir=Path.home() / ".cache" / "rl-swarm-bench",
                                   dtype=torch.float32, device="cpu")
    policy = Policy(model, tokenizer, generation_dtype=torch.float32, max_prompt_tokens=1024)
    rng = random.Random(0)
    questions = [tasks.sample(1, random.Random(f"probe:{i}"))[0] for i in range(args.probe)]
    stats: dict[str, dict[str, list[float]]] = {s: {"readable": [], "reward": [], "exact": []} for s in STAGES}
    started = time.perf_counter()
    for task in questions:
        wrong = str(int(float(task.answer)) + 1) if canonical(task.answer) else "0"
        shown = [ShownAnswer(task.answer, f"worked it out: {task.answer}"), ShownAnswer(wrong, f"guessed {wrong}")]
        rng.shuffle(shown)
        truth = [a.value == task.answer for a in shown]
        critics = [CriticView(frozenset({canonical(task.answer)}), "it checks out")] * 2
        right = majority_is_right(task, canonical(task.answer), [a.value for a in shown])
        prompts = {
            "answer": tasks.messages(task),
            "critique": critique_messages(task.question, shown),
            "revise": revise_messages(task.question, shown, critics),
        }
        for stage, messages in prompts.items():
            group = policy.generate([policy.prompt_ids(messages)], num_generations=args.generations,
                                    max_new_tokens=args.max_new_tokens, temperature=1.0, top_p=1.0,
                                    seed=rng.getrandbits(63))[0]
            for completion in group:
                text = completion.text
                if stage == "answer":
                    readable, reward = answer_well_formed(text), answer_reward(task, text)
                elif stage == "critique":
                    readable, reward = parse_critique(text, len(shown)) is not None, critique_reward(text, truth)
                else:
                    readable = revise_well_formed(text)
                    reward = revise_reward(task, text, majority_value=canonical(task.answer), majority_right=right)
                stats[stage]["readable"].append(readable)
                stats[stage]["reward"].append(reward)
                stats[stage]["exact"].append(stage != "critique" and is_exact(task, text))
        print(f"{len(stats['answer']['reward']) // args.generations} questions probed", flush=True)
    print(f"\nprobe: {args.probe} questions x {args.generations} completions per stage, model {args.model}, "
          f"{args.max_new_tokens} new tokens, {time.perf_counter() - started:.0f} s\n")
    print("| stage | readable | mean reward | exactly right |\n|---|---|---|---|")
    for stage, values in stats.items():
        exact = "-" if stage == "critique" else f"{_mean(values['exact']):.3f}"
        print(f"| {stage} | {_mean(values['readable']):.3f} | {statistics.mean(values['reward']):.3f} | {exact} |")


def _mean(values: list[bool]) -> float | None:
    return sum(values) / len(values) if values else None


if __name__ == "__main__":
    main()
