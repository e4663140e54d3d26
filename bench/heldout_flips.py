"""What moved between a node's held-out evaluations, question by question: a random walk or a collapse?

A fall-back of held-out accuracy looks the same in the totals whether many questions were gained and lost (a noisy
step moves greedy answers both ways) or the answers converged on one wrong value (a collapse: "5 * 7" and "5 * 9"
both answered 250). Every evaluation of a node writes each question's greedy answer to its run folder
(``heldout_answers.jsonl``, :class:`node.runstore.HeldoutAnswers`); this reads them and reports, between consecutive
evaluations of each node and per task family:

- questions gained (wrong, then right), lost (right, then wrong), the net, and how many answers changed at all;
- the share of the previously right answers that were lost;
- the collapse signature of each evaluation: of the family's wrong answers (a value that is not the right one; no
  answer block is counted apart), how many equal its most common wrong answer, and that answer;
- how many groups of the family the node trained on between the two evaluations (groups with reward spread, its own
  and peers', from its ``samples.jsonl``), and how many of those had no right answer: their spread came from the
  format bonus (or partial credit) alone, so their advantages pushed well-formed wrong answers up. A family can also
  lose answers in rounds that trained none of its groups, moved by the updates on the others.

Below the table, over every node and window: the share of a family's right answers lost where the window trained
none of its groups, only groups with a right answer, or some group without one.

Give it run folders (``<data_dir>/runs/<run_name>``), a folder of run folders (``<work>/runs``), or a
``bench/swarm_vs_solo.py --work`` folder (its nodes' run folders are ``<work>/runs/<config>-s<seed>-n<node>``)::

    python bench/heldout_flips.py ~/.cache/rl-swarm-bench/swarm_vs_solo --out flips.json

A markdown table goes to stdout, the same figures to ``--out`` as JSON. Two evaluations are compared only when they
answered the same questions (the records' ``question_set`` digests are equal).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from node.runstore import ANSWERS_FILE, HeldoutAnswers, RunStore  # noqa: E402
from node.sapo.scoring import TRAINED  # noqa: E402

ALL = "all"  # the row of every family together


def run_dirs(paths: list[Path]) -> list[Path]:
    """The run folders under the given paths, each path a run folder, a folder of them, or a bench work folder."""
    found: list[Path] = []
    for path in paths:
        if (path / ANSWERS_FILE).is_file():
            found.append(path)
            continue
        for folder in (path, path / "runs"):
            found.extend(sorted(p for p in folder.glob("*") if (p / ANSWERS_FILE).is_file()) if folder.is_dir() else [])
    return list(dict.fromkeys(found))


def family_state(record: HeldoutAnswers) -> dict[str, dict]:
    """Per family (and all together): questions, right, wrong values, no answer, and the most common wrong value."""
    families: dict[str, list] = {}
    for answer in record.answers:
        families.setdefault(answer.family, []).append(answer)
    state = {family: _state(answers, signature=True) for family, answers in sorted(families.items())}
    state[ALL] = _state(list(record.answers), signature=False)  # one wrong value across families means nothing
    return state


def _state(answers: list, *, signature: bool) -> dict:
    wrong = Counter(a.answer for a in answers if not a.correct and a.answer is not None)
    # the most common wrong answer; among equally common ones the first in text order, so that reports are stable
    top = min(wrong.items(), key=lambda item: (-item[1], item[0])) if wrong and signature else (None, None)
    return {
        "questions": len(answers), "correct": sum(a.correct for a in answers),
        "wrong": sum(wrong.values()), "no_answer": sum(a.answer is None for a in answers),
        "top_wrong": top[0], "top_wrong_count": top[1],
    }


def flips(before: HeldoutAnswers, after: HeldoutAnswers) -> dict[str, dict] | None:
    """Per family (and all together) between two evaluations: gained, lost, net, changed answers, and the share of
    the right answers before that were lost; None when they did not answer the same questions."""
    if before.question_set != after.question_set or len(before.answers) != len(after.answers):
        return None
    moved: dict[str, Counter] = {}
    for old, new in zip(before.answers, after.answers, strict=True):
        for family in (old.family, ALL):
            counts = moved.setdefault(family, Counter())
            counts["gained"] += not old.correct and new.correct
            counts["lost"] += old.correct and not new.correct
            counts["changed"] += old.answer != new.answer
            counts["correct_before"] += old.correct
    return {family: {
        "gained": c["gained"], "lost": c["lost"], "net": c["gained"] - c["lost"], "changed": c["changed"],
        "lost_share": c["lost"] / c["correct_before"] if c["correct_before"] else None,
    } for family, c in sorted(moved.items(), key=lambda item: (item[0] == ALL, item[0]))}


def totals(records: list[HeldoutAnswers]) -> list[list[int]]:
    """[rounds before, rounds after, gained, lost] of every comparable pair of consecutive evaluations (all families)."""
    rows = []
    for before, after in zip(records, records[1:]):
        moved = flips(before, after)
        if moved is not None:
            rows.append([before.rounds_trained, after.rounds_trained, moved[ALL]["gained"], moved[ALL]["lost"]])
    return rows


def trained_groups(store: RunStore) -> dict[int, Counter]:
    """Round -> groups trained on (reward spread, in the update), counted per (family, whether any completion was
    right). A trained group with no right answer got its spread from the format bonus or partial credit alone, so
    its advantages pushed wrong answers up (a group's sample is its best completion, right when any was)."""
    trained: dict[int, Counter] = {}
    for sample in store.samples():
        if sample.fate == TRAINED:
            trained.setdefault(sample.round, Counter())[sample.family, sample.reason == "correct"] += 1
    return trained


def _trained_between(trained: dict[int, Counter], before: int, after: int) -> dict[str, Counter]:
    """Per family (and all together): groups trained in the rounds between two evaluations (``trained_groups``), and
    those of them with no right answer (``trained_without_right``). An evaluation after n rounds trained follows
    rounds 0..n-1; a family without any is missing."""
    between: dict[str, Counter] = {}
    for number in range(before, after):
        for (family, right), n in trained.get(number, Counter()).items():
            for key in (family, ALL):
                counts = between.setdefault(key, Counter(trained_groups=0, trained_without_right=0))
                counts["trained_groups"] += n
                counts["trained_without_right"] += 0 if right else n
    return between


def analyse_node(run_dir: Path) -> dict:
    """Every evaluation of one node, each with its families' state, what moved since the one before and the groups
    of each family trained on in between."""
    store = RunStore(run_dir)
    records, trained = store.heldout_answers(), trained_groups(store)
    evaluations = []
    for number, record in enumerate(records):
        moved = flips(records[number - 1], record) if number else None
        if moved is not None:
            groups = _trained_between(trained, records[number - 1].rounds_trained, record.rounds_trained)
            none = {"trained_groups": 0, "trained_without_right": 0}
            moved = {family: values | dict(groups.get(family, none)) for family, values in moved.items()}
        state = family_state(record)
        evaluations.append({
            "rounds_trained": record.rounds_trained, "round": record.round, "question_set": record.question_set,
            "accuracy": state[ALL]["correct"] / state[ALL]["questions"] if state[ALL]["questions"] else None,
            # False where the set changed (a resumed run with other evaluation settings): nothing is compared
            "compared": moved is not None,
            "families": {family: values | (moved or {}).get(family, {}) for family, values in state.items()},
        })
    return {"node": run_dir.name, "run_dir": str(run_dir), "evaluations": evaluations}


def analyse(paths: list[Path]) -> dict:
    nodes = [analyse_node(run_dir) for run_dir in run_dirs(paths)]
    return {"nodes": nodes, "losses_by_training": losses_by_training(nodes)}


# Windows of one family between two evaluations, by what the node trained on of that family in them.
WINDOW_KINDS = {
    "none_trained": "no group of it trained",
    "only_right": "only groups with a right answer trained",
    "some_without_right": "a group without a right answer trained",
}


def losses_by_training(nodes: list[dict]) -> dict[str, dict]:
    """Over every node, window between evaluations and family: right answers lost and gained, by what the window
    trained of that family (``WINDOW_KINDS``)."""
    split = {kind: {"windows": 0, "correct_before": 0, "lost": 0, "gained": 0} for kind in WINDOW_KINDS}
    for node in nodes:
        previous = None
        for evaluation in node["evaluations"]:
            if evaluation["compared"] and previous is not None:
                for family, f in evaluation["families"].items():
                    if family == ALL:
                        continue
                    kind = ("none_trained" if not f["trained_groups"] else
                            "some_without_right" if f["trained_without_right"] else "only_right")
                    cell = split[kind]
                    cell["windows"] += 1
                    cell["correct_before"] += previous["families"][family]["correct"]
                    cell["lost"] += f["lost"]
                    cell["gained"] += f["gained"]
            previous = evaluation
    for cell in split.values():
        cell["lost_share"] = round(cell["lost"] / cell["correct_before"], 4) if cell["correct_before"] else None
    return split


def markdown(result: dict) -> str:
    lines = [
        "| node | rounds | family | right | gained | lost | net | lost share | changed | no answer "
        "| top wrong answer (of wrong) | groups trained (no right answer) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for node in result["nodes"]:
        previous = None
        for evaluation in node["evaluations"]:
            rounds = f"{previous} -> {evaluation['rounds_trained']}" if evaluation["compared"] \
                else str(evaluation["rounds_trained"])
            for family, f in evaluation["families"].items():
                moved = evaluation["compared"]
                top = f"`{f['top_wrong']}` {f['top_wrong_count']}/{f['wrong']}" if f["top_wrong"] is not None \
                    else ("" if family == ALL else f"-/{f['wrong']}")
                lines.append("| " + " | ".join([
                    node["node"], rounds, f"**{family}**" if family == ALL else family,
                    f"{f['correct']}/{f['questions']}",
                    f"+{f['gained']}" if moved else "", f"-{f['lost']}" if moved else "",
                    f"{f['net']:+d}" if moved else "",
                    (f"{f['lost_share']:.2f}" if f["lost_share"] is not None else "-") if moved else "",
                    str(f["changed"]) if moved else "", str(f["no_answer"]), top,
                    f"{f['trained_groups']} ({f['trained_without_right']})" if moved else "",
                ]) + " |")
            previous = evaluation["rounds_trained"]
    for kind, cell in result["losses_by_training"].items():
        if cell["windows"]:
            lines.append(f"\nWindows of a family with {WINDOW_KINDS[kind]}: {cell['windows']}; right answers lost "
                         f"{cell['lost']} of {cell['correct_before']} ({cell['lost_share']}), gained {cell['gained']}.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("paths", nargs="+", type=Path,
                        help="run folders, folders of run folders, or swarm_vs_solo.py --work folders")
    parser.add_argument("--out", type=Path, help="write the figures as JSON to this file")
    args = parser.parse_args(argv)
    result = analyse(args.paths)
    if not result["nodes"]:
        parser.error(f"no {ANSWERS_FILE} under {' '.join(map(str, args.paths))}: give run folders of nodes that ran "
                     "a held-out evaluation with this version")
    print(markdown(result))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
