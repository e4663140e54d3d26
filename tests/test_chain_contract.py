"""Our SwarmCoordinator on a real EVM (py-evm over JSON-RPC), driven through the client (0.6.0 interface)."""

from __future__ import annotations

import hashlib
import json

import pytest

from node.chain import networks
from node.chain.coordinator import (
    ARTIFACT_FILE, CONTRACTS_DIR, ChainRevert, CoordinatorClient, contract_artifact, coordinator_abi,
)
from node.config import ChainSettings, NodeConfig
from node.errors import NodeError
from tests.chain_helpers import VERSIONS, deployed, devchain, funded_account, legacy_artifact  # noqa: F401 - fixture

PEER_A = "QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N"
PEER_B = "QmcZf59bWwK5XFi76CZX8cbJ4BhTzzA3gU1ZjYZcYW3dwt"


UPGRADE_ONLY = {"UPGRADE_INTERFACE_VERSION", "initialize", "proxiableUUID", "upgradeToAndCall"}


@pytest.mark.parametrize("version", VERSIONS)
def test_artifacts_are_built_from_the_committed_sources_and_match_the_public_abi(version):
    """Each build implements its public interface exactly (all but the upgrade proxy's plumbing), so a client
    that passes against it speaks that version; rebuilding from the committed sources gives the committed file."""
    artifact = contract_artifact() if version in ("0.5.1", "0.6.0") else legacy_artifact(version)
    for name, digest in artifact["sources"].items():
        assert hashlib.sha256((CONTRACTS_DIR / name).read_bytes()).hexdigest() == digest, "run resources/contracts/build.sh"
    assert artifact["compiler"].startswith("solc-js 0.8.28") and len(artifact["bytecode"]) > 1000

    def signatures(abi, kind):
        return {(i["name"], tuple(x["type"] for x in i["inputs"])) for i in abi if i["type"] == kind}

    public = coordinator_abi(version)
    ours_functions = signatures(artifact["abi"], "function")
    assert ours_functions == {s for s in signatures(public, "function") if s[0] not in UPGRADE_ONLY}
    assert signatures(artifact["abi"], "error") <= signatures(public, "error")
    assert signatures(artifact["abi"], "event") == {s for s in signatures(public, "event")
                                                    if s[0] not in ("Initialized", "Upgraded")}
    assert json.loads(ARTIFACT_FILE.read_text())["contractName"] == "SwarmCoordinator"


def test_register_rounds_rewards_winners_and_decoded_refusals(devchain):  # noqa: F811
    owner, alice, bob = (funded_account(devchain) for _ in range(3))
    target, admin = deployed(devchain, owner)
    a, b = CoordinatorClient(target, alice), CoordinatorClient(target, bob)

    assert a.register_peer(PEER_A) is not None
    assert a.register_peer(PEER_A) is None  # idempotent: already ours, nothing sent
    assert a.owner_of(PEER_A) == alice.address and a.owner_of(PEER_B) is None
    with pytest.raises(ChainRevert) as refused:  # the client checks getEoa before sending
        b.register_peer(PEER_A)
    assert refused.value.error == "PeerIdAlreadyRegistered"
    assert "belongs to another wallet" in refused.value.message and alice.address in refused.value.message
    with pytest.raises(ChainRevert) as reverted:  # and the contract itself refuses it, decoded from the revert data
        b._transact("register", "registerPeer", PEER_A)
    assert reverted.value.error == "PeerIdAlreadyRegistered"
    b.register_peer(PEER_B)

    assert a.current_round() == 0 and a.current_stage() == 0
    with pytest.raises(ChainRevert) as not_manager:
        a.advance_round()
    assert not_manager.value.error == "OnlyStageManager"
    with pytest.raises(ChainRevert) as future:
        a.submit_reward(1, 10, PEER_A)
    assert future.value.error == "InvalidRoundNumber"
    with pytest.raises(ChainRevert) as not_mine:
        b.submit_reward(0, 10, PEER_A)
    assert not_mine.value.error == "InvalidVoterPeerId" and "not registered to this wallet" in str(not_mine.value)

    for round_ in range(3):
        a.submit_reward(round_, 700 + round_, PEER_A)
        b.submit_reward(round_, -5, PEER_B)
        a.submit_winners(round_, [PEER_A, PEER_B], PEER_A)
        b.submit_winners(round_, [PEER_A], PEER_B)
        admin.advance_round()
    assert a.current_round() == 3

    assert a.total_rewards([PEER_A, PEER_B]) == [700 + 701 + 702, -15]
    assert a.total_wins(PEER_A) == 6 and a.total_wins(PEER_B) == 3
    assert a.voter_vote_count(PEER_A) == 3 and b.voter_vote_count(PEER_B) == 3
    assert a.reward_submitted(2, 0, PEER_A) and not a.reward_submitted(3, 0, PEER_A)
    assert a.winners_submitted(1, PEER_A) and not a.winners_submitted(3, PEER_A)

    with pytest.raises(ChainRevert) as dup_reward:
        a.submit_reward(1, 1, PEER_A)
    assert dup_reward.value.error == "RewardAlreadySubmitted" and "already submitted" in dup_reward.value.message
    with pytest.raises(ChainRevert) as dup_vote:
        a.submit_winners(1, [PEER_B], PEER_A)
    assert dup_vote.value.error == "WinnerAlreadyVoted"
    with pytest.raises(ChainRevert) as bad_vote:
        a.submit_winners(3, [PEER_B, PEER_B], PEER_A)
    assert bad_vote.value.error == "InvalidVote"
    assert a.total_rewards([PEER_A]) == [2103]  # refused submissions changed nothing

    admin.add_bootnodes(["/ip4/127.0.0.1/tcp/4001/p2p/" + PEER_A, "not a multiaddr"])
    assert a.bootnodes() == ["/ip4/127.0.0.1/tcp/4001/p2p/" + PEER_A]  # malformed entries from the chain dropped


def test_rpc_health_and_wrong_chain_refused(devchain):  # noqa: F811
    health = networks.rpc_health(devchain.url)
    assert health.ok and health.chain_id == devchain.chain_id and health.block_number is not None
    wrong = networks.rpc_health(devchain.url, expected_chain_id=685685)
    assert not wrong.ok and "not the expected 685685" in wrong.message
    down = networks.rpc_health("http://127.0.0.1:9", timeout_s=2)
    assert not down.ok and down.chain_id is None and "unreachable" in down.message

    owner = funded_account(devchain)
    target, _ = deployed(devchain, owner)
    testnet_target = networks.ChainTarget(**{**target.__dict__, "chain_id": 685685, "label": "Gensyn Testnet"})
    with pytest.raises(NodeError) as refused:
        CoordinatorClient(testnet_target, owner).register_peer(PEER_A)
    assert refused.value.code == "wrong_chain" and "685685" in refused.value.message


def test_network_presets_and_config_errors():
    assert networks.resolve(ChainSettings()) is None  # no chain: the node trains as before
    testnet = networks.resolve(ChainSettings(network="gensyn-testnet", coordinator="0x" + "ab" * 20))
    assert testnet.chain_id == 685685 and testnet.rpc_url == "https://gensyn-testnet.g.alchemy.com/public"
    assert testnet.tx_url("0x12").endswith("/tx/0x12")
    with pytest.raises(NodeError) as no_coordinator:
        networks.resolve(ChainSettings(network="gensyn-testnet"))
    assert "coordinator" in no_coordinator.value.hint
    with pytest.raises(NodeError) as no_id:
        networks.resolve(ChainSettings(network="custom", rpc_url="http://example.org:8545", coordinator="0x" + "00" * 20))
    assert "chain_id" in no_id.value.hint
    with pytest.raises(NodeError) as bad:
        NodeConfig.build({"chain": {"network": "mainnet", "coordinator": "0x12"}})
    assert "[chain] network" in bad.value.message and "[chain] coordinator" in bad.value.message


@pytest.mark.slow  # each command is a fresh interpreter (~7 s here)
def test_cli_deploy_register_and_status(devchain, tmp_path):  # noqa: F811
    import os
    import subprocess
    import sys

    from eth_account import Account

    from node.chain.wallet import PASSPHRASE_ENV

    key = Account.create().key.hex()
    env = {**os.environ, PASSPHRASE_ENV: "cli passphrase"}

    def cli(*args, stdin=""):
        result = subprocess.run([sys.executable, "-m", "node", *args, "--data-dir", str(tmp_path)], input=stdin,
                                capture_output=True, text=True, env=env, timeout=120)
        assert key.removeprefix("0x") not in result.stdout + result.stderr
        return result

    assert cli("wallet", "import", "--private-key", stdin=key).returncode == 0
    chain = ("--network", "local", "--rpc-url", devchain.url)
    broke = cli("chain", "deploy", *chain)
    assert broke.returncode == 2 and "cannot pay" in broke.stderr  # an unfunded wallet is told so
    devchain.fund(Account.from_key(key).address, 10**18)
    deployed_ = cli("chain", "deploy", *chain, "--bootnode", "/ip4/127.0.0.1/tcp/4001/p2p/" + PEER_A)
    assert deployed_.returncode == 0, deployed_.stderr
    address = deployed_.stdout.strip().splitlines()[-1]
    assert address.startswith("0x") and len(address) == 42
    with_contract = (*chain, "--coordinator", address)
    registered = cli("chain", "register", *with_contract)
    assert registered.returncode == 0 and "registered" in registered.stdout, registered.stderr
    assert cli("chain", "advance", *with_contract).stdout.startswith("round 1")
    status = cli("chain", "status", *with_contract)
    assert status.returncode == 0 and "registered yes" in status.stdout and "round 1" in status.stdout, status.stdout
    wrong = cli("chain", "status", "--network", "custom", "--rpc-url", devchain.url, "--chain-id", "685685",
                "--coordinator", address)
    assert wrong.returncode == 1 and "not the expected 685685" in wrong.stderr


def test_the_gui_facing_chain_api_does_not_import_the_training_stack():
    from tests.fresh_imports import run_and_list_imports

    _, imported = run_and_list_imports("import node.chain.wallet, node.chain.account, node.chain.networks, "
                                       "node.chain.coordinator", ("torch", "hivemind", "transformers", "trl", "PySide6"))
    assert imported == []
