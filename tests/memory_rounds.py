"""Kept RSS after each of N GRPO rounds of a tiny model, and before the heap trim that ends each round, printed as
JSON (run by tests/test_memory.py in a child process, so the heap it measures is its own).

    python tests/memory_rounds.py MODEL_DIR ROUNDS [--untamed] [--sample-float32] [--prompt-width-step N]

``--untamed`` skips node.allocator.tame_heap() and the trim after every round (trim_heap()), to show what the test
guards against. ``--sample-float32`` samples from the float32 weights instead of a bfloat16 copy.
``--prompt-width-step 1`` pads a batch of prompts only to its longest (node.learning.grpo.PROMPT_WIDTH_STEP), to
show the growth that padding to a few widths prevents on CPUs with native bfloat16 kernels.
"""

from __future__ import annotations

import gc
import json
import sys
from pathlib import Path


def main() -> None:
    model_dir, rounds = Path(sys.argv[1]), int(sys.argv[2])
    tamed = "--untamed" not in sys.argv
    from node import allocator

    if tamed:
        allocator.tame_heap()  # as the node does first thing in its setup
    import tempfile

    import psutil

    from node.import_gc import collector_off_while_importing

    with collector_off_while_importing():  # as `node run` imports its stack
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from node.learning import grpo
        from node.learning.grpo import GrpoLearner, Policy, TrainGroup

    if "--prompt-width-step" in sys.argv:
        grpo.PROMPT_WIDTH_STEP = int(sys.argv[sys.argv.index("--prompt-width-step") + 1])

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    generation_dtype = torch.float32 if "--sample-float32" in sys.argv else torch.bfloat16
    policy = Policy(model, tokenizer, generation_dtype=generation_dtype, max_prompt_tokens=256)
    scratch = tempfile.TemporaryDirectory(prefix="rl-swarm-memory-rounds-")  # removed at exit
    learner = GrpoLearner(
        policy, output_dir=Path(scratch.name) / "trl", device="cpu", mixed_bf16=False, num_generations=4,
        max_new_tokens=32, learning_rate=1e-4, beta=0.0, epsilon=0.2, epsilon_high=0.28, loss_type="grpo",
        max_grad_norm=1.0, seed=0,
    )
    process = psutil.Process()
    kept, untrimmed = [], []  # RSS after each round, and before its trim
    for number in range(rounds):
        # Prompts of varying lengths, as a round's questions are: a fresh mix of tensor sizes every round.
        prompts = [
            policy.prompt_ids([{"role": "user", "content": f"round {number} question {q}: " + "x " * (20 * q + number)}])
            for q in range(4)
        ]
        groups = policy.generate(prompts, num_generations=4, max_new_tokens=32, temperature=1.0, top_p=1.0,
                                 seed=number)
        learner.step([
            TrainGroup(prompt, tuple(group), tuple(float(i % 2) for i in range(4)))
            for prompt, group in zip(prompts, groups, strict=True)
        ])
        gc.collect()
        untrimmed.append(process.memory_info().rss)
        if tamed:
            allocator.trim_heap()  # as the node does after every round
        kept.append(process.memory_info().rss)
    print(json.dumps({"kept": kept, "untrimmed": untrimmed}))


if __name__ == "__main__":
    main()
