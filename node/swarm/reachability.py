"""Whether peers outside this computer's network can reach the node, how, and which addresses to invite them with.

A node is *reachable* when a peer elsewhere can open a connection to it: it has an address on the internet (or on a
network every member shares, ``reachable_networks``), or its router forwards a port to it (UPnP / NAT-PMP mapping,
made by p2pd's ``-natPortMap``, or a port forwarded by hand). Otherwise it is reached *through a relay*: a reachable
member relays for it (libp2p circuit relay v2) and its invite carries ``/p2p-circuit`` addresses; with no relay at
all, nobody outside its network can reach it.

Nobody can tell that from inside: we ask peers to dial us back. A checking peer opens a fresh TCP connection to the
address it sees our connection come from (never an address we name: a node cannot make peers connect to third
parties) on each port we ask about, and answers which ones a libp2p daemon answered on. Without any peer to ask
(a node starting a new swarm) we judge from what we see (:func:`local_verdict`): an address in ``reachable_networks``
or a global one, or a port mapping the router reported; the verdict says it is unchecked until a peer has checked.

Why not libp2p's AutoNAT: it needs several confirming peers (a swarm of two never gets there), and it treats every
non-global address as undialable, so inside a private network nothing is ever public.
"""

from __future__ import annotations

import asyncio
import dataclasses
import ipaddress
import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from typing import Literal

import msgpack
from google.protobuf.wrappers_pb2 import BytesValue
from hivemind.p2p import P2P, P2PContext, PeerID
from hivemind.utils.multiaddr import Multiaddr

logger = logging.getLogger(__name__)

PROTOCOL = "rl-swarm.reachability.v1"
Status = Literal["reachable", "relayed", "unreachable", "unknown"]
Via = Literal["public_address", "port_mapping", "relay", "none"]

MAX_PORTS = 4  # ports one request may ask about
MAX_ADDRESSES = 8  # addresses a helper reports about itself
MAX_MESSAGE_BYTES = 4096
DIAL_TIMEOUT_S = 3.0
_MIN_INTERVAL_S = 10.0  # one check per requesting peer this often, at most
_CONCURRENT_CHECKS = 8  # checks a helper runs at once; more wait
_MULTISTREAM = b"/multistream/1.0.0"


@dataclasses.dataclass(frozen=True)
class Verdict:
    status: Status
    via: Via
    checked_by: int  # peers that dialed us back (0: judged from what we see)
    public_ip: str | None = None  # the address peers see us at, where known
    ports: tuple[int, ...] = ()  # TCP ports reachable at public_ip
    relays: tuple[str, ...] = ()  # relay addresses (/ip4/.../p2p/<relay>) we are reached through

    @property
    def checked(self) -> bool:
        return self.checked_by > 0


@dataclasses.dataclass(frozen=True)
class Answer:
    """One peer's dial-back: the address it sees us at, which ports answered, and what it says about itself."""

    peer: str
    observed_ip: str | None
    open_ports: tuple[int, ...]
    public: bool  # the helper found itself reachable: it can relay for us
    addresses: tuple[str, ...]  # the helper's own reachable addresses


def is_reachable_ip(ip: str, reachable_networks: Sequence[str] = ()) -> bool:
    """An address peers elsewhere can connect to: global, or in a network every member shares."""
    address = ipaddress.ip_address(ip)
    return address.is_global or any(address in ipaddress.ip_network(n, strict=False) for n in reachable_networks)


def tcp_endpoints(maddrs: Iterable[Multiaddr | str], *, loopback: bool = False) -> list[tuple[str, int]]:
    """(ip, port) of each direct TCP address (no relay circuit; loopback ones only if asked for)."""
    found = []
    for maddr in maddrs:
        text = str(maddr)
        if "/p2p-circuit" in text:
            continue
        parts = text.split("/")
        if len(parts) > 4 and parts[1] in ("ip4", "ip6") and parts[3] == "tcp":
            ip, port = parts[2], int(parts[4])
            if (loopback or not ipaddress.ip_address(ip).is_loopback) and (ip, port) not in found:
                found.append((ip, port))
    return found


def local_verdict(visible: Sequence[Multiaddr | str], listen_port: int, reachable_networks: Sequence[str]) -> Verdict:
    """What we can tell without a peer: an address of ours that peers can reach, or a port mapped by the router."""
    for ip, port in tcp_endpoints(visible):
        if is_reachable_ip(ip, reachable_networks):
            via: Via = "public_address" if port == listen_port else "port_mapping"
            return Verdict("reachable", via, 0, ip, (port,))
    return Verdict("unreachable", "none", 0)


def combine(answers: Sequence[Answer], listen_port: int, mapped_ports: Sequence[int]) -> Verdict | None:
    """The verdict of the peers that answered: a port counts as open when most of them could connect to it.

    None when nobody answered. A lying helper can only spoil the verdict when it is half of those asked.
    """
    answers = [a for a in answers if a.observed_ip is not None]
    if not answers:
        return None
    ip = Counter(a.observed_ip for a in answers).most_common(1)[0][0]
    agreeing = [a for a in answers if a.observed_ip == ip]
    votes = Counter(port for a in agreeing for port in set(a.open_ports))
    open_ports = tuple(sorted(p for p, n in votes.items() if 2 * n > len(answers)))
    if listen_port in open_ports:
        # at its own port: the node has that address itself, or the router forwards the same port to it
        return Verdict("reachable", "public_address", len(answers), ip, open_ports)
    if open_ports and set(open_ports) & set(mapped_ports):
        return Verdict("reachable", "port_mapping", len(answers), ip, open_ports)
    return Verdict("unreachable", "none", len(answers), ip)


def invite_addresses(peer_id: str, visible: Sequence[Multiaddr | str], verdict: Verdict,
                     reachable_networks: Sequence[str]) -> tuple[list[str], list[str]]:
    """(addresses that work from outside, addresses that only work in our own network), each with /p2p/<peer id>.

    Loopback only for a node that listens on nothing else. Reachable: the public address and port peers connect to (checked or seen). Relayed: the circuit
    addresses through each relay. The local ones (a LAN address) are for friends on the same network.
    """
    suffix = f"/p2p/{peer_id}"
    outside: list[str] = []
    local: list[str] = []
    if verdict.status == "reachable" and verdict.public_ip is not None:
        family = "ip6" if ":" in verdict.public_ip else "ip4"
        outside += [f"/{family}/{verdict.public_ip}/tcp/{port}{suffix}" for port in verdict.ports]
    outside += [f"{relay}/p2p-circuit{suffix}" for relay in verdict.relays]
    loopback: list[str] = []
    for maddr in visible:
        text = str(maddr)
        address = text if text.endswith(suffix) else text + suffix
        if "/p2p-circuit" in text:
            if address not in outside:
                outside.append(address)
            continue
        endpoints = tcp_endpoints([text])
        if not endpoints:
            if text.startswith(("/ip4/127.", "/ip6/::1/")):
                loopback.append(address)
            continue
        ip, _ = endpoints[0]
        if is_reachable_ip(ip, reachable_networks):
            if address not in outside:
                outside.append(address)
        elif address not in local:
            local.append(address)
    if not outside and not local:  # a node that listens on loopback only: other nodes on this computer join it
        local = loopback
    return outside, local


# ------------------------------------------------------------------------------------------------ the protocol
class DialBackService:
    """Answers peers' reachability checks on our p2pd (see the module docstring), within bounds."""

    def __init__(self, p2p: P2P, *, own_verdict: Callable[[], Verdict | None],
                 own_addresses: Callable[[], list[str]], on_reachable: Callable[[str, list[str]], None]) -> None:
        self._p2p = p2p
        self._own_verdict = own_verdict
        self._own_addresses = own_addresses
        self._on_reachable = on_reachable  # (peer id, its addresses we could connect to): a contact worth keeping
        self._last: dict[str, float] = {}
        self._slots = asyncio.Semaphore(_CONCURRENT_CHECKS)

    async def serve(self) -> None:
        await self._p2p.add_protobuf_handler(PROTOCOL, self._handle, BytesValue)

    async def _handle(self, request: BytesValue, context: P2PContext) -> BytesValue:
        peer = context.remote_id.to_base58()
        ports = _decode_request(request.value)
        now = time.monotonic()
        if ports is None or now - self._last.get(peer, -_MIN_INTERVAL_S) < _MIN_INTERVAL_S:
            return BytesValue(value=_encode({"v": 1, "ip": None, "open": [], "public": False, "addrs": []}))
        self._last[peer] = now
        if len(self._last) > 4096:
            self._last = {p: t for p, t in self._last.items() if now - t < _MIN_INTERVAL_S}
        ip = await observed_ip(self._p2p, context.remote_id)
        open_ports: list[int] = []
        if ip is not None:
            async with self._slots:
                answered = await asyncio.gather(*(answers_libp2p(ip, port) for port in ports))
            open_ports = [port for port, ok in zip(ports, answered) if ok]
        if open_ports:
            family = "ip6" if ":" in ip else "ip4"
            self._on_reachable(peer, [f"/{family}/{ip}/tcp/{port}/p2p/{peer}" for port in open_ports])
        verdict = self._own_verdict()
        public = verdict is not None and verdict.status == "reachable"
        addresses = self._own_addresses()[:MAX_ADDRESSES] if public else []
        return BytesValue(value=_encode({"v": 1, "ip": ip, "open": open_ports, "public": public, "addrs": addresses}))


async def ask(p2p: P2P, peers: Sequence[PeerID], ports: Sequence[int], timeout: float) -> list[Answer]:
    """Ask each of ``peers`` to dial us back on ``ports``; the answers that came within ``timeout``."""
    request = BytesValue(value=_encode({"v": 1, "ports": list(ports)[:MAX_PORTS]}))

    async def one(peer: PeerID) -> Answer | None:
        try:
            response = await asyncio.wait_for(p2p.call_protobuf_handler(peer, PROTOCOL, request, BytesValue), timeout)
        except Exception as e:  # a peer without the protocol, gone, or slow: no answer
            logger.debug("reachability check by %s failed: %r", peer, e)
            return None
        return _decode_answer(peer.to_base58(), response.value)

    found = await asyncio.gather(*(one(peer) for peer in peers))
    return [a for a in found if a is not None]


async def observed_ip(p2p: P2P, peer: PeerID) -> str | None:
    """The IP address our direct connection with ``peer`` comes from (None if we only reach it through a relay)."""
    for info in await p2p.list_peers():
        if info.peer_id != peer:
            continue
        for ip, _ in tcp_endpoints(info.addrs, loopback=True):  # loopback: a swarm on one computer
            return ip
    return None


async def answers_libp2p(ip: str, port: int, timeout: float = DIAL_TIMEOUT_S) -> bool:
    """Whether a libp2p daemon answers a fresh TCP connection to ip:port (it greets with multistream-select)."""
    writer = None
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(ip, port), timeout)
        greeting = await asyncio.wait_for(reader.read(64), timeout)
        return _MULTISTREAM in greeting
    except (OSError, TimeoutError, asyncio.IncompleteReadError):
        return False
    finally:
        if writer is not None:
            writer.close()


def _encode(message: dict) -> bytes:
    return msgpack.packb(message)


def _unpack(raw: bytes) -> dict | None:
    if len(raw) > MAX_MESSAGE_BYTES:
        return None
    try:
        message = msgpack.unpackb(raw, raw=False, max_array_len=64, max_map_len=16, max_str_len=512,
                                  max_bin_len=0, max_ext_len=0)
    except (ValueError, msgpack.UnpackException):
        return None
    return message if isinstance(message, dict) and message.get("v") == 1 else None


def _decode_request(raw: bytes) -> list[int] | None:
    message = _unpack(raw)
    ports = message.get("ports") if message else None
    if not isinstance(ports, list) or not 1 <= len(ports) <= MAX_PORTS:
        return None
    if not all(type(p) is int and 1 <= p <= 65535 for p in ports):
        return None
    return sorted(set(ports))


def _decode_answer(peer: str, raw: bytes) -> Answer | None:
    message = _unpack(raw)
    if message is None:
        return None
    ip, open_ports, addrs = message.get("ip"), message.get("open"), message.get("addrs")
    try:
        ip = None if ip is None else str(ipaddress.ip_address(ip))
    except ValueError:
        return None
    if not isinstance(open_ports, list) or not all(type(p) is int and 1 <= p <= 65535 for p in open_ports):
        return None
    if not isinstance(addrs, list):
        return None
    valid = []
    for addr in addrs[:MAX_ADDRESSES]:
        try:
            maddr = Multiaddr(addr)
            if maddr["p2p"] == peer:  # a helper vouches only for its own addresses
                valid.append(str(maddr))
        except (TypeError, ValueError, LookupError):
            continue
    return Answer(peer, ip, tuple(open_ports[:MAX_PORTS]), message.get("public") is True, tuple(valid))


def explain(verdict: Verdict, *, starting_swarm: bool, port: int | None = None,
            reachable_networks: Sequence[str] = ()) -> tuple[str, str]:
    """(one line for the header, plain advice): what friends outside this network can and cannot do."""
    checked = "" if verdict.checked else " (not yet confirmed by a peer)"
    if (verdict.status == "reachable" and verdict.public_ip is not None
            and not is_reachable_ip(verdict.public_ip, reachable_networks)):
        # the peers that checked share our network (or this computer): nothing is known about the internet
        return ("Reachable on your own network",
                f"Peers on your own network reached this node at {verdict.public_ip}. Whether friends elsewhere "
                "can is not known: nobody outside your network has checked.")
    if verdict.status == "reachable":
        how = ("your router forwards a port to this computer (UPnP)" if verdict.via == "port_mapping"
               else "this computer has an address the internet can reach")
        return (f"Reachable from the internet{checked}",
                f"Friends anywhere can join with your invite: {how}. Keep the app running while they join.")
    if verdict.status == "relayed":
        return ("Reachable through a relay",
                "Peers outside your network reach you through a relay run by a reachable swarm member. It works, "
                "but is slower than a direct connection. To be reached directly, forward TCP port "
                f"{port or 'of this node'} on your router to this computer, or enable UPnP on the router.")
    seen = f" (the internet sees your network at {verdict.public_ip})" if verdict.public_ip else ""
    forward = (f"forward TCP port {port} on your router to this computer{seen} (a fixed port in Settings keeps it "
               "stable), or enable UPnP on your router" if port else
               f"forward this node's TCP port on your router to this computer{seen}, or enable UPnP on your router")
    if starting_swarm:
        return (f"Not reachable from outside your network{checked}",
                "Friends on your own network can join with your invite. Friends elsewhere cannot: your router "
                f"does not let them in. To host for them, {forward}; or let a member with a public address (a "
                "server, a cloud machine) start the swarm or join it first: it relays for members behind routers.")
    return (f"Not reachable from outside your network{checked}",
            "You take part through the swarm's reachable members, but nobody outside your network can connect to "
            f"you, and no member offers a relay. To be reachable, {forward}.")


# ------------------------------------------------------------------------------------------- relay reservations
HOP_PROTOCOL = "/libp2p/circuit/relay/0.2.0/hop"
_RESERVE = b"\x08\x00"  # HopMessage{type: RESERVE}
_STATUS_OK = 100


async def reserve(p2p: P2P, relay: PeerID, timeout: float) -> bool:
    """Book a slot on ``relay`` (circuit relay v2), so that peers can reach us at ``<relay>/p2p-circuit/p2p/<us>``.

    p2pd's auto-relay books slots by itself, but only after it has found four relay candidates or three minutes have
    passed, and it never considers relays whose address is not global: in a swarm with one public member that is
    never, or minutes late. A reservation is the relay's promise for its own peer, whatever stream asked: we send
    the RESERVE message ourselves over a stream p2pd opens, and its relay client answers the relay's STOP streams.
    """
    writer = None
    try:
        _, reader, writer = await asyncio.wait_for(p2p._client.stream_open(relay, [HOP_PROTOCOL]), timeout)
        writer.write(bytes([len(_RESERVE)]) + _RESERVE)
        await writer.drain()
        length = await asyncio.wait_for(_read_varint(reader), timeout)
        if not 0 < length <= MAX_MESSAGE_BYTES:
            return False
        message = await asyncio.wait_for(reader.readexactly(length), timeout)
        status = _hop_status(message)
        if status != _STATUS_OK:
            logger.info("Relay %s refused a reservation: status %s", relay, status)
        return status == _STATUS_OK
    except Exception as e:  # no relay service there, gone, refused: not reserved
        logger.info("Relay reservation on %s failed: %r", relay, e)
        return False
    finally:
        if writer is not None:
            writer.close()


async def _read_varint(reader: asyncio.StreamReader) -> int:
    value = shift = 0
    while shift < 35:
        byte = (await reader.readexactly(1))[0]
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value
        shift += 7
    raise ValueError("varint too long")


def _hop_status(message: bytes) -> int | None:
    """The ``status`` (field 5) of a HopMessage, walking its top-level fields."""
    position = 0

    def varint() -> int:
        nonlocal position
        value = shift = 0
        while True:
            byte = message[position]
            position += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    try:
        while position < len(message):
            key = varint()
            field, wire = key >> 3, key & 7
            if wire == 0:
                value = varint()
                if field == 5:
                    return value
            elif wire == 2:
                length = varint()  # before moving on: varint() itself advances the position
                position += length
            else:
                return None
    except IndexError:
        return None
    return None
