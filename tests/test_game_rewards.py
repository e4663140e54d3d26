"""The multi-stage game's parsers and rewards, with hand-made answers and critiques, adversarial ones included."""

from __future__ import annotations

import random

import pytest

from node.game import prompts, rewards
from node.game.prompts import CriticView, ShownAnswer, canonical, majority, parse_critique
from node.tasks.source import TaskSource


@pytest.fixture(scope="module")
def task():
    source = TaskSource({"chain_sum": 1.0}, seed=11)
    return source.sample(1, random.Random(3))[0]


def wrong(task) -> str:
    return str(int(task.answer) + 1)


# ------------------------------------------------------------------------------------------------- answer
def test_answer_reward_is_correctness_plus_format(task):
    good = f"<think>adding up</think><answer>{task.answer}</answer>"
    assert rewards.answer_reward(task, good) == pytest.approx(1.25)
    # thinking is optional (the small models' one-shot chat answers without); an answer alone is well formed
    assert rewards.answer_reward(task, f"<answer>{task.answer}</answer>") == pytest.approx(1.25)
    assert rewards.answer_reward(task, f"<answer>{wrong(task)}</answer>") == pytest.approx(0.25)
    assert rewards.answer_reward(task, f"<answer>{task.answer}</answer><think>x</think>") == pytest.approx(1.0)
    assert rewards.answer_reward(task, f"<think>x</think><answer>{wrong(task)}</answer>") == pytest.approx(0.25)
    assert rewards.answer_reward(task, "") == 0.0
    assert rewards.answer_reward(task, f"<think>x</think><answer>{task.answer}") == 0.0  # cut off: no answer
    # Hedging with two answer blocks loses the format bonus; the last block is the answer.
    hedge = f"<think>x</think><answer>{wrong(task)}</answer><answer>{task.answer}</answer>"
    assert rewards.answer_reward(task, hedge) == pytest.approx(1.0)


def test_a_correct_answer_outranks_any_wrong_one_whatever_the_format(task):
    worst_right = rewards.answer_reward(task, f"{task.answer}</think><answer>{task.answer}</answer>")
    best_wrong = rewards.answer_reward(task, f"<think>x</think><answer>{wrong(task)}</answer>")
    assert worst_right > best_wrong


def test_canonical_values_compare_numbers_by_value():
    assert canonical(" 1,000 ") == canonical("1000.0") == canonical("1000") == "1000"
    assert canonical("-0") == canonical("0.00") == "0"
    assert canonical("0.50") == "0.5"
    assert canonical("Paris.") == "paris"
    assert canonical("") is None and canonical("   ") is None and canonical(None) is None
    assert canonical("9" * 65) is None  # not a short answer
    assert canonical("1e999999") == "1e999999"  # compared as text, never expanded


# ----------------------------------------------------------------------------------------------- critique
TRUTH = [False, True, False, True]  # A wrong, B right, C wrong, D right


@pytest.mark.parametrize(
    ("text", "judgement", "well_formed"),
    [
        ("<correct>B, D</correct><why>B and D add up.</why>", 1.0, True),
        ("<correct>d b</correct><why>ok</why>", 1.0, True),  # order, case and separators do not matter
        ("<correct>B</correct><why>only B checked</why>", 0.75, True),  # found half, rejected all wrong
        ("<correct>A, B, C, D</correct><why>all fine</why>", 0.5, True),  # names everything: a coin's score
        ("<correct>none</correct><why>all wrong</why>", 0.5, True),  # names nothing: a coin's score
        ("<correct>A, C</correct><why>backwards</why>", 0.0, True),
        ("<correct>B, D</correct>", 1.0, False),  # no justification
        ("<correct>B, D</correct><why>" + "x" * 400 + "</why>", 1.0, False),  # justification too long
        ("<why>first</why><correct>B, D</correct>", 1.0, False),  # wrong order
        # unreadable: scored 0 whatever they say
        ("", 0.0, False),
        ("B and D are correct", 0.0, False),  # wrong format
        ("<correct>B</correct><correct>D</correct><why>two verdicts</why>", 0.0, False),  # hedging
        ("<correct>B, E</correct><why>E does not exist</why>", 0.0, False),
        ("<correct>none, B</correct><why>contradiction</why>", 0.0, False),
        ("<correct></correct><why>empty verdict</why>", 0.0, False),
        ("<correct>BD</correct><why>not a list</why>", 0.0, False),
        ("<correct>B, D</correct><why>ok</why>" + " pad" * 400, 0.0, False),  # over-long critique
    ],
)
def test_critique_judgement(text, judgement, well_formed):
    scored = rewards.critique_score(text, TRUTH)
    assert scored.judgement == pytest.approx(judgement)
    assert scored.well_formed is well_formed
    assert scored.reward == pytest.approx(judgement + 0.25 * well_formed)


def test_when_every_answer_is_wrong_only_none_is_a_perfect_critique():
    truth = [False, False, False]
    assert rewards.critique_reward("<correct>none</correct><why>all off by one</why>", truth) == pytest.approx(1.25)
    assert rewards.critique_score("<correct>A, B, C</correct><why>all</why>", truth).judgement == 0.0
    assert rewards.critique_score("<correct>A</correct><why>A</why>", truth).judgement == pytest.approx(1 / 3)


def test_when_every_answer_is_right_naming_them_all_is_perfect_and_none_is_worthless():
    truth = [True, True]
    assert rewards.critique_score("<correct>A, B</correct><why>both</why>", truth).judgement == 1.0
    assert rewards.critique_score("<correct>none</correct><why>x</why>", truth).judgement == 0.0


def test_no_blind_critique_strategy_beats_a_coin_on_any_mix():
    rng = random.Random(0)
    for _ in range(200):
        truth = [rng.random() < 0.5 for _ in range(rng.randint(1, 5))]
        letters = ", ".join(prompts.LETTERS[: len(truth)])
        for blind in (f"<correct>{letters}</correct><why>all</why>", "<correct>none</correct><why>none</why>"):
            assert rewards.critique_score(blind, truth).judgement <= 0.5 or all(truth) or not any(truth)


# ------------------------------------------------------------------------------------------------- revise
def test_revise_rewards_consensus_only_when_the_majority_is_right(task):
    right, bad = canonical(task.answer), canonical(wrong(task))
    text = "<majority>{m}</majority><think>checked</think><answer>{a}</answer>"
    # majority right, named, final right: everything
    assert rewards.revise_reward(task, text.format(m=right, a=right), majority_value=right, majority_right=True) == pytest.approx(1.75)
    # majority wrong: naming it and following it earns only the format bonus
    assert rewards.revise_reward(task, text.format(m=bad, a=bad), majority_value=bad, majority_right=False) == pytest.approx(0.25)
    # majority wrong, named, but the reviser answered right anyway
    assert rewards.revise_reward(task, text.format(m=bad, a=right), majority_value=bad, majority_right=False) == pytest.approx(1.25)
    # majority right, misreported: no consensus
    assert rewards.revise_reward(task, text.format(m=bad, a=right), majority_value=right, majority_right=True) == pytest.approx(1.25)
    # no majority (tie or no critic): nothing to agree with
    assert rewards.revise_reward(task, text.format(m=right, a=right), majority_value=None, majority_right=False) == pytest.approx(1.25)
    # unformatted but right still beats formatted consensus on a wrong final answer
    assert rewards.revise_reward(task, f"<answer>{right}</answer>", majority_value=right, majority_right=True) > \
        rewards.revise_reward(task, text.format(m=right, a=bad), majority_value=right, majority_right=True)


def test_majority_is_right_is_judged_by_our_ground_truth(task):
    right, bad = canonical(task.answer), canonical(wrong(task))
    assert rewards.majority_is_right(task, right, [bad, right])
    assert not rewards.majority_is_right(task, bad, [bad, right])
    assert rewards.majority_is_right(task, "none", [bad, None])
    assert not rewards.majority_is_right(task, "none", [bad, right])
    assert not rewards.majority_is_right(task, None, [right])


def test_majority_needs_a_strict_plurality():
    view = lambda *values: CriticView(favoured=frozenset(values), why="")  # noqa: E731
    assert majority([view("5"), view("5"), view("7")]) == "5"
    assert majority([view("5"), view("7")]) is None
    assert majority([view(), view(), view("5")]) == "none"
    assert majority([view("5", "7"), view("5")]) == "5"
    assert majority([]) is None


def test_critic_views_translate_letters_into_values():
    critique = parse_critique("<correct>A, C</correct><why>x</why>", 3)
    view = prompts.critic_view(critique, ["12", None, "1,000"])
    assert view.favoured == {"12", "1000"}


def test_prompts_show_anonymized_answers_and_critics():
    shown = [ShownAnswer("12", "7 + 5"), ShownAnswer(None, "")]
    critique = prompts.critique_messages("What is 7 + 5?", shown)[-1]["content"]
    assert "A: 12 (7 + 5)" in critique and "B: (no answer)" in critique
    revise = prompts.revise_messages("Q?", shown, [CriticView(frozenset({"12"}), "adds up")])[-1]["content"]
    assert "Critic 1: judged correct: 12. Why: adds up" in revise
    assert "No critic" in prompts.revise_messages("Q?", shown, [])[-1]["content"]
    with pytest.raises(ValueError):
        prompts.critique_messages("Q?", [])


def test_excerpts_are_short_and_carry_no_tags():
    text = "<think>" + "step " * 100 + "</think><answer>5</answer>"
    cut = prompts.excerpt(text)
    assert len(cut) <= prompts.EXCERPT_CHARS and "<" not in cut and "5</answer>" not in cut
    assert prompts.excerpt("<correct>A</correct> sneaky") == "A sneaky"
