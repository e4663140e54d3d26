"""The chat a policy answers: a system prompt, one worked example of the same family, then the question.

Small models rarely write an ``<answer>`` block when only told to; shown one solved task of the same family first,
they copy the format. The example is a pure function of the task ref (its family, generator config and a digest of
the ref choose an entry from a seed space no training or evaluation task uses), so every peer rebuilds the identical
chat for a shared task, and the example never leaks a training task's answer.

:data:`PROMPT_FORMAT` names this recipe. It travels in every shared record: a node trains on a peer's completions as
if they answered its own prompt, which is only true when both built the same prompt.
"""

from __future__ import annotations

import hashlib

from node.tasks.taskref import TaskRef

# 1: system prompt + question (no example); 2: system prompt + one worked example of the same family + question.
PROMPT_FORMAT = 2

SYSTEM_PROMPT = (
    "You are a careful problem solver. Think briefly and to the point, then give your final answer, "
    "in exactly the format the question asks for, inside <answer>...</answer> tags, e.g. <answer>42</answer>. "
    "Put nothing but the final answer inside the tags."
)


def answer_block(answer: str) -> str:
    return f"<answer>{answer}</answer>"


def build_messages(question: str, example: tuple[str, str] | None = None) -> list[dict[str, str]]:
    """The chat for ``question``; ``example`` is a solved (question, answer) pair of the same family."""
    messages = [{"role": "system", "content": SYSTEM_PROMPT}]
    if example is not None:
        example_question, example_answer = example
        messages += [
            {"role": "user", "content": example_question},
            {"role": "assistant", "content": answer_block(example_answer)},
        ]
    messages.append({"role": "user", "content": question})
    return messages


def example_digest(ref: TaskRef) -> int:
    """A stable 56-bit number derived from ``ref`` that picks its worked example (see TaskSource.example)."""
    text = f"example:{ref.family}:{ref.config_id}:{ref.seed}:{ref.index}"
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:7], "big")
