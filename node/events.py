"""Typed events: the only way the node reports to the outside world.

Subscribers get them through :class:`EventBus` callbacks (in-process, e.g. the demo table or a test) or as a
JSON-lines stream (one object per line, ``{"kind": ..., ...}``) that a separate process such as the desktop app
reads and turns back into the same dataclasses with :func:`event_from_json`.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import IO, Any, ClassVar, Literal

from node.clock import DEFAULT_EPOCH, DEFAULT_ROUND_SECONDS

log = logging.getLogger(__name__)

NodeState = Literal["starting", "training", "waiting_for_peers", "paused", "stopping", "stopped", "error"]


@dataclass(frozen=True, kw_only=True)
class Event:
    kind: ClassVar[str] = "event"
    time: float = field(default_factory=time.time)

    def to_json(self) -> str:
        return json.dumps({"kind": self.kind, **dataclasses.asdict(self)}, separators=(",", ":"))


@dataclass(frozen=True, kw_only=True)
class NodeStarted(Event):
    kind: ClassVar[str] = "node_started"
    peer_id: str
    peer_name: str
    swarm_name: str
    invite: list[str]
    model: str
    device: str
    hardware: dict[str, Any]
    run_dir: str
    resumed_from_round: int | None
    game: str = "sapo"  # the game the swarm plays (node.config.GAMES); invites carry it
    swarm_epoch: float = DEFAULT_EPOCH  # the swarm's clock (node.clock); invites carry it
    round_seconds: float = DEFAULT_ROUND_SECONDS


@dataclass(frozen=True, kw_only=True)
class StateChanged(Event):
    kind: ClassVar[str] = "state_changed"
    state: NodeState
    detail: str = ""


@dataclass(frozen=True, kw_only=True)
class RoundFinished(Event):
    """Everything measured in one round; also the row persisted in the run's metrics.jsonl."""

    kind: ClassVar[str] = "round_finished"
    round: int
    rounds_trained: int
    reward_local: float
    reward_external: float | None
    reward_train: float
    loss: float
    kl: float | None
    completion_length: float
    tokens_generated: int
    generation_tokens_per_s: float
    seconds_generate: float
    seconds_share: float
    seconds_gather: float
    seconds_train: float
    seconds_total: float
    peers_seen: int
    groups_shared: int
    groups_received: int
    groups_used: int
    groups_zero_advantage: int
    groups_rejected: int
    rejected_reasons: dict[str, int]
    # Peer groups come from a buffer filled in the background (node.sapo.peer_buffer), so a round may train on groups
    # that arrived before it. groups_received: groups verified since the previous round; groups_zero_advantage (all
    # rewards equal) and groups_rejected: their fates, plus groups refused when taken; groups_not_needed: usable
    # groups that left the buffer unused (too old, or pushed out by its bounds). Over a run, received = used +
    # zero_advantage + rejected + not_needed + what is still buffered.
    groups_not_needed: int = 0
    # How fresh the peer groups trained on were: age in swarm rounds (node.clock) and in seconds since their peer
    # published them (as our feed first saw them announced); None when no peer group was trained on.
    peer_group_age_rounds_mean: float | None = None
    peer_group_age_rounds_max: int | None = None
    peer_group_age_s_mean: float | None = None
    peer_group_age_s_max: float | None = None
    external_groups_wanted: int = 0  # J: the round filled its slots when groups_used == external_groups_wanted
    peer_groups_buffered: int = 0  # usable peer groups left in the buffer for later rounds
    # Signals that move while the model learns (GRPO's loss is ~0 by construction with one iteration and beta=0).
    wellformed_rate: float = 0.0  # share of local completions with one complete <answer> block
    accuracy_local: float = 0.0  # share of local completions whose answer is exactly right
    groups_with_spread: float = 0.0  # share of trained groups whose rewards differ (the ones that give a gradient)
    mean_abs_advantage: float = 0.0
    grad_norm: float | None = None
    entropy: float | None = None  # the policy's mean token entropy on the completions of groups with reward spread
    update_skipped: bool = False  # no trained group had reward spread: no forward/backward was run
    difficulty: dict[str, int] = field(default_factory=dict)  # curriculum level per task family
    # The game played: "sapo", or "multistage" (answer, critique, revise; see node.game), whose rounds also report
    # the mean reward of each stage played ("answer", "critique", "revise"; a stage not played is absent) and the
    # share of exactly right answers: "answer" (this node's first answers), "revise" (its revised answers),
    # "swarm_final" (questions where the plurality of all final answers seen, peers' and ours, is right).
    game: str = "sapo"
    stage_rewards: dict[str, float] = field(default_factory=dict)
    stage_accuracy: dict[str, float] = field(default_factory=dict)
    # With a chain: how many of groups_used came from peers registered on its coordinator (picked first).
    groups_from_registered: int | None = None
    # What the swarm gave this round (node.sapo.scoring.peer_signal; None in the game and in runs older than these
    # figures): groups of the update with reward spread, ours and peers', and of the peers' ones those on a task family
    # that this round's own groups drew and got no spread from (every answer of ours scored the same there).
    local_groups_with_spread: int | None = None
    peer_groups_with_spread: int | None = None
    peer_groups_spread_we_lacked: int | None = None


@dataclass(frozen=True, kw_only=True)
class RolloutSample(Event):
    """One completion of the round, for the app's gossip view."""

    kind: ClassVar[str] = "rollout_sample"
    round: int
    source_peer: str
    source_name: str
    local: bool
    family: str
    question: str
    completion: str
    reward: float
    expected: str | None = None  # our own regenerated ground truth (never taken from a peer)
    reason: str = ""  # why it scored what it did: correct, wrong_value, partial_credit, no_answer_block, cut_at_token_limit
    # what became of the group (node.sapo.scoring): trained, no_signal (in the update, all rewards equal),
    # update_skipped (no group of the round had reward spread), dropped_equal_rewards, not_needed, rejected:<reason>;
    # the game's peer items: shown, scored, unreadable
    fate: str = "trained"
    group_rewards: list[float] = field(default_factory=list)
    stage: str = ""  # multistage game: "answer", "critique" or "revise" (empty for SAPO)


@dataclass(frozen=True, kw_only=True)
class RoundProgress(Event):
    """Where the current round is, for a progress bar; ``total`` 0 means no count is known."""

    kind: ClassVar[str] = "round_progress"
    round: int
    phase: Literal["loading_model", "generating", "sharing", "waiting_for_peers", "training", "checkpoint", "evaluating"]
    done: int = 0
    total: int = 0
    detail: str = ""


@dataclass(frozen=True, kw_only=True)
class EvalFinished(Event):
    """Held-out evaluation on unseen tasks (a seed space disjoint from training), run at round 0 and every N rounds.

    Exact-match and reasoning-gym's own score are reported apart, so partial credit never passes for accuracy.
    """

    kind: ClassVar[str] = "eval_finished"
    round: int
    rounds_trained: int
    questions: int
    accuracy_greedy: float  # pass@1, greedy decoding, exact match
    exact_mean: float  # mean exact match over the sampled completions per question
    score_mean: float  # mean reasoning-gym score (partial credit included) of the sampled completions
    wellformed_rate: float
    per_family: dict[str, float] = field(default_factory=dict)  # greedy exact accuracy by family
    per_family_questions: dict[str, int] = field(default_factory=dict)  # held-out questions of each family
    seconds: float = 0.0


@dataclass(frozen=True, kw_only=True)
class PeerJoined(Event):
    kind: ClassVar[str] = "peer_joined"
    peer_id: str
    peer_name: str


@dataclass(frozen=True, kw_only=True)
class PeerLeft(Event):
    kind: ClassVar[str] = "peer_left"
    peer_id: str
    peer_name: str


@dataclass(frozen=True, kw_only=True)
class ReachabilityChanged(Event):
    """Whether peers outside this computer's network can reach the node, and how (:mod:`node.swarm.reachability`): sent
    at start, and again when peers' checks change what the node knew."""

    kind: ClassVar[str] = "reachability"
    status: Literal["reachable", "relayed", "unreachable", "unknown"]
    via: Literal["public_address", "port_mapping", "relay", "none"]
    checked: bool  # peers dialed the node back; False: judged from its own addresses (nobody to ask yet)
    public_address: str | None  # the address peers elsewhere see, where known
    addresses: list[str]  # invite addresses that work from outside its network
    local_addresses: list[str]  # invite addresses that only work inside it (a LAN address)
    client_mode: bool  # the node stores no DHT keys for others (it is reached through a relay, or not at all)
    summary: str  # one line for the header
    advice: str  # plain words: what friends outside can and cannot do, and what to do about it


@dataclass(frozen=True, kw_only=True)
class CheckpointSaved(Event):
    kind: ClassVar[str] = "checkpoint_saved"
    round: int
    path: str
    seconds: float
    reason: str = ""  # time, rounds, pause, stop, upload, requested (node.checkpoint_policy)


@dataclass(frozen=True, kw_only=True)
class ErrorReported(Event):
    """A problem the user should see; ``fatal`` ones stop the node."""

    kind: ClassVar[str] = "error"
    message: str
    hint: str = ""
    fatal: bool = False


@dataclass(frozen=True, kw_only=True)
class ChainStatus(Event):
    """The node's view of the on-chain coordinator, sent when it changes."""

    kind: ClassVar[str] = "chain_status"
    network: str
    rpc_url: str
    coordinator: str
    address: str  # this node's wallet
    connected: bool
    chain_id: int | None
    block_number: int | None
    chain_round: int | None
    registered: bool | None  # None: not known yet
    pending_submissions: int
    message: str = ""
    coordinator_version: str = ""  # the detected SwarmCoordinator interface (0.4.2, 0.4.3, 0.5.1, 0.6.0); "" = not yet
    chain_stage: int | None = None  # the stage of chain_round
    stage_count: int | None = None  # stages per round on this coordinator


@dataclass(frozen=True, kw_only=True)
class ChainTransaction(Event):
    """A queued chain submission that was delivered, found already on chain, failed for good, will be retried, or
    waits for the chain's stage window."""

    kind: ClassVar[str] = "chain_transaction"
    action: Literal["register", "reward", "winners"]
    round: int | None
    # waiting_for_stage: a late reward the coordinator (0.4.2) takes only while the chain is at its stage again
    status: Literal["delivered", "already_on_chain", "refused", "failed", "retrying", "waiting_for_stage"]
    tx_hash: str | None = None
    explorer_url: str | None = None
    message: str = ""
    stage: int | None = None  # the chain stage a reward belongs to


@dataclass(frozen=True, kw_only=True)
class UploadProgress(Event):
    """Bytes of a Hub upload sent so far (at most a few per second)."""

    kind: ClassVar[str] = "upload_progress"
    repo_id: str
    bytes_done: int
    bytes_total: int


@dataclass(frozen=True, kw_only=True)
class UploadFinished(Event):
    kind: ClassVar[str] = "upload_finished"
    repo_id: str
    url: str
    commit: str | None  # None: the repo already held this checkpoint
    round: int
    files_uploaded: int
    bytes_sent: int


@dataclass(frozen=True, kw_only=True)
class UploadFailed(Event):
    """A Hub upload did not happen; the repo is left at its previous commit and training goes on."""

    kind: ClassVar[str] = "upload_failed"
    repo_id: str
    message: str
    hint: str = ""
    code: str = "error"


@dataclass(frozen=True, kw_only=True)
class ResourceLimitChanged(Event):
    """Training was slowed down or paused by the schedule or by heat, or runs at full speed again (node.governor)."""

    kind: ClassVar[str] = "resource_limit"
    reason: str  # "schedule", "heat", "schedule and heat"; "" = no limit
    threads: int | None  # CPU threads now; None = the configured ones
    paused: bool
    until: float | None  # unix time the schedule's limit changes; None = not known / not by schedule
    summary: str  # one line for the header: "slowed down by schedule until 18:00 (1 thread)"; "" = full speed


@dataclass(frozen=True, kw_only=True)
class TemperaturesRead(Event):
    """The CPU and GPU temperatures the node could read (sent when they change by a degree or more)."""

    kind: ClassVar[str] = "temperatures"
    celsius: dict[str, float]  # "cpu", "gpu0", ... ; empty when nothing is readable
    note: str = ""  # why nothing is readable, in plain words
    hot: bool = False  # above the configured limit (until it cools below the resume temperature)


EVENT_TYPES: dict[str, type[Event]] = {
    cls.kind: cls
    for cls in (
        NodeStarted, StateChanged, RoundFinished, RolloutSample, RoundProgress, EvalFinished, PeerJoined, PeerLeft, CheckpointSaved, ErrorReported,
        ReachabilityChanged, ChainStatus, ChainTransaction,
        UploadProgress, UploadFinished, UploadFailed, ResourceLimitChanged, TemperaturesRead,
    )
}


class EventDecodeError(ValueError):
    """A line of the event stream that is not a usable event; ``reason`` says which way it is not."""

    def __init__(self, reason: Literal["not_json", "unknown_kind", "missing_fields"], message: str) -> None:
        super().__init__(message)
        self.reason = reason


def decode_event(line: str) -> tuple[Event, list[str]]:
    """Parse one line of the event stream into its event and the names of fields this version does not know.

    Unknown fields are dropped (a newer node may add some); a line that is not JSON, an unknown kind or a known
    kind missing a required field raises :class:`EventDecodeError` (never ``TypeError``), so a reader that counts
    and skips bad lines survives a version skew between app and node.
    """
    try:
        data = json.loads(line)
    except ValueError:
        raise EventDecodeError("not_json", f"not JSON: {line[:80]!r}") from None
    if not isinstance(data, dict) or data.get("kind") not in EVENT_TYPES:
        raise EventDecodeError("unknown_kind", f"not a known node event: {line[:80]!r}")
    cls = EVENT_TYPES[data.pop("kind")]
    names = {f.name for f in dataclasses.fields(cls)}
    extra = sorted(key for key in data if key not in names)
    try:
        return cls(**{key: value for key, value in data.items() if key in names}), extra
    except TypeError as exc:  # a required field is missing
        raise EventDecodeError("missing_fields", f"{cls.kind}: {exc}") from None


def event_from_json(line: str) -> Event:
    """Parse one line of the event stream; raises :class:`EventDecodeError` (a ValueError) on anything that is
    not a complete known event."""
    return decode_event(line)[0]


Subscriber = Callable[[Event], None]


class EventBus:
    """Fan-out of events to subscribers; a failing subscriber is logged and never breaks the node."""

    def __init__(self) -> None:
        self._subscribers: list[Subscriber] = []
        self._lock = threading.Lock()

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        with self._lock:
            self._subscribers.append(callback)

        def unsubscribe() -> None:
            with self._lock:
                self._subscribers.remove(callback)

        return unsubscribe

    def emit(self, event: Event) -> None:
        with self._lock:
            subscribers = list(self._subscribers)
        for callback in subscribers:
            try:
                callback(event)
            except Exception:
                log.exception("event subscriber %r failed on %s", callback, event.kind)


class JsonLinesWriter:
    """Subscriber that writes each event as one flushed JSON line (for a reading process)."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def __call__(self, event: Event) -> None:
        with self._lock:
            self._stream.write(event.to_json() + "\n")
            self._stream.flush()
