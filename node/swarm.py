"""Sharing rollouts with the swarm over hivemind's DHT.

Why we do not use ``hivemind.DHT``: it runs a ``DHTNode`` in a forked child process and talks to it through an
``mp.Pipe``. Under uvloop the child's end of that pipe is non-blocking, so any call whose pickled arguments exceed
~16 KiB (``dht.store(key, value_of_60_KiB, ...)``, i.e. every real rollout record) makes the child's ``recv()`` raise
``BlockingIOError``/``EOFError``; the child's loop dies and the caller's ``store()`` blocks forever. Instead we run
``hivemind.dht.node.DHTNode`` directly, on our own asyncio loop in a daemon thread of the node process. Public methods
are synchronous: each submits a coroutine to that loop and waits with a timeout, so a stuck network can delay the
caller by at most ``call_timeout`` (the timeout is logged and counted in :attr:`Swarm.timeouts`), never hang it.

Layout in the DHT, for a swarm called ``S``:

* ``S/round/<r>`` holds a dictionary with one entry per peer: the subkey is the peer's owner marker
  ``b"[owner:<ssh-rsa public key>]"``, the value one :mod:`node.records` record.
* ``S/clock`` holds a dictionary with one entry per peer: the owner marker maps to the last round it announced.

``RSASignatureValidator`` (with the identity's key, the libp2p key itself) signs every entry we store, and every
honest node verifies the signature against the key in the owner marker, both when asked to store an entry and when
receiving one, so only the holder of a key can write or overwrite its entry. The marker's key also yields the
author's libp2p peer id, which :meth:`Swarm.gather` compares with the ``peer_id`` a record claims. A second
validator (:class:`_OwnedEntriesOnly`) makes honest nodes refuse anything else, e.g. values hivemind itself would
choke on.

The p2pd daemon is a child process of the node: :meth:`Swarm.shutdown` (also run at exit) stops it, killing it if it
does not stop in time, so no daemon or unix socket under /tmp outlives the node.
"""

from __future__ import annotations

import asyncio
import atexit
import dataclasses
import ipaddress
import logging
import re
import socket
import threading
from collections import Counter
from collections.abc import Callable, Coroutine, Sequence
from pathlib import Path
from typing import Any, TypeVar

import msgpack
import psutil
from cryptography.exceptions import UnsupportedAlgorithm
from hivemind.dht.crypto import RSASignatureValidator
from hivemind.dht.node import DHTNode
from hivemind.dht.routing import DHTID
from hivemind.dht.protocol import ValidationError
from hivemind.dht.validation import CompositeValidator, DHTRecord, RecordValidatorBase
from hivemind.p2p import P2P, PeerID
from hivemind.utils.crypto import RSAPublicKey
from hivemind.utils.multiaddr import Multiaddr
from hivemind.utils.timed_storage import get_dht_time

from node.errors import NodeError
from node.identity import Identity, peer_id_from_public_key
from node.records import MAX_RECORD_BYTES, RecordRejected, RoundRecord, decode_record, encode_record

logger = logging.getLogger(__name__)

T = TypeVar("T")

_OWNER_RE = re.compile(RSASignatureValidator.PUBLIC_KEY_REGEX)
# RSASignatureValidator appends "[signature:...]" to values and refuses a value holding two of them
_SIGNATURE_MARKER = b"[signature:"
# One DHT response carries every peer's entry for a round: ~60 records at MAX_RECORD_BYTES (p2pd's default is 4 MiB).
_MAX_MESSAGE_BYTES = 32 * 1024**2
# p2pd's control sockets (hivemind's P2P._UNIX_SOCKET_PREFIX); a daemon that fails to start leaves its own behind
_SOCKET_DIR, _SOCKET_GLOB = Path("/tmp"), "hivemind-*.sock"
_RPCS_PER_CALL = 3  # a single unanswered RPC may cost a third of call_timeout, so the call still completes
_INVITE_HINT = "An invite looks like /ip4/203.0.113.7/tcp/38211/p2p/QmPeerId...: copy it whole from the inviting node."
_JOIN_HINT = (
    "Check that the inviting node is running and that the invite is copied whole. If it runs on another machine, "
    "use an address of that machine you can reach (not its 127.0.0.1) and make sure its firewall or router lets "
    "the TCP port in the invite through."
)


@dataclasses.dataclass(frozen=True)
class GatherResult:
    records: tuple[RoundRecord, ...]  # valid records from OTHER peers for that round, sorted by peer id
    rejected: Counter[str]  # reason -> count: RecordRejected reasons, "bad_signature", "peer_mismatch", ...
    peers: frozenset[str]  # other peers that published for that round (authenticated, valid record or not)


class Swarm:
    """This node's membership in one swarm: publishes and gathers round records through the DHT."""

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
    ) -> None:
        self._identity = identity
        self._swarm_name = swarm_name
        self._initial_peers = tuple(initial_peers)
        self._host, self._port = host, port
        self._record_ttl = record_ttl
        self._call_timeout = call_timeout
        self._start_timeout = start_timeout

        self._validator = RSASignatureValidator(identity.private_key)
        self._owner = self._validator.local_public_key  # our subkey everywhere: only we can sign entries under it

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

    def publish(self, record: RoundRecord) -> bool:
        """Store our record for ``record.round``. False (and logged) if it could not be stored in time."""
        if record.peer_id != self.peer_id:
            raise ValueError(f"record of {record.peer_id} cannot be published by {self.peer_id}")
        value = encode_record(record)
        if _SIGNATURE_MARKER in value:
            logger.warning("Round %d record not shared: its text contains %r", record.round, _SIGNATURE_MARKER)
            return False
        expiration = get_dht_time() + self._record_ttl
        key = self._round_key(record.round)
        stored = self._call("publish", lambda node: node.store(key, value, expiration, subkey=self._owner))
        if stored is False:
            logger.warning("Round %d record (%d bytes) was not stored by any peer", record.round, len(value))
        return bool(stored)

    def gather(self, round: int) -> GatherResult:
        """Valid records other peers published for ``round``; bad entries are counted by reason, never raised."""
        key = self._round_key(round)
        records, rejected, peers = [], Counter(), set()
        for author, entry in self._entries("gather", key):
            if author is None:
                rejected["bad_signature"] += 1
                continue
            if author == self.peer_id:
                continue
            peers.add(author)
            try:
                record = decode_record(entry.value)
            except RecordRejected as e:
                rejected[e.reason] += 1
                continue
            if record.peer_id != author:
                rejected["peer_mismatch"] += 1
            elif record.round != round:
                rejected["round_mismatch"] += 1
            else:
                records.append(record)
        if rejected:
            logger.info("Round %d: rejected entries %s", round, dict(rejected))
        records.sort(key=lambda r: r.peer_id)
        return GatherResult(records=tuple(records), rejected=rejected, peers=frozenset(peers))

    def announce_round(self, round: int) -> None:
        """Tell the swarm we are at ``round`` (see :meth:`swarm_round`)."""
        expiration = get_dht_time() + self._record_ttl
        key = self._clock_key()
        if not self._call("announce", lambda node: node.store(key, round, expiration, subkey=self._owner)):
            logger.warning("Could not announce round %d to the swarm", round)

    def swarm_round(self) -> int | None:
        """The highest round announced by any live peer, us included; None if none is known."""
        rounds = [
            entry.value
            for author, entry in self._entries("clock", self._clock_key())
            if author is not None and type(entry.value) is int and entry.value >= 0
        ]
        return max(rounds, default=None)

    def peers_seen(self) -> int:
        """Other peers whose entries we saw in recent gathers and clock reads and which have not expired yet."""
        now = get_dht_time()
        with self._lock:
            self._seen = {peer: expiration for peer, expiration in self._seen.items() if expiration > now}
            return len(self._seen)

    def connected_peers(self) -> int:
        """Peers in our DHT routing table: others are in the swarm even if they have not published yet."""
        node = self._node
        return 0 if node is None else len(node.protocol.routing_table.uid_to_peer_id)

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

    def _round_key(self, round: int) -> str:
        return f"{self._swarm_name}/round/{round}"

    def _clock_key(self) -> str:
        return f"{self._swarm_name}/clock"

    def _entries(self, op: str, key: str) -> list[tuple[str | None, Any]]:
        """(author peer id or None if unauthenticated, entry) for every entry under ``key``; remembers authors."""
        found = self._call(op, lambda node: node.get(key, latest=True))
        if found is None or not isinstance(found.value, dict):
            return []
        entries = [(_owner_peer_id(subkey), entry) for subkey, entry in found.value.items()]
        with self._lock:
            for author, entry in entries:
                if author is not None and author != self.peer_id:
                    self._seen[author] = max(self._seen.get(author, 0.0), entry.expiration_time)
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
        self._node = await DHTNode.create(
            p2p=self._p2p,
            # hivemind draws a random DHT id from Python's global `random`, which training libraries seed (TRL
            # seeds it with the run seed): equally seeded nodes would share one id and never see each other's
            # records. Derive it from the peer id instead: unique per identity, stable across restarts.
            node_id=DHTID.generate(source=self._identity.peer_id.encode()),
            initial_peers=initial_peers,
            record_validator=CompositeValidator([self._validator, _OwnedEntriesOnly()]),
            wait_timeout=self._call_timeout / _RPCS_PER_CALL,
        )
        self._invite = [str(maddr) for maddr in await self._node.get_visible_maddrs()]

    async def _stop_node(self) -> None:
        node, p2p, self._node, self._p2p = self._node, self._p2p, None, None
        if node is not None:
            await self._stop_step(node.shutdown())
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


class _OwnedEntriesOnly(RecordValidatorBase):
    """Accept only entries whose subkey is an owner marker and whose value is bytes (a record) or an int (a round).

    Everything our swarm stores is one peer's entry under a shared key, so anything else is hostile: a plain value
    with a later expiration shadows the dictionary (hivemind then refuses every entry stored under that key), an
    entry without an owner can be overwritten by anyone, and a value that hivemind cannot deserialize makes every
    get() of that key fail to resolve. Its priority is below RSASignatureValidator's, so it sees values unsigned.
    """

    def validate(self, record: DHTRecord) -> bool:
        subkey, value = _unpack_scalar(record.subkey), _unpack_scalar(record.value)
        if type(subkey) is not bytes or not _OWNER_RE.fullmatch(subkey):
            return False
        return (type(value) is bytes and len(value) <= MAX_RECORD_BYTES) or (type(value) is int and value >= 0)


def _unpack_scalar(raw: bytes) -> Any:
    try:
        return msgpack.unpackb(raw, raw=False, max_array_len=0, max_map_len=0, max_ext_len=0)
    except (ValueError, msgpack.UnpackException):
        return None


def _owner_peer_id(subkey: Any) -> str | None:
    """The peer id of the key in an owner-marker subkey; None if the subkey is not one."""
    match = _OWNER_RE.fullmatch(subkey) if type(subkey) is bytes else None
    if match is None:
        return None
    try:
        return peer_id_from_public_key(RSAPublicKey.from_bytes(match.group(1)))
    except (ValueError, UnsupportedAlgorithm):
        return None


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
