"""Client of a SwarmCoordinator contract, of any public interface version, signed locally by the node's wallet.

At connect time the client detects which interface version the contract speaks (:mod:`node.chain.versions`:
0.4.2, 0.4.3, 0.5.1 or 0.6.0; an expected version may be given, and the probe must agree) and then speaks it:
the right ``hasSubmittedRoundStageReward``, rewards per peer id where the contract keys them so, the stage count,
the views that exist. Our own contract (``resources/contracts/SwarmCoordinator.sol``) implements the newest
interface. Reverts are decoded (custom errors, ``Error(string)``, ``Panic(uint256)``) into sentences a user can
act on, whichever web3 provider reported them (:mod:`node.chain.reverts`); a call of a function the deployed
contract lacks says so, with the version. Every call is a blocking request with the target's timeout.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from functools import cache
from typing import Any

from eth_account.signers.local import LocalAccount
from web3 import Web3
from web3.exceptions import TimeExhausted, Web3RPCError

from node.chain import reverts, versions
from node.chain.networks import ChainTarget, check_chain_id, connect
from node.chain.versions import CONTRACTS_DIR, CoordinatorVersion, Probe, Revert
from node.errors import NodeError

log = logging.getLogger(__name__)

ARTIFACT_FILE = CONTRACTS_DIR / "SwarmCoordinator.json"
RECEIPT_TIMEOUT_S = 120.0
MAX_BOOTNODES = 64
MAX_BOOTNODE_CHARS = 512
DEFAULT_STAGES = 1  # our contract's stage count unless told otherwise: SAPO has one stage per round

# What each custom error means for the person running the node (every public version and ours share them).
ERROR_MESSAGES: dict[str, tuple[str, str]] = {
    "PeerIdAlreadyRegistered": (
        "this peer identity belongs to another wallet on this coordinator",
        "log in with the wallet that registered it, or use another identity (a new identity file gets a new peer id)",
    ),
    "InvalidVoterPeerId": (
        "this peer identity is not registered to this wallet",
        "register the peer id with this wallet first (`rl-swarm-node chain register`)",
    ),
    "RewardAlreadySubmitted": ("the reward of this round and stage was already submitted", "nothing to do"),
    "WinnerAlreadyVoted": ("the winners of this round were already submitted", "nothing to do"),
    "InvalidRoundNumber": (
        "the coordinator does not accept this round number (it is ahead of the chain's round)",
        "wait for the swarm's round to advance",
    ),
    "InvalidStageNumber": (
        "the coordinator does not accept this stage number (it is ahead of the chain's stage)",
        "wait for the swarm's stage to advance",
    ),
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


def coordinator_abi(version: str = versions.NEWEST.name) -> list[dict[str, Any]]:
    return versions.load_abi(version)


@cache
def contract_artifact() -> dict[str, Any]:
    """Our contract's compiled ABI and bytecode (built by resources/contracts/build.sh)."""
    return json.loads(ARTIFACT_FILE.read_text(encoding="utf-8"))


class ChainRevert(NodeError):
    """A transaction or call the contract refused. ``error`` is the custom error's name when the revert named
    one; ``revert`` says what the revert data held (Error(string), Panic, unknown or nothing)."""

    def __init__(self, error: str | None, action: str, revert: Revert | None = None) -> None:
        revert = revert or (Revert("custom", name=error) if error else Revert("empty"))
        if error in ERROR_MESSAGES:
            message, hint = ERROR_MESSAGES[error]
        elif revert.kind == "error":
            message, hint = f"the coordinator refused it: {revert.reason}", ""
        elif revert.kind == "panic":
            message, hint = f"the coordinator failed ({revert.describe()})", "this is a bug in the contract"
        else:
            message, hint = f"the coordinator refused it ({revert.describe() if error is None else error})", ""
        super().__init__(f"{action}: {message}", hint=hint, code="chain_revert")
        self.error = error
        self.revert = revert


class MissingFunction(ChainRevert):
    """A call of a function the deployed coordinator does not have (another interface version)."""

    def __init__(self, function: str, version: str | None, action: str) -> None:
        NodeError.__init__(
            self, f"{action}: this coordinator version ({version or 'unknown'}) does not have {function}",
            hint="the swarm runs another SwarmCoordinator interface than this feature needs", code="chain_version",
        )
        self.error = None
        self.revert = Revert("empty")
        self.function = function


@dataclass(frozen=True)
class TxResult:
    tx_hash: str
    block_number: int
    gas_used: int


class CoordinatorClient:
    """One wallet's view of one coordinator. ``account`` may be None for read-only use.

    ``version``: the interface version the caller expects (e.g. from a swarm's settings); the probe must agree.
    Without it the detected version is used. Detection runs on the first call that needs it (:meth:`detect`).
    """

    def __init__(
        self, target: ChainTarget, account: LocalAccount | None = None, *, w3: Web3 | None = None,
        version: str | None = None,
    ) -> None:
        if target.coordinator is None:
            raise NodeError("no coordinator address is configured", hint="set [chain] coordinator", code="chain_config")
        if version is not None and version not in versions.VERSIONS:
            raise NodeError(f"unknown coordinator version {version!r}",
                            hint=f"one of {', '.join(versions.VERSIONS)}", code="chain_config")
        self.target = target
        self.account = account
        self.w3 = w3 or connect(target)
        self.expected_version = version
        self._version: CoordinatorVersion | None = None
        self._stage_count: int | None = None
        self._selectors: frozenset[bytes] | None = None
        self.contract = self.w3.eth.contract(address=target.coordinator, abi=coordinator_abi())
        self._chain_checked = False

    # ------------------------------------------------------------------------------------------ the version
    def detect(self) -> CoordinatorVersion:
        """Probe the contract (once): which interface version it speaks and how many stages a round has."""
        if self._version is not None:
            return self._version
        address = self.target.coordinator
        code = self._rpc("read the coordinator's code", lambda: bytes(self.w3.eth.get_code(address)))
        if not code:
            raise NodeError(
                f"there is no contract at {address} on {self.target.label} ({self.target.rpc_url})",
                hint="check [chain] coordinator and the network: the address must be the swarm's SwarmCoordinator",
                code="no_contract",
            )
        answers = {name: self._probe(name) for name in versions.PROBES}
        probe = Probe(
            peer_keyed=answers["peer_keyed"] is not None, wallet_keyed=answers["wallet_keyed"] is not None,
            vote_views=answers["vote_views"] is not None, stage_count=answers["stage_count"],
        )
        version = versions.classify(probe)
        if version is None:
            raise versions.unknown_contract(address, probe)
        if self.expected_version is not None and self.expected_version != version.name:
            raise NodeError(
                f"the coordinator at {address} speaks the {version.name} interface, not {self.expected_version}",
                hint="correct the expected coordinator version, or the coordinator address", code="chain_version",
            )
        self._selectors = versions.code_selectors(self._implementation_code(code))
        self._version = version
        self._stage_count = probe.stage_count or version.stage_count
        self.contract = self.w3.eth.contract(address=address, abi=version.abi)
        log.info("coordinator %s: interface %s, %d stage(s) per round", address, version.name, self._stage_count)
        return version

    @property
    def version(self) -> CoordinatorVersion:
        return self.detect()

    @property
    def detected(self) -> CoordinatorVersion | None:
        """The version if it was detected already (never touches the network)."""
        return self._version

    def stage_count(self) -> int:
        """Stages per round, as the contract's stageCount() says."""
        self.detect()
        assert self._stage_count is not None
        return self._stage_count

    def has(self, function: str) -> bool:
        """Whether the deployed coordinator has this function (by its version's ABI)."""
        return self.version.has(function)

    # -------------------------------------------------------------------------------------------------- reads
    def chain_id(self) -> int:
        chain_id = check_chain_id(self.w3, self.target)
        self._chain_checked = True
        return chain_id

    def current_round(self) -> int:
        return int(self._call("read the current round", "currentRound"))

    def current_stage(self) -> int:
        return int(self._call("read the current stage", "currentStage"))

    def position(self) -> tuple[int, int]:
        """(round, stage) now. Two reads: a stage advance in between can pair a round with the stage after it,
        so the round is read again when the stage reads 0."""
        round_ = self.current_round()
        stage = self.current_stage()
        if stage == 0:
            round_ = self.current_round()
        return round_, stage

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

    def peer_ids_of(self, address: str) -> list[str]:
        """The peer ids registered to a wallet (getPeerId)."""
        return [str(p) for p in self._call("look up the wallet's peer ids", "getPeerId", [address])[0]]

    def total_rewards(self, peer_ids: list[str]) -> list[int]:
        return [int(v) for v in self._call("read total rewards", "getTotalRewards", peer_ids)]

    def total_wins(self, peer_id: str) -> int:
        return int(self._call("read total wins", "getTotalWins", peer_id))

    def voter_vote_count(self, peer_id: str) -> int:
        return int(self._call("read the vote count", "getVoterVoteCount", peer_id))

    def peer_vote_count(self, round_: int, peer_id: str) -> int:
        """Votes ``peer_id`` won in one round (0.4.x only: 0.5.0 removed it)."""
        return int(self._call("read the round's votes", "getPeerVoteCount", round_, peer_id))

    def winner_leaderboard(self, start: int, end: int) -> list[tuple[str, int]]:
        """Peers ranked by wins (0.4.x only)."""
        peers, wins = self._call("read the winner leaderboard", "winnerLeaderboard", start, end)
        return [(str(p), int(w)) for p, w in zip(peers, wins, strict=True)]

    def reward_submitted(self, round_: int, stage: int = 0, peer_id: str | None = None, *, account: str | None = None) -> bool:
        """Whether the reward of this (round, stage) is on chain: for ``peer_id`` where the coordinator keys rewards
        by peer id, for the wallet (``account``, default this one) on 0.4.2, where any of its peers counts."""
        if self.version.rewards_per_peer:
            if peer_id is None:
                raise NodeError("checking a reward needs the peer id on this coordinator version", code="bug")
            return bool(self._call("check the reward", "hasSubmittedRoundStageReward", round_, stage, peer_id))
        return bool(self._call("check the reward", "hasSubmittedRoundStageReward", round_, stage,
                               account or self._address()))

    def reward_submitters(self, round_: int, stage: int, account: str | None = None) -> list[str]:
        """The peer ids whose reward for (round, stage) a wallet submitted, from the RewardSubmitted events (the
        account, round and stage are indexed, so this is one filtered log query). On 0.4.2 this tells which node
        of a wallet got the wallet's one reward."""
        account = account or self._address()
        event = self.contract.events.RewardSubmitted()

        def query() -> list[str]:
            logs = event.get_logs(
                from_block=0, to_block="latest",
                argument_filters={"account": account, "roundNumber": round_, "stageNumber": stage},
            )
            return [str(entry["args"]["peerId"]) for entry in logs]

        return self._rpc("read the reward events", query)

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
        """From 0.4.3 on, a non-negative reward goes through the uint256 overload, which the contract keys by peer
        id; a negative one (and every reward on 0.4.2) through the int256 one."""
        action = f"submit the reward of round {round_}, stage {stage}"
        if self.version.rewards_per_peer and reward >= 0:
            signature = "submitReward(uint256,uint256,uint256,string)"
        else:
            signature = "submitReward(uint256,uint256,int256,string)"
        return self._transact(action, signature, round_, stage, reward, peer_id)

    def submit_winners(self, round_: int, winners: list[str], peer_id: str) -> TxResult:
        return self._transact(f"submit the winners of round {round_}", "submitWinners", round_, winners, peer_id)

    def advance_stage(self) -> TxResult:
        """updateStageAndRound: one stage on (a new round after the last stage). Only the stage manager may."""
        return self._transact("advance the stage", "updateStageAndRound")

    def advance_round(self) -> list[TxResult]:
        """Advance stage by stage until the next round begins (one transaction on a 1-stage coordinator, up to 3
        on 0.4.x and 0.5.x); returns the transactions."""
        start, _ = self.position()
        results: list[TxResult] = []
        for _ in range(self.stage_count()):
            results.append(self.advance_stage())
            if self.current_round() > start:
                return results
        raise NodeError(
            f"advance the round: still round {start} after {len(results)} stage advances",
            hint="someone else may be advancing it too; check `rl-swarm-node chain status`", code="chain_state",
        )

    def add_bootnodes(self, bootnodes: list[str]) -> TxResult:
        return self._transact("add bootnodes", "addBootnodes", bootnodes)

    # ---------------------------------------------------------------------------------------------- internals
    def _address(self) -> str:
        if self.account is None:
            raise NodeError("no wallet is unlocked", hint="log in with a wallet first", code="wallet_locked")
        return self.account.address

    def _probe(self, name: str) -> bool | int | None:
        """One detection probe: its answer, or None when the contract reverted (it lacks the function)."""
        data = versions.probe_call_data(name)
        address = self.target.coordinator

        def call() -> bool | int | None:
            try:
                raw = bytes(self.w3.eth.call({"to": address, "data": "0x" + data.hex()}))
            except Exception as exc:  # a revert means "no such function"; anything else is the RPC's
                if reverts.revert_of(exc) is not None:
                    return None
                raise
            return versions.probe_answer(name, raw)

        return self._rpc("detect the coordinator version", call)

    def _implementation_code(self, code: bytes) -> bytes:
        """The code that holds the functions: behind an ERC-1967 upgrade proxy, the implementation's."""
        slot = self._rpc("read the coordinator's code", lambda: bytes(
            self.w3.eth.get_storage_at(self.target.coordinator, versions.IMPLEMENTATION_SLOT)))
        implementation = int.from_bytes(slot, "big") if slot else 0
        if implementation == 0:
            return code
        address = Web3.to_checksum_address(implementation.to_bytes(20, "big"))
        return self._rpc("read the coordinator's code", lambda: bytes(self.w3.eth.get_code(address)))

    def _function(self, action: str, function: str, *args: Any):
        """The bound contract function (``function``: a name, or a full signature to pick an overload); refused
        before anything is sent when the detected version does not have it."""
        version = self.detect()
        name = function.split("(")[0]
        if not version.has(name):
            raise MissingFunction(name, version.name, action)
        if "(" in function:
            return self.contract.get_function_by_signature(function)(*args)
        return getattr(self.contract.functions, function)(*args)

    def _missing(self, function: str, action: str, exc: Exception) -> ChainRevert:
        """The revert's decoded error; a revert without data of a function the deployed bytecode lacks says so."""
        revert = reverts.revert_of(exc) or Revert("empty")
        if revert.kind == "empty" and self._selectors and self._selector(function) not in self._selectors:
            return MissingFunction(function.split("(")[0], self._version.name if self._version else None, action)
        return ChainRevert(revert.name if revert.kind == "custom" else None, action, revert)

    def _selector(self, function: str) -> bytes:
        if "(" not in function:
            item = next(i for i in self.version.abi if i["type"] == "function" and i["name"] == function)
            function = f"{function}({','.join(x['type'] for x in item['inputs'])})"
        return versions.selector(function)

    def _call(self, action: str, function: str, *args: Any) -> Any:
        fn = self._function(action, function, *args)
        try:
            return fn.call()
        except NodeError:
            raise
        except Exception as exc:  # noqa: BLE001 - a revert is the contract's answer; the rest, the transport's
            if reverts.revert_of(exc) is not None:
                raise self._missing(function, action, exc) from None
            raise _rpc_error(self.target, action, exc) from None

    def _rpc(self, action: str, call):
        try:
            return call()
        except NodeError:
            raise
        except Exception as exc:  # noqa: BLE001
            raise _rpc_error(self.target, action, exc) from None

    def _transact(self, action: str, function: str, *args: Any) -> TxResult:
        account = self.account
        if account is None:
            raise NodeError("no wallet is unlocked", hint="log in with a wallet first", code="wallet_locked")
        if not self._chain_checked:
            self.chain_id()
        w3 = self.w3
        fn = self._function(action, function, *args)
        try:
            tx = fn.build_transaction(
                {"from": account.address, "nonce": w3.eth.get_transaction_count(account.address, "pending")}
            )
            signed = account.sign_transaction(tx)
            tx_hash = w3.eth.send_raw_transaction(signed.raw_transaction)
            receipt = w3.eth.wait_for_transaction_receipt(tx_hash, timeout=RECEIPT_TIMEOUT_S)
        except TimeExhausted:
            raise NodeError(
                f"{action}: the transaction was sent but not mined within {RECEIPT_TIMEOUT_S:.0f} s",
                hint="the chain may be congested; it is checked again on the next attempt", code="tx_pending",
            ) from None
        except NodeError:
            raise
        except Exception as exc:  # noqa: BLE001 - a revert (mostly at the gas estimate, before anything is sent)
            if reverts.revert_of(exc) is not None:
                raise self._missing(function, action, exc) from None
            if isinstance(exc, Web3RPCError) and _no_funds(exc):
                raise NodeError(
                    f"{action}: the wallet {account.address} cannot pay the gas",
                    hint="fund the wallet with the chain's native token (a testnet faucet for the Gensyn Testnet)",
                    code="insufficient_funds",
                ) from None
            raise _rpc_error(self.target, action, exc) from None
        if receipt["status"] != 1:
            raise ChainRevert(None, f"{action} (transaction {tx_hash.to_0x_hex()} reverted)")
        return TxResult(tx_hash=tx_hash.to_0x_hex(), block_number=int(receipt["blockNumber"]), gas_used=int(receipt["gasUsed"]))


def deploy_coordinator(
    target: ChainTarget, account: LocalAccount, *, w3: Web3 | None = None, stages: int = DEFAULT_STAGES,
    artifact: dict[str, Any] | None = None, constructor_args: tuple | None = None,
) -> DeployResult:
    """Deploy our SwarmCoordinator with ``stages`` stages per round (1 for SAPO; 3 to host the multi-stage game);
    the deploying wallet owns it and holds the stage and bootnode manager roles. ``artifact`` (with its
    ``constructor_args``) deploys another build instead, which is how the tests get the older interfaces."""
    if not 1 <= stages <= 16:
        raise NodeError(f"a coordinator has 1 to 16 stages per round, not {stages}", hint="e.g. --stages 1",
                        code="chain_config")
    w3 = w3 or connect(target)
    check_chain_id(w3, target)
    artifact = artifact or contract_artifact()
    factory = w3.eth.contract(abi=artifact["abi"], bytecode=artifact["bytecode"])
    args = (stages,) if constructor_args is None else constructor_args
    try:
        tx = factory.constructor(*args).build_transaction(
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
        revert = reverts.revert_of(exc)
        if revert is not None:
            raise NodeError(f"deploying the coordinator failed: the chain refused it ({revert.describe()})",
                            hint="check the contract build and the chain", code="deploy_failed") from None
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
