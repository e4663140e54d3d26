"""Tests of node.tasks.source against the real reasoning-gym generators and scorers."""

from __future__ import annotations

import builtins
import random
import re

import pytest
import reasoning_gym
from hypothesis import given, settings
from hypothesis import strategies as st

from node.errors import NodeError
from node.tasks.source import (
    EVAL_SEED_BASE,
    MAX_INDEX,
    TRAIN_SEED_LIMIT,
    SYSTEM_PROMPT,
    Task,
    TaskRejected,
    TaskSource,
    build_messages,
    config_id,
    extract_answer,
    grade,
)
from node.tasks.taskref import DEFAULT_FAMILIES, TaskRef

SEED = 1234
SOURCE = TaskSource({family: 1.0 for family in DEFAULT_FAMILIES}, seed=SEED)


def tasks_of(family: str, n: int = 3) -> list[Task]:
    return TaskSource({family: 1.0}, seed=SEED).sample(n, random.Random(family))


def known_correct(task: Task) -> str:
    return task.answer if task.answer is not None else task.entry["metadata"]["example_answer"]


ONE_TASK_PER_FAMILY = [tasks_of(family, 1)[0] for family in DEFAULT_FAMILIES]


@pytest.mark.parametrize("family", DEFAULT_FAMILIES)
def test_known_correct_answer_scores_full_and_a_wrong_one_scores_low(family: str) -> None:
    for task in tasks_of(family):
        assert task.ref.family == family
        assert grade(task, f"Some thinking.\n<answer>{known_correct(task)}</answer>").reward == 1.0
        # Some scorers give a little credit for a wrong answer of the right shape; propositional_logic gives 0.25 to
        # any lone atom when the premises contradict each other (then every conclusion is valid).
        assert grade(task, "<answer>certainly wrong</answer>").reward <= 0.25
        assert grade(task, "no answer at all").reward == 0.0


def test_propositional_logic_has_no_single_answer() -> None:
    task = tasks_of("propositional_logic", 1)[0]
    assert task.answer is None
    assert task.entry["answer"] is None


def test_format_weight_rewards_a_single_well_formed_block() -> None:
    task = tasks_of("basic_arithmetic", 1)[0]
    assert grade(task, f"<answer>{task.answer}</answer>", format_weight=0.5).reward == 1.5
    assert grade(task, "<answer>-1.5x</answer>", format_weight=0.5).reward == 0.5
    assert grade(task, f"<answer>x</answer><answer>{task.answer}</answer>", format_weight=0.5).reward == 1.0
    assert grade(task, f"<answer>{task.answer}", format_weight=0.5).reward == 0.0
    assert grade(task, "<answer> </answer>", format_weight=0.5).reward == 0.0


def test_regenerate_gives_the_sampled_task_here_at_a_peer_and_in_reasoning_gym() -> None:
    peer = TaskSource({family: 1.0 for family in DEFAULT_FAMILIES}, seed=SEED + 1)
    for task in SOURCE.sample(30, random.Random(0)):
        for source in (SOURCE, peer):
            again = source.regenerate(task.ref)
            assert (again.question, again.answer, again.entry) == (task.question, task.answer, task.entry)
        # Entries depend on (seed, index) only, not on the dataset size the node picks.
        direct = reasoning_gym.create_dataset(task.ref.family, seed=SEED, size=MAX_INDEX)[task.ref.index]
        assert (direct["question"], direct["answer"]) == (task.question, task.entry["answer"])


def test_another_seed_gives_another_question() -> None:
    for task in ONE_TASK_PER_FAMILY:
        other = SOURCE.regenerate(TaskRef(task.ref.family, task.ref.config_id, SEED + 1, task.ref.index))
        assert other.question != task.question


def test_sample_follows_the_weights_and_uses_the_source_seed() -> None:
    source = TaskSource({"bf": 0.0, "basic_arithmetic": 3.0, "base_conversion": 1.0}, seed=SEED)
    assert source.families == ("basic_arithmetic", "base_conversion")
    tasks = source.sample(400, random.Random(1))
    counts = {family: sum(t.ref.family == family for t in tasks) for family in source.families}
    assert 240 < counts["basic_arithmetic"] < 360
    assert all(t.ref.seed == SEED and 0 <= t.ref.index < MAX_INDEX for t in tasks)
    assert source.sample(0, random.Random(1)) == []


def test_generator_config_is_applied_and_named_by_config_id() -> None:
    options = {"min_terms": 2, "max_terms": 2, "min_digits": 1, "max_digits": 1}
    source = TaskSource({"basic_arithmetic": 1.0}, seed=SEED, configs={"basic_arithmetic": options})
    for task in source.sample(5, random.Random(2)):
        assert task.ref.config_id == config_id("basic_arithmetic", options)
        assert task.entry["metadata"]["num_terms"] == 2
        assert grade(task, f"<answer>{task.answer}</answer>").reward == 1.0


def test_config_id_is_a_canonical_short_digest() -> None:
    cid = config_id("basic_arithmetic", {"min_terms": 2, "max_terms": 3})
    assert re.fullmatch(r"[0-9a-f]{12}", cid)
    assert cid == config_id("basic_arithmetic", {"max_terms": 3, "min_terms": 2})
    assert cid != config_id("basic_arithmetic", {"min_terms": 2, "max_terms": 4})
    assert config_id("bf", {}) != config_id("arc_1d", {})


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"family": "chain_sum"}, "family_not_enabled"),
        ({"family": "bf"}, "family_not_enabled"),  # known to reasoning-gym, weight 0 here
        ({"config_id": config_id("basic_arithmetic", {"min_terms": 3})}, "config_mismatch"),
        ({"seed": -1}, "bad_seed"),
        ({"seed": TRAIN_SEED_LIMIT}, "bad_seed"),  # the example and evaluation seed range: never trained on
        ({"seed": EVAL_SEED_BASE}, "bad_seed"),
        ({"seed": 1.5}, "bad_seed"),
        ({"index": -1}, "bad_index"),
        ({"index": MAX_INDEX}, "bad_index"),
        ({"index": "7"}, "bad_index"),
        ({"index": True}, "bad_index"),
    ],
)
def test_regenerate_rejects_refs_this_node_will_not_run(change: dict, reason: str) -> None:
    source = TaskSource({"basic_arithmetic": 1.0, "bf": 0.0}, seed=SEED)
    ref = source.sample(1, random.Random(3))[0].ref
    fields = {"family": ref.family, "config_id": ref.config_id, "seed": ref.seed, "index": ref.index} | change
    with pytest.raises(TaskRejected) as caught:
        source.regenerate(TaskRef(**fields))
    assert caught.value.reason == reason


def test_regenerate_accepts_any_peer_seed_and_index_in_range() -> None:
    ref = SOURCE.sample(1, random.Random(4))[0].ref
    for seed, index in [(0, 0), (TRAIN_SEED_LIMIT - 1, MAX_INDEX - 1)]:
        task = SOURCE.regenerate(TaskRef(ref.family, ref.config_id, seed, index))
        assert task.question


@pytest.mark.parametrize(
    ("weights", "configs", "seed", "in_hint"),
    [
        ({"basic_arithmetik": 1.0}, None, SEED, "basic_arithmetic"),
        ({"basic_arithmetic": 0.0, "bf": 0.0}, None, SEED, "positive weight"),
        ({"basic_arithmetic": -1.0}, None, SEED, ">= 0"),
        ({"basic_arithmetic": float("nan")}, None, SEED, ">= 0"),
        ({"basic_arithmetic": "1"}, None, SEED, ">= 0"),
        ({"basic_arithmetic": 1.0}, {"basic_arithmetic": {"min_termz": 2}}, SEED, "min_terms"),
        ({"basic_arithmetic": 1.0}, {"basic_arithmetic": {"min_terms": 5, "max_terms": 2}}, SEED, "max_terms"),
        ({"basic_arithmetic": 1.0}, {"basic_arithmetic": {"seed": 3}}, SEED, "seed and size"),
        ({"basic_arithmetic": 1.0}, {"basic_arithmetik": {}}, SEED, "basic_arithmetic"),
        ({"basic_arithmetic": 1.0}, None, -1, "tasks.seed"),
        ({"basic_arithmetic": 1.0}, None, TRAIN_SEED_LIMIT, "tasks.seed"),
        ({"puzzle24": 1.0}, None, SEED, "remove puzzle24"),  # its scorer evals answers with sympy
        ({"list_functions": 1.0}, None, SEED, "remove list_functions"),  # entries depend on the dataset size
        ({"composite": 1.0}, None, SEED, "basic_arithmetic"),
    ],
)
def test_invalid_settings_raise_node_error_with_a_hint(weights, configs, seed, in_hint) -> None:
    with pytest.raises(NodeError) as caught:
        TaskSource(weights, seed=seed, configs=configs)
    assert caught.value.message
    assert in_hint in caught.value.hint


@settings(max_examples=300, deadline=None)
@given(task=st.sampled_from(ONE_TASK_PER_FAMILY), text=st.text(), wrap=st.booleans())
def test_score_never_raises_and_stays_in_range(task: Task, text: str, wrap: bool) -> None:
    completion = f"<answer>{text}</answer>" if wrap else text
    assert 0.0 <= grade(task, completion).reward <= 1.0
    assert 0.0 <= grade(task, completion, format_weight=0.25).reward <= 1.25


def test_eval_based_scorer_runs_no_code_from_answers() -> None:
    task = tasks_of("binary_matrix", 1)[0]
    rows = [[int(x) for x in line.split()] for line in task.answer.splitlines()]
    assert grade(task, f"<answer>{rows}</answer>").reward == pytest.approx(0.1)  # a literal keeps its partial credit
    assert grade(task, f"<answer>list({rows})</answer>").reward == 0.0
    attack = "__import__('builtins').__setattr__('tasks_test_pwned', 1)"
    assert grade(task, f"<answer>{attack}</answer>").reward == 0.0
    assert not hasattr(builtins, "tasks_test_pwned")


def test_overlong_answer_scores_zero_without_slow_parsing() -> None:
    task = tasks_of("propositional_logic", 1)[0]
    variable = task.entry["metadata"]["variables"][0]
    assert grade(task, f"<answer>{'¬' * 100_000}{variable}</answer>").reward == 0.0


def test_generating_bf_tasks_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    TaskSource({"bf": 1.0}, seed=SEED + 2).sample(5, random.Random(5))
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("<answer>42</answer>", "42"),
        ("<answer>  \n 42 \t</answer>", "42"),
        ("<answer>1</answer> on second thought <answer>2</answer>", "2"),
        ("<answer>1</answer> then cut off <answer>2", "1"),
        ("<answer>1</answer></answer>", "1"),
        ("<answer>junk <answer> 3 </answer>", "3"),
        ("<answer><answer>4</answer></answer>", "4"),
        ("<answer>5", None),
        ("5</answer>", None),
        ("</answer><answer>6", None),
        ("<answer></answer>", None),
        ("<ANSWER>7</ANSWER>", None),
        ("the answer is 8", None),
        ("", None),
    ],
)
def test_extract_answer(completion: str, expected: str | None) -> None:
    assert extract_answer(completion) == expected


def test_build_messages() -> None:
    assert build_messages("What is 2+2?") == [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": "What is 2+2?"},
    ]
    assert "<answer>" in SYSTEM_PROMPT and "</answer>" in SYSTEM_PROMPT


# ------------------------------------------------------------------------------------ prompts, grades, ladders
def _small_source(seed: int) -> TaskSource:
    from node.tasks.curriculum import SMALL_MODEL_LADDERS

    return TaskSource({family: 1.0 for family in SMALL_MODEL_LADDERS}, seed=seed, ladders=SMALL_MODEL_LADDERS)


def test_two_nodes_build_the_same_worked_example_prompt_for_a_ref() -> None:
    mine, peer = _small_source(SEED), _small_source(SEED + 99)
    for task in mine.sample(20, random.Random(5), {"basic_arithmetic": 2, "gcd": 1}):
        messages = mine.messages(task)
        assert peer.messages(peer.regenerate(task.ref)) == messages
        system, example_q, example_a, question = messages
        assert system["content"] == SYSTEM_PROMPT and question == {"role": "user", "content": task.question}
        assert example_q["role"] == "user" and example_q["content"] != task.question
        assert re.fullmatch(r"<answer>[^<]+</answer>", example_a["content"]) and example_a["role"] == "assistant"
    a, b = mine.sample(2, random.Random(6))
    assert mine.messages(a)[1] != mine.messages(b)[1] or a.ref.family != b.ref.family  # examples vary with the ref


def test_zero_shot_build_messages_is_format_one() -> None:
    from node.tasks.prompts import PROMPT_FORMAT

    assert PROMPT_FORMAT == 2  # bump it whenever the chat built for a ref changes
    assert len(build_messages("q", ("eq", "ea"))) == 4


def test_every_ladder_level_regenerates_at_a_peer_and_easy_levels_skip_trivial_items() -> None:
    mine, peer = _small_source(SEED), _small_source(SEED + 1)
    for level in range(4):
        for task in mine.sample(30, random.Random(level), {family: level for family in mine.families}):
            assert mine.level_of(task.ref) == level
            assert peer.regenerate(task.ref).question == task.question
            expression = task.entry["metadata"].get("expression")
            if expression:  # no x + 0, x * 1 or negative results: they teach nothing or earn partial credit
                numbers = re.findall(r"\d+", expression)
                assert not task.answer.startswith("-") and "0" not in numbers
                assert "*" not in expression or "1" not in numbers


def test_grade_counts_only_exact_answers_as_accuracy() -> None:
    from node.tasks.source import grade

    task = _small_source(SEED).sample(1, random.Random(7), {"basic_arithmetic": 0})[0]
    right = grade(task, f"<answer>{task.answer}</answer>")
    assert (right.exact, right.reward, right.reason, right.wellformed) == (True, 1.0, "correct", True)
    near = grade(task, f"<answer>-{task.answer}</answer>", format_weight=0.2)
    assert near.score > 0 and not near.exact and near.reward == 0.2 and near.reason == "partial_credit"
    assert grade(task, "<answer>", finished=False).reason == "cut_at_token_limit"
    assert grade(task, "no block").reason == "no_answer_block"
    assert grade(task, f"<answer>{task.answer}.0</answer>").exact


def test_evaluation_set_is_fixed_shared_and_disjoint_from_training() -> None:
    mine, peer = _small_source(SEED), _small_source(SEED + 1)
    evaluation = mine.evaluation_set(64, levels=2)
    assert [t.ref for t in peer.evaluation_set(64, levels=2)] == [t.ref for t in evaluation]
    assert {t.ref.family for t in evaluation} == set(mine.families)
    assert {mine.level_of(t.ref) for t in evaluation} == {0, 1}
    assert all(t.ref.seed >= TRAIN_SEED_LIMIT for t in evaluation)
    for task in evaluation[:5]:
        with pytest.raises(TaskRejected):  # a peer cannot make us train on the evaluation set
            peer.regenerate(task.ref)
    assert [t.ref for t in mine.evaluation_set(64, levels=2, seed=1)] != [t.ref for t in evaluation]
