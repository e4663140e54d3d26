"""What the app calls the node's ids: task families, scoring reasons and group fates, in words a user reads."""

from __future__ import annotations

TASKS = {
    "basic_arithmetic": "Arithmetic", "chain_sum": "Chain sums", "products": "Products",
    "gcd": "Greatest common divisor", "lcm": "Least common multiple", "count_bits": "Counting bits",
    "base_conversion": "Base conversion", "arc_1d": "ARC 1-D puzzles", "bf": "Brainf*ck programs",
    "propositional_logic": "Propositional logic", "fraction_simplification": "Fraction simplification",
    "decimal_arithmetic": "Decimal arithmetic", "calendar_arithmetic": "Calendar arithmetic",
    "binary_matrix": "Binary matrices", "leg_counting": "Leg counting", "number_sorting": "Number sorting",
    "word_sorting": "Word sorting", "simple_equations": "Simple equations", "gsm_symbolic": "Grade-school maths",
}
REASONS = {
    "correct": "correct", "wrong_value": "wrong value", "partial_credit": "partial credit",
    "no_answer_block": "no <answer> block", "cut_at_token_limit": "cut at the token limit",
}
# The same, short enough for the gossip table's Scored column (the detail pane and the tooltip say it in full).
REASONS_SHORT = {"no_answer_block": "no <answer>", "cut_at_token_limit": "cut off"}
FATES = {
    "trained": "trained on", "no_signal": "trained, no signal", "update_skipped": "update skipped",
    "dropped_equal_rewards": "dropped: equal rewards", "not_needed": "not needed",
    "shown": "read by our model", "scored": "scored for winners", "unreadable": "unreadable",  # the game's peer items
}
FATE_HINTS = {
    "trained": "This node trained on this group.",
    "no_signal": "In this node's update, but every completion got the same reward: its advantages were all zero, so "
                 "it changed nothing.",
    "update_skipped": "Not trained on: no group of this round had reward spread, so this node skipped the round's "
                      "update.",
    "dropped_equal_rewards": "Every completion of this group got the same reward, so it carries no learning signal.",
    "not_needed": "Usable, but this node had already taken as many peer groups as a round uses.",
    "rejected": "This node's checks refused the group; nothing of it was trained on.",
    "shown": "This node's model read it in the next stage: a peer's answer in its critique, a peer's critique in its "
             "revision.",
    "scored": "A peer's final answer: this node's verifier scored it to name the round's winners.",
    "unreadable": "Not in the critique format: it counted for nothing, and this node's model never read it.",
}


def task_name(family: str) -> str:
    return TASKS.get(family) or family.replace("_", " ").strip().capitalize() or "unknown task"


def reason_text(reason: str) -> str:
    return REASONS.get(reason) or reason.replace("_", " ")


def reason_short(reason: str) -> str:
    return REASONS_SHORT.get(reason) or reason_text(reason)


def fate_text(fate: str) -> str:
    if fate.startswith("rejected:"):
        return "rejected: " + fate.partition(":")[2].replace("_", " ")
    return FATES.get(fate) or fate.replace("_", " ")


def fate_hint(fate: str) -> str:
    return FATE_HINTS.get(fate.partition(":")[0], "")
