"""The public SwarmCoordinator interface versions, how to tell them apart on chain, and how to decode reverts.

Public swarms ran 0.4.2, 0.4.3, 0.5.1 and 0.6.0; their ABIs ship in ``resources/contracts/abi/``. What differs
between them, and all the client needs to know (one client, this table; no client per version):

- how a reward is keyed: per wallet on 0.4.2 (``hasSubmittedRoundStageReward(uint256,uint256,address)``; a second
  node on the same wallet is refused with ``RewardAlreadySubmitted``), per peer id from 0.4.3
  (``hasSubmittedRoundStageReward(uint256,uint256,string)`` and the overload ``submitReward(...,uint256,string)``);
- the stages per round: 3 on 0.4.x and 0.5.x, 1 on 0.6.0 (``stageCount()`` says it on chain);
- which past stages take a late reward: on 0.4.2 only those up to the chain's current stage, whatever the reward's
  round (a "stage window" that opens once per round), on the later versions every stage of a past round;
- the views that exist: 0.5.0 removed ``getPeerVoteCount``, ``uniqueVotedPeers`` and the two leaderboards.

0.5.1 and 0.6.0 have the same ABI; only their stage count tells them apart. The version is detected with
``eth_call`` probes of the distinguishing view functions (they work through an upgrade proxy too), and the
deployed bytecode's function selectors (the implementation's, behind an ERC-1967 proxy) tell "this contract does
not have F" apart from a revert without a reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Literal

from eth_abi import decode as abi_decode
from eth_abi import encode as abi_encode
from eth_utils import function_signature_to_4byte_selector

from node.errors import NodeError

CONTRACTS_DIR = Path(__file__).resolve().parents[2] / "resources" / "contracts"
ABI_DIR = CONTRACTS_DIR / "abi"
# keccak256("eip1967.proxy.implementation") - 1: where an upgrade proxy keeps its implementation's address
IMPLEMENTATION_SLOT = 0x360894A13BA1A3210667C828492DB98DCA3E2076CC3735A920A3CA505D382BBC


@dataclass(frozen=True)
class CoordinatorVersion:
    """One public interface version: what the client does differently for it."""

    name: str
    stage_count: int  # as released; the chain's stageCount() is read at connect time and wins
    reward_key: Literal["wallet", "peer"]  # what one reward per (round, stage) is counted against
    # 0.4.2 checks a reward's stage against the chain's current stage whatever the reward's round: a past round's
    # stage s is taken only while the chain is at stage s or later (of a later round); 0.4.3 fixed it
    stage_window: bool = False

    @property
    def abi(self) -> list[dict[str, Any]]:
        return load_abi(self.name)

    def has(self, function: str) -> bool:
        """Whether this version's ABI has a function of that name (any overload)."""
        return function in _function_names(self.name)

    @property
    def rewards_per_peer(self) -> bool:
        return self.reward_key == "peer"


VERSIONS: dict[str, CoordinatorVersion] = {
    v.name: v
    for v in (
        CoordinatorVersion("0.4.2", stage_count=3, reward_key="wallet", stage_window=True),
        CoordinatorVersion("0.4.3", stage_count=3, reward_key="peer"),
        CoordinatorVersion("0.5.1", stage_count=3, reward_key="peer"),
        CoordinatorVersion("0.6.0", stage_count=1, reward_key="peer"),
    )
}
NEWEST = VERSIONS["0.6.0"]


def expected(setting: str) -> str | None:
    """The version a ``[chain] coordinator_version`` setting expects (None for "auto": whatever is detected). Every
    client built from a configuration passes it on, so a configured version is checked before anything is sent."""
    return None if setting == "auto" else setting


def deployed_by_us(stages: int) -> str | None:
    """The public interface our SwarmCoordinator speaks when deployed with ``stages`` stages (None: none of them)."""
    return {1: "0.6.0", 3: "0.5.1"}.get(stages)


@cache
def load_abi(name: str) -> list[dict[str, Any]]:
    return json.loads((ABI_DIR / f"SwarmCoordinator_{name}.abi.json").read_text(encoding="utf-8"))


@cache
def _function_names(name: str) -> frozenset[str]:
    return frozenset(item["name"] for item in load_abi(name) if item["type"] == "function")


def selector(signature: str) -> bytes:
    return function_signature_to_4byte_selector(signature)


# ------------------------------------------------------------------------------------------------- detection
@dataclass(frozen=True)
class Probe:
    """What the probes found on chain, kept for messages and tests."""

    peer_keyed: bool  # hasSubmittedRoundStageReward(uint256,uint256,string) answers
    wallet_keyed: bool  # hasSubmittedRoundStageReward(uint256,uint256,address) answers
    vote_views: bool  # getPeerVoteCount(uint256,string) answers (0.4.x)
    stage_count: int | None


def classify(probe: Probe) -> CoordinatorVersion | None:
    """The version whose interface matches the probes, or None when none does."""
    if probe.peer_keyed and not probe.wallet_keyed:
        if probe.vote_views:
            return VERSIONS["0.4.3"]
        return VERSIONS["0.6.0"] if probe.stage_count == 1 else VERSIONS["0.5.1"]
    if probe.wallet_keyed and not probe.peer_keyed and probe.vote_views:
        return VERSIONS["0.4.2"]
    return None


PROBES: dict[str, tuple[str, list[str], list[Any]]] = {
    "peer_keyed": ("hasSubmittedRoundStageReward(uint256,uint256,string)", ["uint256", "uint256", "string"], [0, 0, ""]),
    "wallet_keyed": (
        "hasSubmittedRoundStageReward(uint256,uint256,address)", ["uint256", "uint256", "address"],
        [0, 0, "0x" + "00" * 20],
    ),
    "vote_views": ("getPeerVoteCount(uint256,string)", ["uint256", "string"], [0, ""]),
    "stage_count": ("stageCount()", [], []),
}


def probe_call_data(name: str) -> bytes:
    signature, types, args = PROBES[name]
    return selector(signature) + abi_encode(types, args)


def probe_answer(name: str, raw: bytes) -> bool | int | None:
    """A probe's answer from the call's return data; None when it is not a well-formed answer."""
    if len(raw) != 32:
        return None
    value = int.from_bytes(raw, "big")
    if name == "stage_count":
        return value if 1 <= value <= 64 else None
    return True if value in (0, 1) else None


def code_selectors(code: bytes) -> frozenset[bytes]:
    """Every PUSH4 operand of EVM bytecode (walking opcodes, so push data is never read as code): solc's function
    dispatcher compares the call's selector with each of its functions' selectors pushed this way."""
    found: set[bytes] = set()
    i = 0
    while i < len(code):
        op = code[i]
        if 0x60 <= op <= 0x7F:  # PUSH1..PUSH32
            width = op - 0x5F
            if width == 4:
                found.add(bytes(code[i + 1 : i + 5]))
            i += 1 + width
        else:
            i += 1
    return frozenset(found)


# ---------------------------------------------------------------------------------------------- revert data
_ERROR_STRING = selector("Error(string)")
_PANIC = selector("Panic(uint256)")
PANIC_REASONS = {
    0x01: "an assertion failed",
    0x11: "an arithmetic overflow or underflow",
    0x12: "a division by zero",
    0x21: "an invalid enum value",
    0x22: "a corrupt storage byte array",
    0x31: "pop() on an empty array",
    0x32: "an array index out of bounds",
    0x41: "too much memory allocated",
    0x51: "a call to an uninitialised function",
}


@dataclass(frozen=True)
class Revert:
    """What a revert's data says. ``kind``: custom (a named custom error of the ABIs), error (Error(string)),
    panic (Panic(uint256)), unknown (a selector no ABI names) or empty (no data at all)."""

    kind: Literal["custom", "error", "panic", "unknown", "empty"]
    name: str | None = None  # the custom error's name
    reason: str | None = None  # Error(string)'s text, or the panic's meaning
    code: int | None = None  # the panic code
    selector: str | None = None  # an unknown error's selector (0x...)

    def describe(self) -> str:
        if self.kind == "custom":
            return str(self.name)
        if self.kind == "error":
            return f"“{self.reason}”"
        if self.kind == "panic":
            return f"panic 0x{self.code:02x}: {self.reason}"
        if self.kind == "unknown":
            return f"an error this client does not know ({self.selector})"
        return "no reason given"


@cache
def _custom_errors() -> dict[bytes, tuple[str, list[str]]]:
    errors: dict[bytes, tuple[str, list[str]]] = {}
    for name in VERSIONS:
        for item in load_abi(name):
            if item["type"] == "error":
                types = [i["type"] for i in item["inputs"]]
                errors[selector(f"{item['name']}({','.join(types)})")] = (item["name"], types)
    return errors


def decode_revert_data(data: bytes) -> Revert:
    if len(data) < 4:
        return Revert("empty")
    head, body = data[:4], data[4:]
    try:
        if head == _ERROR_STRING:
            (reason,) = abi_decode(["string"], body)
            return Revert("error", reason=str(reason)[:300])
        if head == _PANIC:
            (code,) = abi_decode(["uint256"], body)
            return Revert("panic", code=int(code), reason=PANIC_REASONS.get(int(code), "an unknown panic"))
    except Exception:  # noqa: BLE001 - malformed revert data is reported as unknown, never raised
        return Revert("unknown", selector="0x" + head.hex())
    known = _custom_errors().get(head)
    if known is not None:
        return Revert("custom", name=known[0])
    return Revert("unknown", selector="0x" + head.hex())


def unknown_contract(address: str, probe: Probe) -> NodeError:
    return NodeError(
        f"the contract at {address} does not look like any known SwarmCoordinator (0.4.2, 0.4.3, 0.5.1, 0.6.0): "
        f"{probe}",
        hint="check [chain] coordinator: it must be the swarm's SwarmCoordinator address on this chain",
        code="chain_version",
    )
