"""bench/memory.py's demo round, the groups every training-step bench trains on: made, and graded as the node grades."""

import random

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from bench.memory import demo_round_groups, demo_task_source
from node.learning.grpo import Policy
from node.tasks.source import grade


def test_a_demo_round_has_i_local_and_j_peer_groups_graded_by_the_nodes_grader(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    policy = Policy(model, AutoTokenizer.from_pretrained(tiny_model_dir), generation_dtype=torch.float32,
                    max_prompt_tokens=1024)
    tasks = demo_task_source(None)
    groups = demo_round_groups(policy, tasks, 0, local=2, peer=1, generations=3, max_new_tokens=4)
    assert len(groups) == 3 and all(len(g.completions) == len(g.rewards) == 3 for g in groups)
    local = tasks.sample(2, random.Random(0))  # the round's questions, as demo_round_groups draws them
    for task, group in zip(local, groups[:2], strict=True):
        assert group.rewards == tuple(grade(task, c.text, finished=c.finished).reward for c in group.completions)
    assert groups[2].rewards == (0.0, 1.0, 0.0)  # a peer group's rewards alternate, so it always has spread
