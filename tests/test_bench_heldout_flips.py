"""bench/heldout_flips.py's arithmetic on hand-made run folders: questions gained, lost and changed between
consecutive evaluations per family, the share of right answers lost, the collapse signature (how many wrong answers
are the family's most common one), sets that changed, the groups of each family trained between evaluations, and
finding run folders as swarm_vs_solo.py lays them out."""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from node.events import EvalFinished, RolloutSample
from node.runstore import HeldoutAnswer, HeldoutAnswers, RunStore

REPO = Path(__file__).resolve().parents[1]

# (family, answer, right); the family's questions keep their positions in every evaluation
ROUND_0 = [("products", "35", True), ("products", "45", True), ("products", "12", False), ("products", None, False),
           ("chain_sum", "7", True), ("chain_sum", "9", False), ("chain_sum", "4", False), ("chain_sum", "3", True)]
# products collapses: two right answers lost, both now 250, and a wrong one became 250 too; chain_sum walks: one
# gained, one lost, one wrong answer changed to another wrong one
ROUND_10 = [("products", "250", False), ("products", "250", False), ("products", "250", False),
            ("products", "8", False),
            ("chain_sum", "7", True), ("chain_sum", "11", True), ("chain_sum", "5", False), ("chain_sum", "2", False)]


@pytest.fixture(scope="module")
def flips():
    spec = importlib.util.spec_from_file_location("heldout_flips", REPO / "bench" / "heldout_flips.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


def _record(rounds_trained: int, rows, question_set: str = "set-a") -> HeldoutAnswers:
    return HeldoutAnswers(rounds_trained, rounds_trained, question_set,
                          tuple(HeldoutAnswer(f, a, right, a is not None) for f, a, right in rows))


def _write(run_dir: Path, *records: HeldoutAnswers) -> None:
    store = RunStore(run_dir)
    for record in records:
        store.append_evaluation(EvalFinished(round=record.round, rounds_trained=record.rounds_trained,
                                             questions=len(record.answers), accuracy_greedy=0.0, exact_mean=0.0,
                                             score_mean=0.0, wellformed_rate=0.0), record)


def test_gains_losses_and_the_collapse_signature_per_family(flips):
    before, after = _record(0, ROUND_0), _record(10, ROUND_10)
    moved = flips.flips(before, after)
    assert list(moved) == ["chain_sum", "products", "all"]
    assert moved["products"] == {"gained": 0, "lost": 2, "net": -2, "changed": 4, "lost_share": 1.0}
    assert moved["chain_sum"] == {"gained": 1, "lost": 1, "net": 0, "changed": 3, "lost_share": 0.5}
    assert moved["all"] == {"gained": 1, "lost": 3, "net": -2, "changed": 7, "lost_share": 0.75}

    state = flips.family_state(after)
    assert state["products"] == {"questions": 4, "correct": 0, "wrong": 4, "no_answer": 0, "top_wrong": "250",
                                 "top_wrong_count": 3}
    # equally common wrong answers: the first in text order, so that a report is the same every time
    assert state["chain_sum"]["top_wrong"] == "2" and state["chain_sum"]["top_wrong_count"] == 1
    assert state["all"]["correct"] == 2 and state["all"]["top_wrong"] is None
    # no answer block is not a wrong value
    assert flips.family_state(before)["products"] == {"questions": 4, "correct": 2, "wrong": 1, "no_answer": 1,
                                                       "top_wrong": "12", "top_wrong_count": 1}
    assert flips.flips(before, before)["all"] == {"gained": 0, "lost": 0, "net": 0, "changed": 0, "lost_share": 0.0}
    assert flips.flips(_record(0, ROUND_0[4:]), _record(10, ROUND_10[4:]))["all"]["lost_share"] == 0.5
    nothing_right = [(f, a, False) for f, a, _ in ROUND_0]
    assert flips.flips(_record(0, nothing_right), after)["all"]["lost_share"] is None


def test_evaluations_of_another_question_set_are_not_compared(flips, tmp_path):
    assert flips.flips(_record(0, ROUND_0), _record(10, ROUND_10, question_set="set-b")) is None
    assert flips.flips(_record(0, ROUND_0), _record(10, ROUND_10[:6])) is None
    _write(tmp_path / "n1", _record(0, ROUND_0), _record(10, ROUND_10, question_set="set-b"),
           _record(20, ROUND_0, question_set="set-b"))
    evaluations = flips.analyse_node(tmp_path / "n1")["evaluations"]
    assert [e["compared"] for e in evaluations] == [False, False, True]
    assert "gained" not in evaluations[1]["families"]["all"]
    assert evaluations[2]["families"]["all"]["gained"] == 3 and evaluations[2]["families"]["all"]["lost"] == 1
    assert flips.totals(RunStore(tmp_path / "n1").heldout_answers()) == [[10, 20, 3, 1]]


def _trained(run_dir: Path, *groups: tuple[int, str, str, str]) -> None:
    """(round, family, fate, reason of its best completion) of groups the node's rounds saw, one sample each, as the
    round writes them."""
    lines = [RolloutSample(round=number, source_peer="peer", source_name="name", local=True, family=family,
                           question="q", completion="c", reward=0.0, fate=fate, reason=reason).to_json()
             for number, family, fate, reason in groups]
    with RunStore(run_dir).samples_path.open("a", encoding="utf-8") as file:
        file.write("".join(line + "\n" for line in lines))


def test_groups_trained_between_evaluations_split_the_losses(flips, tmp_path):
    _write(tmp_path / "n1", _record(0, ROUND_0), _record(10, ROUND_10))
    # rounds 0..9 lead to the evaluation after 10 rounds; round 10's group and groups that gave no gradient do not count
    _trained(tmp_path / "n1", (2, "chain_sum", "trained", "correct"), (9, "chain_sum", "trained", "wrong_value"),
             (10, "products", "trained", "correct"), (4, "products", "no_signal", "correct"),
             (5, "products", "dropped_equal_rewards", "wrong_value"))
    result = flips.analyse([tmp_path / "n1"])
    families = result["nodes"][0]["evaluations"][1]["families"]
    assert (families["products"]["trained_groups"], families["chain_sum"]["trained_groups"],
            families["all"]["trained_groups"]) == (0, 2, 2)
    # round 9's chain_sum group had spread without a right answer (the format bonus alone)
    assert (families["chain_sum"]["trained_without_right"], families["all"]["trained_without_right"]) == (1, 1)
    assert "trained_groups" not in result["nodes"][0]["evaluations"][0]["families"]["all"]
    # products lost both of its right answers with none of its groups trained; chain_sum one of two, with a group
    # without a right answer among its two
    assert result["losses_by_training"] == {
        "none_trained": {"windows": 1, "correct_before": 2, "lost": 2, "gained": 0, "lost_share": 1.0},
        "only_right": {"windows": 0, "correct_before": 0, "lost": 0, "gained": 0, "lost_share": None},
        "some_without_right": {"windows": 1, "correct_before": 2, "lost": 1, "gained": 1, "lost_share": 0.5}}
    table = flips.markdown(result)
    assert "| n1 | 0 -> 10 | products | 0/4 | +0 | -2 | -2 | 1.00 | 4 | 0 | `250` 3/4 | 0 (0) |" in table
    assert "| n1 | 0 -> 10 | chain_sum | 2/4 | +1 | -1 | +0 | 0.50 | 3 | 0 | `2` 1/2 | 2 (1) |" in table
    assert "no group of it trained: 1; right answers lost 2 of 2 (1.0), gained 0." in table
    assert "only groups with a right answer" not in table  # no such window


def test_the_script_reads_a_bench_work_folder_and_writes_a_table_and_json(flips, tmp_path, capsys):
    work = tmp_path / "work"
    _write(work / "runs" / "i2j2-s0-n1", _record(0, ROUND_0), _record(10, ROUND_10))
    _write(work / "runs" / "i2j2-s0-n2", _record(0, ROUND_0))
    (work / "runs" / "i4j0-s0-n1").mkdir()  # a node that never evaluated
    assert flips.run_dirs([work]) == flips.run_dirs([work / "runs"]) == [work / "runs" / "i2j2-s0-n1",
                                                                          work / "runs" / "i2j2-s0-n2"]
    assert flips.run_dirs([work / "runs" / "i2j2-s0-n2"]) == [work / "runs" / "i2j2-s0-n2"]

    out = tmp_path / "flips.json"
    assert flips.main([str(work), "--out", str(out)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].startswith("| node | rounds | family | right | gained | lost | net | lost share |")
    assert "| i2j2-s0-n1 | 0 -> 10 | products | 0/4 | +0 | -2 | -2 | 1.00 | 4 | 0 | `250` 3/4 | 0 (0) |" in table
    assert "| i2j2-s0-n1 | 0 -> 10 | **all** | 2/8 | +1 | -3 | -2 | 0.75 | 7 | 0 |  | 0 (0) |" in table
    assert "| i2j2-s0-n2 | 0 | products | 2/4 |  |  |  |  |  | 1 | `12` 1/1 |  |" in table
    result = json.loads(out.read_text())
    assert [n["node"] for n in result["nodes"]] == ["i2j2-s0-n1", "i2j2-s0-n2"]
    last = result["nodes"][0]["evaluations"][1]
    assert last["rounds_trained"] == 10 and last["accuracy"] == 0.25 and last["compared"]
    assert last["families"]["products"]["top_wrong"] == "250" and last["families"]["products"]["lost"] == 2

    with pytest.raises(SystemExit):
        flips.main([str(tmp_path / "empty")])
    assert "heldout_answers.jsonl" in capsys.readouterr().err


def test_swarm_vs_solo_summaries_carry_each_nodes_gains_and_losses(tmp_path):
    spec = importlib.util.spec_from_file_location("swarm_vs_solo", REPO / "bench" / "swarm_vs_solo.py")
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench
    try:
        spec.loader.exec_module(bench)
        sapo = bench.Sapo(2, 2)
        _write(tmp_path / "runs" / bench.run_name(sapo, 0, 0), _record(0, ROUND_0), _record(10, ROUND_10))
        _write(tmp_path / "runs" / bench.run_name(sapo, 0, 1), _record(0, ROUND_0))
        args = argparse.Namespace(nodes=2, rounds=10, eval_samples=0, specialize=None)
        summary = bench.summarize(args, tmp_path, sapo, 0, "complete", 1.0)
    finally:
        del sys.modules[spec.name]
    assert [curve["heldout_flips"] for curve in summary["curves"]] == [[[0, 10, 1, 3]], []]
