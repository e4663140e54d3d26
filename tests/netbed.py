"""A simulated internet made of network namespaces: public hosts on one bridge, home hosts behind NAT routers.

Layout (documentation address ranges only, everything inside namespaces this bed creates and deletes):

* ``<tag>-net``: the internet, a bridge ``br0`` in its own namespace, no address of its own.
* a public host: one namespace, ``eth0`` on the bridge with ``203.0.113.(10+i)/24``.
* a home: a router namespace (``wan`` on the bridge with ``203.0.113.(100+j)/24``, ``lan`` to the host) and a host
  namespace behind it, on its own /26 of 198.51.100.0/24 or 192.0.2.0/24 (router .1, host .2). The router masquerades
  outgoing traffic and drops every inbound connection it did not see go out (iptables in the router's namespace), the
  way a home router does; with ``upnp=True`` it also runs miniupnpd (UPnP IGD and NAT-PMP) for the host.

Nothing touches the machine's own namespace: iptables rules and interfaces live in the namespaces and go away
with them. :meth:`Netbed.close` (also on a failed build) kills what runs inside and deletes every namespace, and a
new bed first deletes the namespaces of beds whose test process died.
"""

from __future__ import annotations

import ctypes
import dataclasses
import ipaddress
import json
import multiprocessing
import os
import queue
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

PREFIX = "rswnb"  # namespaces of this bed are "<PREFIX><pid>x<n>-<role>"
INTERNET = ipaddress.ip_network("203.0.113.0/24")
STUN_IP, STUN_PORT = str(INTERNET[2]), 3478
HOME_LANS = tuple(
    ipaddress.ip_network(f"{base}.{start}/26")
    for start in (0, 64, 128, 192)
    for base in ("198.51.100", "192.0.2")
)
_ROOT = Path(__file__).resolve().parents[1]
_counter = 0


class NetbedUnavailable(RuntimeError):
    """This machine cannot build the bed (not root, no ip/iptables, no namespaces): the reason, for a skip."""


@dataclasses.dataclass
class Host:
    name: str
    netns: str
    ip: str  # the host's own address
    public_ip: str  # where the internet sees it: its own address, or its router's
    router_netns: str | None = None

    @property
    def behind_nat(self) -> bool:
        return self.router_netns is not None


class Member:
    """A :mod:`tests.netbed_peer` process: each call sends one command and waits for its answer, with a deadline."""

    def __init__(self, name: str, host: Host, process: multiprocessing.Process, channel: socket.socket, log: Path,
                 identity: Path) -> None:
        self.name, self.host, self.process, self.log, self.identity = name, host, process, log, identity
        self.peer_id: str | None = None
        self.invite: list[str] = []
        self._answers: queue.Queue[str] = queue.Queue()
        self._reader, self._writer = channel.makefile("rb"), channel.makefile("wb")
        channel.close()  # the two files hold the socket
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self._reader:
            self._answers.put(line.decode())

    def call(self, op: str, timeout: float = 60, **args) -> object:
        self._writer.write((json.dumps({"op": op, **args}) + "\n").encode())
        self._writer.flush()
        try:
            answer = json.loads(self._answers.get(timeout=timeout))
        except queue.Empty:
            raise AssertionError(f"{self.name}: no answer to {op} in {timeout} s; log:\n{self.tail()}") from None
        if "error" in answer:
            raise MemberError(f"{self.name}: {op} failed: {answer['error']}")
        return answer["ok"]

    def start(self, swarm: str = "bed", timeout: float = 90, **options) -> dict:
        started = self.call("start", timeout=timeout, identity=str(self.identity), swarm_name=swarm, **options)
        self.peer_id, self.invite = started["peer_id"], started["invite"]
        return started

    def state(self) -> dict:
        return self.call("state")

    def stop(self) -> None:
        if self.process.is_alive():
            try:
                self.call("stop", timeout=30)
            except (AssertionError, BrokenPipeError, OSError):
                pass
        self._writer.close()

    def tail(self, chars: int = 4000, *, without: str | None = None) -> str:
        """The end of the member's log (``without``: less the lines holding that text, such as a periodic line)."""
        try:
            text = self.log.read_text(errors="replace")
        except OSError:
            return ""
        if without is not None:
            text = "".join(line for line in text.splitlines(keepends=True) if without not in line)
        return text[-chars:]


class MemberError(RuntimeError):
    """A command the member answered with an error (its text says which)."""


def check_available() -> None:
    if os.geteuid() != 0:
        raise NetbedUnavailable("the simulated internet needs root (network namespaces, iptables)")
    for tool in ("ip", "iptables"):
        if shutil.which(tool) is None:
            raise NetbedUnavailable(f"{tool} is not installed (apt-get install iproute2 iptables)")
    probe = f"{PREFIX}{os.getpid()}probe"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        raise NetbedUnavailable(f"cannot create a network namespace: {made.stderr.strip()}")
    try:
        nat = _run_in(probe, ["iptables", "-t", "nat", "-L", "-n"], check=False)
        if nat.returncode != 0:
            raise NetbedUnavailable(f"iptables NAT does not work in a namespace: {nat.stderr.strip()}")
    finally:
        subprocess.run(["ip", "netns", "del", probe], capture_output=True)


def remove_stale_beds() -> None:
    """Delete namespaces left by beds whose process is gone (a killed test run cannot clean up after itself)."""
    for name in _our_namespaces():
        owner = name[len(PREFIX):].split("x", 1)[0]
        if owner.isdigit() and not _alive(int(owner)):
            _delete_namespace(name)


class Netbed:
    def __init__(self) -> None:
        global _counter
        _counter += 1
        self.tag = f"{PREFIX}{os.getpid()}x{_counter}"
        self.hosts: dict[str, Host] = {}
        self._namespaces: list[str] = []
        self._processes: list[subprocess.Popen] = []
        self._members: list[Member] = []
        self._publics = 0
        self._homes = 0
        self._ports = 0
        self.workdir = Path(tempfile.mkdtemp(prefix=f"{self.tag}-"))
        try:
            self._internet = self._add_namespace("net")
            self._ip(self._internet, "link", "add", "br0", "type", "bridge")
            self._ip(self._internet, "link", "set", "br0", "up")
            # the provider's STUN server, which miniupnpd asks for the router's public address
            self._ip(self._internet, "addr", "add", f"{STUN_IP}/{INTERNET.prefixlen}", "dev", "br0")
            self._stun = None
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------------------------------------- building
    def public(self, name: str) -> Host:
        """A host with a public address on the internet."""
        self._publics += 1
        ip = str(INTERNET[10 + self._publics])
        netns = self._add_namespace(name)
        self._plug(netns, "eth0", ip)
        host = self.hosts[name] = Host(name, netns, ip, ip)
        return host

    def home(self, name: str, *, upnp: bool = False, rate_mbit: float | None = None) -> Host:
        """A host behind its own NAT router, which drops inbound connections (``upnp``: the router runs miniupnpd).
        ``rate_mbit`` caps the home's link to the internet both ways (tc tbf on the router)."""
        if self._homes >= len(HOME_LANS):
            raise ValueError(f"the bed has room for {len(HOME_LANS)} homes")
        lan = HOME_LANS[self._homes]
        self._homes += 1
        wan_ip = str(INTERNET[100 + self._homes])
        router_ip, host_ip = str(lan[1]), str(lan[2])
        router = self._add_namespace(f"{name}r")
        netns = self._add_namespace(name)
        self._plug(router, "wan", wan_ip)
        self._ip(router, "link", "add", "lan", "type", "veth", "peer", "name", "eth0", "netns", netns)
        self._ip(router, "addr", "add", f"{router_ip}/{lan.prefixlen}", "dev", "lan")
        self._ip(router, "link", "set", "lan", "up")
        self._ip(netns, "addr", "add", f"{host_ip}/{lan.prefixlen}", "dev", "eth0")
        self._ip(netns, "link", "set", "eth0", "up")
        self._ip(netns, "route", "add", "default", "via", router_ip)
        _run_in(router, ["sysctl", "-q", "-w", "net.ipv4.ip_forward=1"])
        rules = [
            ["-t", "nat", "-A", "POSTROUTING", "-o", "wan", "-j", "MASQUERADE"],
            # inbound: only replies to what went out, and what the router itself forwards (UPnP mappings: DNAT)
            ["-A", "FORWARD", "-i", "wan", "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED,DNAT", "-j", "ACCEPT"],
            ["-A", "FORWARD", "-i", "wan", "-j", "DROP"],
            ["-A", "INPUT", "-i", "wan", "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"],
            ["-A", "INPUT", "-i", "wan", "-j", "DROP"],
        ]
        for rule in rules:
            _run_in(router, ["iptables", "-w", *rule])
        if rate_mbit is not None:
            for dev in ("wan", "lan"):
                _run_in(router, ["tc", "qdisc", "add", "dev", dev, "root", "tbf", "rate", f"{rate_mbit}mbit",
                                 "burst", "32kbit", "latency", "400ms"])
        host = self.hosts[name] = Host(name, netns, host_ip, wan_ip, router_netns=router)
        if upnp:
            self._start_miniupnpd(host, router_ip, lan)
        return host

    def _start_miniupnpd(self, host: Host, router_ip: str, lan: ipaddress.IPv4Network) -> None:
        if shutil.which("miniupnpd") is None:
            raise NetbedUnavailable("miniupnpd is not installed (apt-get install miniupnpd)")
        conf = self.workdir / f"{host.name}-miniupnpd.conf"
        if shutil.which("nft") is None:
            raise NetbedUnavailable("nft is not installed (apt-get install nftables): miniupnpd needs its tables")
        # miniupnpd (nftables build) adds its mappings to chains it expects to exist
        _run_in(host.router_netns, ["nft", "-f", "-"], input=(
            "table inet miniupnpd {\n"
            " chain forward { type filter hook forward priority 0; policy accept; jump forward_upnp; }\n"
            " chain forward_upnp { }\n"
            " chain prerouting { type nat hook prerouting priority -100; policy accept; jump prerouting_upnp; }\n"
            " chain prerouting_upnp { }\n"
            " chain postrouting { type nat hook postrouting priority 100; policy accept; jump postrouting_upnp; }\n"
            " chain postrouting_upnp { }\n"
            "}\n"))
        if self._stun is None:
            self._stun = self.spawn(self._internet, [sys.executable, "-m", "tests.netbed", "stun"], cwd=_ROOT)
        conf.write_text(
            # miniupnpd refuses to map ports on a router whose WAN address is in a reserved range (the documentation
            # ranges are) unless a STUN server sees that address unfiltered: ours does
            f"ext_ifname=wan\next_perform_stun=yes\next_stun_host={STUN_IP}\next_stun_port={STUN_PORT}\n"
            f"listening_ip=lan\n"
            "upnp_table_name=miniupnpd\nupnp_nat_table_name=miniupnpd\nupnp_forward_chain=forward_upnp\n"
            "upnp_nat_chain=prerouting_upnp\nupnp_nat_postrouting_chain=postrouting_upnp\n"
            "enable_upnp=yes\nenable_natpmp=yes\nsecure_mode=yes\nsystem_uptime=no\n"
            f"allow 1024-65535 {lan} 1024-65535\ndeny 0-65535 0.0.0.0/0 0-65535\n"
        )
        log = open(self.workdir / f"{host.name}-miniupnpd.log", "wb")
        self.spawn(host.router_netns, ["miniupnpd", "-d", "-f", str(conf), "-P",
                                        str(self.workdir / f"{host.name}-miniupnpd.pid")],
                   stdout=log, stderr=subprocess.STDOUT)
        # ready once its STUN check enabled port forwarding and it listens for NAT-PMP requests
        deadline = time.monotonic() + 30
        path = self.workdir / f"{host.name}-miniupnpd.log"
        while b"Listening for NAT-PMP" not in path.read_bytes():
            if time.monotonic() > deadline:
                raise RuntimeError(f"miniupnpd did not start: {path.read_text(errors='replace')[-2000:]}")
            time.sleep(0.2)
        if b"Port forwarding is now enabled" not in path.read_bytes():
            raise RuntimeError(f"miniupnpd cannot forward ports: {path.read_text(errors='replace')[-2000:]}")

    # ------------------------------------------------------------------------------------------- running
    def member(self, host: Host, name: str) -> Member:
        """A swarm member (a real DhtExchange, :mod:`tests.netbed_peer`) running on ``host``.

        Members are forked from one server process that has already imported what a member runs: those imports
        (torch, through hivemind) cost seconds of CPU a process, and the tests start dozens of members."""
        ours, theirs = socket.socketpair()
        log = self.workdir / f"{name}.log"
        process = _MEMBERS.Process(target=_serve_member, args=(host.netns, theirs, str(log)), name=name, daemon=True)
        process.start()
        theirs.close()
        member = Member(name, host, process, ours, log, self.workdir / f"{name}.key")
        self._members.append(member)
        return member

    def spawn(self, netns: str, argv: list[str], **popen) -> subprocess.Popen:
        """Start ``argv`` inside ``netns``; stopped by :meth:`close` if still running."""
        process = subprocess.Popen(["ip", "netns", "exec", netns, *argv], start_new_session=True, **popen)
        self._processes.append(process)
        return process

    def run(self, host: Host | str, argv: list[str], **kwargs) -> subprocess.CompletedProcess:
        netns = host.netns if isinstance(host, Host) else host
        return _run_in(netns, argv, **kwargs)

    def link(self, host: Host, up: bool) -> None:
        """Cut (or restore) a host's link to the internet: its router's WAN for a home, its own for a public host."""
        netns, dev = (host.router_netns, "wan") if host.behind_nat else (host.netns, "eth0")
        self._ip(netns, "link", "set", dev, "up" if up else "down")

    def namespaces(self) -> list[str]:
        return list(self._namespaces)

    # ------------------------------------------------------------------------------------------- teardown
    def close(self) -> None:
        for member in self._members:  # a clean stop first: p2pd removes its sockets under /tmp
            member.stop()
        for member in self._members:  # each member leads its own session (p2pd with it)
            if member.process.is_alive():
                _signal_session(member.process.pid, signal.SIGTERM)
        for process in self._processes:
            if process.poll() is None:
                _signal_session(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        for process in self._processes:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_session(process.pid, signal.SIGKILL)
                process.wait(5)
        for member in self._members:
            member.process.join(max(0.1, deadline - time.monotonic()))
            if member.process.is_alive():
                _signal_session(member.process.pid, signal.SIGKILL)
                member.process.join(5)
        for netns in reversed(self._namespaces):
            _delete_namespace(netns)
        self._namespaces.clear()
        shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> Netbed:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------------------------------- plumbing
    def _add_namespace(self, role: str) -> str:
        netns = f"{self.tag}-{role}"
        subprocess.run(["ip", "netns", "add", netns], check=True, capture_output=True)
        self._namespaces.append(netns)
        self._ip(netns, "link", "set", "lo", "up")
        return netns

    def _plug(self, netns: str, dev: str, ip: str) -> None:
        """A veth from ``netns`` (named ``dev``, address ``ip``) to a port of the internet's bridge."""
        self._ports += 1
        port = f"p{self._ports}"
        self._ip(netns, "link", "add", dev, "type", "veth", "peer", "name", port, "netns", self._internet)
        self._ip(self._internet, "link", "set", port, "master", "br0")
        self._ip(self._internet, "link", "set", port, "up")
        self._ip(netns, "addr", "add", f"{ip}/{INTERNET.prefixlen}", "dev", dev)
        self._ip(netns, "link", "set", dev, "up")

    @staticmethod
    def _ip(netns: str, *args: str) -> None:
        done = subprocess.run(["ip", "-n", netns, *args], capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"ip -n {netns} {' '.join(args)}: {done.stderr.strip()}")


_MEMBERS = multiprocessing.get_context("forkserver")
_MEMBERS.set_forkserver_preload(["tests.netbed_peer"])
_CLONE_NEWNET = 0x40000000  # linux/sched.h


def _serve_member(netns: str, channel: socket.socket, log: str) -> None:
    """A member's process, forked from the preloaded server: in its own session (stopped as a group with its p2pd),
    inside the host's namespace (what ``ip netns exec`` does for a command), answering on ``channel``."""
    os.setsid()
    namespace = os.open(f"/run/netns/{netns}", os.O_RDONLY)
    try:
        if ctypes.CDLL(None, use_errno=True).setns(namespace, _CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"cannot enter the network namespace {netns}")
    finally:
        os.close(namespace)
    stderr = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(stderr, 2)
    os.close(stderr)
    os.dup2(channel.fileno(), 0)
    os.dup2(channel.fileno(), 1)
    channel.close()
    sys.stdin = open(0, encoding="utf-8", closefd=False)
    sys.stdout = open(1, "w", encoding="utf-8", buffering=1, closefd=False)
    sys.stderr = open(2, "w", encoding="utf-8", buffering=1, closefd=False)
    from tests import netbed_peer

    netbed_peer.main()


def _run_in(netns: str, argv: list[str], check: bool = True, **kwargs) -> subprocess.CompletedProcess:
    kwargs.setdefault("capture_output", True)
    kwargs.setdefault("text", True)
    done = subprocess.run(["ip", "netns", "exec", netns, *argv], **kwargs)
    if check and done.returncode != 0:
        raise RuntimeError(f"in {netns}: {' '.join(argv)}: {done.stderr.strip()}")
    return done


def _our_namespaces() -> list[str]:
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split("\n")
    return [line.split()[0] for line in listed if line.startswith(PREFIX)]


def _delete_namespace(netns: str) -> None:
    """Kill what still runs in ``netns`` (only processes of this bed run there), then delete it."""
    pids = subprocess.run(["ip", "netns", "pids", netns], capture_output=True, text=True).stdout.split()
    for pid in pids:
        try:
            os.kill(int(pid), signal.SIGKILL)
        except (ProcessLookupError, ValueError):
            pass
    subprocess.run(["ip", "netns", "del", netns], capture_output=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _signal_session(pid: int, sig: int) -> None:
    """Signal the session ``pid`` leads (a helper or member and the p2pd it started), if it still runs."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        pass


def serve_stun(host: str = STUN_IP, port: int = STUN_PORT) -> None:
    """A minimal STUN server (RFC 5389 Binding): answers each request with the address it came from."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.bind((host, port))
    while True:
        data, (ip, source_port) = sock.recvfrom(2048)
        if len(data) < 20 or data[0:2] != b"\x00\x01":
            continue
        cookie, transaction = data[4:8], data[8:20]
        xport = source_port ^ 0x2112
        xip = bytes(a ^ b for a, b in zip(socket.inet_aton(ip), cookie))
        attribute = struct.pack("!HHBBH", 0x0020, 8, 0, 1, xport) + xip
        sock.sendto(struct.pack("!HH", 0x0101, len(attribute)) + cookie + transaction + attribute, (ip, source_port))


if __name__ == "__main__" and sys.argv[1:] == ["stun"]:
    serve_stun()
