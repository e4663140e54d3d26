"""Network presets, the resolved chain settings of a node, and RPC health checks.

Health is checked with ``eth_chainId`` and ``eth_blockNumber`` only: the Gensyn Testnet's public RPC rejects
``web3_clientVersion``. A node never talks to a chain whose id differs from the one it expects, so a mistyped
URL cannot send transactions signed for one chain to another.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from web3 import HTTPProvider, Web3

from node.config import ChainSettings
from node.errors import NodeError


@dataclass(frozen=True)
class NetworkPreset:
    key: str
    label: str
    rpc_url: str | None
    chain_id: int | None  # None: accept the chain the RPC reports (local development chains differ)
    explorer_url: str | None  # base URL; a transaction is <explorer_url>/tx/<hash>
    coordinator: str | None = None  # None: the user sets the address of the swarm they join


PRESETS: dict[str, NetworkPreset] = {
    "gensyn-testnet": NetworkPreset(
        key="gensyn-testnet", label="Gensyn Testnet", rpc_url="https://gensyn-testnet.g.alchemy.com/public",
        chain_id=685685, explorer_url="https://gensyn-testnet.explorer.alchemy.com",
    ),
    # anvil, hardhat and `rl-swarm-node chain devnet` all listen here by default
    "local": NetworkPreset(
        key="local", label="Local development chain", rpc_url="http://127.0.0.1:8545", chain_id=None,
        explorer_url=None,
    ),
    "custom": NetworkPreset(key="custom", label="Custom RPC", rpc_url=None, chain_id=None, explorer_url=None),
}


@dataclass(frozen=True)
class ChainTarget:
    """Everything needed to reach one swarm's coordinator."""

    network: str
    label: str
    rpc_url: str
    chain_id: int | None
    coordinator: str | None
    explorer_url: str | None
    timeout_s: float

    def tx_url(self, tx_hash: str) -> str | None:
        return f"{self.explorer_url.rstrip('/')}/tx/{tx_hash}" if self.explorer_url else None

    def address_url(self, address: str) -> str | None:
        return f"{self.explorer_url.rstrip('/')}/address/{address}" if self.explorer_url else None


def resolve(settings: ChainSettings, *, need_coordinator: bool = True) -> ChainTarget | None:
    """The chain a node uses, or None when none is configured; the config's fields override the preset's."""
    if settings.network == "none":
        return None
    preset = PRESETS[settings.network]
    rpc_url = settings.rpc_url or preset.rpc_url
    if not rpc_url:
        raise NodeError(
            "the custom network has no RPC URL", hint="set [chain] rpc_url (e.g. https://my-node.example:8545)",
            code="chain_config",
        )
    if settings.network == "custom" and settings.chain_id is None:
        raise NodeError(
            "the custom network has no chain id", hint="set [chain] chain_id to the id of the chain you join",
            code="chain_config",
        )
    coordinator = settings.coordinator or preset.coordinator
    if need_coordinator and not coordinator:
        raise NodeError(
            f"no coordinator contract address is set for {preset.label}",
            hint="set [chain] coordinator (or --coordinator) to the swarm's SwarmCoordinator address; "
            "`rl-swarm-node chain deploy` deploys your own",
            code="chain_config",
        )
    return ChainTarget(
        network=settings.network, label=preset.label, rpc_url=rpc_url,
        chain_id=settings.chain_id if settings.chain_id is not None else preset.chain_id,
        coordinator=Web3.to_checksum_address(coordinator) if coordinator else None,
        explorer_url=preset.explorer_url, timeout_s=settings.rpc_timeout_s,
    )


def connect(target: ChainTarget) -> Web3:
    """A Web3 over HTTP with a timeout on every call and no hidden retries (the caller decides when to retry)."""
    provider = HTTPProvider(
        target.rpc_url, request_kwargs={"timeout": target.timeout_s}, exception_retry_configuration=None
    )
    return Web3(provider)


@dataclass(frozen=True)
class RpcHealth:
    ok: bool
    rpc_url: str
    chain_id: int | None
    block_number: int | None
    latency_ms: float | None
    message: str  # what is wrong, or "ok"


def rpc_health(rpc_url: str, expected_chain_id: int | None = None, *, timeout_s: float = 10.0) -> RpcHealth:
    """Ask the RPC for its chain id and latest block. Never raises: problems are in ``message``."""
    w3 = Web3(HTTPProvider(rpc_url, request_kwargs={"timeout": timeout_s}, exception_retry_configuration=None))
    started = time.perf_counter()
    try:
        chain_id = int(w3.eth.chain_id)
        block = int(w3.eth.block_number)
    except Exception as exc:  # noqa: BLE001 - any transport or protocol failure means "unreachable"
        return RpcHealth(False, rpc_url, None, None, None, f"RPC {rpc_url} is unreachable: {_short(exc)}")
    latency = (time.perf_counter() - started) * 1000
    if expected_chain_id is not None and chain_id != expected_chain_id:
        return RpcHealth(
            False, rpc_url, chain_id, block, latency,
            f"RPC {rpc_url} serves chain id {chain_id}, not the expected {expected_chain_id}",
        )
    return RpcHealth(True, rpc_url, chain_id, block, latency, "ok")


def check_chain_id(w3: Web3, target: ChainTarget) -> int:
    """The RPC's chain id; a NodeError when it is not the expected one or the RPC does not answer."""
    try:
        chain_id = int(w3.eth.chain_id)
    except Exception as exc:  # noqa: BLE001
        raise NodeError(
            f"the RPC {target.rpc_url} of {target.label} does not answer: {_short(exc)}",
            hint="check your internet connection and the RPC URL, or try again later",
            code="rpc_unreachable",
        ) from None
    if target.chain_id is not None and chain_id != target.chain_id:
        raise NodeError(
            f"the RPC {target.rpc_url} serves chain id {chain_id}, but {target.label} is chain id {target.chain_id}",
            hint="fix [chain] rpc_url, or set [chain] chain_id if you really mean this chain; "
            "transactions are never sent to a chain other than the expected one",
            code="wrong_chain",
        )
    return chain_id


def _short(exc: Exception) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) < 200 else text[:200] + "..."
