"""Sharing rollouts with the swarm over hivemind's DHT, at a cost per node that does not grow with the swarm.

Why we do not use ``hivemind.DHT``: it runs a ``DHTNode`` in a forked child process and talks to it through an
``mp.Pipe``. Under uvloop the child's end of that pipe is non-blocking, so any call whose pickled arguments exceed
~16 KiB makes the child's ``recv()`` raise; the child's loop dies and the caller blocks forever. Instead we run
``hivemind.dht.node.DHTNode`` directly, on our own asyncio loop in a daemon thread of the node process. Public methods
are synchronous: each submits a coroutine to that loop and waits with a timeout, so a stuck network can delay the
caller by at most ``call_timeout`` (counted in :attr:`DhtExchange.timeouts`), never hang it.

Layout (protocol v2) for a swarm ``S`` with ``D`` directory shards; a peer's shard is a hash of its peer id:

* ``S/v2/D/g/<round>/<peer>/<i>``: group ``i`` that peer published in swarm round ``round``
  (:class:`node.swarm.records.GroupRecord`), one entry. A round is a slice of time (:mod:`node.clock`), and a node that
  plays several rounds in one publishes each after the last (indices go on).
* ``S/v2/D/d/<round>/<shard>``: the directory: one small signed :class:`node.swarm.records.Pointer` per peer of the
  shard, rewritten as the peer publishes more groups in that round.

Nothing is agreed on: there is no clock to read or to hijack. A node's background feed (:meth:`DhtExchange.start_feed`)
reads the directory of the current and previous swarm round several times in each of the node's rounds (every 1 to
10 s, :meth:`node.sapo.peer_buffer.PeerGroupBuffer.poll_interval_s`), on the DHT loop, while the node generates and
trains, and fetches up to 2 J new groups a poll, one per peer in turn (peers in uniform random order,
groups claiming reward spread and the newest first), as long as its buffer wants more: what it fetches follows what
the node consumes (about J groups a round) plus a few pointers a poll, whatever the swarm size.

Every entry's subkey is ``[owner:<ssh-rsa key>]|<kind>/<numbers>``: ``RSASignatureValidator`` signs it with our key
and checks every signature, and :class:`SwarmValidator` rebuilds the entry's DHT key from the subkey, the owner's
peer id and the swarm name, so an honest node stores and accepts only the swarm's own keys, one entry per signer
per key, with the record shape that key holds and an expiry at most ``MAX_ENTRY_TTL_S`` ahead.
:class:`node.swarm.storage.BoundedStorage` caps the bytes a node stores and caches, per signer, per network address
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

from node.clock import SwarmClock
from node.errors import NodeError
from node.game.records import decode_stage_record
from node.swarm import reachability
from node.swarm.exchange import GroupSink
from node.swarm.identity import Identity, acceptable_key_size, peer_id_from_public_key
from node.swarm.peer_addresses import UNKNOWN, AddressBook
from node.swarm.reachability import Verdict
from node.swarm.recovery import Entry, Reappearances, Unconfirmed
from node.swarm.records import (
    MAX_GROUP_RECORD_BYTES, MAX_GROUPS, MAX_ROUND, GroupRecord, Pointer, RecordRejected, RoundRecord,
    admission_key, decode_group_record, decode_pointer, encode_group_record, encode_pointer, seal_entry, unseal_entry,
)
from node.swarm.storage import MAX_ENTRIES_PER_KEY, SENDER_GROUP, BoundedStorage, rounds_near

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
# A group whose pointer we read but that no replica held yet (a peer's store again after a cut may land its pointer
# before the group) is looked up again after the next read of the round's directory: at most this many more lookups
# for one peer in one round, so a pointer to groups that never come costs a bounded handful more.
MISSING_RETRIES_PER_PEER = 4
_STRIKES_BEFORE_BACKOFF = 2
_MAX_IN_FLIGHT = 4  # publishes handed to the DHT loop and not done yet
_BACKOFF_S = (60.0, 3600.0)  # first and longest time a repeatedly rejected peer is ignored
_REBOOTSTRAP_EVERY_S = 15.0
_IN_FLIGHT_S = 1.0  # a held entry younger than this is still in its own first store
# Our entries no replica confirmed (a link down) are stored again this often while fresh, and at once when a store of
# ours was just confirmed (the network is back); without a feed, "fresh" is the buffer's automatic freshness
_RETRY_EVERY_S = 3.0
_UNFED_FRESH_S = 120.0
# The background feed (start_feed): its fetch budget per swarm round, above a gather's: a peer may publish several times
# in one swarm round and we may play several rounds in it. Its directory reads are bounded per poll instead
# (_feed_reread), so that a long swarm round is read to its end; how often it polls, its sink says (poll_interval_s)
_FEED_FETCHES = 64
_MAPPING_WAIT_S = 8.0  # how long a node without a reachable address waits for its router to map a port
_RECHECK_EVERY_S = 20.0
_RESERVATION_RENEW_S = 15 * 60.0  # relays keep a reservation for an hour (circuit relay v2's default)
_CONTACTS_KEPT = 16
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
    fetched: dict[tuple[str, int], GroupRecord] = dataclasses.field(default_factory=dict)  # (peer, index) ->
    tried: set[tuple[str, int]] = dataclasses.field(default_factory=set)  # (peer, index)
    missing: set[tuple[str, int]] = dataclasses.field(default_factory=set)  # tried, no replica held it yet
    retried: Counter[str] = dataclasses.field(default_factory=Counter)  # peer -> missing groups looked up again
    tried_peers: set[str] = dataclasses.field(default_factory=set)
    seen_at: dict[tuple[str, int], float] = dataclasses.field(default_factory=dict)  # (peer, index) -> unix time
    # the pointer first announced it (an estimate of when it was published)
    fetches: int = 0
    bytes: int = 0
    rejected: Counter[str] = dataclasses.field(default_factory=Counter)


def shard_of(peer_id: str, shards: int) -> int:
    return int.from_bytes(hashlib.sha256(peer_id.encode()).digest()[:8], "big") % shards


class DhtExchange:
    """The rollout exchange of :mod:`node.swarm.exchange` over hivemind's DHT: this node's membership in one swarm,
    which publishes and gathers round records (the in-memory exchange is the same interface without a network)."""

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
        admission_secret: str | None = None,
        storage_bytes: int = STORAGE_BYTES,
        cache_bytes: int = CACHE_BYTES,
        client_mode: bool = False,
        reachability_mode: str = "auto",
        reachable_networks: Sequence[str] = (),
        known_peers: Sequence[str] = (),
        on_reachability: Callable[[Verdict, list[str], list[str]], None] | None = None,
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
        self._admission = admission_key(admission_secret) if admission_secret else None
        self._storage_bytes, self._cache_bytes = storage_bytes, cache_bytes
        self._client_mode = client_mode
        if reachability_mode not in ("auto", "public", "private"):
            raise ValueError(f"reachability_mode {reachability_mode!r} is not auto, public or private")
        self._reachability_mode = reachability_mode
        self._reachable_networks = tuple(reachable_networks)
        self._known_peers = tuple(known_peers)
        self._on_reachability = on_reachability
        self._verdict: Verdict | None = None
        self._local_invite: list[str] = []  # our addresses that only work inside our own network
        self._members: list[str] = []  # reachable members' addresses: an invite from us works through them too
        self._contacts: OrderedDict[str, list[str]] = OrderedDict()  # peer -> addresses we know reach it
        self._recheck: asyncio.Task | None = None
        self._renew: asyncio.Task | None = None
        self._lan_addresses: list[str] = []
        self._kinds = GAME_KINDS[game]
        self._address_prefixes = address_prefixes
        self._addresses: AddressBook | None = None
        self._round_window = round_window
        self._current_round: int | None = None  # the round we play: others' entries are stored only near it
        self._feed_clock: SwarmClock | None = None  # the swarm's clock, once the feed runs: "now" for storage too
        self._storage_logged_round: int | None = None
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
        self._publishing_round: int | None = None  # the swarm round of our last publish, its groups and spread
        self._published_groups = 0
        self._published_spread: tuple[int, ...] = ()
        self._publishes_in_flight = 0
        self._unconfirmed = Unconfirmed()  # our entries no replica has confirmed yet (under _lock)
        self._retry: asyncio.Task | None = None
        self._retry_kick: asyncio.Event | None = None
        self._reappearances = Reappearances()  # past rounds to read again when a peer comes back (on the DHT loop)
        self._feed: asyncio.Task | None = None
        self._feed_sink: GroupSink | None = None
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
        if initial_peers:  # joining: also through the members met before (a node starting a swarm joins nobody)
            initial_peers += [addr for addr in _valid_addresses(self._known_peers) if addr not in initial_peers]
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
            raise _start_error(e, joining=bool(initial_peers), port=self._port,
                               local_only=_local_only(self._initial_peers, self._reachable_networks)) from e
        logger.info("Swarm %r: joined as %s, invite %s", self._swarm_name, self.peer_id, " ".join(self._invite))

    def invite(self) -> list[str]:
        """Multiaddrs that other nodes can join with; empty unless started. Ours first (with /p2p/<our peer id>):
        those that work from outside our network (public, mapped or relay circuit addresses), then those that only
        work inside it; then a few reachable members' addresses, through which a join works as well."""
        return list(self._invite)

    def report_reachability_to(self, callback: Callable[[Verdict, list[str], list[str]], None]) -> None:
        """Call ``callback(verdict, addresses that work from outside, local-only addresses)`` at start and whenever
        a peer's check changes the verdict (on the DHT thread)."""
        self._on_reachability = callback

    @property
    def client_mode(self) -> bool:
        """Whether the DHT node runs as a client (stores no keys for others)."""
        node = self._node
        return self._client_mode if node is None else bool(node.protocol.client_mode)

    def reachability(self) -> Verdict | None:
        """Whether peers outside our network can reach us, and how (:mod:`node.swarm.reachability`); None until started."""
        return self._verdict

    def contacts(self) -> dict[str, list[str]]:
        """Peers met whose addresses were seen to work, most recent last: to rejoin through when the invite's
        peers are gone."""
        with self._lock:
            return {peer: list(addrs) for peer, addrs in self._contacts.items()}

    # ------------------------------------------------------------------------------------------ publishing
    def publish(self, record: RoundRecord, *, spread: Sequence[int] | None = None, wait: bool = True) -> bool:
        """Store our groups for ``record.round`` (a swarm round: :mod:`node.clock`) and our pointer in the directory.

        A node may play several rounds within one swarm round: each publish adds its groups after those already
        published in that swarm round (indices go on, up to ``MAX_GROUPS``; past that, a publish is skipped) and the
        pointer is rewritten to cover them all, so readers see the new ones on their next directory read.

        ``spread``: indices of the groups whose completions got different rewards under our verifier (receivers
        fetch those first); None claims every group. ``wait=False`` returns at once (True: queued) and leaves the
        store to the DHT loop, so that publishing never holds up generation or training; at most a few publishes
        are in flight, a newer one is not sent behind a stuck network. With ``wait=True``: whether it was stored
        (False, logged, if not).

        Entries no replica confirmed (a store that failed, timed out or was not sent) are stored again by the DHT
        loop while they are fresh (:mod:`node.swarm.recovery`), so a link that was down loses no fresh round.
        """
        if record.peer_id != self.peer_id:
            raise ValueError(f"record of {record.peer_id} cannot be published by {self.peer_id}")
        if not record.groups:
            return False
        with self._lock:
            if self._publishing_round != record.round:
                self._publishing_round, self._published_groups, self._published_spread = record.round, 0, ()
            first = self._published_groups
            if first + len(record.groups) > MAX_GROUPS:
                logger.info("Round %d: groups not shared (%d already shared in this swarm round)", record.round, first)
                return False
            claimed = range(len(record.groups)) if spread is None else sorted(set(spread))
            spread_all = self._published_spread + tuple(first + i for i in claimed if 0 <= i < len(record.groups))
            self._published_groups, self._published_spread = first + len(record.groups), spread_all
            self._current_round = record.round
        keys, values, subkeys = [], [], []
        for offset, group in enumerate(record.groups):
            index = first + offset
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
        pointer = Pointer(self.peer_id, record.round, first + len(record.groups), spread_all)
        shard = shard_of(self.peer_id, self._shards)
        keys.append(self._directory_key(record.round, shard))
        values.append(self._seal(encode_pointer(pointer)))
        subkeys.append(self._subkey("d", record.round, shard))
        expiration = get_dht_time() + self._record_ttl
        self.traffic["publish_bytes"] += sum(len(v) for v in values)
        with self._lock:
            self._unconfirmed.hold(record.round, keys, subkeys, values, expiration=expiration)
            sent_later = not wait and self._publishes_in_flight >= _MAX_IN_FLIGHT
        self._kick_retry(now=False)
        if sent_later:
            logger.info("Round %d: %d publishes in flight; this one is sent by the retries", record.round,
                        _MAX_IN_FLIGHT)
            return True

        def stored_all(stored: dict | None) -> bool:
            with self._lock:
                released = self._unconfirmed.confirm(stored, keys, subkeys, values)
            if released:
                self._kick_retry(now=True)  # the network took this one: send what waits at once
            if not stored:
                logger.warning("Round %d groups were not stored by any peer (held to retry)", record.round)
                return False
            ok = [bool(stored.get((key, subkey))) for key, subkey in zip(keys, subkeys)]
            if not all(ok):
                logger.info("Round %d: %d of %d entries not stored", record.round, ok.count(False), len(keys))
            return ok[-1] and any(ok[:-1])

        def store(node: DHTNode) -> Coroutine[Any, Any, Any]:
            return _store_many(node, keys, values, expiration, subkeys)

        if wait:
            return stored_all(self._call("publish", store))
        return self._submit("publish", store, stored_all)

    def _kick_retry(self, *, now: bool) -> None:
        """Make sure the retry task runs while entries are held (``now``: and stores them at once)."""
        loop = self._loop
        if loop is None:
            return

        def kick() -> None:
            if self._retry is None or self._retry.done():
                self._retry_kick = asyncio.Event()
                self._retry = loop.create_task(self._retry_unconfirmed())
            if now:
                self._retry_kick.set()

        try:
            loop.call_soon_threadsafe(kick)
        except RuntimeError:  # the loop closed: shutting down
            pass

    async def _retry_unconfirmed(self) -> None:
        """Store again the held entries (:class:`node.swarm.recovery.Unconfirmed`) that are still fresh, every
        ``_RETRY_EVERY_S`` those whose own store had its time to answer; when kicked (a store of ours was just
        confirmed: the network is back) every one at once, so that they land together. Until none is held."""
        while True:
            kicked = False
            try:
                kicked = await asyncio.wait_for(self._retry_kick.wait(), _RETRY_EVERY_S)
            except TimeoutError:
                pass
            self._retry_kick.clear()
            node = self._node
            with self._lock:
                # kicked: every held entry at once, except those handed over just now, whose own store is still in
                # flight (storing them twice at once only loads the replicas)
                due = self._unconfirmed.due(self._fresh_to_send,
                                            older_than_s=_IN_FLIGHT_S if kicked else self._call_timeout)
                if not self._unconfirmed or node is None:
                    return
            if not due:
                continue
            keys, subkeys, values = [e.key for e in due], [e.subkey for e in due], [e.value for e in due]
            with self._lock:
                expirations = [e.resend_expiration() for e in due]
            stored = None
            try:
                stored = await asyncio.wait_for(_store_many(node, keys, values, expirations, subkeys),
                                                self._call_timeout)
            except TimeoutError:
                self._count_timeout("retry")
            except Exception:
                logger.debug("Swarm retry failed", exc_info=True)
            with self._lock:
                released = self._unconfirmed.confirm(stored, keys, subkeys, values)
                left = len(self._unconfirmed)
            if released:
                self.traffic["retried_entries"] += released
                logger.info("Stored %d held entries of rounds %s again; %d still held", released,
                            sorted({e.round for e in due}), left)

    def _fresh_to_send(self, entry: Entry) -> bool:
        """Whether a held entry is still worth storing: a round our own buffer would still take a group of."""
        clock, sink = self._feed_clock, self._feed_sink
        if clock is None or sink is None:
            return time.monotonic() - entry.held_since <= _UNFED_FRESH_S
        return clock.accepts(entry.round, max_age_rounds=sink.max_age_rounds())

    def unconfirmed(self) -> tuple[int, list[int]]:
        """(entries, their swarm rounds) of ours that no replica has confirmed yet."""
        with self._lock:
            return len(self._unconfirmed), self._unconfirmed.rounds()

    def _submit(self, op: str, make: Callable[[DHTNode], Coroutine[Any, Any, T]], done: Callable[[T | None], Any]) -> bool:
        """Run ``make(node)`` on the DHT loop without waiting; ``done`` gets its result (None if it failed or timed
        out). False if not connected."""
        loop, node = self._loop, self._node
        if loop is None or node is None:
            logger.warning("Swarm %s skipped: not connected", op)
            return False

        async def bounded() -> None:
            result = None
            try:
                result = await asyncio.wait_for(make(node), self._call_timeout)
            except TimeoutError:
                self._count_timeout(op)
                logger.warning("Swarm %s timed out after %.1f s", op, self._call_timeout)
            except Exception:
                logger.warning("Swarm %s failed", op, exc_info=True)
            finally:
                with self._lock:
                    self._publishes_in_flight -= 1
            done(result)

        with self._lock:
            self._publishes_in_flight += 1
        asyncio.run_coroutine_threadsafe(bounded(), loop)
        return True

    # ------------------------------------------------------------------------------------------- gathering
    def gather(self, round: int) -> GatherResult:
        """A uniform sample of peers' groups for ``round``, one group per peer, within this round's fetch budget.

        A one-off read for tools and tests (rounds use :meth:`start_feed`). Each call reads more of the directory
        and fetches more peers while the budget lasts: the first call fetches ``groups_wanted`` groups, later calls
        half as many more. Bad entries are counted by reason, never raised.
        """
        if not 0 <= round <= MAX_ROUND:
            return GatherResult((), Counter(), frozenset())
        state = self._round_state(round)
        self._maybe_rebootstrap()

        async def once(node: DHTNode) -> None:
            await self._read_directory(node, round, state, self._gather_reread)
            with self._lock:
                recent = {p for other in self._rounds.values() for p in other.pool}
            await self._learn_address_groups(list(recent | state.tried_peers))
            count = self._wanted if not state.tried_peers else max(1, self._wanted // 2)
            await self._fetch_groups(node, round, state, self._one_per_new_peer(round, state, count))

        # one call: each RPC inside is bounded by a third of call_timeout, each group lookup by two thirds
        self._call("gather", once, timeout=1.5 * self._call_timeout)
        latest: dict[str, GroupRecord] = {}
        for (peer, _), group in state.fetched.items():
            latest[peer] = group
        records = tuple(sorted((g.as_round_record() for g in latest.values()), key=lambda r: r.peer_id))
        if state.rejected:
            logger.info("Round %d: rejected entries %s", round, dict(state.rejected))
        # Only the budget ends a round's gather: a directory read to the end now may hold a peer that is still
        # generating on the next read (the caller knows who is live and when its deadline is).
        return GatherResult(records=records, rejected=state.rejected.copy(), peers=frozenset(state.tried_peers),
                            published=len(state.pool), exhausted=self._spent(state))

    def start_feed(self, sink: GroupSink, clock: SwarmClock, *, poll_s: float | None = None) -> None:
        """Fetch peers' groups of the recent swarm rounds in the background, on the DHT loop, into ``sink`` (a
        :class:`node.sapo.peer_buffer.PeerGroupBuffer`), until shutdown, every ``poll_s`` or, without it, as often as
        ``sink.poll_interval_s()`` says each time. Costs the caller's threads nothing."""
        self._feed_clock, self._feed_sink = clock, sink
        loop = self._loop
        if loop is None or self._node is None:
            raise RuntimeError("start the swarm before its feed")

        def create() -> None:
            self._feed = loop.create_task(self._feed_loop(sink, clock, poll_s))

        loop.call_soon_threadsafe(create)

    async def _feed_loop(self, sink: GroupSink, clock: SwarmClock, poll_s: float | None) -> None:
        """Every poll: read the directory of the current and previous swarm round (older rounds of the window
        once), and fetch the new groups peers announced there, as many as ``sink`` still wants of each peer."""
        while True:
            started = time.monotonic()
            try:
                node = self._node
                if node is None:
                    return
                if not self._initial_peers or node.protocol.routing_table.uid_to_peer_id:
                    await self._feed_once(node, sink, clock)
                elif time.monotonic() - self._last_rebootstrap >= _REBOOTSTRAP_EVERY_S:
                    self._last_rebootstrap = time.monotonic()
                    await self._bootstrap(node, [_parse_invite(a) for a in self._initial_peers])
            except asyncio.CancelledError:
                raise
            except Exception:
                logger.warning("Swarm feed: a poll failed", exc_info=True)
            interval = sink.poll_interval_s() if poll_s is None else poll_s
            await asyncio.sleep(max(0.0, interval - (time.monotonic() - started)))

    async def _feed_once(self, node: DHTNode, sink: GroupSink, clock: SwarmClock) -> None:
        now = clock.now()
        if now != self._storage_logged_round:  # once a swarm round: what peers make us hold (bench/attack.py reads it)
            self._storage_logged_round = now
            self._log_storage(node)
        oldest = max(now - sink.max_age_rounds(), 0)
        # a past round is read once (nobody publishes there any more), and once again when a peer reappears after
        # rounds without a pointer, or shows up first after rounds we read: it, or we, was cut off, and its held
        # entries of those rounds have landed since
        again = set(self._reappearances.take(oldest))
        if again:
            logger.info("Reading rounds %s again: peers showed up after rounds without them", sorted(again))
        for round_ in range(now, oldest - 1, -1):
            state = self._round_state(round_, keep=sink.max_age_rounds() + 2)
            if self._spent(state, feed=True):
                continue
            if round_ >= now - 1 or not state.shards_read or round_ in again:
                await asyncio.wait_for(self._read_directory(node, round_, state, self._feed_reread, None),
                                       self._call_timeout)
                self._reappearances.seen(round_, list(state.pool))
            picks = self._new_groups(round_, state, sink)
            if picks:
                found = await self._fetch_groups(node, round_, state, picks, remember=False)
                networks = self._address_groups([group.peer_id for group, _ in found])
                for group, size in found:
                    seen = state.seen_at.get((group.peer_id, group.index), time.time())
                    sink.offer(group, published_at=min(seen, clock.start_of(round_ + 1)), size=size,
                               network=networks[group.peer_id])

    def _spent(self, state: _RoundGather, *, feed: bool = False) -> bool:
        """Whether the round's fetch budget is spent: a gather's, or the feed's (larger: a peer may publish several
        times in one swarm round, and we may play several rounds in it)."""
        fetches = max(self._max_fetches, _FEED_FETCHES) if feed else self._max_fetches
        return state.fetches >= fetches or state.bytes >= fetches * MAX_GROUP_RECORD_BYTES

    def _round_state(self, round: int, *, keep: int = _ROUNDS_KEPT) -> _RoundGather:
        with self._lock:
            state = self._rounds.get(round)
            if state is None:
                state = self._rounds[round] = _RoundGather()
                while len(self._rounds) > max(keep, _ROUNDS_KEPT):
                    del self._rounds[min(self._rounds)]
            return state

    def _gather_reread(self, state: _RoundGather) -> list[int]:
        """Shards a gather reads again once every one was read: one a call, in turn, for peers published since."""
        if not state.reread:
            state.reread = self._rng.sample(range(self._shards), self._shards)
        first, state.reread = state.reread[:1], state.reread[1:]
        return first

    def _feed_reread(self, state: _RoundGather) -> list[int]:
        """Shards the feed reads again each poll: those of the peers it knows in this round (their pointers grow as
        they publish more), of the peers that published in the other rounds it keeps and of the peers it is
        connected to (members that will publish: a peer that published after our first read of the round is found
        at the next poll, not when its shard's turn comes), a first read's worth at most, and one other in turn,
        for peers it knows nothing of yet. The empty shards of a small swarm are not read every poll: each read
        costs a request to every replica, served by peers that are training too."""
        node = self._node
        connected = node.protocol.routing_table.uid_to_peer_id.values() if node is not None else ()
        with self._lock:
            recent = {peer for other in self._rounds.values() for peer in other.pool}
        wanted = {shard_of(peer, self._shards) for peer in recent}
        wanted |= {shard_of(peer.to_base58(), self._shards) for peer in connected}
        most = _FIRST_READ_SHARDS[1]
        chosen = self._rng.sample(sorted(wanted), most - 1) if len(wanted) >= most else sorted(wanted)
        if len(chosen) < self._shards:
            in_turn = self._gather_reread(state)[0]
            while in_turn in chosen:
                in_turn = self._gather_reread(state)[0]
            chosen.append(in_turn)
        return chosen

    async def _read_directory(self, node: DHTNode, round: int, state: _RoundGather,
                              reread: Callable[[_RoundGather], list[int]],
                              reads_per_shard: int | None = DIRECTORY_READS_PER_SHARD) -> None:
        """Read shards in random order until the pool holds enough peers to sample J from (or all were read); once
        all were read, the shards ``reread`` names. A pointer that grew replaces the one we had. ``reads_per_shard``
        bounds the round's reads (None: the caller bounds them per call)."""
        target = max(4 * self._wanted, 16)
        unread = [s for s in range(self._shards) if s not in state.shards_read]
        self._rng.shuffle(unread)
        first = not state.shards_read  # later reads of a round top up with a shard or two: too few to measure
        if not unread:
            unread = reread(state)
        batch = self._first_read(target, len(unread)) if first else max(1, len(unread))
        entries_read = shards_read = 0
        budget = math.inf if reads_per_shard is None else reads_per_shard * self._shards
        while unread and state.directory_reads < budget:
            shards, unread = unread[:batch], unread[batch:]
            keys = [self._directory_key(round, shard) for shard in shards]
            found = await _latest_many(node, keys)
            state.directory_reads += len(shards)
            state.shards_read.update(shards)
            self.traffic["lookups"] += len(keys)
            read = [self._dictionary_entries((found or {}).get(key)) for key in keys]
            entries_read += sum(map(len, read))
            shards_read += len(shards)
            now = time.time()
            for entries, shard in zip(read, shards):
                for author, entry in entries:
                    if author is None or author == self.peer_id:
                        continue
                    known = state.pool.get(author)
                    try:
                        pointer = decode_pointer(entry.value)
                    except RecordRejected as e:
                        state.rejected[e.reason] += 1
                        continue
                    if pointer.peer_id != author or shard_of(author, self._shards) != shard:
                        state.rejected["peer_mismatch"] += 1
                    elif pointer.round != round:
                        state.rejected["round_mismatch"] += 1
                    elif known is None or pointer.groups > known.groups:
                        state.pool[author] = pointer
                        for index in range(known.groups if known else 0, pointer.groups):
                            state.seen_at.setdefault((author, index), now)
            # enough peers to sample from, counted by network: identities from one take one peer's place
            await self._learn_address_groups(list(state.pool))
            if first and (len(set(self._address_groups(list(state.pool)).values())) >= target or state.fetched):
                break
            batch = min(2 * batch, self._shards)
        if first:
            self._measure_shards(entries_read, shards_read)
        if shards_read:
            self._retry_missing(state)

    @staticmethod
    def _retry_missing(state: _RoundGather) -> None:
        """After a read of the directory: the groups found missing since the last one may be looked up again, within
        :data:`MISSING_RETRIES_PER_PEER` a peer."""
        for peer, index in sorted(state.missing):
            if state.retried[peer] < MISSING_RETRIES_PER_PEER:
                state.retried[peer] += 1
                state.tried.discard((peer, index))
        state.missing.clear()

    def _banned(self, state: _RoundGather, peers: list[str]) -> list[str]:
        """``peers`` less those in backoff (counted once per round)."""
        now = time.monotonic()
        banned = [p for p in peers if self._banned_until.get(p, 0.0) > now]
        fresh_bans = [p for p in banned if p not in state.tried_peers]
        if fresh_bans:
            state.rejected["backoff"] += len(fresh_bans)
            state.tried_peers.update(fresh_bans)
        return [p for p in peers if p not in banned]

    def _one_per_new_peer(self, round: int, state: _RoundGather, count: int) -> dict[str, tuple[str, int]]:
        """A gather's picks: ``count`` peers not tried yet, sampled uniformly (those claiming spread first), one
        group each (a spread one if claimed)."""
        count = min(count, self._max_fetches - state.fetches)
        if self._wanted == 0 or count <= 0 or state.bytes >= self._max_fetch_bytes:
            return {}
        fresh = self._banned(state, [p for p in state.pool if p not in state.tried_peers])
        fresh = self._over_address_groups(fresh, count, state)
        picks = {}
        for peer in fresh[:count]:
            pointer = state.pool[peer]
            index = self._rng.choice(pointer.spread or range(pointer.groups))
            picks[self._group_key(round, peer, index)] = (peer, index)
        return picks

    def _new_groups(self, round: int, state: _RoundGather, sink: GroupSink) -> dict[str, tuple[str, int]]:
        """The feed's picks for one poll: groups not fetched yet of the peers ``sink`` wants more of, newest first
        (those claiming spread before the others), until ``2 J`` are picked. Networks take turns, one group each
        (identities from one network count as one peer: :meth:`_address_groups`, as the address book last read them,
        no call to the daemon on this path), in random order; within a network its peers take turns, in uniform
        random order."""
        budget = 2 * max(1, self._wanted)
        peers = self._banned(state, list(state.pool))
        self._rng.shuffle(peers)
        groups = self._address_groups(peers)
        lanes: dict[str, list[str]] = {}
        queues: dict[str, list[int]] = {}
        for peer in peers:
            pointer, spread = state.pool[peer], set(state.pool[peer].spread)
            new = sorted((i for i in range(pointer.groups) if (peer, i) not in state.tried),
                         key=lambda i: (i in spread, i), reverse=True)
            wanted = min(len(new), sink.wants(peer, groups[peer])) if new else 0
            if wanted:
                queues[peer] = new[:wanted]
                lanes.setdefault(groups[peer], []).append(peer)
        order = list(lanes)
        self._rng.shuffle(order)
        picks: dict[str, tuple[str, int]] = {}
        while order and len(picks) < budget:
            for network in list(order):
                if len(picks) >= budget:
                    break
                lane = lanes[network]
                peer = lane.pop(0)
                index = queues[peer].pop(0)
                picks[self._group_key(round, peer, index)] = (peer, index)
                if queues[peer]:
                    lane.append(peer)
                if not lane:
                    order.remove(network)
        return picks

    async def _fetch_groups(self, node: DHTNode, round: int, state: _RoundGather, picks: dict[str, tuple[str, int]],
                            *, remember: bool = True) -> list[tuple[GroupRecord, int]]:
        """Fetch the picked groups ({dht key: (peer, index)}) side by side; the valid ones with their sizes
        (``remember``: also kept in the round's state, for :meth:`gather`)."""
        if not picks:
            return []
        state.tried.update(picks.values())
        state.tried_peers.update(peer for peer, _ in picks.values())
        state.fetches += len(picks)
        lookup_timeout = self._call_timeout * (_RPCS_PER_CALL - 1) / _RPCS_PER_CALL
        found = await _first_replicas(node, list(picks), lookup_timeout)
        self.traffic["lookups"] += len(picks)
        valid = []
        for key, (peer, index) in picks.items():
            entries = self._dictionary_entries((found or {}).get(key), sealed=False)  # a group record carries its own tag
            if not entries:
                state.rejected["missing"] += 1
                state.missing.add((peer, index))
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
                    elif group.index != index:
                        reason = "index_mismatch"
                    else:
                        if remember:
                            state.fetched[(peer, index)] = group
                        self._strikes.pop(peer, None)
                        valid.append((group, size))
            if reason is not None:
                state.rejected[reason] += 1
                self._strike(peer)
        return valid

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
        groups = self._address_groups(list({*fresh, *state.tried_peers, *recent}))
        sampled = Counter(groups[p] for p in state.tried_peers)
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

    async def _learn_address_groups(self, peers: list[str]) -> None:
        """Ask our daemon for these peers' address groups, for :meth:`_address_groups` to answer on the DHT loop
        (where it cannot wait for the loop)."""
        if self._addresses is not None and peers:
            try:
                await self._addresses.groups_of(peers)  # refreshes what the address book holds
            except Exception:
                logger.debug("Could not read the peers' addresses", exc_info=True)

    def address_groups(self, peers: list[str]) -> dict[str, str]:
        """Each peer's network address group (:mod:`node.swarm.peer_addresses`), or :data:`UNKNOWN`: identities from
        one network count as one peer."""
        return self._address_groups(peers)

    def _address_groups(self, peers: list[str]) -> dict[str, str]:
        """Each peer's address group: of our live connection to it, else of the peer that sent us its entries (we
        hold its directory pointer as a replica), else :data:`UNKNOWN`."""
        addresses, node = self._addresses, self._node
        if addresses is None or node is None or not peers:
            return dict.fromkeys(peers, UNKNOWN)
        if _running_loop() is self._loop:  # the gather and the feed: what _learn_address_groups found
            groups = addresses.known_groups(peers)
        else:
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

    def _log_storage(self, node: DHTNode) -> None:
        """On the DHT loop, which alone changes the storage."""
        storage = node.protocol.storage
        usage = storage.usage()
        logger.info("Swarm storage: %d bytes held for the swarm, at most %d from one address group and %d from one "
                    "signer; refused %s, from %s; evicted %d", storage.measure(),
                    max((v for k, v in usage["by_group"].items() if k != "self"), default=0), usage["largest_signer"],
                    json.dumps(dict(storage.refused)), json.dumps(dict(storage.refused_from)), storage.evicted)

    def _stored_rounds(self) -> tuple[int, int] | None:
        current = self._feed_clock.now() if self._feed_clock is not None else self._current_round
        if current is None:
            return None
        first, last = self._round_window(current)
        if self._feed_sink is not None:  # every round a group may still be fresh in (short rounds: more of them), so
            # that a member's entries stored again after a partition are kept
            first = min(first, max(0, current - self._feed_sink.max_age_rounds()))
        return first, last

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
        """Store ``value`` as our entry in our shard of the game's clock (``key_of``: :func:`position_key`)."""
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

    def _call(self, op: str, make: Callable[[DHTNode], Coroutine[Any, Any, T]], *,
              timeout: float | None = None) -> T | None:
        """Run ``make(node)`` on the DHT loop; its result, or None if not running, failed or timed out (after
        ``timeout``, default ``call_timeout``)."""
        loop, node = self._loop, self._node
        if loop is None or node is None:
            logger.warning("Swarm %s skipped: not connected", op)
            return None
        timeout = self._call_timeout if timeout is None else timeout
        future = asyncio.run_coroutine_threadsafe(make(node), loop)
        try:
            return future.result(timeout)
        except TimeoutError:
            future.cancel()
            self._count_timeout(op)
            logger.warning("Swarm %s timed out after %.1f s", op, timeout)
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
        forced = None if self._reachability_mode == "auto" else self._reachability_mode
        self._p2p = await self._create_p2p(initial_peers, [listen], forced, relays=())
        self._daemon = _daemon_process(self._p2p)
        verdict = await self._first_verdict(initial_peers)
        daemon_mode = _daemon_reachability(verdict)
        if forced is None and daemon_mode is not None and not ipaddress.ip_address(self._host).is_loopback:
            # p2pd's options are fixed at start: a daemon that serves as a relay (reachable) or books relay slots
            # (unreachable) is started again, on the port the first one got, with what we now know
            first_visible = await self._p2p.get_visible_maddrs()
            port = _listen_port(first_visible) or self._port
            # a daemon forced private hides its LAN addresses: friends on the same network still use them
            self._lan_addresses = [str(a) for a in first_visible]
            await self._p2p.shutdown()
            self._p2p = None
            self._p2p = await self._create_p2p(initial_peers, [_listen_maddr(self._host, port)], daemon_mode,
                                                relays=verdict.relays, identity_checked=True)
            self._daemon = _daemon_process(self._p2p)
        if verdict.relays:
            verdict = await self._reserve_relays(verdict)
        relayed = verdict.status in ("relayed", "unreachable")
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
            # a node peers cannot reach would be asked to store keys it can never be asked for: it joins as a DHT
            # client (it still publishes and reads). A node that starts the swarm serves it, reachable or not.
            client_mode=self._client_mode or (relayed and bool(initial_peers)),
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
        await reachability.DialBackService(
            self._p2p, own_verdict=lambda: self._verdict, own_addresses=lambda: list(self._invite_outside()),
            on_reachable=self._remember_contact,
        ).serve()
        await self._set_verdict(verdict)
        if not verdict.checked:
            self._recheck = asyncio.ensure_future(self._recheck_until_checked())

    async def _create_p2p(self, initial_peers: list[str], listen: list[str], mode: str | None, *,
                          relays: Sequence[str], identity_checked: bool = False) -> P2P:
        return await P2P.create(
            initial_peers=initial_peers,
            host_maddrs=listen,
            identity_path=str(self._identity.path),
            startup_timeout=self._start_timeout,
            persistent_conn_max_msg_size=_MAX_MESSAGE_BYTES,
            nat_port_map=True,  # ask the router (UPnP / NAT-PMP) to forward a port to us
            use_relay=True,  # dial /p2p-circuit addresses of members that are reached through relays
            force_reachability=mode,  # "public": serve as a relay (within p2pd's limits); "private": book relays
            use_auto_relay=mode == "private",
            trusted_relays=None,
            check_if_identity_free=not identity_checked,
        )

    async def _first_verdict(self, initial_peers: list[str]) -> Verdict:
        """Reachability at start: asked of the invite's peers when joining, else judged from what we see."""
        p2p = self._p2p
        visible = await p2p.get_visible_maddrs(latest=True)
        port = _listen_port(visible) or self._port
        if self._reachability_mode != "auto":
            status = "reachable" if self._reachability_mode == "public" else "unreachable"
            local = reachability.local_verdict(visible, port, self._reachable_networks)
            return dataclasses.replace(local, status=status, via=local.via if status == "reachable" else "none")
        local = reachability.local_verdict(visible, port, self._reachable_networks)
        if local.status != "reachable" and not ipaddress.ip_address(self._host).is_loopback:
            visible = await self._wait_for_mapping(port) or visible
            local = reachability.local_verdict(visible, port, self._reachable_networks)
        # a member reached through a relay cannot see where we come from: its relay can, and is reachable
        relays = list(dict.fromkeys(a.split("/p2p-circuit")[0] for a in initial_peers if "/p2p-circuit" in a))
        for relay in relays:
            await self._connect(relay)
        helpers = await _connected(p2p, [*initial_peers, *relays])
        if not helpers:
            return local
        mapped = [p for _, p in reachability.tcp_endpoints(visible) if p != port]
        answers = await reachability.ask(p2p, helpers, [port, *mapped], self._call_timeout)
        logger.info("Reachability: %d of %d peers answered: %s", len(answers), len(helpers), answers)
        for answer in answers:  # the invite's addresses of a peer that answered: they work, keep them
            worked = [a for a in initial_peers if a.endswith(f"/p2p/{answer.peer}") and "/p2p-circuit" not in a]
            if worked:
                self._remember_contact(answer.peer, worked)
        verdict = reachability.combine(answers, port, mapped)
        if verdict is None:
            return local
        self._learn_members(answers)
        if verdict.status == "unreachable":
            relays = tuple(a.addresses[0].rsplit("/p2p/", 1)[0] + f"/p2p/{a.peer}" for a in answers
                           if a.public and a.addresses)
            if relays:
                verdict = dataclasses.replace(verdict, status="relayed", via="relay", relays=relays)
        return verdict

    async def _reserve_relays(self, verdict: Verdict) -> Verdict:
        """Book a slot on each relay of the verdict (connecting first: the daemon was restarted); keep those that
        took us, and renew them before they expire."""
        booked = []
        for relay in verdict.relays:
            peer = await self._connect(relay)
            if peer is not None and await reachability.reserve(self._p2p, peer, self._call_timeout):
                booked.append(relay)
        if booked and self._renew is None:
            self._renew = asyncio.ensure_future(self._renew_reservations(booked))
        if not booked:
            return dataclasses.replace(verdict, status="unreachable", via="none", relays=())
        return dataclasses.replace(verdict, relays=tuple(booked))

    async def _connect(self, address: str) -> PeerID | None:
        """Connect our daemon to the peer at ``address`` (``.../p2p/<id>``); its id, or None if that failed."""
        maddr = Multiaddr(address)
        peer = PeerID.from_base58(address.rsplit("/p2p/", 1)[1])
        try:
            await asyncio.wait_for(self._p2p._client.connect(peer, [maddr.decapsulate(Multiaddr(f"/p2p/{peer}"))]),
                                   self._call_timeout)
        except Exception as e:
            logger.info("Could not connect to %s: %r", address, e)
            return None
        return peer

    async def _renew_reservations(self, relays: list[str]) -> None:
        while True:
            await asyncio.sleep(_RESERVATION_RENEW_S)
            if self._p2p is None:
                return
            for relay in relays:
                await reachability.reserve(self._p2p, PeerID.from_base58(Multiaddr(relay)["p2p"]), self._call_timeout)

    async def _wait_for_mapping(self, port: int) -> list[Multiaddr] | None:
        """Our addresses once the router mapped a port for us (p2pd asks it at start, over UPnP or NAT-PMP);
        None if no mapping appeared in a few seconds (no such router, or it refused)."""
        deadline = time.monotonic() + _MAPPING_WAIT_S
        while time.monotonic() < deadline:
            visible = await self._p2p.get_visible_maddrs(latest=True)
            if any(p != port for _, p in reachability.tcp_endpoints(visible)):
                return visible
            await asyncio.sleep(0.5)
        return None

    async def _recheck_until_checked(self) -> None:
        """A verdict nobody has checked (we started the swarm): ask the peers that joined, until some answer."""
        while self._verdict is not None and not self._verdict.checked:
            await asyncio.sleep(_RECHECK_EVERY_S)
            p2p, node = self._p2p, self._node
            if p2p is None or node is None:
                return
            # every peer connected to us, DHT clients included (they are in no routing table)
            peers = [info.peer_id for info in await p2p.list_peers()][:5]
            if not peers:
                continue
            visible = await p2p.get_visible_maddrs(latest=True)
            port = _listen_port(visible) or self._port
            mapped = [p for _, p in reachability.tcp_endpoints(visible) if p != port]
            answers = await reachability.ask(p2p, peers, [port, *mapped], self._call_timeout)
            verdict = reachability.combine(answers, port, mapped)
            if verdict is not None:
                self._learn_members(answers)
                await self._set_verdict(verdict)

    async def _set_verdict(self, verdict: Verdict) -> None:
        self._verdict = verdict
        visible = await self._p2p.get_visible_maddrs(latest=True)
        visible += [a for a in self._lan_addresses if a not in map(str, visible)]
        outside, self._local_invite = reachability.invite_addresses(self.peer_id, visible, verdict,
                                                                    self._reachable_networks)
        self._invite = outside + self._local_invite + [a for a in self._members if a not in outside][:2]
        logger.info("Swarm %r: %s via %s (checked by %d peers); invite %s", self._swarm_name, verdict.status,
                    verdict.via, verdict.checked_by, " ".join(self._invite))
        if self._on_reachability is not None:
            try:
                self._on_reachability(verdict, outside, list(self._local_invite))
            except Exception:
                logger.warning("Reachability callback failed", exc_info=True)

    def _invite_outside(self) -> list[str]:
        suffix = f"/p2p/{self.peer_id}"
        return [a for a in self._invite if a.endswith(suffix) and a not in self._local_invite]

    def _learn_members(self, answers: Sequence[reachability.Answer]) -> None:
        for answer in answers:
            if answer.public and answer.addresses:
                self._remember_contact(answer.peer, list(answer.addresses))
                for address in answer.addresses[:1]:
                    if address not in self._members:
                        self._members.append(address)

    def _remember_contact(self, peer: str, addresses: list[str]) -> None:
        with self._lock:
            self._contacts.pop(peer, None)
            self._contacts[peer] = addresses[:reachability.MAX_ADDRESSES]
            while len(self._contacts) > _CONTACTS_KEPT:
                self._contacts.popitem(last=False)

    def _attribute_stores(self, p2p: P2P) -> None:
        """Wrap hivemind's store handler as it registers, so that storage knows which address group sent each
        entry (:data:`node.swarm.storage.SENDER_GROUP`)."""
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
        for task in (self._recheck, self._renew):
            if task is not None:
                task.cancel()
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


async def _store_many(node: DHTNode, keys: list[str], values: list[Any], expiration: float | list[float],
                      subkeys: list[bytes]) -> dict:
    """hivemind's ``store_many`` (answers per (key, subkey)) with a beam of twice the replicas, not its default
    (bucket_size): finding where to store visits every node of the beam, and each answers with its neighbours and
    whatever it holds under the key (a whole clock shard). The replicas and as many fallbacks are all a store needs.
    A DHT client serves nobody, so its own storage is no replica: hivemind would store there and answer "stored" when
    no server can be reached (a link down), and the entry would never be sent again.
    """
    return await node.store_many(keys, values, expiration, subkeys=subkeys, beam_size=2 * node.num_replicas,
                                 exclude_self=node.protocol.client_mode)


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


def _valid_addresses(addresses: Iterable[str]) -> list[str]:
    """The addresses of ``addresses`` that are valid peer multiaddrs (remembered ones may be stale or damaged)."""
    valid = []
    for addr in addresses:
        try:
            valid.append(_parse_invite(addr))
        except NodeError:
            logger.info("Ignoring remembered peer address %r", addr)
    return valid


def _listen_port(visible: Sequence[Multiaddr]) -> int | None:
    """The TCP port p2pd listens on (the port of its own, non-mapped addresses)."""
    ports = Counter(port for _, port in reachability.tcp_endpoints(visible))
    for maddr in visible:  # loopback is never a mapped address
        text = str(maddr)
        if text.startswith(("/ip4/127.", "/ip6/::1/")) and "/tcp/" in text:
            return int(text.split("/tcp/")[1].split("/")[0])
    return ports.most_common(1)[0][0] if ports else None


async def _connected(p2p: P2P, addresses: Sequence[str]) -> list[PeerID]:
    """The peers of ``addresses`` we hold a connection to (the bootstrap connected to those it could)."""
    wanted = {Multiaddr(a)["p2p"] for a in addresses}
    return [info.peer_id for info in await p2p.list_peers() if info.peer_id.to_base58() in wanted][:5]


def _daemon_reachability(verdict: Verdict) -> str | None:
    """The p2pd reachability to restart with after a check, if any: a member reachable at its own address serves
    as a relay; one that is not books relay slots. A mapped port belongs to the running daemon: it stays."""
    if verdict.status == "reachable" and verdict.via == "public_address":
        return "public"
    if verdict.status in ("relayed", "unreachable"):
        return "private"
    return None


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


def _local_only(invite: Sequence[str], reachable_networks: Sequence[str]) -> list[str]:
    """The invite's addresses if none of them can work from another network (LAN and loopback only), else []."""
    ips = []
    for address in invite:
        if "/p2p-circuit" in address:
            return []
        endpoints = reachability.tcp_endpoints([address]) or [(None, 0)]
        ip = endpoints[0][0]
        if ip is None or reachability.is_reachable_ip(ip, reachable_networks):
            return []
        ips.append(ip)
    return ips


def _start_error(error: Exception, *, joining: bool, port: int, local_only: Sequence[str] = ()) -> NodeError:
    detail = str(error) or type(error).__name__
    if joining and local_only and "bootstrap" in detail:
        return NodeError(
            f"Could not join the swarm: the invite only holds addresses inside the inviting computer's own network "
            f"({', '.join(dict.fromkeys(local_only))}), and this computer cannot reach them",
            hint="The inviting node is not reachable from the internet. Ask any member that is (their app says "
            "'Reachable' or 'Reachable through a relay') for an invite, or ask the host to forward its TCP port on "
            "their router or enable UPnP, then send a fresh invite.",
            code="swarm_invite_local_only",
        )
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


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
