"""The dashboard's answer to "is the swarm helping me?", in its main cases, and the per-family accuracy table's rows."""

from __future__ import annotations

from app.swarm_help import QUESTION, family_accuracy, swarm_help_line
from node.events import EvalFinished, RoundFinished


def rnd(number: int, *, wanted: int = 2, received: int = 0, used: int = 0, own: int | None = 2,
        peers: int | None = 0, lacked: int | None = 0) -> RoundFinished:
    return RoundFinished(
        round=number, rounds_trained=number + 1, reward_local=0.5, reward_external=None, reward_train=0.5, loss=0.0,
        kl=None, completion_length=20.0, tokens_generated=100, generation_tokens_per_s=10.0, seconds_generate=1.0,
        seconds_share=0.1, seconds_gather=0.1, seconds_train=1.0, seconds_total=2.2, peers_seen=1 if received else 0,
        groups_shared=2, groups_received=received, groups_used=used, groups_zero_advantage=received - used,
        groups_rejected=0, rejected_reasons={}, external_groups_wanted=wanted,
        local_groups_with_spread=own, peer_groups_with_spread=peers, peer_groups_spread_we_lacked=lacked,
    )


def test_nothing_is_said_before_a_round_that_counts_it():
    assert swarm_help_line([]) == ""
    # a run folder written before these figures, or the multi-stage game: not measured, so no claim either way
    assert swarm_help_line([rnd(0, own=None, peers=None, lacked=None)]) == ""


def test_alone_says_everything_came_from_its_own_questions():
    line = swarm_help_line([rnd(r, wanted=0) for r in range(5)])
    assert line.startswith(QUESTION) and "Not in this run" in line and "trains alone" in line
    assert "own questions" in line
    line = swarm_help_line([rnd(r) for r in range(3)])  # wants peers, none came
    assert "Not yet: no peer group has reached this node in 3 rounds" in line


def test_peers_without_signal_taught_nothing():
    line = swarm_help_line([rnd(r, received=3, used=0, own=1) for r in range(4)])
    assert "Not yet: peers shared 12 groups in 4 rounds" in line
    assert "none it could train on had reward spread" in line and "taught it nothing" in line
    assert "%" not in line  # no share of a signal that does not exist


def test_peers_supplying_signal_often_is_a_yes_with_its_figures():
    rounds = [rnd(0, received=4, used=2, own=2, peers=2, lacked=0),
              rnd(1, received=4, used=2, own=1, peers=2, lacked=1),
              rnd(2, received=4, used=2, own=0, peers=2, lacked=2),   # all of the signal from peers
              rnd(3, received=4, used=2, own=2, peers=1, lacked=0)]
    line = swarm_help_line(rounds)
    assert line == (f"{QUESTION} Yes: 58% of the groups this node learned from came from peers (7 of 12 with reward "
                    "spread, in 4 rounds); 3 had spread on a task where its own questions had none; in 1 round peers "
                    "gave all of the signal.")


def test_peers_adding_only_more_of_the_same_is_a_little_and_rare_gaps_are_now_and_then():
    same = [rnd(r, received=2, used=2, own=2, peers=2, lacked=0) for r in range(20)]
    line = swarm_help_line(same)
    assert line.startswith(f"{QUESTION} A little: 50% of the groups this node learned from came from peers")
    assert "none it lacked" in line
    rare = same[:-1] + [rnd(19, received=2, used=2, own=1, peers=2, lacked=1)]  # 1 of 20 rounds
    line = swarm_help_line(rare)
    assert line.startswith(f"{QUESTION} Now and then:") and "1 had spread on a task where its own questions had none." in line
    assert "peers gave all" not in line
    for text in (line, swarm_help_line(same)):  # never a comparison with a solo run the user did not make
        assert "solo" not in text and "alone would" not in text and "better" not in text


def test_family_rows_compare_the_latest_evaluation_with_the_first():
    def evaluation(round_, per_family, questions=None):
        return EvalFinished(round=round_, rounds_trained=round_, questions=12, accuracy_greedy=0.5, exact_mean=0.5,
                            score_mean=0.5, wellformed_rate=1.0, per_family=per_family,
                            per_family_questions=questions or {})

    assert family_accuracy([]) == []
    rows = family_accuracy([evaluation(0, {"products": 0.25}),
                            evaluation(10, {"products": 0.5, "chain_sum": 0.5}, {"products": 8, "chain_sum": 4})])
    assert [(r.family, r.first, r.last, r.questions, r.change) for r in rows] == [
        ("products", 0.25, 0.5, 8, 0.25), ("chain_sum", None, 0.5, 4, None)]


def test_the_headless_node_prints_the_peer_groups_with_spread_ours_lacked(capsys, tmp_path):
    from node.cli.main import _HumanProgress

    progress = _HumanProgress(tmp_path / "node.log")
    progress(rnd(4, received=3, used=2, own=0, peers=2, lacked=1))
    progress(rnd(5, own=None, peers=None, lacked=None))  # not measured (the game): nothing claimed
    first, second = capsys.readouterr().out.splitlines()
    assert "used 2/2 (1 with spread ours lacked) rejected 0" in first
    assert "used 0/2 rejected 0" in second and "lacked" not in second
