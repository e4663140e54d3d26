"""Every public SwarmCoordinator interface (0.4.2, 0.4.3, 0.5.1, 0.6.0) on a real EVM: the client detects which one
it meets and speaks it, and the node's submission queue delivers every reward exactly once or reports why not,
through RPC outages, lost queue records and two nodes on one wallet.

The contracts are our own builds of each interface (resources/contracts/*.sol, built by build.sh; 0.5.1 and 0.6.0
are SwarmCoordinator with 3 and 1 stages). The node side runs without a model: ChainParticipant is driven the way
the runner drives it (chain_round() as a training round begins, round_finished() when it ends).
"""

from __future__ import annotations

import sqlite3
import time

import pytest
from eth_abi import encode as abi_encode
from eth_account import Account
from web3.exceptions import ContractLogicError

from node.chain import participant as participant_module
from node.chain.account import account_summary
from node.chain import versions
from node.chain.coordinator import ChainRevert, CoordinatorClient, MissingFunction
from node.chain.participant import ChainParticipant, queue_path
from node.chain.submissions import SubmissionQueue
from node.config import NodeConfig
from node.errors import NodeError
from node.events import EventBus
from tests.chain_helpers import VERSIONS, chain_settings, deployed, devchain, funded_account  # noqa: F401 - fixture
from tests.test_chain_node import Recorder

PEER_A = "QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N"
PEER_B = "QmcZf59bWwK5XFi76CZX8cbJ4BhTzzA3gU1ZjYZcYW3dwt"
STAGES = {"0.4.2": 3, "0.4.3": 3, "0.5.1": 3, "0.6.0": 1}


def wait_until(predicate, timeout: float = 30.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def rows_of(config: NodeConfig, coordinator: str):
    q = SubmissionQueue(queue_path(config))
    try:
        return {(r.kind, r.round, r.stage): r for r in q.recent(coordinator, limit=1000)}
    finally:
        q.close()


def settled(config, coordinator, key) -> bool:
    row = rows_of(config, coordinator).get(key)
    return row is not None and row.status != "pending"


def node_config(data_dir, chain, coordinator) -> NodeConfig:
    return NodeConfig.build({"run": {"data_dir": str(data_dir)},
                             "chain": chain_settings(chain, coordinator, poll_interval_s=0.2)})


def train_one_round(p: ChainParticipant, reward: float, peers=()) -> tuple[int, int]:
    """What the runner does for one training round: read the chain round as it begins, report when it ends."""
    chain_round = p.chain_round()
    stage = p.chain_position()[1]
    p.round_finished(chain_round, [reward], {p.peer_id: [reward], **{q: [0.1] for q in peers}})
    return chain_round, stage


def follow(p: ChainParticipant, position: tuple[int, int]) -> None:
    wait_until(lambda: p.chain_position() == position, what=f"the node to see {position}")


# ------------------------------------------------------------------------------------------------- the client
@pytest.mark.parametrize("version", VERSIONS)
def test_client_detects_and_speaks_each_version(devchain, version):  # noqa: F811
    owner, alice, bob = (funded_account(devchain) for _ in range(3))
    target, admin = deployed(devchain, owner, version)
    a, b = CoordinatorClient(target, alice), CoordinatorClient(target, bob)
    assert a.detect().name == version and a.stage_count() == STAGES[version]
    assert a.version.rewards_per_peer is (version != "0.4.2")

    a.register_peer(PEER_A)
    b.register_peer(PEER_B)
    for stage in range(STAGES[version]):  # a reward per stage where the contract has stages
        assert a.position() == (0, stage)
        with pytest.raises(ChainRevert) as ahead:  # the next stage has not begun
            a.submit_reward(0, 1, PEER_A, stage=stage + 1)
        assert ahead.value.error == ("StageOutOfBounds" if stage + 1 == STAGES[version] else "InvalidStageNumber")
        a.submit_reward(0, 100 + stage, PEER_A, stage=stage)
        assert a.reward_submitted(0, stage, PEER_A) and not b.reward_submitted(0, stage, PEER_B)
        if stage + 1 < STAGES[version]:
            admin.advance_stage()
    a.submit_winners(0, [PEER_A, PEER_B], PEER_A)
    assert a.winners_submitted(0, PEER_A)
    assert a.total_rewards([PEER_A]) == [sum(100 + s for s in range(STAGES[version]))]
    assert a.reward_submitters(0, 0) == [PEER_A]

    # `chain advance` moves a whole round: the stages left of it, every stage from a round's start
    assert len(admin.advance_round()) == 1 and a.position() == (1, 0)  # from round 0's last stage
    assert len(admin.advance_round()) == STAGES[version] and a.position() == (2, 0)

    with pytest.raises(ChainRevert) as again:
        a.submit_reward(0, 1, PEER_A)
    assert again.value.error == "RewardAlreadySubmitted"

    if version.startswith("0.4"):
        assert a.peer_vote_count(0, PEER_B) == 1
        assert a.winner_leaderboard(0, 10) == [(PEER_A, 1), (PEER_B, 1)]
        with pytest.raises(ChainRevert) as reason:  # Error(string) keeps its text
            a.winner_leaderboard(3, 1)
        assert reason.value.revert.kind == "error" and "Start index must not be after" in reason.value.message
    else:  # 0.5.0 removed the vote views: said so, with the version, before anything is sent
        with pytest.raises(MissingFunction) as missing:
            a.peer_vote_count(0, PEER_B)
        assert f"this coordinator version ({version}) does not have getPeerVoteCount" in missing.value.message
        assert missing.value.code == "chain_version"

    other = next(v for v in VERSIONS if v != version)
    with pytest.raises(NodeError) as mismatch:  # an expected version is checked against the probe
        CoordinatorClient(target, alice, version=other).detect()
    assert mismatch.value.code == "chain_version" and version in mismatch.value.message


def test_a_missing_function_is_named_from_the_deployed_bytecode(devchain):  # noqa: F811
    """A revert without data of a selector the deployed code lacks is "this version does not have F", not a
    refusal without a reason; a revert without data of a function it has stays a refusal."""
    target, admin = deployed(devchain, funded_account(devchain), "0.6.0")
    admin.detect()
    signature = "getPeerVoteCount(uint256,string)"
    data = versions.selector(signature) + abi_encode(["uint256", "string"], [0, PEER_A])
    with pytest.raises(ContractLogicError) as raw:
        admin.w3.eth.call({"to": target.coordinator, "data": "0x" + data.hex()})
    error = admin._missing(signature, "read the round's votes", raw.value)
    assert isinstance(error, MissingFunction) and "(0.6.0) does not have getPeerVoteCount" in error.message
    present = admin._missing("currentRound", "read the round", ContractLogicError("execution reverted", data="0x"))
    assert not isinstance(present, MissingFunction) and "no reason given" in present.message

    with pytest.raises(NodeError) as nothing_there:
        CoordinatorClient(type(target)(**{**target.__dict__, "coordinator": Account.create().address})).detect()
    assert nothing_there.value.code == "no_contract"


def test_revert_data_is_decoded():
    error = versions.decode_revert_data(versions.selector("Error(string)") + abi_encode(["string"], ["Start index"]))
    assert (error.kind, error.reason) == ("error", "Start index")
    panic = versions.decode_revert_data(versions.selector("Panic(uint256)") + abi_encode(["uint256"], [0x11]))
    assert panic.kind == "panic" and panic.code == 0x11 and "overflow" in panic.reason
    custom = versions.decode_revert_data(versions.selector("RewardAlreadySubmitted()"))
    assert (custom.kind, custom.name) == ("custom", "RewardAlreadySubmitted")
    assert versions.decode_revert_data(bytes.fromhex("deadbeef")).describe() == \
        "an error this client does not know (0xdeadbeef)"
    assert versions.decode_revert_data(b"").kind == "empty"
    assert "panic 0x11" in ChainRevert(None, "submit", panic).message
    assert "refused it: Start index" in ChainRevert(None, "read", error).message


# ------------------------------------------------------------------------------------------------ the queue
@pytest.mark.parametrize("version", VERSIONS)
def test_every_reward_is_delivered_once_through_an_outage_and_a_lost_record(devchain, tmp_path, version):  # noqa: F811
    target, admin = deployed(devchain, funded_account(devchain), version)
    wallet = funded_account(devchain)
    config = node_config(tmp_path, devchain, target.coordinator)
    stages = STAGES[version]

    bus = EventBus()
    recorder = Recorder(bus)
    p = ChainParticipant(config, PEER_A, bus, account=wallet)
    p.start()
    expected: dict[tuple[int, int], int] = {}
    for stage in range(stages):  # a node following the chain submits for each stage it trained in
        follow(p, (0, stage))
        slot = train_one_round(p, 0.1 * (stage + 1))
        expected[slot] = round(0.1 * (stage + 1) * 1000)
        wait_until(lambda: settled(config, target.coordinator, ("reward", *slot)), what=f"reward {slot}")
        train_one_round(p, 0.9)  # a second training round in the same stage adds nothing
        if stage + 1 < stages:
            admin.advance_stage()
    admin.advance_round()
    follow(p, (1, 0))

    # the RPC goes away; the send of the next reward is lost in it (an attempt counted, nothing on chain): the
    # check before sending again must not revert into "failed" (the 1400-instead-of-1700 bug)
    devchain.stop()
    slot = train_one_round(p, 0.3)
    expected[slot] = 300
    wait_until(lambda: not p._connected, what="the node to notice the outage")
    q = SubmissionQueue(queue_path(config))
    q._db.execute("UPDATE submissions SET attempts = 1 WHERE kind = 'reward' AND round = 1")
    q.close()
    assert rows_of(config, target.coordinator)[("reward", 1, 0)].status == "pending"
    devchain.start()
    wait_until(lambda: settled(config, target.coordinator, ("reward", 1, 0)), what="delivery after the outage")
    p.stop()

    rows = rows_of(config, target.coordinator)
    assert rows[("reward", 1, 0)].status == "delivered", rows[("reward", 1, 0)].message
    assert admin.total_rewards([PEER_A]) == [sum(expected.values())]
    statuses = {e.status for e in recorder.of("chain_transaction")}
    assert "failed" not in statuses and "refused" not in statuses
    status = [e for e in recorder.of("chain_status") if e.coordinator_version][-1]
    assert status.coordinator_version == version and status.stage_count == stages

    # a restart that lost the queue: the same slot queued again is found on chain, not sent twice
    nonce = devchain.w3.eth.get_transaction_count(wallet.address)
    queue_path(config).unlink()
    for suffix in ("-wal", "-shm"):
        queue_path(config).with_name(queue_path(config).name + suffix).unlink(missing_ok=True)
    bus2 = EventBus()
    again = ChainParticipant(config, PEER_A, bus2, account=wallet)
    again.start()
    follow(again, (1, 0))
    train_one_round(again, 0.7)
    wait_until(lambda: settled(config, target.coordinator, ("reward", 1, 0)), what="the re-queued reward")
    wait_until(lambda: settled(config, target.coordinator, ("winners", 1, 0)), what="the re-queued winners")
    again.stop()
    rows = rows_of(config, target.coordinator)
    assert rows[("reward", 1, 0)].status == "already_on_chain" and rows[("winners", 1, 0)].status == "already_on_chain"
    assert admin.total_rewards([PEER_A]) == [sum(expected.values())]
    sent = devchain.w3.eth.get_transaction_count(wallet.address) - nonce
    assert sent == 0  # the duplicates were refused at the gas estimate: nothing was sent twice
    # ... and the lost-record check before sending: a row that says "one attempt made" is looked up first
    q = SubmissionQueue(queue_path(config))
    q._db.execute("UPDATE submissions SET status = 'pending', attempts = 1")
    q.close()
    nonce = devchain.w3.eth.get_transaction_count(wallet.address)
    third = ChainParticipant(config, PEER_A, EventBus(), account=wallet)
    third.start()
    wait_until(lambda: all(r.status != "pending" for r in rows_of(config, target.coordinator).values()),
               what="every row settled")
    third.stop()
    assert devchain.w3.eth.get_transaction_count(wallet.address) == nonce
    assert {r.status for r in rows_of(config, target.coordinator).values()} == {"already_on_chain"}


@pytest.mark.parametrize("version", VERSIONS)
def test_two_nodes_on_one_wallet(devchain, tmp_path, version):  # noqa: F811
    """From 0.4.3 both nodes' rewards land; on 0.4.2 the contract keeps one per wallet, and the node says so."""
    target, admin = deployed(devchain, funded_account(devchain), version)
    wallet = funded_account(devchain)
    nodes, recorders, configs = [], [], []
    for peer, name in ((PEER_A, "a"), (PEER_B, "b")):
        bus = EventBus()
        recorders.append(Recorder(bus))
        configs.append(node_config(tmp_path / name, devchain, target.coordinator))
        node = ChainParticipant(configs[-1], peer, bus, account=wallet)
        node.start()
        nodes.append(node)
        wait_until(lambda: admin.owner_of(peer) == wallet.address, what=f"{name} registered")
    rewards = (0.25, 0.5)
    for node, reward in zip(nodes, rewards, strict=True):
        train_one_round(node, reward)
    for config in configs:
        wait_until(lambda: settled(config, target.coordinator, ("reward", 0, 0)), what="both rewards settled")
    for node in nodes:
        node.stop()

    statuses = [rows_of(c, target.coordinator)[("reward", 0, 0)] for c in configs]
    totals = admin.total_rewards([PEER_A, PEER_B])
    warnings = [e for r in recorders for e in r.of("error") if "one reward per wallet" in e.hint]
    if version == "0.4.2":
        assert sorted(r.status for r in statuses) == ["delivered", "refused"]
        refused = next(r for r in statuses if r.status == "refused")
        assert "one reward per wallet" in refused.message
        assert sorted(totals) == sorted([0, [250, 500][statuses.index(refused) ^ 1]])
        assert warnings and not warnings[0].fatal  # said plainly, in the app's error/warning stream
        assert any(e.status == "refused" for r in recorders for e in r.of("chain_transaction"))
        summary = account_summary(configs[0], wallet.address, PEER_A)  # what `chain status` and the app show
        assert any("one reward per wallet" in problem for problem in summary.problems)
    else:
        assert [r.status for r in statuses] == ["delivered", "delivered"]
        assert totals == [250, 500]
        assert not warnings
        assert account_summary(configs[0], wallet.address, PEER_A).problems == []


def test_a_check_that_reverts_is_unknown_and_retried_never_failed(devchain, tmp_path, monkeypatch):  # noqa: F811
    """The issue's bug: a read-back that reverts (e.g. the 0.4.2 ABI's check against a 0.4.3+ contract) marked the
    row failed for good. Now it is retried with a growing delay and reported, and the reward still lands."""
    monkeypatch.setattr(participant_module, "UNKNOWN_RETRY_S", 0.2)
    target, admin = deployed(devchain, funded_account(devchain), "0.5.1")
    wallet = funded_account(devchain)
    config = node_config(tmp_path, devchain, target.coordinator)
    bus = EventBus()
    recorder = Recorder(bus)
    p = ChainParticipant(config, PEER_A, bus, account=wallet)
    p.start()
    wait_until(lambda: settled(config, target.coordinator, ("register", -1, 0)), what="registration")
    p.stop()
    # The row of "an earlier attempt was made" is written while no participant runs: a running one could pick it up
    # between its insert and the update of its attempts, and send it as a first attempt (no check).
    q = SubmissionQueue(queue_path(config))
    q.add(target.coordinator, PEER_A, "reward", 0, {"reward": 640})
    q._db.execute("UPDATE submissions SET attempts = 1 WHERE kind = 'reward'")
    q.close()
    p = ChainParticipant(config, PEER_A, bus, account=wallet)  # the node restarted
    real = p.client.reward_submitted
    reverts = {"left": 2}

    def flaky(*args, **kwargs):
        if reverts["left"]:
            reverts["left"] -= 1
            raise ChainRevert(None, "check the reward")
        return real(*args, **kwargs)

    monkeypatch.setattr(p.client, "reward_submitted", flaky)
    p.start()
    wait_until(lambda: settled(config, target.coordinator, ("reward", 0, 0)), what="the reward", timeout=30)
    p.stop()
    row = rows_of(config, target.coordinator)[("reward", 0, 0)]
    assert row.status == "delivered" and reverts["left"] == 0
    retrying = [e for e in recorder.of("chain_transaction") if e.status == "retrying"]
    assert len(retrying) == 2 and all("outcome unknown" in e.message for e in retrying)
    assert admin.total_rewards([PEER_A]) == [640]


def test_an_old_queue_gets_the_stage_column_and_keeps_its_rows(tmp_path):
    path = tmp_path / "chain" / "submissions.sqlite"
    path.parent.mkdir()
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE submissions (coordinator TEXT NOT NULL, peer_id TEXT NOT NULL, kind TEXT NOT NULL, "
               "round INTEGER NOT NULL, payload TEXT NOT NULL, status TEXT NOT NULL DEFAULT 'pending', attempts "
               "INTEGER NOT NULL DEFAULT 0, tx_hash TEXT, message TEXT NOT NULL DEFAULT '', created REAL NOT NULL, "
               "updated REAL NOT NULL, PRIMARY KEY (coordinator, peer_id, kind, round))")
    db.execute("INSERT INTO submissions VALUES ('0xC', 'QmA', 'reward', 4, '{\"reward\": 5}', 'pending', 1, NULL, "
               "'', 1.0, 1.0)")
    db.commit()
    db.close()
    q = SubmissionQueue(path)
    (row,) = q.recent()
    assert (row.kind, row.round, row.stage, row.attempts, row.payload) == ("reward", 4, 0, 1, {"reward": 5})
    assert q.add("0xC", "QmA", "reward", 4, {"reward": 6}, stage=1)  # another stage is another row
    assert not q.add("0xC", "QmA", "reward", 4, {"reward": 7}, stage=0)
    assert q.next_pending("0xC", "QmA").stage == 0
    q.retry_later(q.next_pending("0xC", "QmA"), "unknown", delay_s=60)
    assert q.next_pending("0xC", "QmA").stage == 1  # a row set aside does not hold up the next
    q.close()
