"""bench/swarm_vs_solo.py's bookkeeping: run folders -> per-run summary -> results file, resume, node settings.

The sweep itself takes hours with the real model; these tests feed it run folders written by the node's own
RunStore, so the numbers in bench/results/learning.json are computed by the code tested here.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib.util
import json
import sys
from pathlib import Path

import pytest

from node.events import EvalFinished, RolloutSample, RoundFinished
from node.runstore import RunStore

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("swarm_vs_solo", REPO / "bench" / "swarm_vs_solo.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[spec.name]


def _args(bench, tmp_path: Path, **changes) -> argparse.Namespace:
    args = dict(nodes=2, configs=["I=4,J=0", "I=2,J=2"], seeds=[0, 1], rounds=4, generations=4, max_new_tokens=48,
                eval_every=2, eval_questions=8, eval_samples=0, eval_seed=0, gather_timeout=30.0, model="bundled",
                set=None, work=tmp_path, out=tmp_path / "out", fresh=False, argv=["--rounds", "4"], game="sapo",
                specialize=None, solo_rounds=None, node_models=None)
    args.update(changes)
    return argparse.Namespace(**args)


def _metrics(round_: int, reward: float, wellformed: float, *, used: int = 0, equal: int = 0) -> RoundFinished:
    return RoundFinished(
        round=round_, rounds_trained=round_ + 1, reward_local=reward, reward_external=None, reward_train=reward,
        loss=0.0, kl=None, completion_length=9.0, tokens_generated=100, generation_tokens_per_s=10.0,
        seconds_generate=1.0, seconds_share=0.1, seconds_gather=0.5, seconds_train=1.0, seconds_total=3.0,
        peers_seen=1, groups_shared=2, groups_received=used + equal, groups_used=used, groups_zero_advantage=equal,
        groups_rejected=0, rejected_reasons={}, wellformed_rate=wellformed, difficulty={"products": 0},
        external_groups_wanted=2, local_groups_with_spread=1, peer_groups_with_spread=used,
        peer_groups_spread_we_lacked=min(used, 1), peer_group_age_s_mean=2.0 if used else None,
    )


def _write_run(bench, args, sapo, seed: int, accuracies: list[list[float]], rewards: list[float],
               cpu: list[float] | None = None, families: list[dict[str, float]] | None = None,
               samples: dict[int, list[RolloutSample]] | None = None) -> None:
    """One run folder per node: accuracies[node] at rounds 0, 2, 4 (and on); the same local reward every round; with ``cpu``,
    the node's CPU seconds at those evaluations, as the bench's runner writes them; with ``families``, each node's
    accuracy by family at every evaluation (questions: 2 of each family but 4 of chain_sum); with ``samples``, every
    node's rollout samples of each round (by swarm round)."""
    if cpu is not None:
        for index in range(len(accuracies)):
            path = args.work / "cpu" / f"{bench.run_name(sapo, seed, index)}.json"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps({str(2 * i): seconds for i, seconds in enumerate(cpu)}))
    for index, node_accuracies in enumerate(accuracies):
        store = RunStore(args.work / "runs" / bench.run_name(sapo, seed, index))
        for round_ in range(bench.rounds_of(args, sapo) + 1):  # one round more than asked: the bench's stop follows
            store.append_round(_metrics(round_, rewards[index], 0.1 * round_, used=1, equal=2),
                               (samples or {}).get(round_, []))
        evaluations = [*zip(range(0, 2 * len(node_accuracies), 2), node_accuracies), (2, 0.99)]  # a repeat: ignored
        for n, accuracy in evaluations:
            by_family = families[index] if families else {}
            store.append_evaluation(EvalFinished(
                round=n, rounds_trained=n, questions=8, accuracy_greedy=accuracy, exact_mean=accuracy / 2,
                score_mean=accuracy, wellformed_rate=0.5, per_family=by_family,
                per_family_questions={f: 4 if f == "chain_sum" else 2 for f in by_family}))


def test_summary_of_a_run_reads_the_nodes_run_folders(bench, tmp_path):
    args = _args(bench, tmp_path)
    sapo = bench.Sapo.parse("I=2, J=2")
    _write_run(bench, args, sapo, 0, [[0.1, 0.2, 0.5], [0.1, 0.3, 0.3]], [0.5, 0.25])
    summary = bench.summarize(args, tmp_path, sapo, 0, "complete", 3.0)
    assert summary["complete"] and summary["config"] == "I=2,J=2"
    assert summary["heldout_round0"] == pytest.approx(0.1)
    assert summary["heldout_final"] == pytest.approx(0.4)
    assert summary["heldout_final_per_node"] == [0.5, 0.3]
    # Rounds past the asked count are not counted: 4 rounds x (0.5 + 0.25).
    assert summary["cumulative_reward"] == pytest.approx(3.0)
    assert summary["wellformed_round0"] == pytest.approx(0.0)
    assert summary["diagnostics"]["peer_groups_trained"] == 8
    assert summary["diagnostics"]["peer_groups_equal_rewards"] == 16
    # what the swarm gave: 4 rounds x 2 nodes, one group with spread of ours and one of a peer's a round, that one on
    # a family where ours had none; one peer group of the two slots: J never filled
    assert summary["diagnostics"]["local_groups_with_spread"] == 8
    assert summary["diagnostics"]["peer_groups_with_spread"] == 8
    assert summary["diagnostics"]["peer_groups_spread_we_lacked"] == 8
    assert summary["diagnostics"]["rounds_j_filled"] == 0.0
    assert summary["diagnostics"]["peer_group_age_s"] == pytest.approx(2.0)
    assert [row[0] for row in summary["curves"][0]["heldout"]] == [0, 2, 4]
    assert summary["heldout_sampled_round0"] is None  # greedy only: no sampled answers to report

    sampled = bench.summarize(_args(bench, tmp_path, eval_samples=2), tmp_path, sapo, 0, "complete", 3.0)
    assert sampled["heldout_sampled_round0"] == pytest.approx(0.05)
    assert sampled["heldout_sampled_final"] == pytest.approx(0.2)
    assert sampled["heldout_sampled_by_round"] == {"0": pytest.approx(0.05), "2": pytest.approx(0.125),
                                                   "4": pytest.approx(0.2)}
    assert [row[3] for row in sampled["curves"][1]["heldout"]] == [0.05, 0.15, 0.15]


def test_a_run_without_every_final_evaluation_is_incomplete(bench, tmp_path):
    args = _args(bench, tmp_path)
    sapo = bench.Sapo(4, 0)
    _write_run(bench, args, sapo, 0, [[0.1, 0.2, 0.5], [0.1, 0.3]], [0.5, 0.25])
    summary = bench.summarize(args, tmp_path, sapo, 0, "complete", 3.0)
    assert not summary["complete"]


def test_report_pairs_seeds_and_counts_where_sharing_is_at_least_solo(bench, tmp_path):
    args = _args(bench, tmp_path)
    runs = []
    finals = {("I=4,J=0", 0): 0.3, ("I=2,J=2", 0): 0.3, ("I=4,J=0", 1): 0.4, ("I=2,J=2", 1): 0.35}
    for (name, seed), final in finals.items():
        sapo = bench.Sapo.parse(name)
        _write_run(bench, args, sapo, seed, [[0.1, 0.2, final], [0.1, 0.2, final]], [final, final])
        runs.append(bench.summarize(args, tmp_path, sapo, seed, "complete", 2.0))
    result = bench.report(args, runs, 8.0)
    assert result["heldout"]["config"] == "I=2,J=2"
    assert result["heldout"]["round0"] == pytest.approx(0.1)
    assert result["heldout"]["final"] == pytest.approx(0.325)
    assert result["heldout_sampled"] is None
    sampled = bench.report(_args(bench, tmp_path, eval_samples=2), [
        bench.summarize(_args(bench, tmp_path, eval_samples=2), tmp_path, bench.Sapo.parse("I=2,J=2"), seed,
                        "complete", 2.0) for seed in (0, 1)], 8.0)
    assert sampled["heldout_sampled"]["round0"] == pytest.approx(0.05)
    assert sampled["heldout_sampled"]["final"] == pytest.approx(0.1625)
    [comparison] = result["comparisons"]
    assert comparison["heldout_final_delta"] == [pytest.approx(0.0), pytest.approx(-0.05)]
    assert comparison["seeds_shared_at_least_solo"] == 1  # a tie counts as "at least"
    assert {(r["config"], r["seed"]) for r in result["swarm_vs_solo"]} == set(finals)
    assert result["per_config"]["I=4,J=0"]["heldout_final_sd"] == pytest.approx(0.0707, abs=1e-3)
    assert comparison["heldout_final_delta_mean"] == pytest.approx(-0.025)
    assert comparison["ci95"] == [pytest.approx(-0.05), pytest.approx(0.0)]  # two seeds: resamples of 0 and -0.05
    assert comparison["heldout_equal_cpu_delta"] == []  # these runs recorded no CPU seconds
    json.dumps(result)  # the results file is plain JSON


def test_report_compares_at_equal_cpu_seconds_with_a_paired_interval(bench, tmp_path):
    args = _args(bench, tmp_path, seeds=[0, 1, 2])
    runs = []
    # Solo spends 100 CPU-s between evaluations, shared 50 (it generates half the completions). The pair's budget is
    # what the cheaper run spent in all, shared's 100 CPU-s: shared's final evaluation meets solo's last one within
    # 100 s, that of round 2 (0.3).
    for seed in (0, 1, 2):
        for name, accuracies, cpu in (("I=4,J=0", [0.1, 0.3, 0.4], [0.0, 100.0, 200.0]),
                                      ("I=2,J=2", [0.1, 0.2, 0.35 + 0.05 * seed], [0.0, 50.0, 100.0])):
            sapo = bench.Sapo.parse(name)
            _write_run(bench, args, sapo, seed, [accuracies, accuracies], [0.5, 0.5], cpu)
            runs.append(bench.summarize(args, tmp_path, sapo, seed, "complete", 2.0))
    assert runs[0]["cpu_seconds"] == pytest.approx(200.0)
    [comparison] = bench.report(args, runs, 8.0)["comparisons"]
    assert comparison["heldout_final_delta"] == [pytest.approx(-0.05), pytest.approx(0.0), pytest.approx(0.05)]
    assert comparison["cpu_seconds_budget"] == [100.0, 100.0, 100.0]
    assert comparison["heldout_equal_cpu_delta"] == [pytest.approx(0.05), pytest.approx(0.1), pytest.approx(0.15)]
    low, high = comparison["ci95_equal_cpu"]
    assert 0.05 <= low < 0.1 < high <= 0.15  # the interval of the mean lies within the seeds' differences
    low, high = comparison["ci95"]
    assert -0.05 <= low < 0.0 < high <= 0.05


def _parts(main, threads, children):
    return {"main_thread": main, "other_threads": threads, "children": children}


def test_cpu_seconds_count_the_rounds_not_the_start_up_and_the_evaluations(bench, tmp_path):
    # As the runner records them: CPU seconds at each evaluation and at the end of each round (before its evaluation).
    # Start-up and the round-0 evaluation take 80 s, rounds 30 s, the evaluation after round 2 60 s. The same seconds
    # split as _cpu_parts reads them: the main thread trains and evaluates; the DHT's thread and p2pd serve peers
    # during evaluations too (left out with them).
    recorded = {"at_eval": {"0": 80.0, "2": 200.0, "4": 320.0},
                "at_round_end": {"1": 110.0, "2": 140.0, "3": 230.0, "4": 260.0},
                "parts_at_eval": {"0": _parts(78.0, 1.0, 1.0), "2": _parts(184.0, 9.0, 7.0),
                                  "4": _parts(290.0, 17.0, 13.0)},
                "parts_at_round_end": {"1": _parts(104.0, 3.0, 3.0), "2": _parts(128.0, 7.0, 5.0),
                                       "3": _parts(212.0, 11.0, 7.0), "4": _parts(236.0, 15.0, 9.0)}}
    assert bench.training_cpu(recorded) == {0: 0.0, 2: 60.0, 4: 120.0}
    assert bench.training_cpu({"2": 200.0, "0": 80.0}) == {2: 200.0, 0: 80.0}  # an older file: as recorded
    assert bench.training_cpu_parts({"2": 200.0, "0": 80.0}) == {}  # and not split
    args = _args(bench, tmp_path)
    sapo = bench.Sapo.parse("I=2,J=2")
    _write_run(bench, args, sapo, 0, [[0.1, 0.2, 0.3]] * 2, [0.5, 0.5])
    for index in range(2):
        path = args.work / "cpu" / f"{bench.run_name(sapo, 0, index)}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(recorded))
    summary = bench.summarize(args, tmp_path, sapo, 0, "complete", 2.0)
    assert summary["cpu_seconds"] == pytest.approx(120.0)
    assert summary["heldout_by_cpu_per_node"][0] == [[0.0, 0.1], [60.0, 0.2], [120.0, 0.3]]
    # when the run ended: runs from different sessions may not be compared at equal CPU
    assert abs(dt.datetime.fromisoformat(summary["finished_utc"]) - dt.datetime.now(dt.timezone.utc)).total_seconds() < 60
    # main: 236 - 78 - (184 - 128) = 102; other threads: 15 - 1 - (9 - 7) = 12; children: 9 - 1 - (7 - 5) = 6
    assert summary["cpu_seconds_parts"] == pytest.approx({"main_thread": 102.0, "other_threads": 12.0,
                                                          "children": 6.0})


def test_a_solo_run_trains_on_to_the_cpu_seconds_of_a_shared_one_and_is_read_between_its_evaluations(bench, tmp_path):
    args = _args(bench, tmp_path, solo_rounds=6)
    solo, shared = bench.Sapo.parse("I=4,J=0"), bench.Sapo.parse("I=2,J=2")
    assert bench.node_config(args, tmp_path, solo, 0, 0, "bundled", []).run.rounds == 7  # then the stop
    assert bench.node_config(args, tmp_path, shared, 0, 0, "bundled", []).run.rounds == 5
    # Solo spends 50 CPU-s a round, shared 75: shared's 150 CPU-s after its 4 rounds fall between solo's evaluations
    # after rounds 2 and 4 (100 and 200 CPU-s, held-out 0.3 and 0.4): solo's held-out at 150 CPU-s is 0.35.
    _write_run(bench, args, solo, 0, [[0.1, 0.3, 0.4, 0.5]] * 2, [0.5, 0.5], [0.0, 100.0, 200.0, 300.0])
    _write_run(bench, args, shared, 0, [[0.1, 0.3, 0.45]] * 2, [0.5, 0.5], [0.0, 75.0, 150.0])
    runs = [bench.summarize(args, tmp_path, sapo, 0, "complete", 2.0) for sapo in (solo, shared)]
    assert [r["complete"] for r in runs] == [True, True] and runs[0]["rounds_run"] == 6
    assert runs[0]["heldout_final"] == pytest.approx(0.4)  # equal rounds: solo's round 4, not its round 6
    assert runs[0]["cumulative_reward"] == pytest.approx(4.0)  # 4 rounds x 2 nodes x 0.5: the rounds compared
    [comparison] = bench.report(args, runs, 8.0)["comparisons"]
    assert comparison["heldout_final_delta"] == [pytest.approx(0.05)]
    assert comparison["cpu_seconds_budget"] == [150.0]
    assert comparison["heldout_equal_cpu_delta"] == [pytest.approx(0.1)]
    # A solo run cut short before its extra rounds is incomplete: it cannot be compared at equal CPU.
    _write_run(bench, args, solo, 1, [[0.1, 0.3, 0.4], [0.1, 0.3, 0.4]], [0.5, 0.5], [0.0, 100.0, 200.0])
    assert not bench.summarize(args, tmp_path, solo, 1, "complete", 2.0)["complete"]


def test_resume_keeps_runs_of_the_same_settings_only(bench, tmp_path):
    args = _args(bench, tmp_path)
    path = tmp_path / "learning.json"
    bench.save(path, bench.report(args, [{"complete": True, "config": "I=4,J=0", "seed": 0, "minutes": 5.0,
                                          "heldout_round0": 0.1, "heldout_final": 0.2, "cumulative_reward": 1.0,
                                          "wellformed_round0": 0.5, "wellformed_round10": None, "curves": []}], 5.0))
    runs, minutes = bench.load_previous(path, args)
    assert [r["seed"] for r in runs] == [0] and minutes == 5.0
    assert bench.load_previous(path, _args(bench, tmp_path, rounds=6)) == ([], 0.0)
    assert bench.load_previous(path, _args(bench, tmp_path, fresh=True)) == ([], 0.0)


def test_a_report_redrawn_from_the_results_file_keeps_the_command_that_measured_it(bench, tmp_path):
    args = _args(bench, tmp_path)
    runs = []
    for name in ("I=4,J=0", "I=2,J=2"):
        sapo = bench.Sapo.parse(name)
        _write_run(bench, args, sapo, 0, [[0.1, 0.2, 0.3]] * 2, [0.5, 0.5], [0.0, 50.0, 100.0])
        runs.append(bench.summarize(args, tmp_path, sapo, 0, "complete", 2.0))
    out = tmp_path / "out"
    out.mkdir()
    bench.save(out / "learning.json", bench.report(args, runs, 4.0))  # measured by "... --rounds 4"
    assert bench.main(["--nodes", "2", "--rounds", "4", "--eval-every", "2", "--eval-questions", "8",
                       "--eval-samples", "0", "--work", str(tmp_path), "--out", str(out), "--report-only"]) == 0
    saved = json.loads((out / "learning.json").read_text())
    assert len(saved["runs"]) == 2  # the same settings: the saved runs are reported again
    assert saved["command"] == "python bench/swarm_vs_solo.py --rounds 4"
    assert saved["reported_by"].endswith("--report-only")


def test_node_settings_differ_between_configurations_only_in_i_and_j(bench, tmp_path):
    args = _args(bench, tmp_path, set=["training.learning_rate=1e-5"])
    solo = bench.node_config(args, tmp_path, bench.Sapo(4, 0), 1, 1, "bundled", [])
    shared = bench.node_config(args, tmp_path, bench.Sapo(2, 2), 1, 1, "bundled", ["/ip4/127.0.0.1/tcp/1/p2p/Qm"])
    assert (solo.training.local_questions, solo.training.external_groups) == (4, 0)
    assert (shared.training.local_questions, shared.training.external_groups) == (2, 2)
    assert solo.tasks.seed == shared.tasks.seed == 1001
    assert solo.run.seed == shared.run.seed == 1 and solo.run.threads == 1
    assert solo.training.learning_rate == 1e-5
    assert solo.evaluation == shared.evaluation
    differing = {
        section for section in ("training", "tasks", "evaluation")
        if getattr(solo, section).model_dump(exclude={"local_questions", "external_groups"})
        != getattr(shared, section).model_dump(exclude={"local_questions", "external_groups"})
    }
    assert not differing


def test_specialized_nodes_sample_mostly_one_family_each_alike_in_every_configuration(bench, tmp_path):
    args = _args(bench, tmp_path, nodes=4, specialize=0.25)
    solo = [bench.node_config(args, tmp_path, bench.Sapo(4, 0), 0, i, "bundled", []).tasks.weights for i in range(4)]
    shared = [bench.node_config(args, tmp_path, bench.Sapo(2, 2), 0, i, "bundled", []).tasks.weights
              for i in range(4)]
    assert solo == shared
    assert solo[0] == solo[3] == {"basic_arithmetic": 1.0, "chain_sum": 0.25, "products": 0.25}
    assert solo[1] == {"basic_arithmetic": 0.25, "chain_sum": 1.0, "products": 0.25}
    assert solo[2] == {"basic_arithmetic": 0.25, "chain_sum": 0.25, "products": 1.0}
    # every node keeps every family, in one order: the held-out sets are the same
    assert {tuple(weights) for weights in solo} == {("basic_arithmetic", "chain_sum", "products")}
    assert bench.settings_of(args)["specialize"] == 0.25 and "specialize" not in bench.settings_of(_args(bench, tmp_path))
    assert bench.node_config(_args(bench, tmp_path), tmp_path, bench.Sapo(4, 0), 0, 0, "bundled", []).tasks.weights == {}


def test_specialized_runs_are_compared_on_each_nodes_own_family_and_on_the_others(bench, tmp_path):
    args = _args(bench, tmp_path, specialize=0.25)
    # node 0 mostly samples basic_arithmetic, node 1 chain_sum; their other families weigh by questions (chain_sum 4)
    solo = [{"basic_arithmetic": 0.5, "chain_sum": 0.25, "products": 0.0},
            {"basic_arithmetic": 0.0, "chain_sum": 0.5, "products": 0.5}]
    shared = [{"basic_arithmetic": 0.5, "chain_sum": 0.5, "products": 0.5},
              {"basic_arithmetic": 0.5, "chain_sum": 0.25, "products": 0.5}]
    runs = []
    for name, families in (("I=4,J=0", solo), ("I=2,J=2", shared)):
        sapo = bench.Sapo.parse(name)
        _write_run(bench, args, sapo, 0, [[0.1, 0.2, 0.3], [0.1, 0.2, 0.3]], [0.5, 0.5], families=families)
        runs.append(bench.summarize(args, tmp_path, sapo, 0, "complete", 2.0))
    assert runs[0]["heldout_final_own_family"] == pytest.approx(0.5)
    assert runs[0]["heldout_final_other_families"] == pytest.approx((1 / 6 + 0.25) / 2, abs=1e-4)
    assert runs[1]["heldout_final_own_family"] == pytest.approx(0.375)
    assert runs[1]["heldout_final_other_families"] == pytest.approx(0.5)
    assert runs[1]["curves"][1]["heldout_own_other"] == [[0, 0.25, 0.5], [2, 0.25, 0.5], [4, 0.25, 0.5]]
    [comparison] = bench.report(args, runs, 4.0)["comparisons"]
    assert comparison["heldout_final_own_family_delta"] == [pytest.approx(-0.125)]
    assert comparison["heldout_final_other_families_delta"] == [pytest.approx(0.5 - 5 / 24, abs=1e-4)]
    plain = bench.report(_args(bench, tmp_path), [bench.summarize(_args(bench, tmp_path), tmp_path, bench.Sapo.parse(n),
                                                                  0, "complete", 2.0) for n in ("I=4,J=0", "I=2,J=2")],
                         4.0)
    assert "heldout_final_own_family_delta" not in plain["comparisons"][0]


def test_the_games_solo_nodes_play_in_swarms_of_their_own_and_its_shared_nodes_in_one(bench, tmp_path):
    game = _args(bench, tmp_path, game="multistage")
    solo = [bench.node_config(game, tmp_path, bench.Sapo(2, 0), 0, i, "bundled", []) for i in range(2)]
    shared = [bench.node_config(game, tmp_path, bench.Sapo(2, 2), 0, i, "bundled", []) for i in range(2)]
    assert {c.swarm.game for c in solo + shared} == {"multistage"}
    assert solo[0].swarm.swarm_name != solo[1].swarm.swarm_name
    assert shared[0].swarm.swarm_name == shared[1].swarm.swarm_name
    assert {c.tasks.seed for c in solo + shared} == {0}  # every member draws the swarm's questions from one seed
    sapo_solo = [bench.node_config(_args(bench, tmp_path), tmp_path, bench.Sapo(4, 0), 0, i, "bundled", [])
                 for i in range(2)]
    assert sapo_solo[0].swarm.swarm_name == sapo_solo[1].swarm.swarm_name  # SAPO's solo nodes share one swarm
    assert bench.settings_of(game)["game"] == "multistage" and "game" not in bench.settings_of(_args(bench, tmp_path))


def test_curves_are_drawn_from_finished_and_cut_short_runs(bench, tmp_path):
    pytest.importorskip("matplotlib")
    args = _args(bench, tmp_path, eval_samples=2)  # greedy and sampled curves
    runs = []
    for name, seed, accuracies in (("I=4,J=0", 0, [0.1, 0.2, 0.3]), ("I=2,J=2", 0, [0.1, 0.3, 0.4]),
                                   ("I=4,J=0", 1, [0.1, 0.2]), ("I=2,J=2", 1, [0.1, 0.25])):
        sapo = bench.Sapo.parse(name)
        cpu = [0.0, 60.0, 120.0] if seed == 0 else None  # the finished runs' curves against CPU seconds too
        _write_run(bench, args, sapo, seed, [accuracies, accuracies], [0.2, 0.3], cpu)
        runs.append(bench.summarize(args, tmp_path, sapo, seed, "complete" if seed == 0 else "out_of_time", 2.0))
    result = bench.report(args, runs, 8.0)
    assert [(r["seed"], r["config"]) for r in result["swarm_vs_solo"]] == [(0, "I=4,J=0"), (0, "I=2,J=2")]
    [partial] = result["partial_comparisons"]
    assert (partial["seed"], partial["rounds"]) == (1, 2)
    assert partial["heldout_shared"] == pytest.approx(0.25) and partial["heldout_solo"] == pytest.approx(0.2)
    paths = bench.draw(result, tmp_path)
    assert [p.name for p in paths] == ["learning_heldout.png", "learning_signals.png", "learning_cpu.png"]
    assert all(p.stat().st_size > 10_000 for p in paths)


def _sample(round_: int, family: str, *, local: bool, fate: str) -> RolloutSample:
    rewards = [0.0, 1.0] if fate == "trained" else [0.0, 0.0]
    return RolloutSample(round=round_, source_peer="me" if local else "peer", source_name="x", local=local,
                         family=family, question="q", completion="c", reward=max(rewards), fate=fate,
                         group_rewards=rewards)


def test_a_summary_counts_each_nodes_groups_with_spread_and_its_held_out_by_family(bench, tmp_path):
    args = _args(bench, tmp_path)
    sapo = bench.Sapo.parse("I=2,J=2")
    samples = {
        0: [_sample(0, "products", local=True, fate="no_signal"), _sample(0, "products", local=True, fate="trained"),
            _sample(0, "products", local=False, fate="trained"),
            _sample(0, "chain_sum", local=False, fate="dropped_equal_rewards"),
            _sample(0, "chain_sum", local=False, fate="rejected:bad_prompt")],
        1: [_sample(1, "chain_sum", local=True, fate="update_skipped"),
            _sample(1, "chain_sum", local=False, fate="no_signal")],
        4: [_sample(4, "products", local=True, fate="trained")],  # the round past the compared ones
    }
    families = [{"chain_sum": 0.25, "products": 0.5}] * 2
    _write_run(bench, args, sapo, 0, [[0.1, 0.2, 0.3]] * 2, [0.5, 0.5], families=families, samples=samples)
    curve = bench.summarize(args, tmp_path, sapo, 0, "complete", 2.0)["curves"][0]
    assert curve["groups_by_family"] == {"products": {"own": 2, "own_with_spread": 1, "peer_with_spread": 1},
                                         "chain_sum": {"own": 1, "own_with_spread": 0, "peer_with_spread": 0}}
    assert curve["heldout_per_family"][-1] == [4, {"chain_sum": 0.25, "products": 0.5}]


def test_each_node_of_a_swarm_of_models_runs_its_own_and_the_settings_record_them(bench, tmp_path, capsys):
    args = _args(bench, tmp_path, node_models=["bundled", "/models/stronger"])
    assert bench.settings_of(args)["node_models"] == ["bundled", "/models/stronger"]
    assert "node_models" not in bench.settings_of(_args(bench, tmp_path))
    run = bench._Run(args, tmp_path, bench.Sapo(2, 2), 0, ["bundled", "/models/stronger"], stop_at=0.0)
    assert [run.config_of(i, join=[]).training.model for i in range(2)] == ["bundled", "/models/stronger"]
    with pytest.raises(SystemExit):
        bench.main(["--nodes", "2", "--node-models", "bundled", "--out", str(tmp_path / "out")])
    assert "one model per node" in capsys.readouterr().err
