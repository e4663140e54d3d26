"""The app shows asynchronous SAPO as it runs: how old the peer groups trained on were and how often J was filled."""

from __future__ import annotations

import dataclasses

from node.clock import DEFAULT_EPOCH, DEFAULT_ROUND_SECONDS
from node.config import NodeConfig
from node.events import NodeStarted, RoundFinished, RoundProgress
from node.swarm.invite import parse_invite
from tests.apphelpers import make_window


def _round(number, *, used, age=None, oldest=None, wanted=2) -> RoundFinished:
    return RoundFinished(
        round=number, rounds_trained=number + 1, reward_local=0.5, reward_external=0.4 if used else None,
        reward_train=0.5, loss=0.0, kl=None, completion_length=10.0, tokens_generated=80,
        generation_tokens_per_s=40.0, seconds_generate=2.0, seconds_share=0.001, seconds_gather=0.002,
        seconds_train=1.0, seconds_total=3.0, peers_seen=1, groups_shared=2, groups_received=2, groups_used=used,
        groups_zero_advantage=0, groups_rejected=0, rejected_reasons={}, groups_with_spread=1.0,
        peer_group_age_s_mean=age, peer_group_age_s_max=oldest, peer_group_age_rounds_mean=None if age is None else 0.0,
        peer_group_age_rounds_max=None if age is None else 0, external_groups_wanted=wanted,
    )


def test_the_dashboard_shows_the_age_of_peer_groups_and_how_often_j_was_filled(qtbot, tmp_path):
    window = make_window(qtbot, NodeConfig.build({"run": {"data_dir": str(tmp_path / "data")}}))
    for event in (_round(0, used=0), _round(1, used=2, age=4.0, oldest=6.0), _round(2, used=2, age=8.0, oldest=12.0)):
        window.supervisor.feed(event)
    text = window.dashboard.summary.text().replace("\xa0", " ")  # figures are glued to their units
    assert "Peer groups trained on: 6 s old on average, oldest 12 s; J filled in 2 of 3 rounds (67%)." in text
    # a SAPO round goes from sharing to training: no "waiting for peers" in between
    window.supervisor.feed(RoundProgress(round=3, phase="sharing", done=0, total=2))
    window.supervisor.feed(RoundProgress(round=3, phase="training", done=0, total=4))
    assert "Waiting" not in window.header.progress.label.text()
    # nor in the seconds per round: the legend names the phases the rounds spent time in
    seconds = window.dashboard.charts["seconds"]
    assert "waiting for peers" not in seconds.entries and "training" in seconds.entries
    window.supervisor.feed(dataclasses.replace(_round(3, used=2), seconds_gather=6.0))  # a game's stage barrier
    assert "waiting for peers" in seconds.entries


def test_a_solo_run_says_nothing_about_peer_groups(qtbot, tmp_path):
    window = make_window(qtbot, NodeConfig.build({"run": {"data_dir": str(tmp_path / "data")}}))
    window.supervisor.feed(_round(0, used=0, wanted=0))
    assert "Peer groups" not in window.dashboard.summary.text()


def test_the_copied_invite_carries_a_swarm_clock_that_is_not_the_default(qtbot, tmp_path):
    window = make_window(qtbot, NodeConfig.build({"run": {"data_dir": str(tmp_path / "data")}}))
    started = NodeStarted(peer_id="QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N", peer_name="a", swarm_name="team",
                          invite=["/ip4/192.0.2.7/tcp/31337/p2p/QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N"],
                          model="bundled", device="cpu", hardware={}, run_dir=str(tmp_path), resumed_from_round=None,
                          swarm_epoch=1_800_000_000.0, round_seconds=30.0)
    window.supervisor.feed(started)
    invite = parse_invite(window.header.invite)
    assert (invite.clock.epoch, invite.clock.round_seconds) == (1_800_000_000.0, 30.0)
    window.supervisor.feed(dataclasses.replace(started, swarm_epoch=DEFAULT_EPOCH, round_seconds=DEFAULT_ROUND_SECONDS))
    assert "epoch=" not in window.header.invite  # a default swarm's invite stays as short as before
