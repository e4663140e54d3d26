"""Client of a SwarmCoordinator contract (the public 0.4.2 ABI), signed locally by the node's wallet.

The ABI is the public contract's (``resources/contracts/SwarmCoordinator_0.4.2.abi.json``), so the same client
talks to the public swarm's contract and to ours (``resources/contracts/SwarmCoordinator.sol``), which implements
the same functions and errors. Reverts are decoded from the error selector into sentences a user can act on.
Every call is a blocking HTTP request with the target's timeout.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from eth_account.signers.local import LocalAccount
from eth_utils import function_signature_to_4byte_selector
from web3 import Web3
from web3.exceptions import ContractLogicError, TimeExhausted, Web3RPCError

from node.chain.networks import ChainTarget, check_chain_id, connect
from node.errors import NodeError

log = logging.getLogger(__name__)

CONTRACTS_DIR = Path(__file__).resolve().parents[2] / "resources" / "contracts"
ABI_FILE = CONTRACTS_DIR / "SwarmCoordinator_0.4.2.abi.json"
ARTIFACT_FILE = CONTRACTS_DIR / "SwarmCoordinator.json"
RECEIPT_TIMEOUT_S = 120.0
MAX_BOOTNODES = 64
MAX_BOOTNODE_CHARS = 512

# What each custom error means for the person running the node (the public contract and ours share them).
ERROR_MESSAGES: dict[str, tuple[str, str]] = {
    "PeerIdAlreadyRegistered": (
        "this peer identity belongs to another wallet on this coordinator",
        "log in with the wallet that registered it, or use another identity (a new identity file gets a new peer id)",
    ),
    "InvalidVoterPeerId": (
        "this peer identity is not registered to this wallet",
        "register the peer id with this wallet first (`rl-swarm-node chain register`)",
    ),
    "RewardAlreadySubmitted": ("the reward of this round was already submitted", "nothing to do"),
    "WinnerAlreadyVoted": ("the winners of this round were already submitted", "nothing to do"),
    "InvalidRoundNumber": (
        "the coordinator does not accept this round number (it is ahead of the chain's round)",
        "wait for the swarm's round to advance",
    ),
    "InvalidStageNumber": ("the coordinator does not accept this stage number", "check the swarm's stage count"),
    "StageOutOfBounds": ("the stage is out of bounds for this coordinator", "check the swarm's stage count"),
    "InvalidVote": (
        "the coordinator refused the winners (empty, repeated or unregistered peer ids)",
        "this is a bug in the node; please report it",
    ),
    "OnlyStageManager": ("only the swarm's stage manager may advance rounds", "use the wallet that deployed the coordinator"),
    "OnlyBootnodeManager": ("only the swarm's bootnode manager may change bootnodes", "use the wallet that deployed the coordinator"),
    "OnlyOwner": ("only the coordinator's owner may do this", "use the wallet that deployed the coordinator"),
    "InvalidBootnodeIndex": ("there is no bootnode at this index", "list them with `rl-swarm-node chain status`"),
}


@cache
def coordinator_abi() -> list[dict[str, Any]]:
    return json.loads(ABI_FILE.read_text(encoding="utf-8"))


@cache
def contract_artifact() -> dict[str, Any]:
    """Our contract's compiled ABI and bytecode (built by resources/contracts/build.sh)."""
    return json.loads(ARTIFACT_FILE.read_text(encoding="utf-8"))


@cache
def _error_selectors() -> dict[bytes, str]:
    selectors = {}
    for item in coordinator_abi():
        if item["type"] == "error":
            signature = f"{item['name']}({','.join(i['type'] for i in item['inputs'])})"
            selectors[function_signature_to_4byte_selector(signature)] = item["name"]
    return selectors


class ChainRevert(NodeError):
    """A transaction or call the contract refused; ``error`` is the custom error's name when known."""

    def __init__(self, error: str | None, action: str) -> None:
        message, hint = ERROR_MESSAGES.get(error or "", (f"the coordinator refused it ({error or 'no reason given'})", ""))
        super().__init__(f"{action}: {message}", hint=hint, code="chain_revert")
        self.error = error


def decode_revert(exc: Exception) -> str | None:
    """The custom error name carried by a revert, or None when the data names no known error."""
    data = getattr(exc, "data", None)
    if isinstance(data, dict):
        data = data.get("data")
    if not isinstance(data, str) or not data.startswith("0x") or len(data) < 10:
        return None
    return _error_selectors().get(bytes.fromhex(data[2:10]))


@dataclass(frozen=True)
class TxResult:
    tx_hash: str
    block_number: int
    gas_used: int


class CoordinatorClient:
    """One wallet's view of one coordinator. ``account`` may be None for read-only use."""

    def __init__(self, target: ChainTarget, account: LocalAccount | None = None, *, w3: Web3 | None = None) -> None:
        if target.coordinator is None:
            raise NodeError("no coordinator address is configured", hint="set [chain] coordinator", code="chain_config")
        self.target = target
        self.account = account
        self.w3 = w3 or connect(target)
        self.contract = self.w3.eth.contract(address=target.coordinator, abi=coordinator_abi())
        self._chain_checked = False

    # -------------------------------------------------------------------------------------------------- reads
    def chain_id(self) -> int:
        chain_id = check_chain_id(self.w3, self.target)
        self._chain_checked = True
        return chain_id

    def current_round(self) -> int:
        return int(self._call("read the current round", "currentRound"))

    def current_stage(self) -> int:
        return int(self._call("read the current stage", "currentStage"))

    def bootnodes(self) -> list[str]:
        """The contract's bootnodes that look like multiaddrs (anything else is dropped: it came off the network)."""
        raw = self._call("read the bootnodes", "getBootnodes")
        valid = [b for b in raw[:MAX_BOOTNODES] if isinstance(b, str) and b.startswith("/") and len(b) <= MAX_BOOTNODE_CHARS]
        if len(valid) < len(raw):
            log.warning("ignored %d malformed bootnode entries from the coordinator", len(raw) - len(valid))
        return valid

    def owner_of(self, peer_id: str) -> str | None:
        """The wallet that registered ``peer_id`` (getEoa), or None when nobody has."""
        return self.owners([peer_id])[0]

    def owners(self, peer_ids: list[str]) -> list[str | None]:
        eoas = self._call("look up the peers' wallets", "getEoa", peer_ids)
        return [None if int(eoa, 16) == 0 else Web3.to_checksum_address(eoa) for eoa in eoas]

    def total_rewards(self, peer_ids: list[str]) -> list[int]:
        return [int(v) for v in self._call("read total rewards", "getTotalRewards", peer_ids)]

    def total_wins(self, peer_id: str) -> int:
        return int(self._call("read total wins", "getTotalWins", peer_id))

    def voter_vote_count(self, peer_id: str) -> int:
        return int(self._call("read the vote count", "getVoterVoteCount", peer_id))

    def reward_submitted(self, round_: int, stage: int = 0, account: str | None = None) -> bool:
        """Whether ``account`` (default: this wallet) submitted its reward for this round and stage."""
        return bool(self._call("check the reward", "hasSubmittedRoundStageReward", round_, stage, account or self._address()))

    def winners_submitted(self, round_: int, peer_id: str) -> bool:
        return bool(self._call("check the winners", "getVoterVotes", round_, peer_id))

    def balance_wei(self, address: str) -> int:
        return int(self.w3.eth.get_balance(Web3.to_checksum_address(address)))

    # ------------------------------------------------------------------------------------------------- writes
    def register_peer(self, peer_id: str) -> TxResult | None:
        """Bind ``peer_id`` to this wallet; None when it already is (idempotent). Refuses another wallet's id."""
        owner = self.owner_of(peer_id)
        if owner == self._address():
            return None
        if owner is not None:
            raise ChainRevert("PeerIdAlreadyRegistered", f"registering {peer_id} (owned by {owner})")
        return self._transact("register the peer id", "registerPeer", peer_id)

    def submit_reward(self, round_: int, reward: int, peer_id: str, stage: int = 0) -> TxResult:
        return self._transact(f"submit the reward of round {round_}", "submitReward", round_, stage, reward, peer_id)

    def submit_winners(self, round_: int, winners: list[str], peer_id: str) -> TxResult:
        return self._transact(f"submit the winners of round {round_}", "submitWinners", round_, winners, peer_id)

    def advance_round(self) -> TxResult:
        """updateStageAndRound: only the stage manager may call it."""
        return self._transact("advance the round", "updateStageAndRound")

    def add_bootnodes(self, bootnodes: list[str]) -> TxResult:
        return self._transact("add bootnodes", "addBootnodes", bootnodes)

    # ---------------------------------------------------------------------------------------------- internals
    def _address(self) -> str:
        if self.account is None:
            raise NodeError("no wallet is unlocked", hint="log in with a wallet first", code="wallet_locked")
        return self.account.address

    def _call(self, action: str, function: str, *args: Any) -> Any:
        try:
            return getattr(self.contract.functions, function)(*args).call()
        except ContractLogicError as exc:
            raise ChainRevert(decode_revert(exc), action) from None
        except NodeError:
            raise
        except Exception as exc:  # noqa: BLE001 - transport failures become one actionable error
            raise _rpc_error(self.target, action, exc) from None

    def _transact(self, action: str, function: str, *args: Any) -> TxResult:
        account = self.account
        if account is None:
            raise NodeError("no wallet is unlocked", hint="log in with a wallet first", code="wallet_locked")
        if not self._chain_checked:
            self.chain_id()
        w3 = self.w3
        try:
            tx = getattr(self.contract.functions, function)(*args).build_transaction(
                {"from": account.address, "nonce": w3.eth.get_transaction_count(account.address, "pending")}
            )
            signed = account.sign_transaction(tx)
            tx_hash = w3.eth.send_raw_transaction(signed.raw_transaction)
            receipt = w3.eth.wait_for_transaction_receipt(tx_hash, timeout=RECEIPT_TIMEOUT_S)
        except ContractLogicError as exc:  # raised by the gas estimate, before anything is sent
            raise ChainRevert(decode_revert(exc), action) from None
        except TimeExhausted:
            raise NodeError(
                f"{action}: the transaction was sent but not mined within {RECEIPT_TIMEOUT_S:.0f} s",
                hint="the chain may be congested; it is checked again on the next attempt", code="tx_pending",
            ) from None
        except Web3RPCError as exc:
            if _no_funds(exc):
                raise NodeError(
                    f"{action}: the wallet {account.address} cannot pay the gas",
                    hint="fund the wallet with the chain's native token (a testnet faucet for the Gensyn Testnet)",
                    code="insufficient_funds",
                ) from None
            raise _rpc_error(self.target, action, exc) from None
        except NodeError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise _rpc_error(self.target, action, exc) from None
        if receipt["status"] != 1:
            raise ChainRevert(None, f"{action} (transaction {tx_hash.to_0x_hex()} reverted)")
        return TxResult(tx_hash=tx_hash.to_0x_hex(), block_number=int(receipt["blockNumber"]), gas_used=int(receipt["gasUsed"]))


def deploy_coordinator(target: ChainTarget, account: LocalAccount, *, w3: Web3 | None = None) -> DeployResult:
    """Deploy our SwarmCoordinator; the deploying wallet owns it and holds the stage and bootnode manager roles."""
    w3 = w3 or connect(target)
    check_chain_id(w3, target)
    artifact = contract_artifact()
    factory = w3.eth.contract(abi=artifact["abi"], bytecode=artifact["bytecode"])
    try:
        tx = factory.constructor().build_transaction(
            {"from": account.address, "nonce": w3.eth.get_transaction_count(account.address, "pending")}
        )
        tx_hash = w3.eth.send_raw_transaction(account.sign_transaction(tx).raw_transaction)
        receipt = w3.eth.wait_for_transaction_receipt(tx_hash, timeout=RECEIPT_TIMEOUT_S)
    except Web3RPCError as exc:
        if _no_funds(exc):
            raise NodeError(
                f"the wallet {account.address} cannot pay for deploying the coordinator",
                hint="fund it with the chain's native token first", code="insufficient_funds",
            ) from None
        raise _rpc_error(target, "deploy the coordinator", exc, hint="check the RPC URL and try again") from None
    except Exception as exc:  # noqa: BLE001
        raise _rpc_error(target, "deploy the coordinator", exc, hint="check the RPC URL and try again") from None
    if receipt["status"] != 1 or not receipt["contractAddress"]:
        raise NodeError("deploying the coordinator failed (the transaction reverted)", code="deploy_failed")
    return DeployResult(
        tx_hash=tx_hash.to_0x_hex(), block_number=int(receipt["blockNumber"]), gas_used=int(receipt["gasUsed"]),
        address=Web3.to_checksum_address(receipt["contractAddress"]),
    )


@dataclass(frozen=True)
class DeployResult(TxResult):
    address: str


def _rpc_error(target: ChainTarget, action: str, exc: Exception, *, hint: str = "") -> NodeError:
    text = str(exc) or type(exc).__name__
    return NodeError(
        f"could not {action}: the RPC {target.rpc_url} failed ({text[:200]})",
        hint=hint or "check the connection and the RPC URL; a running node queues its submissions and retries",
        code="rpc_unreachable",
    )


def _no_funds(exc: Exception) -> bool:
    text = str(exc).lower()
    return "insufficient funds" in text or "cannot afford" in text
