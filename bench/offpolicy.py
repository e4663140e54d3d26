"""How far off-policy the node's samples are: per-token log-prob gap between the bfloat16 sampling copy and the
float32 policy that is trained, on completions the sampler itself generated.

GRPO's first pass treats the samples as on-policy (importance ratio 1). If the sampler's distribution differs
from the policy's, the truncated importance-sampling correction TRL applies to vLLM rollouts would reweight each
token (or sequence) by exp(logp_policy - logp_sampler); this measures how large those weights would be.

    python bench/offpolicy.py --questions 4

Prints JSON: mean and percentiles of |logp_policy - logp_sampler| per token, and the sequence-level ratios.
"""

from __future__ import annotations

import argparse
import json
import os
import random
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")


def token_logps(model, prompt: tuple[int, ...], completion: list[int]):
    import torch

    ids = torch.tensor([list(prompt) + completion])
    with torch.inference_mode():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
    return torch.log_softmax(logits, dim=-1).gather(1, torch.tensor(completion)[:, None])[:, 0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="bundled")
    parser.add_argument("--questions", type=int, default=4)
    parser.add_argument("-G", type=int, default=4)
    parser.add_argument("--max-new-tokens", type=int, default=128)
    parser.add_argument("--cache-dir", default=str(Path.home() / ".cache" / "rl-swarm-bench"))
    args = parser.parse_args()

    import torch

    from node.learning import models
    from node.learning.grpo import Policy
    from node.tasks.source import TaskSource, build_messages
    from node.tasks.taskref import DEFAULT_FAMILIES

    torch.set_num_threads(1)
    model, tokenizer = models.load(models.resolve(args.model), cache_dir=Path(args.cache_dir), dtype=torch.float32,
                                   device="cpu")
    policy = Policy(model, tokenizer, generation_dtype=torch.bfloat16, max_prompt_tokens=1024)
    sampler = policy.sampling_model()
    tasks = TaskSource({family: 1.0 for family in DEFAULT_FAMILIES}, seed=1234).sample(args.questions, random.Random(0))
    prompts = [policy.prompt_ids(build_messages(task.question)) for task in tasks]
    groups = policy.generate(prompts, num_generations=args.G, max_new_tokens=args.max_new_tokens, temperature=1.0,
                             top_p=1.0, seed=0)
    gaps, sequence_log_ratios = [], []
    for prompt, group in zip(prompts, groups, strict=True):
        for completion in group:
            ids = list(completion.ids) + ([policy.eos_ids[0]] if completion.finished else [])
            if not ids:
                continue
            delta = token_logps(model, prompt, ids) - token_logps(sampler, prompt, ids)
            gaps.append(delta)
            sequence_log_ratios.append(float(delta.sum()))
    flat = torch.cat(gaps)
    ratios = torch.tensor(sequence_log_ratios).exp()
    quantiles = torch.quantile(flat.abs(), torch.tensor([0.5, 0.9, 0.99]))
    print(json.dumps({
        "tokens": int(flat.numel()),
        "sequences": len(sequence_log_ratios),
        "mean_abs_token_gap": round(float(flat.abs().mean()), 5),
        "mean_token_gap": round(float(flat.mean()), 5),
        "abs_token_gap_p50_p90_p99": [round(float(q), 5) for q in quantiles],
        "token_ratio_range": [round(float(flat.exp().min()), 4), round(float(flat.exp().max()), 4)],
        "sequence_ratio_range": [round(float(ratios.min()), 4), round(float(ratios.max()), 4)],
        "sequences_outside_trl_default_cap_3": int((ratios > 3.0).sum()),
    }, indent=1))


if __name__ == "__main__":
    main()
