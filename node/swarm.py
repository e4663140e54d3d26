"""Sharing rollouts with the swarm over hivemind's DHT, at a cost per node that does not grow with the swarm.

Why we do not use ``hivemind.DHT``: it runs a ``DHTNode`` in a forked child process and talks to it through an
``mp.Pipe``. Under uvloop the child's end of that pipe is non-blocking, so any call whose pickled arguments exceed
~16 KiB makes the child's ``recv()`` raise; the child's loop dies and the caller blocks forever. Instead we run
``hivemind.dht.node.DHTNode`` directly, on our own asyncio loop in a daemon thread of the node process. Public methods
are synchronous: each submits a coroutine to that loop and waits with a timeout, so a stuck network can delay the
caller by at most ``call_timeout`` (counted in :attr:`DhtExchange.timeouts`), never hang it.

Layout (protocol v2) for a swarm ``S`` with ``D`` directory shards; a peer's shard is a hash of its peer id:

* ``S/v2/D/g/<round>/<peer>/<i>``: group ``i`` of that peer's round (:class:`node.records.GroupRecord`), one entry.
* ``S/v2/D/d/<round>/<shard>``: the directory: one small signed :class:`node.records.Pointer` per peer of the shard.
* ``S/v2/D/c/<shard>``: the round clock: the last round each peer of the shard announced.

A gathering node reads a few directory shards (a uniform sample of the peers that published, since shards are
hashes), picks J peers uniformly (those claiming groups with reward spread first) and fetches ONE group of each: a
round costs it J groups plus a few pointers, whatever the swarm size. The clock follows a round only when a quorum
of recently active peers (each with a pointer in the directory at or just before the round it announces) announced
it, at most ``max_round_jump`` ahead (:mod:`node.clock`).

Every entry's subkey is ``[owner:<ssh-rsa key>]|<kind>/<numbers>``: ``RSASignatureValidator`` signs it with our key
and checks every signature, and :class:`SwarmValidator` rebuilds the entry's DHT key from the subkey, the owner's
peer id and the swarm name, so an honest node stores and accepts only the swarm's own keys, one entry per signer
per key, with the record shape that key holds and an expiry at most ``MAX_ENTRY_TTL_S`` ahead.
:class:`node.dht_storage.BoundedStorage` caps the bytes a node stores and caches, per signer, per network address
group and per key, so that no response (and no push of our storage to a newcomer) can exceed the message cap and no
identities minted on one machine can fill it.

The p2pd daemon is a child process of the node: :meth:`DhtExchange.shutdown` (also run at exit) stops it, killing it if it
does not stop in time, so no daemon or unix socket under /tmp outlives the node.
"""

from __future__ import annotations

import asyncio
import atexit
import dataclasses
import hashlib
import ipaddress
import json
import logging
import math
import random
import re
import socket
import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Coroutine, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import msgpack
import psutil
from cryptography.exceptions import UnsupportedAlgorithm
from hivemind.dht.crypto import RSASignatureValidator
from hivemind.dht.node import DHTNode
from hivemind.dht.protocol import ValidationError
from hivemind.dht.routing import DHTID
from hivemind.dht.validation import CompositeValidator, DHTRecord, RecordValidatorBase
from hivemind.p2p import P2P, PeerID
from hivemind.utils.crypto import RSAPublicKey
from hivemind.utils.multiaddr import Multiaddr
from hivemind.utils.timed_storage import ValueWithExpiration, get_dht_time

from node.clock import ClockPolicy, follow_round
from node.dht_storage import MAX_ENTRIES_PER_KEY, SENDER_GROUP, BoundedStorage, rounds_near
from node.errors import NodeError
from node.game.records import decode_stage_record
from node.identity import Identity, acceptable_key_size, peer_id_from_public_key
from node.peer_addresses import UNKNOWN, AddressBook
from node.records import (
    MAX_GROUP_RECORD_BYTES, MAX_ROUND, GroupRecord, Pointer, RecordRejected, RoundRecord,
    admission_key, decode_group_record, decode_pointer, encode_group_record, encode_pointer, seal_entry, unseal_entry,
)

logger = logging.getLogger(__name__)

T = TypeVar("T")

PROTOCOL = "v2"
MAX_ENTRY_TTL_S = 3600.0  # no entry lives longer, whatever its signer asks for
_CLOCK_SKEW_S = 60.0
MAX_GAME_POSITION = 3 * MAX_ROUND + 2  # the multi-stage game's clock value of round MAX_ROUND's third stage
READ_REPLICAS = 3  # replicas of a directory or clock shard merged by one read (each entry is stored on 5)
_MAX_READ_WORKERS = 32  # requests in flight for one read (the game reads up to 256 keys at once)
# Shards a directory or clock read starts with: this many before the swarm's density is known, at most this many
# after (what a read doubling from 4 reads in two steps), so a wrong estimate costs a bounded read
_FIRST_READ_SHARDS = (4, 12)
# Bounds on what one node keeps: storage + cache stay below the message cap, so neither a lookup response nor
# hivemind's push of our storage to a newcomer can exceed it (an oversized message drops the peer from routing).
_MAX_MESSAGE_BYTES = 64 * 1024**2
STORAGE_BYTES = 32 * 1024**2
CACHE_BYTES = 16 * 1024**2
# The entry kinds each game writes: a swarm stores and reads no other (no stage records in a SAPO swarm)
GAME_KINDS = {"sapo": frozenset("gdc"), "multistage": frozenset("sp")}
_OWNER_RE = re.compile(rb"(\[owner:(.+?)\])\|([a-z])/([0-9/]{1,40})")
# RSASignatureValidator appends "[signature:...]" to values and refuses a value holding two of them
_SIGNATURE_MARKER = b"[signature:"
_SIGNATURE_BYTES = 356  # "[signature:" + base64 of a 2048-bit RSA signature + "]"
# p2pd's control sockets (hivemind's P2P._UNIX_SOCKET_PREFIX); a daemon that fails to start leaves its own behind
_SOCKET_DIR, _SOCKET_GLOB = Path("/tmp"), "hivemind-*.sock"
_RPCS_PER_CALL = 3  # a single unanswered RPC may cost a third of call_timeout, so the call still completes
_ROUNDS_KEPT = 4  # gather state of this many recent rounds
# Directory reads of one round, in shards: one full pass, then one shard a call, in turn, so a peer still generating
# when we first looked is found on a later pass within the gather deadline. Each read is at most one shard's entries.
DIRECTORY_READS_PER_SHARD = 6
_STRIKES_BEFORE_BACKOFF = 2
_BACKOFF_S = (60.0, 3600.0)  # first and longest time a repeatedly rejected peer is ignored
_REBOOTSTRAP_EVERY_S = 15.0
CLOCK_SAMPLE = 32  # announcing peers a clock read looks for before it stops reading shards
_MAX_CLOCK_CHECKS = 16  # supporters of a clock jump whose activity we check, at most (sampled)
_INVITE_HINT = "An invite looks like /ip4/203.0.113.7/tcp/38211/p2p/QmPeerId...: copy it whole from the inviting node."
_JOIN_HINT = (
    "Check that the inviting node is running and that the invite is copied whole. If it runs on another machine, "
    "use an address of that machine you can reach (not its 127.0.0.1) and make sure its firewall or router lets "
    "the TCP port in the invite through."
)


@dataclasses.dataclass(frozen=True)
class GatherResult:
    records: tuple[RoundRecord, ...]  # one group per sampled peer (other peers only), sorted by peer id
    rejected: Counter[str]  # reason -> count: RecordRejected reasons, "peer_mismatch", "backoff", ...
    peers: frozenset[str]  # other peers that published and that we sampled (fetched or tried) for that round
    published: int = 0  # other peers found in the directory shards read (a sample of those that published)
    exhausted: bool = False  # this round's fetch budget is spent


@dataclasses.dataclass
class _RoundGather:
    """What we know and fetched of one round: bounded by the shards read and the fetch budget."""

    pool: dict[str, Pointer] = dataclasses.field(default_factory=dict)
    shards_read: set[int] = dataclasses.field(default_factory=set)
    reread: list[int] = dataclasses.field(default_factory=list)  # shards due for a second look, in turn
    directory_reads: int = 0
    fetched: dict[str, GroupRecord] = dataclasses.field(default_factory=dict)
    tried: set[str] = dataclasses.field(default_factory=set)
    fetches: int = 0
    bytes: int = 0
    rejected: Counter[str] = dataclasses.field(default_factory=Counter)


def shard_of(peer_id: str, shards: int) -> int:
    return int.from_bytes(hashlib.sha256(peer_id.encode()).digest()[:8], "big") % shards


class DhtExchange:
    """The rollout exchange of :mod:`node.exchange` over hivemind's DHT: this node's membership in one swarm, which
    publishes and gathers round records (the in-memory exchange is the same interface without a network)."""

    def __init__(
        self,
        identity: Identity,
        *,
        swarm_name: str,
        initial_peers: Sequence[str] = (),
        host: str = "0.0.0.0",
        port: int = 0,
        record_ttl: float = 600.0,
        call_timeout: float = 10.0,
        start_timeout: float = 60.0,
        groups_wanted: int = 8,
        max_fetches_per_round: int | None = None,
        directory_shards: int = 8,
        clock: ClockPolicy = ClockPolicy(),
        admission_secret: str | None = None,
        storage_bytes: int = STORAGE_BYTES,
        cache_bytes: int = CACHE_BYTES,
        client_mode: bool = False,
        game: str = "sapo",
        address_prefixes: tuple[int, int] = (24, 48),
        round_window: Callable[[int], tuple[int, int]] = rounds_near,
    ) -> None:
        self._identity = identity
        self._swarm_name = swarm_name
        self._initial_peers = tuple(initial_peers)
        self._host, self._port = host, port
        self._record_ttl = min(record_ttl, MAX_ENTRY_TTL_S)
        self._call_timeout = call_timeout
        self._start_timeout = start_timeout
        self._wanted = max(0, groups_wanted)
        self._max_fetches = max_fetches_per_round if max_fetches_per_round is not None else 3 * max(1, self._wanted)
        self._max_fetch_bytes = self._max_fetches * MAX_GROUP_RECORD_BYTES
        self._shards = directory_shards
        self._clock = clock
        self._admission = admission_key(admission_secret) if admission_secret else None
        self._storage_bytes, self._cache_bytes = storage_bytes, cache_bytes
        self._client_mode = client_mode
        self._kinds = GAME_KINDS[game]
        self._address_prefixes = address_prefixes
        self._addresses: AddressBook | None = None
        self._round_window = round_window
        self._current_round: int | None = None  # the round we play: others' entries are stored only near it
        self._registered: Callable[[Iterable[str]], set[str]] = lambda peers: set()
        self._namespace = f"{swarm_name}/{PROTOCOL}/{directory_shards}"

        self._signer = RSASignatureValidator(identity.private_key)
        self._owner = self._signer.local_public_key
        self._rng = random.Random()

        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._p2p: P2P | None = None
        self._node: DHTNode | None = None
        self._daemon: psutil.Process | None = None
        self._invite: list[str] = []
        self._sockets_before: set[Path] = set()
        self._seen: dict[str, float] = {}  # peer id -> expiration of its latest entry we saw
        self._timeouts: Counter[str] = Counter()
        self._rounds: OrderedDict[int, _RoundGather] = OrderedDict()
        self._strikes: Counter[str] = Counter()
        self._banned_until: dict[str, float] = {}
        self._last_announced: int | None = None
        self._last_rebootstrap = 0.0
        self._per_shard = 0.0  # peers per shard in our last directory or clock read that found any
        self.traffic: Counter[str] = Counter()  # bytes of entries received / sent, lookups made (for benches)

    @property
    def peer_id(self) -> str:
        return self._identity.peer_id

    @property
    def timeouts(self) -> Counter[str]:
        """How many calls timed out, per operation ("publish", "gather", "clock", "announce", "shutdown")."""
        with self._lock:
            return self._timeouts.copy()

    def start(self) -> None:
        """Start the DHT node; with ``initial_peers``, join their swarm. Raises NodeError if that is impossible."""
        if self._thread is not None:
            raise RuntimeError("Swarm.start() called twice")
        initial_peers = [_parse_invite(addr) for addr in self._initial_peers]
        listen = _listen_maddr(self._host, self._port)

        atexit.register(self.shutdown)  # before the daemon exists: Ctrl-C during start must not orphan it
        self._sockets_before = _daemon_sockets()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run_loop, name="swarm-dht", daemon=True)
        self._thread.start()
        future = asyncio.run_coroutine_threadsafe(self._start_node(initial_peers, listen), self._loop)
        try:
            future.result(self._start_timeout)
        except TimeoutError as e:
            future.cancel()
            self.shutdown()
            raise NodeError(
                f"Joining the swarm took more than {self._start_timeout:.0f} s",
                hint=_JOIN_HINT,
                code="swarm_join_timeout",
            ) from e
        except Exception as e:
            self.shutdown()
            raise _start_error(e, joining=bool(initial_peers), port=self._port) from e
        logger.info("Swarm %r: joined as %s, invite %s", self._swarm_name, self.peer_id, " ".join(self._invite))

    def invite(self) -> list[str]:
        """Multiaddrs (with /p2p/<our peer id>) that other nodes can join with; empty unless started."""
        return list(self._invite)

    # ------------------------------------------------------------------------------------------ publishing
    def publish(self, record: RoundRecord, *, spread: Sequence[int] | None = None) -> bool:
        """Store our groups for ``record.round`` and our pointer in the directory. False (logged) if not stored.

        ``spread``: indices of the groups whose completions got different rewards under our verifier (receivers
        fetch those first); None claims every group.
        """
        if record.peer_id != self.peer_id:
            raise ValueError(f"record of {record.peer_id} cannot be published by {self.peer_id}")
        if not record.groups:
            return False
        self._current_round = record.round
        keys, values, subkeys = [], [], []
        for index, group in enumerate(record.groups):
            one = GroupRecord(record.peer_id, record.round, index, group, record.prompt_format)
            value = encode_group_record(one, admission_key=self._admission)
            if _SIGNATURE_MARKER in value:
                logger.warning("Round %d group %d not shared: its text contains %r", record.round, index,
                               _SIGNATURE_MARKER)
                continue
            keys.append(self._group_key(record.round, self.peer_id, index))
            values.append(value)
            subkeys.append(self._subkey("g", record.round, index))
        if not keys:
            return False
        claimed = range(len(record.groups)) if spread is None else sorted(set(spread))
        pointer = Pointer(self.peer_id, record.round, len(record.groups), tuple(i for i in claimed
                                                                                if 0 <= i < len(record.groups)))
        shard = shard_of(self.peer_id, self._shards)
        keys.append(self._directory_key(record.round, shard))
        values.append(self._seal(encode_pointer(pointer)))
        subkeys.append(self._subkey("d", record.round, shard))
        expiration = get_dht_time() + self._record_ttl
        self.traffic["publish_bytes"] += sum(len(v) for v in values)
        stored = self._call("publish", lambda node: _store_many(node, keys, values, expiration, subkeys))
        if not stored:
            logger.warning("Round %d groups were not stored by any peer", record.round)
            return False
        ok = [bool(stored.get((key, subkey))) for key, subkey in zip(keys, subkeys)]
        if not all(ok):
            logger.info("Round %d: %d of %d entries not stored", record.round, ok.count(False), len(keys))
        usage = self.storage_usage()
        if usage:
            logger.info("Swarm storage: %d bytes held for the swarm, at most %d from one address group and %d from "
                        "one signer; refused %s, from %s; evicted %d", usage["bytes"],
                        max((v for k, v in usage["by_group"].items() if k != "self"), default=0),
                        usage["largest_signer"], json.dumps(usage["refused"]), json.dumps(usage["refused_from"]),
                        usage["evicted"])
        return ok[-1] and any(ok[:-1])

    # ------------------------------------------------------------------------------------------- gathering
    def gather(self, round: int) -> GatherResult:
        """A uniform sample of peers' groups for ``round``, one group per peer, within this round's fetch budget.

        Each call reads more of the directory and fetches more peers while the budget lasts: the first call
        fetches ``groups_wanted`` groups, later calls (when the caller still lacks usable groups) half as many
        more. Bad entries are counted by reason, never raised.
        """
        if not 0 <= round <= MAX_ROUND:
            return GatherResult((), Counter(), frozenset())
        state = self._round_state(round)
        self._maybe_rebootstrap()
        self._read_directory(round, state)
        self._fetch_groups(round, state)
        records = tuple(sorted((g.as_round_record() for g in state.fetched.values()), key=lambda r: r.peer_id))
        if state.rejected:
            logger.info("Round %d: rejected entries %s", round, dict(state.rejected))
        # Only the budget ends a round's gather: a directory read to the end now may hold a peer that is still
        # generating on the next read (the caller knows who is live and when its deadline is).
        exhausted = state.fetches >= self._max_fetches or state.bytes >= self._max_fetch_bytes
        return GatherResult(records=records, rejected=state.rejected.copy(), peers=frozenset(state.tried),
                            published=len(state.pool), exhausted=exhausted)

    def _round_state(self, round: int) -> _RoundGather:
        with self._lock:
            state = self._rounds.get(round)
            if state is None:
                state = self._rounds[round] = _RoundGather()
                while len(self._rounds) > _ROUNDS_KEPT:
                    self._rounds.popitem(last=False)
            return state

    def _read_directory(self, round: int, state: _RoundGather) -> None:
        """Read shards in random order until the pool holds enough peers to sample J from, counted by address group
        (or all were read)."""
        target = max(4 * self._wanted, 16)
        unread = [s for s in range(self._shards) if s not in state.shards_read]
        self._rng.shuffle(unread)
        if not unread:
            # every shard read once: re-read one, for peers that published since
            if not state.reread:
                state.reread = self._rng.sample(range(self._shards), self._shards)
            unread, state.reread = state.reread[:1], state.reread[1:]
        first = not state.shards_read  # later reads of a round top up with a shard or two: too few to measure
        batch = self._first_read(target, len(unread)) if first else 2
        entries_read = shards_read = 0
        while unread and state.directory_reads < DIRECTORY_READS_PER_SHARD * self._shards:
            shards, unread = unread[:batch], unread[batch:]
            keys = [self._directory_key(round, shard) for shard in shards]
            found = self._call("gather", lambda node: _latest_many(node, keys))
            state.directory_reads += len(shards)
            state.shards_read.update(shards)
            self.traffic["lookups"] += len(keys)
            read = [self._dictionary_entries((found or {}).get(key)) for key in keys]
            entries_read += sum(map(len, read))
            shards_read += len(shards)
            for entries, shard in zip(read, shards):
                for author, entry in entries:
                    if author is None or author == self.peer_id or author in state.pool:
                        continue
                    try:
                        pointer = decode_pointer(entry.value)
                    except RecordRejected as e:
                        state.rejected[e.reason] += 1
                        continue
                    if pointer.peer_id != author or shard_of(author, self._shards) != shard:
                        state.rejected["peer_mismatch"] += 1
                    elif pointer.round != round:
                        state.rejected["round_mismatch"] += 1
                    else:
                        state.pool[author] = pointer
            # enough peers to sample from, counted by network: identities from one take one peer's place
            if len(set(self._address_groups(list(state.pool)).values())) >= target or state.fetched:
                break
            batch = min(2 * batch, self._shards)
        if first:
            self._measure_shards(entries_read, shards_read)

    def _fetch_groups(self, round: int, state: _RoundGather) -> None:
        """Fetch one group of each of a few more peers, sampled uniformly over network address groups (peers from
        one network count as one: :meth:`_over_address_groups`); peers claiming spread first."""
        if self._wanted == 0:
            return
        count = self._wanted if not state.tried else max(1, self._wanted // 2)
        count = min(count, self._max_fetches - state.fetches)
        if count <= 0 or state.bytes >= self._max_fetch_bytes:
            return
        now = time.monotonic()
        fresh = [p for p in state.pool if p not in state.tried]
        banned = [p for p in fresh if self._banned_until.get(p, 0.0) > now]
        if banned:
            state.rejected["backoff"] += len(banned)
            state.tried.update(banned)
        fresh = [p for p in fresh if p not in banned]
        chosen = self._over_address_groups(fresh, count, state)
        if not chosen:
            return
        picks = {}
        for peer in chosen:
            pointer = state.pool[peer]
            picks[peer] = self._rng.choice(pointer.spread or range(pointer.groups))
        keys = {self._group_key(round, peer, index): peer for peer, index in picks.items()}
        state.tried.update(chosen)
        state.fetches += len(chosen)
        lookup_timeout = self._call_timeout * (_RPCS_PER_CALL - 1) / _RPCS_PER_CALL
        found = self._call("gather", lambda node: _first_replicas(node, list(keys), lookup_timeout))
        self.traffic["lookups"] += len(keys)
        for key, peer in keys.items():
            item = (found or {}).get(key)
            entries = self._dictionary_entries(item, sealed=False)  # a group record carries its own tag
            if not entries:
                state.rejected["missing"] += 1
                continue
            author, entry = entries[0]
            size = len(entry.value) if type(entry.value) is bytes else 0
            state.bytes += size
            reason = None
            if author != peer:
                reason = "peer_mismatch"
            else:
                try:
                    group = decode_group_record(entry.value, admission_key=self._admission)
                except RecordRejected as e:
                    reason = e.reason
                else:
                    if group.peer_id != peer:
                        reason = "peer_mismatch"
                    elif group.round != round:
                        reason = "round_mismatch"
                    elif group.index != picks[peer]:
                        reason = "index_mismatch"
                    else:
                        state.fetched[peer] = group
                        self._strikes.pop(peer, None)
            if reason is not None:
                state.rejected[reason] += 1
                self._strike(peer)

    def prefer(self, registered: Callable[[Iterable[str]], set[str]]) -> None:
        """Fetch first from peers registered on the chain (``registered`` says which of some peers are, without
        waiting: :meth:`node.chain.participant.ChainParticipant.registered_peers`)."""
        self._registered = registered

    def _over_address_groups(self, fresh: list[str], count: int, state: _RoundGather) -> list[str]:
        """Up to ``count`` of ``fresh`` to fetch now, so that identities from one network take one peer's share: each
        address group (:meth:`_address_groups`) takes at most its fair share of the round's J (J over the groups that
        published in this round or the other recent rounds we keep, or that we are connected to), one peer per group
        in turn. Groups not sampled yet this
        round come first, then groups with a peer registered on the chain (:meth:`prefer`), then groups we could
        place on the network before the peers we could not (together one group), then groups whose peers claim no
        spread; within a group, registered peers first, then peers claiming spread, uniformly otherwise."""
        with self._lock:  # peers that published in the other rounds we keep: they will publish in this one too
            recent = {p for other in self._rounds.values() if other is not state for p in other.pool}
        groups = self._address_groups(list({*fresh, *state.tried, *recent}))
        sampled = Counter(groups[p] for p in state.tried)
        members: dict[str, list[str]] = {}
        for peer in fresh:
            members.setdefault(groups[peer], []).append(peer)
        # a group's share of the round's J, over the groups that published this round or lately or that we are
        # connected to (a peer still generating this round): the slots a group cannot fill stay free for groups that
        # publish later rather than go to the group with the most identities
        networks = set(groups.values()) | (self._addresses.recent_groups() if self._addresses is not None else set())
        share = math.ceil(self._wanted / max(1, len(networks)))
        registered = self._registered(fresh)
        for group, peers in members.items():
            self._rng.shuffle(peers)
            peers.sort(key=lambda p: (p not in registered, not state.pool[p].spread))  # stable: uniform within each
            del peers[max(0, share - sampled[group]):]
        order = [g for g, peers in members.items() if peers]
        self._rng.shuffle(order)
        order.sort(key=lambda g: (g in sampled, members[g][0] not in registered, g == UNKNOWN,
                                  not state.pool[members[g][0]].spread))
        picks = []
        for turn in range(max(map(len, members.values()), default=0)):
            picks += [members[g][turn] for g in order if turn < len(members[g])]
        return picks[:count]

    def _address_groups(self, peers: list[str]) -> dict[str, str]:
        """Each peer's address group: of our live connection to it, else of the peer that sent us its entries (we
        hold its directory pointer as a replica), else :data:`UNKNOWN`."""
        addresses, node = self._addresses, self._node
        if addresses is None or node is None or not peers:
            return dict.fromkeys(peers, UNKNOWN)
        groups = self._on_loop(addresses.groups_of(peers)) or dict.fromkeys(peers, UNKNOWN)
        storage = node.protocol.storage
        for peer, group in groups.items():
            if group == UNKNOWN:
                groups[peer] = storage.group_of_author(peer) or UNKNOWN
        return groups

    def _strike(self, peer: str) -> None:
        """Count a rejected record against ``peer``; past a few, ignore it for a while (doubling each time)."""
        self._strikes[peer] += 1
        strikes = self._strikes[peer]
        if strikes >= _STRIKES_BEFORE_BACKOFF:
            backoff = min(_BACKOFF_S[0] * 2 ** (strikes - _STRIKES_BEFORE_BACKOFF), _BACKOFF_S[1])
            self._banned_until[peer] = time.monotonic() + backoff
            if len(self._banned_until) > 10_000:  # memory stays bounded whatever the number of identities
                now = time.monotonic()
                self._banned_until = {p: t for p, t in self._banned_until.items() if t > now}
                self._strikes = Counter({p: self._strikes[p] for p in self._banned_until})

    def penalize(self, peer_id: str) -> None:
        """The caller rejected this peer's group (forged question, ...): counts toward its backoff like ours."""
        self._strike(peer_id)

    # --------------------------------------------------------------------------------------------- the clock
    def announce_round(self, round: int) -> None:
        """Tell the swarm we are at ``round`` (see :meth:`swarm_round`)."""
        if not 0 <= round <= MAX_ROUND:
            raise ValueError(f"round {round} is out of bounds (0..{MAX_ROUND})")
        self._last_announced = self._current_round = round
        if not self._announce("c", clock_key, round):
            logger.warning("Could not announce round %d to the swarm", round)

    def announced_rounds(self) -> dict[str, int]:
        """The round other live peers last announced: a uniform sample of at least ``CLOCK_SAMPLE`` of them (all of
        them in a small swarm), read shard by shard in random order, so a read costs the same at any swarm size."""
        self._maybe_rebootstrap()
        shards = list(range(self._shards))
        self._rng.shuffle(shards)
        rounds: dict[str, int] = {}
        batch = self._first_read(CLOCK_SAMPLE, len(shards))
        found_in_read = shards_read = 0
        while shards and len(rounds) < CLOCK_SAMPLE:
            reading, shards = shards[:batch], shards[batch:]
            found = self._announced(reading, clock_key, MAX_ROUND)
            found_in_read += len(found)
            shards_read += len(reading)
            rounds.update(found)
            rounds.pop(self.peer_id, None)
            batch = 2 * batch
        self._measure_shards(found_in_read, shards_read)
        return rounds

    def _first_read(self, target: int, unread: int) -> int:
        """Shards to read at once to find ``target`` peers: as many as our last read's density says (one more for
        the margin), so that finding them costs one lookup round trip, not two or three in sequence. Never fewer than
        a first read took before any density is known, never more than its first two steps read."""
        low, high = _FIRST_READ_SHARDS
        needed = math.ceil(target / self._per_shard) + 1 if self._per_shard else low
        return min(unread, max(low, min(high, needed)))

    def _measure_shards(self, entries: int, shards: int) -> None:
        """Remember how many peers a shard holds, over every shard of one read: its last batch alone may be the
        densest few shards, and a read sized by them would fall short and take a second round trip. (An empty read
        says nothing: nobody may have published yet.)"""
        if entries and shards:
            self._per_shard = entries / shards

    def swarm_round(self, current: int | None = None) -> int | None:
        """The round to play after ``current`` (default: the last we announced) as a quorum of peers sees it.

        None if no other peer announced anything. Never more than ``max_round_jump`` ahead of ``current``.
        """
        announced = self.announced_rounds()
        if not announced:
            return None
        base = current if current is not None else (self._last_announced or 0)
        candidate = follow_round(base, announced, self._clock)
        while candidate > base:
            # the peers carrying the quorum must be recently active: have published at (or just before) the
            # round they announce. An announcement alone is one unverifiable word.
            supporters = [p for p, r in announced.items() if r >= candidate]
            if len(supporters) > _MAX_CLOCK_CHECKS:
                supporters = self._rng.sample(supporters, _MAX_CLOCK_CHECKS)
            idle = set(supporters) - self._published_near({p: announced[p] for p in supporters})
            if not idle:
                return candidate
            # still counted among the active peers (a quorum does not shrink), but supporting no jump
            announced = {p: base if p in idle else r for p, r in announced.items()}
            candidate = follow_round(base, announced, self._clock)
        return candidate

    def _published_near(self, rounds: dict[str, int]) -> set[str]:
        """The peers of ``{peer: round}`` with a pointer in the directory for that round or the one before."""
        wanted = {(r - back, shard_of(p, self._shards)) for p, r in rounds.items() for back in (0, 1) if r - back >= 0}
        keys = {self._directory_key(r, shard): (r, shard) for r, shard in wanted}
        found = self._call("clock", lambda node: _latest_many(node, list(keys))) or {}
        self.traffic["lookups"] += len(keys)
        published: set[tuple[str, int]] = set()
        for key, (r, _) in keys.items():
            for author, entry in self._dictionary_entries(found.get(key)):
                if author is not None:
                    published.add((author, r))
        return {p for p, r in rounds.items() if (p, r) in published or (p, r - 1) in published}

    # ------------------------------------------------------------------------------------------------ peers
    def peers_seen(self) -> int:
        """Other peers whose entries we saw in recent directory and clock reads and which have not expired yet."""
        now = get_dht_time()
        with self._lock:
            self._seen = {peer: expiration for peer, expiration in self._seen.items() if expiration > now}
            return len(self._seen)

    def connected_peers(self) -> int:
        """Peers in our DHT routing table: others are in the swarm even if they have not published yet."""
        node = self._node
        return 0 if node is None else len(node.protocol.routing_table.uid_to_peer_id)

    def storage_usage(self) -> dict[str, Any]:
        """What this node stores for the swarm: bytes in all, per address group that sent them ("self": ours) and
        of the largest signer, and the entries refused (by reason) and evicted to make room. Empty if not running."""
        node = self._node
        if node is None:
            return {}
        storage = node.protocol.storage

        async def usage() -> dict[str, Any]:  # on the DHT loop, which alone changes the storage
            return {"bytes": storage.measure(), **storage.usage(), "refused": dict(storage.refused),
                    "refused_from": dict(storage.refused_from), "evicted": storage.evicted}

        return self._on_loop(usage()) or {}

    def _stored_rounds(self) -> tuple[int, int] | None:
        return None if self._current_round is None else self._round_window(self._current_round)

    def storage_bytes(self) -> tuple[int, int]:
        """Bytes held in (storage, cache): both bounded whatever peers send."""
        node = self._node
        if node is None:
            return 0, 0
        return node.protocol.storage.measure(), node.protocol.cache.measure()

    def rebootstrap(self) -> int:
        """Reconnect through the invite's peers: returns how many answered. Done automatically when isolated."""
        initial = [_parse_invite(addr) for addr in self._initial_peers]
        return self._call("bootstrap", lambda node: self._bootstrap(node, initial)) or 0

    def _maybe_rebootstrap(self) -> None:
        if not self._initial_peers or self.connected_peers() > 0:
            return
        now = time.monotonic()
        if now - self._last_rebootstrap < _REBOOTSTRAP_EVERY_S:
            return
        self._last_rebootstrap = now
        answered = self.rebootstrap()
        logger.info("No peer in the routing table: re-bootstrapped through the invite, %d answered", answered)

    async def _bootstrap(self, node: DHTNode, maddrs: list[str]) -> int:
        async def one(addr: str) -> bool:
            maddr = Multiaddr(addr)
            peer = PeerID.from_base58(maddr["p2p"])
            try:
                await self._p2p._client.connect(peer, [maddr.decapsulate(Multiaddr(f"/p2p/{maddr['p2p']}"))])
                return await node.protocol.call_ping(peer) is not None
            except Exception:
                return False

        return sum(await asyncio.gather(*(one(a) for a in maddrs)))

    def shutdown(self) -> None:
        """Stop the DHT node, its p2pd daemon and the loop thread. Idempotent; also runs at interpreter exit."""
        atexit.unregister(self.shutdown)
        with self._lock:
            loop, thread, self._loop = self._loop, self._thread, None
        if loop is None:
            return
        self._invite = []
        future = asyncio.run_coroutine_threadsafe(self._stop_node(), loop)
        try:
            future.result(2 * self._call_timeout + 1)
        except TimeoutError:
            logger.warning("Swarm node did not stop within %.0f s", 2 * self._call_timeout + 1)
            self._count_timeout("shutdown")
        except Exception:
            logger.warning("Swarm node did not stop cleanly", exc_info=True)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(self._call_timeout)
        if self._daemon is not None and self._daemon.is_running():
            logger.warning("p2pd (pid %d) ignored the stop request; killing it", self._daemon.pid)
            self._daemon.kill()
        _remove_stale_sockets(_daemon_sockets() - self._sockets_before)
        logger.info("Swarm %r: left", self._swarm_name)

    # ---------------------------------------------------------------------------------- the multi-stage game
    def publish_stage(self, round: int, stage: int, value: bytes) -> bool:
        """Store our encoded stage record (:mod:`node.game.records`) for ``(round, stage)``."""
        key, subkey = stage_key(self._namespace, round, stage, self.peer_id), self._subkey("s", round, stage)
        self._current_round = round
        self.traffic["publish_bytes"] += len(value)
        return self._store_entry("publish", key, value, subkey)

    def stage_entries(self, round: int, stage: int, authors: Iterable[str]) -> list[tuple[str | None, Any]]:
        """(signer or None, raw value) of the stage records these peers stored for ``(round, stage)``: one key per
        author, read in one batch of at most :data:`MAX_ENTRIES_PER_KEY` authors (a sample beyond that)."""
        authors = sorted(set(authors) - {self.peer_id})
        if len(authors) > MAX_ENTRIES_PER_KEY:
            authors = self._rng.sample(authors, MAX_ENTRIES_PER_KEY)
        if not authors:
            return []
        keys = [stage_key(self._namespace, round, stage, author) for author in authors]
        found = self._call("gather", lambda node: _latest_many(node, keys)) or {}
        self.traffic["lookups"] += len(keys)
        return [(signer, entry.value) for key in keys for signer, entry in self._dictionary_entries(found.get(key))]

    def announce_position(self, position: int) -> None:
        """Tell the swarm which stage of which round we play (``node.game.exchange.clock_value``)."""
        if not 0 <= position <= MAX_GAME_POSITION:
            raise ValueError(f"game position {position} is out of bounds (0..{MAX_GAME_POSITION})")
        if not self._announce("p", position_key, position):
            logger.warning("Could not announce game position %d to the swarm", position)

    def announced_positions(self) -> dict[str, int]:
        """The game position every live peer, us included, announced last (all shards: the game reads every peer)."""
        return self._announced(range(self._shards), position_key, MAX_GAME_POSITION)

    # ------------------------------------------------------------------------------------------- the clocks
    def _announce(self, kind: str, key_of: Callable[[str, int], str], value: int) -> bool:
        """Store ``value`` as our entry in our shard of a clock (``key_of``: :func:`clock_key`, ...)."""
        shard = shard_of(self.peer_id, self._shards)
        key, subkey = key_of(self._namespace, shard), self._subkey(kind, shard)
        return self._store_entry("announce", key, value, subkey)

    def _store_entry(self, call: str, key: str, value: Any, subkey: bytes) -> bool:
        """Store one entry of ours under ``key`` until now + the record TTL; whether a replica took it."""
        expiration = get_dht_time() + self._record_ttl
        value = self._seal(value)
        stored = self._call(call, lambda node: _store_many(node, [key], [value], expiration, [subkey]))
        return bool(stored and stored.get((key, subkey)))

    def _announced(self, shards: Iterable[int], key_of: Callable[[str, int], str], maximum: int) -> dict[str, int]:
        """Every authenticated peer's value (0..``maximum``, us included) in these shards of a clock, in one read."""
        shards = list(shards)
        keys = [key_of(self._namespace, shard) for shard in shards]
        found = self._call("clock", lambda node: _latest_many(node, keys)) or {}
        self.traffic["lookups"] += len(keys)
        values: dict[str, int] = {}
        for shard, key in zip(shards, keys):
            for author, entry in self._dictionary_entries(found.get(key)):
                if (author is not None and type(entry.value) is int and 0 <= entry.value <= maximum
                        and shard_of(author, self._shards) == shard):
                    values[author] = entry.value
        return values

    # -------------------------------------------------------------------------------------------------- keys
    def _group_key(self, round: int, peer: str, index: int) -> str:
        return group_key(self._namespace, round, peer, index)

    def _directory_key(self, round: int, shard: int) -> str:
        return directory_key(self._namespace, round, shard)

    def _subkey(self, kind: str, *numbers: int) -> bytes:
        return self._owner + b"|" + kind.encode() + b"/" + "/".join(map(str, numbers)).encode()

    def _seal(self, value: int | bytes) -> int | bytes:
        """In a private swarm, an entry without a tag of its own goes in the secret's envelope."""
        return value if self._admission is None else seal_entry(self._admission, self.peer_id, value)

    def _dictionary_entries(self, item: Any, *, sealed: bool = True) -> list[tuple[str | None, Any]]:
        """(author peer id or None if unauthenticated, entry) for every entry of a found item; remembers authors.
        In a private swarm, ``sealed`` entries come out of their envelope, and those without a valid one are left
        out (the validator refused them on receipt already)."""
        if item is None or not isinstance(item.value, dict):
            return []
        entries = [(_owner_peer_id(subkey), entry) for subkey, entry in list(item.value.items())[:MAX_ENTRIES_PER_KEY]]
        if self._admission is not None and sealed:
            entries = [(author, ValueWithExpiration(value, entry.expiration_time)) for author, entry in entries
                       if author is not None and (value := _unsealed(self._admission, author, entry.value)) is not None]
        # what crossed the wire: the value, its subkey (owner key) and the signature hivemind strips on arrival
        self.traffic["received_bytes"] += sum(
            (len(e.value) if type(e.value) is bytes else 9) + len(k if type(k) is bytes else b"") + _SIGNATURE_BYTES
            for k, e in list(item.value.items())[:MAX_ENTRIES_PER_KEY]
        )
        with self._lock:
            for author, entry in entries:
                if author is not None and author != self.peer_id:
                    self._seen[author] = max(self._seen.get(author, 0.0), min(entry.expiration_time,
                                                                              get_dht_time() + MAX_ENTRY_TTL_S))
            if len(self._seen) > 4 * MAX_ENTRIES_PER_KEY * self._shards:
                now = get_dht_time()
                self._seen = {p: e for p, e in self._seen.items() if e > now}
        return entries

    def _call(self, op: str, make: Callable[[DHTNode], Coroutine[Any, Any, T]]) -> T | None:
        """Run ``make(node)`` on the DHT loop; its result, or None if not running, failed or timed out."""
        loop, node = self._loop, self._node
        if loop is None or node is None:
            logger.warning("Swarm %s skipped: not connected", op)
            return None
        future = asyncio.run_coroutine_threadsafe(make(node), loop)
        try:
            return future.result(self._call_timeout)
        except TimeoutError:
            future.cancel()
            self._count_timeout(op)
            logger.warning("Swarm %s timed out after %.1f s", op, self._call_timeout)
        except Exception:
            logger.warning("Swarm %s failed", op, exc_info=True)
        return None

    def _on_loop(self, coroutine: Coroutine[Any, Any, T]) -> T | None:
        """Run local work (a question to our own p2p daemon, a look at our storage; no network round trip) on the DHT
        loop; None if it failed."""
        loop = self._loop
        if loop is None:
            coroutine.close()
            return None
        future = asyncio.run_coroutine_threadsafe(coroutine, loop)
        try:
            return future.result(self._call_timeout / _RPCS_PER_CALL)
        except Exception:
            future.cancel()
            logger.debug("Local work on the DHT loop failed", exc_info=True)
            return None

    def _count_timeout(self, op: str) -> None:
        with self._lock:
            self._timeouts[op] += 1

    def _run_loop(self) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)
        try:
            loop.run_forever()
        finally:
            tasks = asyncio.all_tasks(loop)  # hivemind leaves background tasks (refreshes, pings) behind
            for task in tasks:
                task.cancel()
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    async def _start_node(self, initial_peers: list[str], listen: str) -> None:
        # We own the P2P instance (rather than letting DHTNode.create make one) so that a failure anywhere in
        # joining still leaves us a handle to stop its daemon.
        self._p2p = await P2P.create(
            initial_peers=initial_peers,
            host_maddrs=[listen],
            identity_path=str(self._identity.path),
            startup_timeout=self._start_timeout,
            persistent_conn_max_msg_size=_MAX_MESSAGE_BYTES,
        )
        self._daemon = _daemon_process(self._p2p)
        self._addresses = AddressBook(self._p2p, ipv4_prefix=self._address_prefixes[0],
                                      ipv6_prefix=self._address_prefixes[1])
        self._attribute_stores(self._p2p)
        self._node = await DHTNode.create(
            p2p=self._p2p,
            # hivemind draws a random DHT id from Python's global `random`, which training libraries seed (TRL
            # seeds it with the run seed): equally seeded nodes would share one id and never see each other's
            # records. Derive it from the peer id instead: unique per identity, stable across restarts.
            node_id=DHTID.generate(source=self._identity.peer_id.encode()),
            initial_peers=initial_peers,
            record_validator=RememberingValidator(
                [self._signer, SwarmValidator(self._swarm_name, self._shards, admission=self._admission,
                                              kinds=self._kinds)]
            ),
            wait_timeout=self._call_timeout / _RPCS_PER_CALL,
            client_mode=self._client_mode,
            # values found are cached on their way (bounded below) but not pushed to other nodes nor refreshed in
            # the background: a round's keys are read a few times, then never again
            cache_nearest=0,
            cache_refresh_before_expiry=0,
            # one key per request: hivemind packs other keys of a read into each request (up to chunk_size), and a
            # node asked that holds one of them answers with all of it, though it may not be one of the few replicas
            # the read merges for that key
            chunk_size=1,
        )
        # BoundedStorage before anyone can store anything (the node only answers RPCs once we return)
        self._node.protocol.storage = BoundedStorage(self._storage_bytes, rounds=self._stored_rounds,
                                                     author_of=_owner_peer_id)
        self._node.protocol.cache = BoundedStorage(self._cache_bytes, rounds=self._stored_rounds)
        self._invite = [str(maddr) for maddr in await self._node.get_visible_maddrs()]

    def _attribute_stores(self, p2p: P2P) -> None:
        """Wrap hivemind's store handler as it registers, so that storage knows which address group sent each
        entry (:data:`node.dht_storage.SENDER_GROUP`)."""
        register, addresses, timeout = p2p.add_protobuf_handler, self._addresses, self._call_timeout / _RPCS_PER_CALL

        async def add_protobuf_handler(name, handler, *args, **kwargs):
            if getattr(handler, "__name__", "") == "rpc_store":
                store = handler

                async def handler(request, context):
                    try:
                        group = await asyncio.wait_for(addresses.group_of(context.remote_id), timeout)
                    except Exception:  # the daemon did not say: the sender shares the group of the unknown
                        group = UNKNOWN
                    token = SENDER_GROUP.set(group)
                    try:
                        return await store(request, context)
                    finally:
                        SENDER_GROUP.reset(token)

            return await register(name, handler, *args, **kwargs)

        p2p.add_protobuf_handler = add_protobuf_handler

    async def _stop_node(self) -> None:
        node, p2p, self._node, self._p2p = self._node, self._p2p, None, None
        if node is not None:
            await self._stop_step(_unless_daemon_exits(node.shutdown(), p2p))
        if p2p is not None:
            await self._stop_step(p2p.shutdown())  # SIGTERM, then wait for the exit

    async def _stop_step(self, step: Coroutine[Any, Any, None]) -> None:
        # each step bounded and never fatal: whatever happens, the next one (stopping p2pd) must run
        try:
            await asyncio.wait_for(step, self._call_timeout)
        except TimeoutError:
            self._count_timeout("shutdown")
        except Exception:
            logger.warning("Error while stopping the swarm node", exc_info=True)


async def _unless_daemon_exits(step: Coroutine[Any, Any, None], p2p: P2P | None) -> None:
    """Run ``step`` (a request to our p2pd) until it is done or the daemon has exited, whichever comes first.

    hivemind's control client never fails the calls pending on a daemon that died (SIGKILL, OOM, crash): they would
    wait out the whole stop timeout, per node, for an answer that cannot come.
    """
    child = getattr(p2p, "_child", None)  # hivemind's asyncio handle on the p2pd process
    if child is None:
        await step
        return
    work, exited = asyncio.ensure_future(step), asyncio.ensure_future(child.wait())
    try:
        await asyncio.wait({work, exited}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (work, exited):
            task.cancel()
        await asyncio.gather(work, exited, return_exceptions=True)
    if not work.cancelled():
        work.result()  # the step's own error, if any


async def _store_many(node: DHTNode, keys: list[str], values: list[Any], expiration: float,
                      subkeys: list[bytes]) -> dict:
    """hivemind's ``store_many`` (answers per (key, subkey)) with a beam of twice the replicas, not its default
    (bucket_size): finding where to store visits every node of the beam, and each answers with its neighbours and
    whatever it holds under the key (a whole clock shard). The replicas and as many fallbacks are all a store needs.
    """
    return await node.store_many(keys, values, expiration, subkeys=subkeys, beam_size=2 * node.num_replicas)


async def _first_replicas(node: DHTNode, keys: list[str], timeout: float) -> dict:
    """Each key's value from the first replica found to hold it: one lookup per key, side by side, each asking one
    node at a time. In one lookup of all keys, hivemind's workers that run out of keys of their own ask for a key
    that another worker is already fetching, and every replica asked answers with the whole value.

    Asking one node at a time, a lookup waits out each unresponsive node it meets: one that takes longer than
    ``timeout`` is given up (its key is missing) rather than making the caller's timeout drop every key.
    """

    async def one(key: str) -> dict:
        try:
            return await asyncio.wait_for(node.get_many([key], num_workers=1), timeout)
        except TimeoutError:
            return {}

    found = await asyncio.gather(*(one(key) for key in keys))
    return {key: value for result in found for key, value in result.items()}


async def _latest_many(node: DHTNode, keys: list[str]) -> dict:
    """Every entry of each shard key, merged over the nearest few of its replicas. Every node of the beam answers
    with the whole shard: hivemind's default beam (bucket_size) costs up to 20 copies of it, all its replicas 5;
    a pointer is stored on all of them, so the union of the nearest ``READ_REPLICAS`` misses it only when none of
    them got it, and survives one of them dying."""
    # as many workers as requests needed (hivemind's default is 4 in all), so that a read of a few shards is one
    # round of requests in parallel rather than several in sequence
    workers = min(READ_REPLICAS * len(keys), _MAX_READ_WORKERS)
    return await node.get_many(keys, sufficient_expiration_time=float("inf"), beam_size=READ_REPLICAS,
                               num_workers=workers)


def group_key(namespace: str, round: int, peer: str, index: int) -> str:
    return f"{namespace}/g/{round}/{peer}/{index}"


def directory_key(namespace: str, round: int, shard: int) -> str:
    return f"{namespace}/d/{round}/{shard}"


def clock_key(namespace: str, shard: int) -> str:
    return f"{namespace}/c/{shard}"


def position_key(namespace: str, shard: int) -> str:
    """The multi-stage game's clock: each peer's position (``round * 3 + stage - 1``) in its shard."""
    return f"{namespace}/p/{shard}"


def stage_key(namespace: str, round: int, stage: int, peer: str) -> str:
    """The multi-stage game: one key per (round, stage, author), so a read never returns more than one record."""
    return f"{namespace}/s/{round}/{stage}/{peer}"


class SwarmValidator(RecordValidatorBase):
    """Accept only the swarm's own keys, each with the one shape it holds, one entry per signer, bounded expiry.

    The DHT sees keys only as hashes, so the entry's subkey names it: ``[owner:<key>]|<kind>/<numbers>``. We rebuild
    the key from the kind, the numbers, the owner's peer id and the swarm name and require its hash to be the
    entry's key: an entry anywhere else (a junk key), a second entry of the same signer under one key (its subkey
    would differ, so would the key it names), a group under another peer's key, a pointer in another shard, all
    fail. Values are then decoded with the same strict codecs as on receipt. Its priority is below
    RSASignatureValidator's, so it sees values with their signature stripped and already verified.
    """

    def __init__(self, swarm_name: str, shards: int, *, admission: bytes | None = None,
                 kinds: frozenset[str] = GAME_KINDS["sapo"]) -> None:
        self._namespace = f"{swarm_name}/{PROTOCOL}/{shards}"
        self._shards = shards
        self._admission = admission
        self._kinds = kinds

    def validate(self, record: DHTRecord) -> bool:
        if record.expiration_time > get_dht_time() + MAX_ENTRY_TTL_S + _CLOCK_SKEW_S:
            return False
        subkey = _unpack_scalar(record.subkey)
        match = _OWNER_RE.fullmatch(subkey) if type(subkey) is bytes else None
        if match is None:
            return False
        author = _owner_peer_id(subkey)
        if author is None:
            return False
        kind, numbers = match.group(3).decode(), match.group(4).decode().split("/")
        if kind not in self._kinds or not all(n.isdigit() and len(n) <= 14 for n in numbers):
            return False
        numbers = [int(n) for n in numbers]
        value = _unpack_scalar(record.value)
        if self._admission is not None and kind != "g":  # a group record carries its own tag
            value = _unsealed(self._admission, author, value)
        try:
            if kind == "g" and len(numbers) == 2:
                round_, index = numbers
                key = group_key(self._namespace, round_, author, index)
                group = decode_group_record(value, admission_key=self._admission) if type(value) is bytes else None
                ok = group is not None and (group.peer_id, group.round, group.index) == (author, round_, index)
            elif kind == "d" and len(numbers) == 2:
                round_, shard = numbers
                key = directory_key(self._namespace, round_, shard)
                pointer = decode_pointer(value) if type(value) is bytes else None
                ok = (pointer is not None and (pointer.peer_id, pointer.round) == (author, round_)
                      and shard == shard_of(author, self._shards))
            elif kind == "c" and len(numbers) == 1:
                (shard,) = numbers
                key = clock_key(self._namespace, shard)
                ok = type(value) is int and 0 <= value <= MAX_ROUND and shard == shard_of(author, self._shards)
            elif kind == "s" and len(numbers) == 2:
                round_, stage = numbers
                key = stage_key(self._namespace, round_, stage, author)
                stage_record = decode_stage_record(value) if type(value) is bytes else None
                ok = (stage_record is not None
                      and (stage_record.peer_id, stage_record.round, stage_record.stage) == (author, round_, stage))
            elif kind == "p" and len(numbers) == 1:
                (shard,) = numbers
                key = position_key(self._namespace, shard)
                ok = (type(value) is int and 0 <= value <= MAX_GAME_POSITION
                      and shard == shard_of(author, self._shards))
            else:
                return False
        except RecordRejected:
            return False
        return ok and record.key == DHTID.generate(source=key).to_bytes()

    @property
    def priority(self) -> int:
        return 5  # below RSASignatureValidator (10): it sees values unsigned


class RememberingValidator(CompositeValidator):
    """hivemind's CompositeValidator that remembers the records it accepted, so each is checked once.

    A lookup receives the same entry from every replica that answers, and directory and clock shards are re-read
    every poll: each copy cost an RSA verification (and a group record a full decode) on the DHT loop, the largest
    share of a gathering node's CPU. An accepted record stays acceptable: its signature does not change, and
    SwarmValidator's only clock check (expiry not too far ahead) only gets easier as time passes. Rejections are
    not remembered, so junk cannot crowd out what is kept; memory is bounded by ``size`` digests.
    """

    def __init__(self, validators: Iterable[RecordValidatorBase], size: int = 8192) -> None:
        super().__init__(validators)
        self._accepted: OrderedDict[bytes, None] = OrderedDict()
        self._size = size

    def validate(self, record: DHTRecord) -> bool:
        digest = hashlib.blake2b(
            msgpack.packb([record.key, record.subkey, record.value, record.expiration_time]), digest_size=32
        ).digest()
        if digest in self._accepted:
            self._accepted.move_to_end(digest)
            return True
        if not super().validate(record):
            return False
        self._accepted[digest] = None
        if len(self._accepted) > self._size:
            self._accepted.popitem(last=False)
        return True


def _unsealed(admission: bytes, author: str, value: Any) -> int | bytes | None:
    try:
        return unseal_entry(admission, author, value)
    except RecordRejected:
        return None


def _unpack_scalar(raw: bytes) -> Any:
    try:
        return msgpack.unpackb(raw, raw=False, max_array_len=0, max_map_len=0, max_ext_len=0)
    except (ValueError, msgpack.UnpackException):
        return None


_PEER_IDS: OrderedDict[bytes, str | None] = OrderedDict()  # owner marker -> peer id (RSA parsing is not free)
_PEER_IDS_LOCK = threading.Lock()


def _owner_peer_id(subkey: Any) -> str | None:
    """The peer id of the owner in a subkey ``[owner:<canonical key>]|...``; None if it is not one."""
    match = _OWNER_RE.fullmatch(subkey) if type(subkey) is bytes else None
    if match is None:
        return None
    marker = match.group(1)
    with _PEER_IDS_LOCK:
        if marker in _PEER_IDS:
            _PEER_IDS.move_to_end(marker)
            return _PEER_IDS[marker]
    try:
        key = RSAPublicKey.from_bytes(match.group(2))
        # one encoding per key: a signer cannot hold two entries under one key with two spellings of its key; and
        # no key small enough to mint by the thousand
        canonical = b"[owner:" + key.to_bytes() + b"]" == marker
        peer = peer_id_from_public_key(key) if canonical and acceptable_key_size(key) else None
    except (ValueError, UnsupportedAlgorithm):
        peer = None
    with _PEER_IDS_LOCK:
        _PEER_IDS[marker] = peer
        while len(_PEER_IDS) > 4096:
            _PEER_IDS.popitem(last=False)
    return peer


def _parse_invite(addr: str) -> str:
    try:
        maddr = Multiaddr(addr.strip())
        PeerID.from_base58(maddr["p2p"])
    except (ValueError, LookupError) as e:
        raise NodeError(f"{addr!r} is not a valid invite: {e}", hint=_INVITE_HINT, code="bad_invite") from e
    return str(maddr)


def _listen_maddr(host: str, port: int) -> str:
    try:
        ip = ipaddress.ip_address(host)
    except ValueError as e:
        raise NodeError(
            f"{host!r} is not an IP address to listen on",
            hint="Use 0.0.0.0 to accept peers on every network interface.",
            code="bad_host",
        ) from e
    if not 0 <= port <= 65535:
        raise NodeError(f"{port} is not a TCP port", hint="Use 0 to pick a free port.", code="bad_port")
    return f"/ip{ip.version}/{ip}/tcp/{port}"


def _daemon_process(p2p: P2P) -> psutil.Process | None:
    """Our p2pd child, found by the unique control socket it was started with, to kill it if it hangs."""
    listen_arg = f"-listen={p2p.daemon_listen_maddr}"
    for child in psutil.Process().children():
        try:
            if listen_arg in child.cmdline():
                return child
        except psutil.Error:
            continue
    return None


def _daemon_sockets() -> set[Path]:
    return set(_SOCKET_DIR.glob(_SOCKET_GLOB))


def _remove_stale_sockets(paths: set[Path]) -> None:
    """Delete the sockets no process listens on any more; live ones may belong to other nodes."""
    for path in paths:
        with socket.socket(socket.AF_UNIX) as probe:
            try:
                probe.connect(str(path))
            except ConnectionRefusedError:
                path.unlink(missing_ok=True)
            except OSError:
                continue


def _start_error(error: Exception, *, joining: bool, port: int) -> NodeError:
    detail = str(error) or type(error).__name__
    if isinstance(error, ValidationError):
        return NodeError(
            f"The swarm cannot connect back to this node: {detail}",
            hint=f"Let incoming TCP connections to port {port} through your firewall or router (forward the port), "
            "or choose a fixed port that is open.",
            code="swarm_unreachable",
        )
    if "already taken" in detail:
        return NodeError(
            "Another running node already uses this identity",
            hint="Close the other node (is the app open twice?) or give this one its own data folder.",
            code="identity_in_use",
        )
    if "address already in use" in detail:
        return NodeError(
            f"Port {port} is already in use: {detail}",
            hint="Close the program using it, or choose another port (0 picks a free one).",
            code="port_in_use",
        )
    if joining:
        return NodeError(f"Could not join the swarm: {detail}", hint=_JOIN_HINT, code="swarm_join_failed")
    return NodeError(
        f"Could not start the swarm node: {detail}",
        hint="Reinstall the node if p2pd is missing or damaged, or see the log for details.",
        code="swarm_start_failed",
    )
