"""A local dev chain (eth-tester over HTTP on loopback), funded wallets and a deployed coordinator for tests."""

from __future__ import annotations

import json
from dataclasses import replace
from functools import cache
from pathlib import Path

import pytest
from eth_account import Account

from node.chain.coordinator import CoordinatorClient, deploy_coordinator
from node.chain.devchain import DevChain
from node.chain.networks import ChainTarget

ETH = 10**18
VERSIONS = ("0.4.2", "0.4.3", "0.5.1", "0.6.0")
LEGACY_DIR = Path(__file__).resolve().parent / "data" / "coordinators"


@cache
def legacy_artifact(version: str) -> dict:
    """The older interfaces, built by resources/contracts/build.sh from LegacyCoordinators.sol."""
    return json.loads((LEGACY_DIR / f"SwarmCoordinatorV{version.replace('.', '')[:3]}.json").read_text())


@pytest.fixture
def devchain():
    chain = DevChain().start()
    yield chain
    chain.stop()


def funded_account(chain: DevChain):
    account = Account.create()
    chain.fund(account.address, 10 * ETH)
    return account


def local_target(chain: DevChain, coordinator: str | None = None, timeout_s: float = 5.0) -> ChainTarget:
    return ChainTarget(network="local", label="Local development chain", rpc_url=chain.url, chain_id=None,
                       coordinator=coordinator, explorer_url=None, timeout_s=timeout_s)


def deployed(chain: DevChain, owner, version: str = "0.6.0") -> tuple[ChainTarget, CoordinatorClient]:
    """Deploy a coordinator of that interface version from ``owner``; returns its target and the owner's client.
    0.6.0 and 0.5.1 are our SwarmCoordinator with 1 and 3 stages; 0.4.x the legacy test builds."""
    if version in ("0.4.2", "0.4.3"):
        result = deploy_coordinator(local_target(chain), owner, artifact=legacy_artifact(version), constructor_args=())
    else:
        result = deploy_coordinator(local_target(chain), owner, stages=1 if version == "0.6.0" else 3)
    target = replace(local_target(chain), coordinator=result.address)
    return target, CoordinatorClient(target, owner)


def chain_settings(chain: DevChain, coordinator: str, **extra) -> dict:
    return {"network": "local", "rpc_url": chain.url, "coordinator": coordinator, "rpc_timeout_s": 3.0,
            "poll_interval_s": 0.5, **extra}
