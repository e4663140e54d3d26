"""A local dev chain (eth-tester over HTTP on loopback), funded wallets and a deployed coordinator for tests."""

from __future__ import annotations

from dataclasses import replace

import pytest
from eth_account import Account

from node.chain.coordinator import CoordinatorClient, deploy_coordinator
from node.chain.devchain import DevChain
from node.chain.networks import ChainTarget

ETH = 10**18


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


def deployed(chain: DevChain, owner) -> tuple[ChainTarget, CoordinatorClient]:
    """Deploy our coordinator from ``owner``; returns its target and the owner's client."""
    result = deploy_coordinator(local_target(chain), owner)
    target = replace(local_target(chain), coordinator=result.address)
    return target, CoordinatorClient(target, owner)


def chain_settings(chain: DevChain, coordinator: str, **extra) -> dict:
    return {"network": "local", "rpc_url": chain.url, "coordinator": coordinator, "rpc_timeout_s": 3.0,
            "poll_interval_s": 0.5, **extra}
