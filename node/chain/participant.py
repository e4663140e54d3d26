"""A node's participation in an on-chain swarm: registration, round clock, bootnodes, reward and winner submissions.

Training never waits for the chain. The round loop only reads a cached chain round and queues submissions; a
background thread polls the chain and delivers the queue (:mod:`node.chain.submissions`), retrying with back-off
while the RPC is down and after restarts. A revert saying "already submitted" counts as delivered.

What is submitted, once per chain round (the contract takes one reward and one vote per wallet and round), from
the first training round this node starts while the chain is at that round:

- reward: the mean reward of this node's own completions in that round, times :data:`REWARD_SCALE`
  (the contract stores integers), so 1000 per round is the maximum;
- winners: SAPO has no vote, so this node names up to :data:`MAX_WINNERS` peers whose completions scored best by
  its own verifier that round: itself and the peers whose groups it trained on, ranked by mean reward (ties by
  peer id). Peers not registered on the coordinator are left out when the vote is sent (the contract refuses them).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence

from eth_account.signers.local import LocalAccount
from web3 import Web3

from node.chain import networks
from node.chain.coordinator import ERROR_MESSAGES, ChainRevert, CoordinatorClient
from node.chain.submissions import NO_ROUND, Submission, SubmissionQueue
from node.config import NodeConfig
from node.errors import NodeError
from node.events import ChainStatus, ChainTransaction, EventBus, NodeFailed

log = logging.getLogger(__name__)

REWARD_SCALE = 1000
MAX_WINNERS = 3
MAX_BACKOFF_S = 30.0
ALREADY = {"RewardAlreadySubmitted", "WinnerAlreadyVoted"}


def pick_winners(scores: Mapping[str, Sequence[float]], k: int = MAX_WINNERS) -> list[str]:
    """The ``k`` peer ids with the highest mean reward this round (ties by peer id)."""
    means = {peer: sum(r) / len(r) for peer, r in scores.items() if r}
    return sorted(means, key=lambda peer: (-means[peer], peer))[:k]


def queue_path(config: NodeConfig):
    return config.run.data_dir / "chain" / "submissions.sqlite"


def unlock_node_wallet(config: NodeConfig) -> LocalAccount:
    """The configured wallet, unlocked from the OS keyring or with the passphrase in RL_SWARM_SECRET_PASSPHRASE."""
    from node.wallet import PASSPHRASE_ENV, WalletStore

    store = WalletStore(config.run.data_dir, config.chain.wallet, passphrase=os.environ.get(PASSPHRASE_ENV) or None)
    try:
        return store.unlock()
    except NodeError as exc:
        if exc.code == "locked":
            raise NodeError(
                "the wallet's encrypted key store is locked",
                hint=f"set {PASSPHRASE_ENV} to its passphrase for this node (the app does this after you log in)",
                code="locked",
            ) from None
        raise


class ChainParticipant:
    def __init__(
        self, config: NodeConfig, peer_id: str, bus: EventBus, *, account: LocalAccount | None = None,
        w3: Web3 | None = None,
    ) -> None:
        target = networks.resolve(config.chain)
        assert target is not None and target.coordinator is not None
        self.target = target
        self.settings = config.chain
        self.peer_id = peer_id
        self.bus = bus
        self.account = account or unlock_node_wallet(config)
        self.client = CoordinatorClient(target, self.account, w3=w3)
        self.queue = SubmissionQueue(queue_path(config))
        self.coordinator = target.coordinator
        self._enabled = config.chain.submit
        self._chain_round: int | None = None
        self._block: int | None = None
        self._chain_id: int | None = None
        self._connected = False
        self._registered: bool | None = None
        self._message = ""
        self._last_status: tuple | None = None
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------------------------- used by the runner
    def start(self) -> list[str]:
        """Check the chain, queue the registration, start the worker; returns the coordinator's bootnodes.

        Only a wrong chain id stops the node: an unreachable RPC is retried in the background.
        """
        bootnodes: list[str] = []
        try:
            self._chain_id = self.client.chain_id()
            owner = self.client.owner_of(self.peer_id)
            self._chain_round = self.client.current_round()
            if self.settings.use_bootnodes:
                bootnodes = self.client.bootnodes()
            self._connected = True
        except NodeError as exc:
            if exc.code == "wrong_chain":
                raise
            self._warn(f"the chain is not reachable now, training goes on and submissions wait: {exc.message}")
        else:
            if owner is not None and owner != self.account.address:
                self._foreign_identity(owner)
            self._registered = owner == self.account.address
        if self._enabled:
            self.queue.add(self.coordinator, self.peer_id, "register", NO_ROUND, {})
        self._emit_status()
        self._thread = threading.Thread(target=self._work, name="chain-worker", daemon=True)
        self._thread.start()
        return bootnodes

    def chain_round(self) -> int | None:
        """The chain's round as last seen (never blocks)."""
        return self._chain_round

    def round_finished(self, chain_round: int | None, own_rewards: Sequence[float], scores: Mapping[str, Sequence[float]]) -> None:
        """Queue this round's reward and winners for ``chain_round`` (the chain round the training round began in)."""
        if not self._enabled or chain_round is None:
            return
        reward = round(sum(own_rewards) / len(own_rewards) * REWARD_SCALE) if own_rewards else 0
        self.queue.add(self.coordinator, self.peer_id, "reward", chain_round, {"reward": reward})
        winners = pick_winners(scores)
        if winners:
            self.queue.add(self.coordinator, self.peer_id, "winners", chain_round, {"winners": winners})
        self._wake.set()

    def stop(self, grace_s: float = 10.0) -> None:
        """Give queued submissions ``grace_s`` to go out; what is left is delivered after the next start."""
        deadline = time.monotonic() + grace_s
        while (
            self._connected and self._enabled and time.monotonic() < deadline
            and self.queue.pending_count(self.coordinator, self.peer_id) > 0
        ):
            self._wake.set()
            time.sleep(0.2)
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(self.target.timeout_s * 3 + 5)
        self.queue.close()

    # ------------------------------------------------------------------------------------------------- worker
    def _work(self) -> None:
        backoff = 0.0
        next_poll = 0.0
        while not self._stop.is_set():
            if time.monotonic() >= next_poll:
                self._poll()
                next_poll = time.monotonic() + self.settings.poll_interval_s
            item = self.queue.next_pending(self.coordinator, self.peer_id) if self._enabled and self._connected else None
            if item is not None:
                if self._deliver(item):
                    backoff = 0.0
                    continue
                backoff = min(max(1.0, backoff * 2), MAX_BACKOFF_S)
                next_poll = time.monotonic() + backoff  # the next poll tells when the RPC is back
                self._stop.wait(backoff)
                continue
            self._wake.wait(max(0.0, next_poll - time.monotonic()))
            self._wake.clear()

    def _poll(self) -> None:
        try:
            if self._chain_id is None:
                self._chain_id = self.client.chain_id()
            self._chain_round = self.client.current_round()
            self._block = int(self.client.w3.eth.block_number)
            self._connected, self._message = True, ""
        except NodeError as exc:
            self._connected, self._message = False, exc.message
        except Exception as exc:  # noqa: BLE001 - block_number goes to the RPC directly
            self._connected, self._message = False, f"the RPC failed: {exc}"[:300]
        self._emit_status()

    def _deliver(self, item: Submission) -> bool:
        """Try one submission; False when it must be retried later (RPC or fee trouble)."""
        try:
            if item.attempts > 0 and self._already_on_chain(item):
                self._finish(item, "already_on_chain", None, "found on chain (an earlier attempt went through)")
                return True
            item = self.queue.begin(item)
            result = self._send(item)
        except ChainRevert as exc:
            if exc.error in ALREADY:
                self._finish(item, "already_on_chain", None, exc.message)
            else:
                self._finish(item, "failed", None, str(exc))
                if exc.error == "PeerIdAlreadyRegistered":
                    self._foreign_identity(None)
            return True
        except NodeError as exc:
            if exc.code == "wrong_chain":
                self._enabled = False
                self._warn(str(exc))
            self.queue.retry_later(item, exc.message)
            if item.attempts <= 1:  # tell once per submission, not on every retry
                self.bus.emit(ChainTransaction(action=item.kind, round=_round(item), status="retrying", message=exc.message))
            self._connected = False
            return False
        if item.kind == "register":
            self._registered = True
        tx_hash = result.tx_hash if result else None
        self._finish(item, "delivered" if result else "already_on_chain", tx_hash, "")
        return True

    def _send(self, item: Submission):
        if item.kind == "register":
            return self.client.register_peer(self.peer_id)
        if item.kind == "reward":
            return self.client.submit_reward(item.round, int(item.payload["reward"]), self.peer_id)
        candidates = [str(w) for w in item.payload["winners"]]
        registered = [w for w, owner in zip(candidates, self.client.owners(candidates), strict=True) if owner]
        if not registered:
            raise ChainRevert("InvalidVote", f"submit the winners of round {item.round} (none is registered)")
        return self.client.submit_winners(item.round, registered, self.peer_id)

    def _already_on_chain(self, item: Submission) -> bool:
        if item.kind == "register":
            return self.client.owner_of(self.peer_id) == self.account.address
        if item.kind == "reward":
            return self.client.reward_submitted(item.round)
        return self.client.winners_submitted(item.round, self.peer_id)

    def _finish(self, item: Submission, status, tx_hash: str | None, message: str) -> None:
        self.queue.finish(item, status, tx_hash=tx_hash, message=message)
        self.bus.emit(ChainTransaction(
            action=item.kind, round=_round(item), status=status, tx_hash=tx_hash,
            explorer_url=self.target.tx_url(tx_hash) if tx_hash else None, message=message,
        ))
        self._emit_status()

    def _foreign_identity(self, owner: str | None) -> None:
        self._enabled = False
        self._registered = False
        message, hint = ERROR_MESSAGES["PeerIdAlreadyRegistered"]
        who = f" ({owner})" if owner else ""
        self.bus.emit(NodeFailed(
            message=f"{message}{who}; training goes on, but nothing is submitted to the chain", hint=hint, fatal=False,
        ))

    def _warn(self, message: str) -> None:
        log.warning("%s", message)
        self.bus.emit(NodeFailed(message=message, hint="check the RPC URL and your connection", fatal=False))

    def _emit_status(self) -> None:
        pending = self.queue.pending_count(self.coordinator, self.peer_id)
        state = (self._connected, self._chain_id, self._chain_round, self._registered, pending, self._message)
        if state == self._last_status:
            return
        self._last_status = state
        self.bus.emit(ChainStatus(
            network=self.target.network, rpc_url=self.target.rpc_url, coordinator=self.coordinator,
            address=self.account.address, connected=self._connected, chain_id=self._chain_id,
            block_number=self._block, chain_round=self._chain_round, registered=self._registered,
            pending_submissions=pending, message=self._message,
        ))


def _round(item: Submission) -> int | None:
    return None if item.round == NO_ROUND else item.round
