"""A revert is the contract's answer whichever web3 provider carries it: over HTTP (ContractLogicError), over an
IPC socket, and in process (EthereumTesterProvider, which raises eth-tester's TransactionFailed). Version detection,
decoded custom errors, Error(string) and "this version does not have F" hold on each, against the committed 0.4.2 /
0.4.3 builds and our 0.6.0 contract."""

from __future__ import annotations

import pytest
from eth_abi import encode as abi_encode
from web3 import IPCProvider, Web3
from web3.exceptions import Web3RPCError

from node.chain import reverts, versions
from node.chain.coordinator import ChainRevert, CoordinatorClient, MissingFunction
from node.chain.participant import ChainParticipant
from node.config import NodeConfig
from node.events import EventBus
from tests.chain_helpers import chain_settings, deployed, devchain, funded_account  # noqa: F401 - fixture
from tests.test_chain_versions import PEER_A, PEER_B, STAGES, rows_of, settled, wait_until

PROVIDERS = ("http", "ipc", "in_process")
COMMITTED = ("0.4.2", "0.4.3", "0.6.0")


def provider_w3(chain, kind: str, tmp_path) -> Web3 | None:
    """The Web3 a client is handed for ``kind`` (None: the client connects over HTTP to the target's RPC URL)."""
    if kind == "http":
        return None
    if kind == "ipc":
        return Web3(IPCProvider(chain.serve_ipc(str(tmp_path / "chain.ipc")), timeout=10))
    return chain.w3


@pytest.mark.parametrize("version", COMMITTED)
@pytest.mark.parametrize("provider", PROVIDERS)
def test_reverts_are_understood_on_every_provider(devchain, tmp_path, provider, version):  # noqa: F811
    target, admin = deployed(devchain, funded_account(devchain), version)
    alice, bob = funded_account(devchain), funded_account(devchain)
    w3 = provider_w3(devchain, provider, tmp_path)
    a = CoordinatorClient(target, alice, w3=w3)
    assert a.detect().name == version and a.stage_count() == STAGES[version]  # the probes' reverts read as "absent"
    assert CoordinatorClient(target, bob, w3=w3, version=version).version.name == version

    a.register_peer(PEER_A)
    with pytest.raises(ChainRevert) as taken:  # the check before sending: another wallet's peer id
        CoordinatorClient(target, bob, w3=w3).register_peer(PEER_A)
    assert taken.value.error == "PeerIdAlreadyRegistered"
    a.submit_reward(0, 10, PEER_A)
    with pytest.raises(ChainRevert) as again:  # refused at the gas estimate: a decoded custom error, not "the RPC"
        a.submit_reward(0, 11, PEER_A)
    assert again.value.error == "RewardAlreadySubmitted" and again.value.code == "chain_revert"
    with pytest.raises(ChainRevert) as ahead:
        a.submit_reward(0, 1, PEER_A, stage=1)
    assert ahead.value.error == ("StageOutOfBounds" if STAGES[version] == 1 else "InvalidStageNumber")
    with pytest.raises(ChainRevert) as foreign:  # a peer id this wallet does not own
        a.submit_winners(0, [PEER_A], PEER_B)
    assert foreign.value.error == "InvalidVoterPeerId"

    if version.startswith("0.4"):  # Error(string) keeps its text
        with pytest.raises(ChainRevert) as reason:
            a.winner_leaderboard(3, 1)
        assert reason.value.revert.kind == "error" and "Start index must not be after" in reason.value.message
    else:  # a revert without data of a selector the deployed code lacks names the missing function
        data = versions.selector("getPeerVoteCount(uint256,string)") + abi_encode(["uint256", "string"], [0, PEER_A])
        with pytest.raises(Exception) as raw:  # each provider raises its own type: that is the point
            a.w3.eth.call({"to": target.coordinator, "data": "0x" + data.hex()})
        assert reverts.revert_of(raw.value) is not None
        missing = a._missing("getPeerVoteCount(uint256,string)", "read the round's votes", raw.value)
        assert isinstance(missing, MissingFunction) and f"({version}) does not have getPeerVoteCount" in missing.message
    assert admin.total_rewards([PEER_A]) == [10]


@pytest.mark.parametrize("provider", ("ipc", "in_process"))
def test_a_node_delivers_through_a_provider_other_than_http(devchain, tmp_path, provider):  # noqa: F811
    """The node's participant handed such a provider detects the version, registers and delivers its reward."""
    target, _ = deployed(devchain, funded_account(devchain), "0.4.2")
    wallet = funded_account(devchain)
    config = NodeConfig.build({"run": {"data_dir": str(tmp_path)},
                               "chain": chain_settings(devchain, target.coordinator, coordinator_version="0.4.2",
                                                       poll_interval_s=0.2)})
    p = ChainParticipant(config, PEER_A, EventBus(), account=wallet, w3=provider_w3(devchain, provider, tmp_path))
    p.start()
    try:
        wait_until(lambda: p.chain_position() == (0, 0), what="the node to read the chain")
        p.round_finished(p.chain_round(), [0.5], {PEER_A: [0.5]})
        wait_until(lambda: settled(config, target.coordinator, ("reward", 0, 0)), what="the reward")
    finally:
        p.stop()
    assert rows_of(config, target.coordinator)[("reward", 0, 0)].status == "delivered"
    assert p.client.total_rewards([PEER_A]) == [500]


def test_a_json_rpc_revert_error_is_a_revert_and_other_rpc_errors_are_not():
    """A node that refuses eth_sendRawTransaction answers with a JSON-RPC error web3 raises as Web3RPCError."""
    data = "0x" + versions.selector("RewardAlreadySubmitted()").hex()
    coded = Web3RPCError("execution reverted", rpc_response={"error": {"code": 3, "message": "execution reverted",
                                                                       "data": data}})
    assert reverts.revert_of(coded).name == "RewardAlreadySubmitted"
    worded = Web3RPCError("x", rpc_response={"error": {"code": -32000, "message": "VM Exception: revert"}})
    assert reverts.revert_of(worded).kind == "empty"
    funds = Web3RPCError("x", rpc_response={"error": {"code": -32000, "message": "insufficient funds for gas"}})
    assert reverts.revert_of(funds) is None
    assert reverts.revert_of(ConnectionError("refused")) is None
