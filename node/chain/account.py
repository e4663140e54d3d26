"""What the app's account page shows: wallet, network status, registration, on-chain totals, recent transactions.

Blocking (a few RPC calls, each with the configured timeout); the app runs it in a worker thread. RPC failures do
not raise: the summary says what could not be read, so the page can still show the local part. Light on imports
(no torch, no hivemind), so the GUI process can call it; the peer's readable name comes with its identity.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from web3 import Web3

from node.chain import networks, versions
from node.chain.coordinator import CoordinatorClient, MissingFunction
from node.chain.participant import queue_path
from node.chain.submissions import NO_ROUND, SubmissionQueue
from node.config import NodeConfig
from node.errors import NodeError


@dataclass(frozen=True)
class RecentTransaction:
    action: str  # register | reward | winners
    round: int | None
    status: str  # pending | delivered | already_on_chain | refused | failed
    tx_hash: str | None
    explorer_url: str | None
    message: str
    time: float
    stage: int = 0  # the chain stage of a reward


@dataclass(frozen=True)
class AccountSummary:
    network: str
    network_label: str
    rpc: networks.RpcHealth
    address: str
    address_url: str | None
    balance_wei: int | None
    coordinator: str | None
    peer_id: str | None
    owner: str | None  # the wallet that registered peer_id on chain (getEoa)
    registered: bool | None  # peer_id registered to this wallet; None = unknown
    owned_by_other: bool
    chain_round: int | None
    total_rewards: int | None
    total_wins: int | None
    votes_cast: int | None  # participation: rounds this peer submitted winners for
    transactions: list[RecentTransaction] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    coordinator_version: str = ""  # the detected interface (0.4.2, 0.4.3, 0.5.1, 0.6.0); "" = unknown
    chain_stage: int | None = None
    stage_count: int | None = None
    # the coordinator speaks another interface than [chain] coordinator_version names: nothing is read or sent
    version_problem: NodeError | None = None

    @property
    def balance_eth(self) -> str | None:
        return None if self.balance_wei is None else f"{Web3.from_wei(self.balance_wei, 'ether'):.6f}"


def account_summary(config: NodeConfig, address: str, peer_id: str | None = None, *, limit: int = 20) -> AccountSummary:
    target = networks.resolve(config.chain, need_coordinator=False)
    if target is None:
        raise NodeError("no chain is configured", hint="choose a network in [chain] network", code="no_chain")
    address = Web3.to_checksum_address(address)
    health = networks.rpc_health(target.rpc_url, target.chain_id, timeout_s=target.timeout_s)
    problems = [] if health.ok else [health.message]
    balance = owner = chain_round = chain_stage = stage_count = rewards = wins = votes = None
    version = ""
    version_problem: NodeError | None = None
    if health.ok:
        client_target = target if target.coordinator else None
        try:
            w3 = networks.connect(target)
            balance = int(w3.eth.get_balance(address))
            if client_target is not None:
                client = CoordinatorClient(client_target, w3=w3,
                                           version=versions.expected(config.chain.coordinator_version))
                version, stage_count = client.version.name, client.stage_count()
                chain_round, chain_stage = client.position()
                if not client.version.rewards_per_peer and len(client.peer_ids_of(address)) > 1:
                    problems.append(
                        f"this wallet has {len(client.peer_ids_of(address))} peer ids on a {version} coordinator, "
                        "which keeps one reward per wallet, round and stage: only one of its nodes is rewarded "
                        "(give each node its own wallet)"
                    )
                if peer_id:
                    owner = client.owner_of(peer_id)
                    rewards = client.total_rewards([peer_id])[0]
                    wins = client.total_wins(peer_id)
                    votes = client.voter_vote_count(peer_id)
            else:
                problems.append("no coordinator address is set")
        except NodeError as exc:
            problems.append(exc.message)
            if exc.code == "chain_version" and not isinstance(exc, MissingFunction):
                version_problem = exc
        except Exception as exc:  # noqa: BLE001 - the balance read goes to the RPC directly
            problems.append(f"the RPC failed: {exc}"[:300])
    return AccountSummary(
        network=target.network, network_label=target.label, rpc=health, address=address,
        address_url=target.address_url(address), balance_wei=balance, coordinator=target.coordinator,
        peer_id=peer_id, owner=owner,
        registered=None if (owner is None and rewards is None) else owner == address,
        owned_by_other=owner is not None and owner != address, chain_round=chain_round, total_rewards=rewards,
        total_wins=wins, votes_cast=votes, transactions=recent_transactions(config, limit=limit), problems=problems,
        coordinator_version=version, chain_stage=chain_stage, stage_count=stage_count, version_problem=version_problem,
    )


def recent_transactions(config: NodeConfig, *, limit: int = 20) -> list[RecentTransaction]:
    """The node's own record of its chain submissions (newest first), with explorer links where known."""
    path = queue_path(config)
    if not path.exists():
        return []
    target = networks.resolve(config.chain, need_coordinator=False)
    queue = SubmissionQueue(path)
    try:
        items = queue.recent(target.coordinator if target else None, limit)
    finally:
        queue.close()
    return [
        RecentTransaction(
            action=item.kind, round=None if item.round == NO_ROUND else item.round, status=item.status,
            tx_hash=item.tx_hash, explorer_url=target.tx_url(item.tx_hash) if target and item.tx_hash else None,
            message=item.message, time=item.updated, stage=item.stage,
        )
        for item in items
    ]
