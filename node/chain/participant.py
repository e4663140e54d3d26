"""A node's participation in an on-chain swarm: registration, round clock, bootnodes, reward and winner submissions.

Training never waits for the chain. The round loop only reads a cached chain position and queues submissions; a
background thread polls the chain and delivers the queue (:mod:`node.chain.submissions`), retrying with back-off
while the RPC is down and after restarts.

Nothing is marked failed on a guess. Only a decoded, definitive answer of the contract ends a submission: it went
through (delivered), the check finds it on chain for this peer id (already_on_chain), this wallet does not own
the peer id or the vote is invalid (failed), or, on a 0.4.2 coordinator, which keeps one reward per wallet, round
and stage, the reward events show another node of this wallet got it (refused, with a warning that says so). A
revert without a decisive reason, a check that reverts, or "already submitted" that the check cannot confirm
leave the row pending: it is retried with a growing delay (other rows go on meanwhile) and each retry is reported.

A 0.4.2 coordinator takes a past round's reward only while the chain's stage is at least the reward's (its "stage
window", :mod:`node.chain.versions`): such a late reward, e.g. for a round's last stage sent after the round
ended, is not retried blindly. It waits, reported as ``waiting_for_stage``, and goes out at the first poll that sees
the chain at that stage again; the rows behind it go on meanwhile.

What is submitted, from the first training round this node starts while the chain is at that position:

- reward: once per chain round and stage. A SAPO round is one stage of training, so on a coordinator with 3
  stages per round (0.4.x, 0.5.x) every stage in which this node trained gets its own reward, as the contract
  keys rewards by (round, stage); on 0.6.0 (one stage) that is once per round. The value is the mean reward of
  this node's own completions in that training round, times :data:`REWARD_SCALE` (the contract stores
  integers), so 1000 is the maximum. A round of the multi-stage game trains once per stage: where the coordinator
  has as many stages (0.4.x, 0.5.x), each stage's reward goes to its own chain stage; on 0.6.0 the round's one
  reward is the correctness of its final answers;
- winners: once per chain round (the contract takes one vote per peer and round, at any stage). SAPO has no vote,
  so this node names up to :data:`MAX_WINNERS` peers whose completions scored best by its own verifier that round:
  itself and the peers whose groups it trained on, ranked by mean reward (ties by peer id). Peers not registered
  on the coordinator are left out: our contract refuses them, and a vote for a peer without a wallet says nothing.

Which peers are registered (their peer id maps to a wallet on the coordinator) is looked up by the same thread, in
one batched call per round for the peers gathered, and kept: the round picks their groups first
(:meth:`node.sapo.peer_buffer.PeerGroupBuffer.take`), since a registration costs a wallet and a transaction where a
libp2p identity is free. A peer found unregistered is asked about again in the next chain round.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence

from eth_account.signers.local import LocalAccount
from web3 import Web3

from node.chain import networks, versions
from node.chain.coordinator import ERROR_MESSAGES, ChainRevert, CoordinatorClient
from node.chain.submissions import NO_ROUND, Submission, SubmissionQueue
from node.config import NodeConfig
from node.errors import NodeError
from node.events import ChainStatus, ChainTransaction, EventBus, ErrorReported

log = logging.getLogger(__name__)

REWARD_SCALE = 1000
MAX_WINNERS = 3
MAX_BACKOFF_S = 30.0  # while the RPC is unreachable
UNKNOWN_RETRY_S = 5.0  # first delay of a row whose outcome is unknown; doubles per attempt
MAX_UNKNOWN_RETRY_S = 600.0
REGISTRY_PEERS = 4096  # peers whose registration is kept or queued: bounded whatever a swarm (or a sybil) holds
LOOKUPS_PER_CALL = 256  # peer ids per getEoa call
ALREADY = {"RewardAlreadySubmitted", "WinnerAlreadyVoted"}
# refusals that no retry can change: the identity is another wallet's, the vote or the stage is invalid
FINAL = {"PeerIdAlreadyRegistered", "InvalidVoterPeerId", "InvalidVote", "StageOutOfBounds"}
ONE_REWARD_PER_WALLET_HINT = (
    "this coordinator (0.4.2) keeps one reward per wallet, round and stage: give each node its own wallet, or join "
    "a swarm whose coordinator is 0.4.3 or newer (rewards per peer id)"
)


def pick_winners(scores: Mapping[str, Sequence[float]], k: int = MAX_WINNERS) -> list[str]:
    """The ``k`` peer ids with the highest mean reward this round (ties by peer id)."""
    means = {peer: sum(r) / len(r) for peer, r in scores.items() if r}
    return sorted(means, key=lambda peer: (-means[peer], peer))[:k]


def queue_path(config: NodeConfig):
    return config.run.data_dir / "chain" / "submissions.sqlite"


def unlock_node_wallet(config: NodeConfig) -> LocalAccount:
    """The configured wallet, unlocked from the OS keyring or with the passphrase in RL_SWARM_SECRET_PASSPHRASE."""
    from node.chain.wallet import PASSPHRASE_ENV, WalletStore

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
        self.client = CoordinatorClient(target, self.account, w3=w3,
                                        version=versions.expected(config.chain.coordinator_version))
        self.queue = SubmissionQueue(queue_path(config))
        self.coordinator = target.coordinator
        self._enabled = config.chain.submit
        self._chain_round: int | None = None
        self._chain_stage: int | None = None
        self._slot: tuple[int, int] | None = None  # (round, stage) when the runner last asked: its training round's
        self._block: int | None = None
        self._chain_id: int | None = None
        self._connected = False
        self._registered: bool | None = None
        self._message = ""
        self._last_status: tuple | None = None
        self._told_shared_wallet = False
        self._waiting: set[tuple[int, int]] = set()  # (round, stage) of rewards reported waiting for a stage window
        # peer id -> (registered, the chain round it was looked up in); the ids the worker is to look up
        self._registry: OrderedDict[str, tuple[bool, int | None]] = OrderedDict()
        self._lookups: OrderedDict[str, None] = OrderedDict()
        self._registry_lock = threading.Lock()
        self._stop = threading.Event()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------------------------- used by the runner
    def start(self) -> list[str]:
        """Check the chain, detect the coordinator's version, queue the registration, start the worker; returns
        the coordinator's bootnodes.

        Only a wrong chain id or a contract that is no SwarmCoordinator stops the node: an unreachable RPC is
        retried in the background.
        """
        bootnodes: list[str] = []
        try:
            self._chain_id = self.client.chain_id()
            self.client.detect()
            owner = self.client.owner_of(self.peer_id)
            self._chain_round, self._chain_stage = self.client.position()
            if self.settings.use_bootnodes:
                bootnodes = self.client.bootnodes()
            self._connected = True
        except NodeError as exc:
            if exc.code in ("wrong_chain", "no_contract", "chain_version"):
                raise
            self._warn(f"the chain is not reachable now, training goes on and submissions wait: {exc.message}")
        else:
            if owner is not None and owner != self.account.address:
                self._foreign_identity(owner)
            self._registered = owner == self.account.address
            self._check_shared_wallet()
        if self._enabled:
            self.queue.add(self.coordinator, self.peer_id, "register", NO_ROUND, {})
        self._emit_status()
        self._thread = threading.Thread(target=self._work, name="chain-worker", daemon=True)
        self._thread.start()
        return bootnodes

    def chain_round(self) -> int | None:
        """The chain's round as last seen (never blocks). The runner calls it as a training round begins, so the
        stage seen with it is the stage that training round's reward belongs to (see :meth:`round_finished`)."""
        if self._chain_round is not None:
            self._slot = (self._chain_round, self._chain_stage or 0)
        return self._chain_round

    def registered_peers(self, peer_ids: Iterable[str]) -> set[str]:
        """Those of ``peer_ids`` known to be registered on the coordinator (never blocks). The others are queued for
        the worker, unless one was found unregistered in this chain round already."""
        registered: set[str] = set()
        with self._registry_lock:
            for peer in peer_ids:
                known = self._registry.get(peer)
                if known is not None and known[0]:
                    registered.add(peer)
                    self._registry.move_to_end(peer)
                elif (known is None or known[1] != self._chain_round) and len(self._lookups) < REGISTRY_PEERS:
                    self._lookups[peer] = None
            waiting = bool(self._lookups)
        if waiting:
            self._wake.set()
        return registered

    def chain_position(self) -> tuple[int | None, int | None]:
        """(round, stage) as last seen (never blocks)."""
        return self._chain_round, self._chain_stage

    def stage_count(self) -> int | None:
        """Stages per chain round; None until the coordinator's version is known (the chain not reached yet)."""
        return self.client.stage_count() if self.client.detected is not None else None

    def round_finished(
        self, chain_round: int | None, own_rewards: Sequence[float], scores: Mapping[str, Sequence[float]],
        *, stage: int | None = None, stage_rewards: Mapping[int, Sequence[float]] | None = None,
    ) -> None:
        """Queue this training round's reward for (``chain_round``, ``stage``) and its winners for ``chain_round``:
        the chain position the training round began at. ``stage`` defaults to the stage seen by the
        :meth:`chain_round` call that returned ``chain_round``.

        ``stage_rewards`` (a multi-stage game round: chain stage -> own rewards in it) queue one reward per stage
        instead, where the coordinator has those stages; on one with fewer (or not reached yet, so its stages are
        unknown) ``own_rewards`` is the round's one reward, as the contract refuses a stage it does not have."""
        if not self._enabled or chain_round is None:
            return
        stages = self.stage_count()
        if stage_rewards and stages is not None and max(stage_rewards) < stages:
            for at, rewards in sorted(stage_rewards.items()):
                self._queue_reward(chain_round, at, rewards)
        else:
            if stage is None:
                stage = self._slot[1] if self._slot is not None and self._slot[0] == chain_round else 0
            self._queue_reward(chain_round, stage, own_rewards)
        winners = pick_winners(scores)
        if winners:
            self.queue.add(self.coordinator, self.peer_id, "winners", chain_round, {"winners": winners})
        self._wake.set()

    def _queue_reward(self, chain_round: int, stage: int, own_rewards: Sequence[float]) -> None:
        reward = round(sum(own_rewards) / len(own_rewards) * REWARD_SCALE) if own_rewards else 0
        self.queue.add(self.coordinator, self.peer_id, "reward", chain_round, {"reward": reward}, stage=stage)

    def stop(self, grace_s: float = 10.0) -> None:
        """Give queued submissions ``grace_s`` to go out; what is left is delivered after the next start."""
        deadline = time.monotonic() + grace_s
        while self._connected and self._enabled and time.monotonic() < deadline:
            item = self.queue.next_pending(self.coordinator, self.peer_id, window=self._window())
            if item is None or self._ahead(item):  # a stage the chain has not reached waits for the next start
                break
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
            if self._connected:
                self._look_up_peers()
            window = self._window()
            item = (self.queue.next_pending(self.coordinator, self.peer_id, window=window)
                    if self._enabled and self._connected else None)
            if item is not None and self._ahead(item):
                # A game stage played before the chain got there: the contract refuses it until then (and due rows
                # come in (round, stage) order, so the rest are ahead too). It goes once a poll sees the chain there.
                self._wake.wait(max(0.0, next_poll - time.monotonic()))
                self._wake.clear()
                continue
            if item is not None:
                if self._deliver(item):
                    backoff = 0.0
                    continue
                backoff = min(max(1.0, backoff * 2), MAX_BACKOFF_S)
                next_poll = time.monotonic() + backoff  # the next poll tells when the RPC is back
                self._stop.wait(backoff)
                continue
            wait = next_poll - time.monotonic()
            due = self.queue.next_due(self.coordinator, self.peer_id, window=window) if self._enabled else None
            if due is not None:
                wait = min(wait, due - time.time())
            self._wake.wait(max(0.0, wait))
            self._wake.clear()

    def _ahead(self, item: Submission) -> bool:
        return (
            item.kind == "reward" and self._chain_round is not None
            and (item.round, item.stage) > (self._chain_round, self._chain_stage or 0)
        )

    def _window(self) -> tuple[int, int] | None:
        """The chain's (round, stage) where the coordinator has a stage window (0.4.2) and the position is known."""
        version = self.client.detected
        if version is None or not version.stage_window or self._chain_round is None:
            return None
        return self._chain_round, self._chain_stage or 0

    def _poll(self) -> None:
        try:
            if self._chain_id is None:
                self._chain_id = self.client.chain_id()
            self._chain_round, self._chain_stage = self.client.position()
            self._block = int(self.client.w3.eth.block_number)
            self._connected, self._message = True, ""
            self._check_shared_wallet()
            self._tell_stage_windows()
        except NodeError as exc:
            self._connected, self._message = False, exc.message
        except Exception as exc:  # noqa: BLE001 - block_number goes to the RPC directly
            self._connected, self._message = False, f"the RPC failed: {exc}"[:300]
        self._emit_status()

    def _look_up_peers(self) -> None:
        with self._registry_lock:
            peers = list(self._lookups)[:LOOKUPS_PER_CALL]
        if not peers:
            return
        try:
            owners = self.client.owners(peers)
        except NodeError as exc:
            log.debug("looking up %d peers' registration failed: %s", len(peers), exc.message)
            if not isinstance(exc, ChainRevert):
                self._connected = False  # asked again once a poll reaches the chain
            return
        with self._registry_lock:
            for peer, owner in zip(peers, owners, strict=True):
                self._lookups.pop(peer, None)
                self._registry[peer] = (owner is not None, self._chain_round)
                self._registry.move_to_end(peer)
            while len(self._registry) > REGISTRY_PEERS:
                self._registry.popitem(last=False)

    def _deliver(self, item: Submission) -> bool:
        """Try one submission; False when the RPC failed (the worker backs off); True when the row was settled or
        set aside for a later retry."""
        try:
            try:
                if item.attempts > 0:  # an earlier attempt may have gone through: look before sending again
                    found = self._on_chain(item)
                    if found is not None:
                        self._settle_found(item, found, "found on chain (an earlier attempt went through)")
                        return True
                item = self.queue.begin(item)
                result = self._send(item)
            except ChainRevert as exc:
                self._refused(item, exc)  # may check the chain again, and so fail like any RPC call
                return True
        except NodeError as exc:
            if exc.code == "wrong_chain":
                self._enabled = False
                self._warn(str(exc))
            self.queue.retry_later(item, exc.message)
            if item.attempts <= 1:  # tell once per submission, not on every retry
                self._report(item, "retrying", exc.message)
            self._connected = False
            return False
        if item.kind == "register":
            self._registered = True
        tx_hash = result.tx_hash if result else None
        self._finish(item, "delivered" if result else "already_on_chain", tx_hash, "")
        return True

    def _refused(self, item: Submission, exc: ChainRevert) -> None:
        """Settle a refused submission only on a definitive answer; anything else is unknown and retried."""
        if exc.error in ALREADY:
            try:
                found = self._on_chain(item)
            except ChainRevert as check:
                self._unknown(item, f"{exc.message}, but checking it reverted ({check.message})")
                return
            if found is None:
                self._unknown(item, f"{exc.message}, but the check does not find it for {self.peer_id}")
            else:
                self._settle_found(item, found, exc.message)
        elif exc.error == "InvalidStageNumber" and self._left_the_window(item):
            return  # not a blind retry: reported waiting by that poll, it goes once one sees the chain at its stage
        elif exc.error in FINAL:
            self._finish(item, "failed", None, str(exc))
            if exc.error == "PeerIdAlreadyRegistered":
                self._foreign_identity(None)
        else:
            self._unknown(item, str(exc))

    def _tell_stage_windows(self) -> None:
        """Say once of each late reward that it waits for the chain's stage (the queue's row says it too)."""
        window = self._window()
        if window is None or not self._enabled:
            return
        for item in self.queue.outside_window(self.coordinator, self.peer_id, window):
            if (item.round, item.stage) in self._waiting:
                continue
            self._waiting.add((item.round, item.stage))
            stages = self.stage_count()
            message = (f"waits for the stage window: this {self.client.version.name} coordinator takes a past round's "
                       f"stage {item.stage + 1} reward only while the chain is at stage {item.stage + 1}"
                       + (f" of {stages}" if stages else "") + "; it is sent then")
            log.info("reward %s: %s", _where(item), message)
            self.queue.retry_later(item, message)
            self._report(item, "waiting_for_stage", message)

    def _unknown(self, item: Submission, message: str) -> None:
        delay = min(MAX_UNKNOWN_RETRY_S, UNKNOWN_RETRY_S * 2 ** min(item.attempts, 10))
        message = f"outcome unknown, retried in {delay:.0f} s: {message}"
        log.warning("%s %s: %s", item.kind, _where(item), message)
        self.queue.retry_later(item, message, delay)
        self._report(item, "retrying", message)

    def _left_the_window(self, item: Submission) -> bool:
        """After InvalidStageNumber: whether the chain moved on past this reward's stage window since the last
        poll (read again now). Anything else, e.g. a refusal while the chain is at the stage, stays unknown."""
        if item.kind != "reward" or self._window() is None:
            return False
        self._waiting.discard((item.round, item.stage))  # said again: it waits once more
        self._poll()
        window = self._window()
        return window is not None and item.round < window[0] and item.stage > window[1]

    def _send(self, item: Submission):
        if item.kind == "register":
            return self.client.register_peer(self.peer_id)
        if item.kind == "reward":
            return self.client.submit_reward(item.round, int(item.payload["reward"]), self.peer_id, stage=item.stage)
        candidates = [str(w) for w in item.payload["winners"]]
        registered = [w for w, owner in zip(candidates, self.client.owners(candidates), strict=True) if owner]
        if not registered:
            raise ChainRevert("InvalidVote", f"submit the winners of round {item.round} (none is registered)")
        return self.client.submit_winners(item.round, registered, self.peer_id)

    def _on_chain(self, item: Submission) -> str | None:
        """Whose submission the chain holds for this row: this peer id's, another peer id's (only on a coordinator
        that keys rewards per wallet), or None when there is none. Raises ChainRevert when a check reverts."""
        if item.kind == "register":
            return self.peer_id if self.client.owner_of(self.peer_id) == self.account.address else None
        if item.kind == "winners":
            return self.peer_id if self.client.winners_submitted(item.round, self.peer_id) else None
        if self.client.version.rewards_per_peer:
            return self.peer_id if self.client.reward_submitted(item.round, item.stage, self.peer_id) else None
        if not self.client.reward_submitted(item.round, item.stage):
            return None
        submitters = self.client.reward_submitters(item.round, item.stage)
        if self.peer_id in submitters or not submitters:
            return self.peer_id if submitters else None
        return submitters[0]

    def _settle_found(self, item: Submission, owner_peer: str, message: str) -> None:
        if owner_peer == self.peer_id:
            self._finish(item, "already_on_chain", None, message)
            return
        text = (f"not rewarded: the coordinator keeps one reward per wallet for round {item.round}, stage "
                f"{item.stage}, and this wallet's other node {owner_peer} submitted it")
        self._finish(item, "refused", None, text)
        self._shared_wallet_warning([owner_peer])

    def _check_shared_wallet(self) -> None:
        """On a coordinator that keeps one reward per wallet, say so when this wallet runs other registered peers."""
        if self._told_shared_wallet or self.client.detected is None or self.client.version.rewards_per_peer:
            return
        others = [p for p in self.client.peer_ids_of(self.account.address) if p != self.peer_id]
        if others:
            self._shared_wallet_warning(others)

    def _shared_wallet_warning(self, others: list[str]) -> None:
        if self._told_shared_wallet:
            return
        self._told_shared_wallet = True
        message = (f"this wallet also runs peer {', '.join(others)} on this coordinator, which takes one reward per "
                   "wallet, round and stage: only the first of your nodes to submit is rewarded each stage")
        log.warning("%s", message)
        self.bus.emit(ErrorReported(message=message, hint=ONE_REWARD_PER_WALLET_HINT, fatal=False))

    def _finish(self, item: Submission, status, tx_hash: str | None, message: str) -> None:
        self.queue.finish(item, status, tx_hash=tx_hash, message=message)
        self._waiting.discard((item.round, item.stage))
        self._report(item, status, message, tx_hash)
        self._emit_status()

    def _report(self, item: Submission, status, message: str, tx_hash: str | None = None) -> None:
        self.bus.emit(ChainTransaction(
            action=item.kind, round=_round(item), status=status, tx_hash=tx_hash,
            explorer_url=self.target.tx_url(tx_hash) if tx_hash else None, message=message,
            stage=item.stage if item.kind == "reward" else None,
        ))

    def _foreign_identity(self, owner: str | None) -> None:
        self._enabled = False
        self._registered = False
        message, hint = ERROR_MESSAGES["PeerIdAlreadyRegistered"]
        who = f" ({owner})" if owner else ""
        self.bus.emit(ErrorReported(
            message=f"{message}{who}; training goes on, but nothing is submitted to the chain", hint=hint, fatal=False,
        ))

    def _warn(self, message: str) -> None:
        log.warning("%s", message)
        self.bus.emit(ErrorReported(message=message, hint="check the RPC URL and your connection", fatal=False))

    def _emit_status(self) -> None:
        pending = self.queue.pending_count(self.coordinator, self.peer_id)
        version = self.client.detected
        stages = self.stage_count()
        state = (self._connected, self._chain_id, self._chain_round, self._chain_stage, self._registered, pending,
                 self._message, version)
        if state == self._last_status:
            return
        self._last_status = state
        self.bus.emit(ChainStatus(
            network=self.target.network, rpc_url=self.target.rpc_url, coordinator=self.coordinator,
            address=self.account.address, connected=self._connected, chain_id=self._chain_id,
            block_number=self._block, chain_round=self._chain_round, registered=self._registered,
            pending_submissions=pending, message=self._message,
            coordinator_version=version.name if version else "", chain_stage=self._chain_stage, stage_count=stages,
        ))


def _round(item: Submission) -> int | None:
    return None if item.round == NO_ROUND else item.round


def _where(item: Submission) -> str:
    if item.kind == "register":
        return ""
    return f"round {item.round}" + (f", stage {item.stage}" if item.kind == "reward" else "")
