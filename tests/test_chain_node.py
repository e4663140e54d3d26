"""A node with a chain: registration, the submission queue through an RPC outage and restarts, foreign identities."""

from __future__ import annotations

import queue
import threading
import time

import pytest
from eth_account import Account

from node.chain.account import account_summary
from node.chain.participant import ChainParticipant, pick_winners, queue_path
from node.chain.submissions import SubmissionQueue
from node.chain.wallet import PASSPHRASE_ENV, WalletStore
from node.config import NodeConfig
from node.errors import NodeError
from node.events import EventBus
from node.runner import SwarmNode
from tests.chain_helpers import ETH, chain_settings, deployed, devchain, funded_account  # noqa: F401 - fixture
from tests.nodes import tiny_config
from tests.test_wallet import assert_no_plaintext

PASS = "node wallet passphrase"
PEER = "QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N"


def node_wallet(chain, data_dir, keys: list[str] | None = None) -> str:
    key = Account.create().key.hex()
    info = WalletStore(data_dir, backend="file", passphrase=PASS).import_private_key(key)
    chain.fund(info.address, 10 * ETH)
    if keys is not None:
        keys.append(key)
    return info.address


def base_config(data_dir, chain, coordinator) -> NodeConfig:
    return NodeConfig.build({"run": {"data_dir": str(data_dir)}, "chain": chain_settings(chain, coordinator)})


class Recorder:
    def __init__(self, bus: EventBus) -> None:
        self.events: queue.Queue = queue.Queue()
        self.seen: list = []
        bus.subscribe(self.events.put)

    def wait_for(self, predicate, timeout: float = 240):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                event = self.events.get(timeout=0.5)
            except queue.Empty:
                continue
            self.seen.append(event)
            if predicate(event):
                return event
        raise AssertionError(f"timed out; last events: {[e.kind for e in self.seen[-8:]]}")

    def of(self, kind: str) -> list:
        while not self.events.empty():
            self.seen.append(self.events.get())
        return [e for e in self.seen if e.kind == kind]


def test_pick_winners_ranks_by_mean_reward_then_peer_id():
    scores = {"Qm-self": [0.5, 0.5], "Qm-b": [1.0, 0.0], "Qm-a": [0.5], "Qm-c": [0.9, 1.0], "Qm-empty": []}
    assert pick_winners(scores) == ["Qm-c", "Qm-a", "Qm-b"]
    assert pick_winners({"Qm-self": [0.0]}) == ["Qm-self"]


def test_restart_after_lost_send_does_not_submit_again(devchain, tmp_path, monkeypatch):  # noqa: F811
    """A crash between sending and recording: the next start finds the submission on chain and sends nothing."""
    monkeypatch.setenv(PASSPHRASE_ENV, PASS)
    target, admin = deployed(devchain, funded_account(devchain))
    address = node_wallet(devchain, tmp_path)
    config = base_config(tmp_path, devchain, target.coordinator)
    bus = EventBus()
    first = ChainParticipant(config, PEER, bus)
    first.start()
    first.round_finished(0, [0.25, 0.75], {PEER: [0.25, 0.75]})
    first.stop()
    nonce = devchain.w3.eth.get_transaction_count(address)
    assert nonce == 3  # register, reward, winners
    # simulate the lost record: the rows say "pending, one attempt made" although the chain has them
    q = SubmissionQueue(queue_path(config))
    q._db.execute("UPDATE submissions SET status = 'pending', attempts = 1")
    q.close()
    recorder = Recorder(bus2 := EventBus())
    second = ChainParticipant(config, PEER, bus2)
    second.start()
    recorder.wait_for(lambda e: e.kind == "chain_status" and e.pending_submissions == 0, timeout=30)
    second.stop()
    assert devchain.w3.eth.get_transaction_count(address) == nonce  # nothing sent twice
    assert {e.status for e in recorder.of("chain_transaction")} == {"already_on_chain"}
    assert admin.total_rewards([PEER]) == [500]


def test_identity_of_another_wallet_is_not_submitted(devchain, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv(PASSPHRASE_ENV, PASS)
    target, admin = deployed(devchain, funded_account(devchain))
    from node.chain.coordinator import CoordinatorClient

    CoordinatorClient(target, funded_account(devchain)).register_peer(PEER)  # someone else owns this peer id
    address = node_wallet(devchain, tmp_path)
    bus = EventBus()
    recorder = Recorder(bus)
    participant = ChainParticipant(base_config(tmp_path, devchain, target.coordinator), PEER, bus)
    participant.start()
    participant.round_finished(0, [1.0], {PEER: [1.0]})
    participant.stop()
    warning = next(e for e in recorder.of("error"))
    assert not warning.fatal and "belongs to another wallet" in warning.message
    assert devchain.w3.eth.get_transaction_count(address) == 0
    summary = account_summary(base_config(tmp_path, devchain, target.coordinator), address, PEER)
    assert summary.owned_by_other and summary.registered is False and summary.rpc.ok


def test_the_participant_tells_which_peers_are_registered_without_waiting_for_the_chain(devchain, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv(PASSPHRASE_ENV, PASS)
    monkeypatch.setattr("node.chain.participant.REGISTRY_PEERS", 3)
    target, _ = deployed(devchain, funded_account(devchain))
    from node.chain.coordinator import CoordinatorClient

    CoordinatorClient(target, funded_account(devchain)).register_peer("QmRegistered")
    node_wallet(devchain, tmp_path)
    participant = ChainParticipant(base_config(tmp_path, devchain, target.coordinator), PEER, EventBus())
    participant.start()
    try:
        asked = ["QmRegistered", "QmStranger"]
        assert participant.registered_peers(asked) == set()  # unknown yet: looked up in the background
        deadline = time.monotonic() + 60
        while not participant.registered_peers(asked) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert participant.registered_peers(asked) == {"QmRegistered"}
        participant.registered_peers([f"QmSybil{i}" for i in range(10)])  # a flood of identities stays bounded
        time.sleep(1)
        assert len(participant._registry) <= 3 and len(participant._lookups) <= 3
    finally:
        participant.stop()


@pytest.mark.slow
def test_training_goes_on_while_rpc_is_down_and_queue_delivers_once(tiny_model_dir, devchain, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv(PASSPHRASE_ENV, PASS)
    target, admin = deployed(devchain, funded_account(devchain))
    keys: list[str] = []
    address = node_wallet(devchain, tmp_path, keys)
    config = tiny_config(tiny_model_dir, tmp_path, run={"checkpoint_every_rounds": 50}).update(
        {"chain": chain_settings(devchain, target.coordinator)}
    )

    def start():
        bus = EventBus()
        recorder = Recorder(bus)
        node = SwarmNode(config, bus=bus)
        thread = threading.Thread(target=node.run, daemon=True)
        thread.start()
        return node, thread, recorder

    node, thread, rec = start()
    rec.wait_for(lambda e: e.kind == "chain_transaction" and e.action == "reward" and e.round == 0)
    peer_id = node.identity.peer_id
    admin.advance_round()
    rec.wait_for(lambda e: e.kind == "chain_status" and e.chain_round == 1)
    devchain.stop()  # the RPC goes away
    down_since = time.monotonic()
    rec.wait_for(lambda e: e.kind == "chain_status" and not e.connected and e.pending_submissions >= 1)
    rounds_before = len(rec.of("round_finished"))
    for _ in range(2):  # training goes on
        rec.wait_for(lambda e: e.kind == "round_finished")
    assert len(rec.of("round_finished")) >= rounds_before + 2
    assert all(e.groups_from_registered == 0 for e in rec.of("round_finished"))  # counted with a chain (solo: 0)
    node.stop()  # a restart while submissions are still queued
    thread.join(120)
    assert not thread.is_alive()
    outage_s = time.monotonic() - down_since

    devchain.start()  # the RPC is back (same chain, same port)
    node, thread, rec = start()
    rec.wait_for(lambda e: e.kind == "chain_status" and e.connected and e.pending_submissions == 0, timeout=120)
    rec.wait_for(lambda e: e.kind == "round_finished")
    node.stop()
    thread.join(120)

    q = SubmissionQueue(queue_path(config))
    rows = q.recent(target.coordinator, limit=100)
    q.close()
    assert {(r.kind, r.round) for r in rows} == {("register", -1), ("reward", 0), ("winners", 0), ("reward", 1), ("winners", 1)}
    assert all(r.status == "delivered" for r in rows), [(r.kind, r.round, r.status, r.message) for r in rows]
    # nothing was sent twice: the wallet's nonce counts every transaction it ever sent
    assert devchain.w3.eth.get_transaction_count(address) == len(rows)
    rewards = {r.round: r.payload["reward"] for r in rows if r.kind == "reward"}
    assert admin.total_rewards([peer_id]) == [rewards[0] + rewards[1]]
    assert admin.voter_vote_count(peer_id) == 2 and admin.owner_of(peer_id) == address
    summary = account_summary(config, address, peer_id)
    assert summary.registered and summary.total_rewards == rewards[0] + rewards[1] and summary.votes_cast == 2
    assert summary.chain_round == 1 and len(summary.transactions) == 5 and summary.balance_wei > 0
    assert_no_plaintext(tmp_path, keys[0])  # data folder, queue, checkpoints, logs
    print(f"outage {outage_s:.1f} s; rounds trained during it: >= 2")


def test_node_refuses_a_chain_with_another_id(devchain, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv(PASSPHRASE_ENV, PASS)
    target, _ = deployed(devchain, funded_account(devchain))
    node_wallet(devchain, tmp_path)
    config = NodeConfig.build({"run": {"data_dir": str(tmp_path)},
                               "chain": chain_settings(devchain, target.coordinator, network="custom", chain_id=685685)})
    participant = ChainParticipant(config, PEER, EventBus())
    with pytest.raises(NodeError) as refused:
        participant.start()
    participant.stop()
    assert refused.value.code == "wrong_chain" and "685685" in refused.value.message


def test_node_refuses_a_coordinator_of_another_version_than_configured(devchain, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv(PASSPHRASE_ENV, PASS)
    target, _ = deployed(devchain, funded_account(devchain), "0.5.1")
    node_wallet(devchain, tmp_path)

    def participant(version):
        return ChainParticipant(NodeConfig.build({
            "run": {"data_dir": str(tmp_path)},
            "chain": chain_settings(devchain, target.coordinator, coordinator_version=version, submit=False),
        }), PEER, EventBus())

    wrong = participant("0.6.0")
    with pytest.raises(NodeError) as refused:
        wrong.start()
    wrong.stop()
    assert refused.value.code == "chain_version" and "speaks the 0.5.1 interface, not 0.6.0" in refused.value.message
    for version in ("0.5.1", "auto"):
        right = participant(version)
        right.start()
        right.stop()
        assert right.client.version.name == "0.5.1"


def test_locked_wallet_is_a_clear_start_error(devchain, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.delenv(PASSPHRASE_ENV, raising=False)
    target, _ = deployed(devchain, funded_account(devchain))
    node_wallet(devchain, tmp_path)
    with pytest.raises(NodeError) as locked:
        ChainParticipant(base_config(tmp_path, devchain, target.coordinator), PEER, EventBus())
    assert locked.value.code == "locked" and PASSPHRASE_ENV in locked.value.hint
