"""Two node processes on loopback sharing a local chain: both register, the second joins through the contract's
bootnode, and both submit their reward and winners in every chain round."""

from __future__ import annotations

import time

import pytest

from node.chain.participant import queue_path
from node.chain.submissions import SubmissionQueue
from node.chain.wallet import PASSPHRASE_ENV
from tests.chain_helpers import chain_settings, deployed, devchain, funded_account  # noqa: F401 - fixture
from tests.nodes import NodeProcess, tiny_config
from tests.test_chain_node import PASS, node_wallet
from tests.test_wallet import assert_no_plaintext

pytestmark = pytest.mark.slow
CHAIN_ROUNDS = 3


def test_two_nodes_register_and_submit_every_round(tiny_model_dir, devchain, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv(PASSPHRASE_ENV, PASS)
    target, admin = deployed(devchain, funded_account(devchain))
    nodes, peers, wallets, configs, keys = [], [], [], [], []
    try:
        for name in ("a", "b"):
            data_dir = tmp_path / name
            wallets.append(node_wallet(devchain, data_dir, keys))
            config = tiny_config(
                tiny_model_dir, data_dir, training={"external_groups": 1}, run={"checkpoint_every_rounds": 50},
            ).update({"chain": chain_settings(devchain, target.coordinator)})
            configs.append(config)
            node = NodeProcess(config, name=name)
            nodes.append(node)
            started = node.wait_for(lambda e: e.kind == "node_started", timeout=240)
            peers.append(started.peer_id)
            if name == "a":  # the first node is the swarm's bootnode, listed on the contract
                admin.add_bootnodes([started.invite[0]])
        nodes[1].wait_for(lambda e: e.kind == "peer_joined" and e.peer_id == peers[0], timeout=240)

        for round_ in range(CHAIN_ROUNDS):
            deadline = time.monotonic() + 240
            while not all(
                admin.reward_submitted(round_, 0, peer) and admin.winners_submitted(round_, peer)
                for wallet, peer in zip(wallets, peers, strict=True)
            ):
                assert time.monotonic() < deadline, f"round {round_} not submitted by both: {[n.stderr() for n in nodes]}"
                for node in nodes:
                    assert node.process.poll() is None, node.stderr()
                time.sleep(0.5)
            admin.advance_round()

        for node in nodes:
            node.send("stop")
        for node in nodes:
            assert node.finish() == 0, node.stderr()
    finally:
        for node in nodes:
            if node.process.poll() is None:
                node.kill_tree()

    assert [admin.owner_of(p) for p in peers] == wallets
    for config, wallet, peer in zip(configs, wallets, peers, strict=True):
        q = SubmissionQueue(queue_path(config))
        rows = q.recent(target.coordinator, limit=100)
        q.close()
        delivered = [r for r in rows if r.status == "delivered"]
        assert all(r.status == "delivered" for r in rows), [(r.kind, r.round, r.status, r.message) for r in rows]
        assert devchain.w3.eth.get_transaction_count(wallet) == len(delivered)  # one transaction per submission
        rewards = [r.payload["reward"] for r in rows if r.kind == "reward"]
        assert admin.total_rewards([peer]) == [sum(rewards)]
        assert admin.voter_vote_count(peer) >= CHAIN_ROUNDS
        for row in rows:
            if row.kind == "winners":
                assert set(row.payload["winners"]) <= set(peers)
        assert_no_plaintext(config.run.data_dir, *keys)  # node.log, queue, checkpoints, events on disk
        kinds = [e.kind for e in nodes[0].seen]
        assert "chain_transaction" in kinds and "chain_status" in kinds
