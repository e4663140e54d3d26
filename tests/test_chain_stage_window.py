"""A 0.4.2 coordinator takes a past round's reward only while the chain's stage is at least the reward's (0.4.3
fixed it). A late reward for a round's last stage waits for that window, said in the node's events and on the
account page, and goes out at the first poll that sees the chain there: no blind retries meanwhile, and the rewards
queued behind it go on. Against the committed 0.4.2 build, over HTTP and in process; 0.4.3 and 0.6.0 take the late
reward at once."""

from __future__ import annotations

import time

import pytest

from app.account_page import AccountPage
from node.chain.participant import ChainParticipant
from node.config import NodeConfig
from node.events import EventBus
from tests.chain_helpers import chain_settings, deployed, devchain, funded_account  # noqa: F401 - fixture
from tests.test_chain_node import Recorder
from tests.test_chain_versions import PEER_A, STAGES, follow, rows_of, settled, wait_until

POLL_S = 0.2


def late_last_stage_reward(chain, tmp_path, version: str, provider: str):
    """A node that trained in round 0's last stage and reports it after the chain moved on to round 1."""
    target, admin = deployed(chain, funded_account(chain), version)
    wallet = funded_account(chain)
    config = NodeConfig.build({"run": {"data_dir": str(tmp_path)},
                               "chain": chain_settings(chain, target.coordinator, poll_interval_s=POLL_S)})
    bus = EventBus()
    recorder = Recorder(bus)
    p = ChainParticipant(config, PEER_A, bus, account=wallet, w3=chain.w3 if provider == "in_process" else None)
    p.start()
    last = STAGES[version] - 1
    for _ in range(last):
        admin.advance_stage()
    follow(p, (0, last))
    assert p.chain_round() == 0  # a training round begins in round 0's last stage ...
    admin.advance_round()
    follow(p, (1, 0))
    p.round_finished(0, [0.4], {PEER_A: [0.4]})  # ... and ends after the chain moved on
    return target, admin, config, recorder, p


def feed(page: AccountPage, recorder: Recorder, start: int) -> int:
    """Hand the page what the app's adapter hands it, the node's typed events in order, from ``start`` on; returns
    where the next feed starts."""
    recorder.of("chain_transaction")  # moves what arrived into recorder.seen
    for event in recorder.seen[start:]:
        page.on_event(event)
    return len(recorder.seen)


def count_calls(monkeypatch, obj, name: str) -> dict[str, int]:
    calls = {"calls": 0}
    real = getattr(obj, name)

    def counted(*args, **kwargs):
        calls["calls"] += 1
        return real(*args, **kwargs)

    monkeypatch.setattr(obj, name, counted)
    return calls


@pytest.mark.parametrize("provider", ("http", "in_process"))
def test_a_late_reward_waits_for_the_stage_window_on_0_4_2(devchain, tmp_path, qtbot, monkeypatch,  # noqa: F811
                                                           provider):
    target, admin, config, recorder, p = late_last_stage_reward(devchain, tmp_path, "0.4.2", provider)
    page = AccountPage(NodeConfig.build({"run": {"data_dir": str(tmp_path / "app")}}))
    qtbot.addWidget(page)
    try:
        def transactions(status):
            return [e for e in recorder.of("chain_transaction") if (e.round, e.stage, e.status) == (0, 2, status)]

        waiting = wait_until(lambda: transactions("waiting_for_stage"), what="the late reward said to wait")
        assert "stage window" in waiting[0].message and "stage 3 of 3" in waiting[0].message
        fed = feed(page, recorder, 0)
        shown = page.fields["waiting"].text()
        assert "reward of round 0, stage 3" in shown and "stage window" in shown

        # the rows behind it go on: round 1's reward is delivered while round 0's waits
        assert p.chain_round() == 1
        p.round_finished(1, [0.1], {PEER_A: [0.1]})
        wait_until(lambda: settled(config, target.coordinator, ("reward", 1, 0)), what="round 1's reward")
        admin.advance_stage()
        follow(p, (1, 1))
        polls = count_calls(monkeypatch, p.client, "position")
        wait_until(lambda: polls["calls"] >= 10, what="ten polls below the window (a blind retry would have gone)")
        row = rows_of(config, target.coordinator)[("reward", 0, 2)]
        assert row.status == "pending" and row.attempts == 0, row  # nothing was sent to be refused
        assert not transactions("retrying") and len(transactions("waiting_for_stage")) == 1

        admin.advance_stage()  # the window: round 1, stage 3
        opened = time.monotonic()
        wait_until(lambda: settled(config, target.coordinator, ("reward", 0, 2)), what="the reward in its window")
        assert time.monotonic() - opened < 5.0  # at the next polls, not after a backoff
        assert rows_of(config, target.coordinator)[("reward", 0, 2)].status == "delivered"
        assert admin.total_rewards([PEER_A]) == [500]
        feed(page, recorder, fed)
        assert page.fields["waiting"].text() == "—"  # delivered: no longer waiting
        assert not transactions("retrying")
    finally:
        p.stop()


@pytest.mark.parametrize("version", ("0.4.3", "0.6.0"))
def test_later_versions_take_a_late_reward_at_once(devchain, tmp_path, version):  # noqa: F811
    target, admin, config, recorder, p = late_last_stage_reward(devchain, tmp_path, version, "http")
    try:
        wait_until(lambda: settled(config, target.coordinator, ("reward", 0, STAGES[version] - 1)),
                   what="the late reward")
    finally:
        p.stop()
    assert rows_of(config, target.coordinator)[("reward", 0, STAGES[version] - 1)].status == "delivered"
    assert not [e for e in recorder.of("chain_transaction") if e.status in ("waiting_for_stage", "retrying")]
    assert admin.total_rewards([PEER_A]) == [400]
