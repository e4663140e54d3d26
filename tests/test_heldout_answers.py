"""Each held-out evaluation's answers per question: the evaluator records every question's greedy answer in the set's
order, the run folder keeps them beside evaluations.jsonl (bounded, validated on reading, cut back on resume), and a
real node writes one record per evaluation that agrees with its EvalFinished totals."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from node.events import EvalFinished
from node.learning.evaluation import EvalSettings, Evaluator, question_set_digest
from node.learning.grpo import Completion, Policy
from node.runner import SwarmNode
from node.runstore import ANSWER_CHARS, HeldoutAnswer, HeldoutAnswers, RunStore
from node.tasks.curriculum import default_mix
from node.tasks.source import TaskSource, grade
from tests.nodes import tiny_config


def _tasks() -> TaskSource:
    mix = default_mix(135_000_000)  # the bundled model's families and ladders
    return TaskSource(mix.weights, seed=3, ladders=mix.ladders)


def _scripted(position: int, answer: str | None) -> str:
    """What the model 'answers' to the question at ``position``: right, a shared wrong value, nothing, too long."""
    return [f"<answer>{answer}</answer>", "<answer>250</answer>", "no answer block",
            "<answer>" + "9" * 100 + "</answer>"][position % 4]


def test_an_evaluation_records_every_questions_greedy_answer_in_the_sets_order(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    policy = Policy(model, AutoTokenizer.from_pretrained(tiny_model_dir), generation_dtype=torch.float32,
                    max_prompt_tokens=256)
    questions = 40  # three chunks: positions must run on across them
    evaluator = Evaluator(policy, _tasks(), EvalSettings(questions=questions, max_new_tokens=3))
    generate, asked = policy.generate, []

    def scripted(prompts, **kwargs):  # the real generation runs; its texts are replaced by known answers
        groups = generate(prompts, **kwargs)
        out = []
        for prompt, group in zip(prompts, groups, strict=True):
            position = len(asked)
            assert prompt == evaluator._prompts[position]
            asked.append(position)
            out.append([Completion(group[0].ids, _scripted(position, evaluator.questions[position].answer), True)])
        return out

    policy.generate = scripted
    result = evaluator.run(round=3, rounds_trained=4)
    assert len(asked) == questions
    record = result.answers
    assert (record.round, record.rounds_trained) == (3, 4)
    assert record.question_set == question_set_digest(evaluator.questions) == evaluator.question_set
    assert len(record.answers) == questions
    for position, (task, answer) in enumerate(zip(evaluator.questions, record.answers, strict=True)):
        graded = grade(task, _scripted(position, task.answer))
        assert answer.family == task.ref.family
        assert (answer.correct, answer.wellformed) == (graded.exact, graded.wellformed)
        assert answer.answer == [task.answer, "250", None, "9" * ANSWER_CHARS][position % 4]
    assert sum(a.correct for a in record.answers) >= questions // 4  # every 4th is right (a 250 may be right too)
    summary = result.summary
    assert summary.accuracy_greedy == pytest.approx(sum(a.correct for a in record.answers) / questions)
    assert summary.per_family_questions == {f: sum(a.family == f for a in record.answers)
                                            for f in summary.per_family_questions}

    # another set (another seed) is named by another digest; the same set by the same one
    other = Evaluator(policy, _tasks(), EvalSettings(questions=questions, seed=1))
    assert other.question_set != evaluator.question_set
    assert Evaluator(policy, _tasks(), EvalSettings(questions=questions)).question_set == evaluator.question_set


def _record(rounds_trained: int, answers: list[tuple[str, str | None, bool]], *, round_: int | None = None,
            question_set: str = "set-a") -> HeldoutAnswers:
    return HeldoutAnswers(rounds_trained if round_ is None else round_, rounds_trained, question_set,
                          tuple(HeldoutAnswer(family, answer, correct, answer is not None)
                                for family, answer, correct in answers))


def _summary(rounds_trained: int) -> EvalFinished:
    return EvalFinished(round=rounds_trained, rounds_trained=rounds_trained, questions=2, accuracy_greedy=0.5,
                        exact_mean=0.5, score_mean=0.5, wellformed_rate=1.0)


def test_the_run_folder_keeps_answers_beside_the_evaluations_reads_them_back_and_cuts_them_on_resume(tmp_path):
    store = RunStore(tmp_path / "run")
    records = [_record(n, [("products", "35", True), ("chain_sum", None, False), ("products", "é\n", False)])
               for n in range(0, 50, 10)]
    for record in records:
        store.append_evaluation(_summary(record.rounds_trained), record)
    assert store.answers_path.name == "heldout_answers.jsonl" and store.answers_path.parent == store.run_dir
    assert RunStore(tmp_path / "run").heldout_answers() == records
    # the event stream's record stays as it was: no answers in it
    assert "answers" not in json.loads(store.evaluations_path.read_text().splitlines()[0])
    # an evaluation written again after a crash (its answers, not yet its summary): the last one counts
    again = _record(40, [("products", "36", False)] * 3)
    store.append_evaluation(_summary(40), again)
    assert store.heldout_answers() == [*records[:-1], again]
    with open(store.answers_path, "a") as f:
        f.write('{"version":1,"round":50,"rounds_trained":50,"question_se')  # torn by a crash
    assert store.heldout_answers()[-1] == again

    store.truncate_after(20)  # resuming from the checkpoint of round 20
    assert [r.rounds_trained for r in RunStore(tmp_path / "run").heldout_answers()] == [0, 10, 20]
    assert [e.rounds_trained for e in store.evaluations()] == [0, 10, 20]
    store.truncate_after(None)
    assert store.heldout_answers() == [] and store.answers_path.read_text() == ""


def _line(**changes) -> str:
    data = json.loads(_record(0, [("products", "35", True), ("chain_sum", "7", False)]).to_json())
    return json.dumps(data | changes)


@pytest.mark.parametrize("line", [
    _line(version=2), _line(round=-1), _line(rounds_trained="3"), _line(question_set=""),
    _line(families=["products", "products"]), _line(answers=[[2, "35", 1, 1]]), _line(answers=[[0, "35", 2, 1]]),
    _line(answers=[[0, "35", True, 1]]), _line(answers=[[0, "9" * (ANSWER_CHARS + 1), 0, 1]]),
    _line(answers=[[0, 35, 1, 1]]), _line(answers=[[0, "35", 1]]), _line(families=[""]), '["not", "a", "record"]',
])
def test_a_line_that_is_not_a_valid_record_is_refused_and_skipped(tmp_path, line):
    assert HeldoutAnswers.from_json(_line()).answers[1] == HeldoutAnswer("chain_sum", "7", False, True)
    with pytest.raises((ValueError, TypeError)):
        HeldoutAnswers.from_json(line)
    store = RunStore(tmp_path / "run")
    store.answers_path.write_text(_line() + "\n" + line + "\n")
    assert len(store.heldout_answers()) == 1


def test_the_record_is_bounded():
    with pytest.raises(ValueError, match="cut it"):
        HeldoutAnswer("products", "1" * (ANSWER_CHARS + 1), False, True)
    families = ("basic_arithmetic", "chain_sum", "products")
    # 200 questions with the answers of a small model (a few digits, some with no answer block)
    typical = _record(1000, [(families[i % 3], None if i % 7 == 0 else str(i * 37), i % 3 == 0)
                             for i in range(200)], round_=999)
    assert len(typical.to_json().encode()) < 4_000
    # the worst a model can answer: every answer as long as kept, every character JSON escapes (6 bytes each)
    worst = _record(1000, [(families[i % 3], "\x01" * ANSWER_CHARS, False) for i in range(200)], round_=999)
    assert len(worst.to_json().encode()) < 200 * (ANSWER_CHARS * 6 + 16) + 200
    assert HeldoutAnswers.from_json(worst.to_json()) == worst


@pytest.mark.slow
def test_a_node_writes_one_record_per_evaluation_that_agrees_with_its_totals_and_resume_cuts_later_ones(
        tiny_model_dir, tmp_path):
    config = tiny_config(tiny_model_dir, tmp_path, run={"rounds": 2}, evaluation={"every_rounds": 1, "questions": 8})
    SwarmNode(config).run()
    store = RunStore(config.run_dir)
    summaries, records = store.evaluations(), store.heldout_answers()
    assert [r.rounds_trained for r in records] == [e.rounds_trained for e in summaries] == [0, 1, 2]
    assert len({r.question_set for r in records}) == 1
    for summary, record in zip(summaries, records, strict=True):
        assert record.round == summary.round and len(record.answers) == summary.questions == 8
        assert sum(a.correct for a in record.answers) / 8 == summary.accuracy_greedy
        assert sum(a.wellformed for a in record.answers) / 8 == summary.wellformed_rate
        assert {f: sum(a.family == f for a in record.answers) for f in summary.per_family_questions} \
            == summary.per_family_questions
    # an evaluation after the last checkpoint (round 1), then a crash: resuming cuts it, and evaluates again
    store.append_evaluation(_summary(7), _record(7, [("products", "1", True)] * 8, question_set=records[0].question_set))
    SwarmNode(config.update({"run": {"rounds": 3}})).run()
    assert [r.rounds_trained for r in RunStore(config.run_dir).heldout_answers()] == [0, 1, 2, 3]

