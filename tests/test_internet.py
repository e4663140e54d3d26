"""Home computers behind NAT routers host and join swarms, on a simulated internet (:mod:`tests.netbed`)."""

from __future__ import annotations

import shutil
import time

import pytest

from node.swarm.storage import ROUNDS_BEHIND
from tests.netbed import INTERNET

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

PUBLIC = [str(INTERNET)]  # the bed's internet: every member can reach it
STORAGE_LINES = "Swarm storage:"  # logged every round: left out of the log tails a failure prints


def start(member, **options):
    return member.start(host="0.0.0.0", reachable_networks=PUBLIC, call_timeout=6.0, **options)


def last_verdict(member) -> dict:
    events = member.state()["events"]
    assert events, f"{member.name} reported no reachability"
    return events[-1]


def exchange_rounds(members, rounds=range(1, 4), deadline_s=30.0) -> dict[str, set[str]]:
    """Each member publishes, then gathers until it has every other member's groups (or the deadline passes)."""
    seen = {m.name: set() for m in members}
    for round_ in rounds:
        for m in members:
            assert m.call("publish", round=round_), f"{m.name} could not publish round {round_}"
        deadline = time.monotonic() + deadline_s
        for m in members:
            others = {o.peer_id for o in members if o is not m}
            got: set[str] = set()
            while not others <= got and time.monotonic() < deadline:
                got |= set(m.call("gather", round=round_)["peers"])
            seen[m.name] |= got
    return seen


def test_home_nodes_join_a_public_node_and_are_reached_through_it(netbed):
    pub = netbed.member(netbed.public("pub"), "pub")
    a = netbed.member(netbed.home("a"), "a")
    b = netbed.member(netbed.home("b"), "b")
    start(pub)
    host_view = last_verdict(pub)
    assert host_view["status"] == "reachable" and not host_view["checked_by"]
    assert pub.invite and all("127.0.0.1" not in addr for addr in pub.invite)
    assert pub.invite[0].startswith(f"/ip4/{pub.host.ip}/tcp/")

    start(a, initial_peers=pub.invite)
    start(b, initial_peers=pub.invite)
    for home in (a, b):
        verdict = last_verdict(home)
        assert verdict["status"] == "relayed", verdict
        assert verdict["checked_by"] == 1 and verdict["public_ip"] == home.host.public_ip
        state = home.state()
        assert state["client_mode"], "a node nobody can reach must not serve the DHT"
        circuit = [addr for addr in home.invite if "/p2p-circuit/" in addr]
        assert circuit and circuit[0].startswith(f"/ip4/{pub.host.ip}/tcp/"), home.invite
        assert not any(addr.startswith(f"/ip4/{home.host.ip}/") for addr in verdict["addresses"])
    seen = exchange_rounds([pub, a, b])
    assert seen["a"] == {pub.peer_id, b.peer_id} and seen["b"] == {pub.peer_id, a.peer_id}, seen


def own(member, addresses):
    return [a for a in addresses if a.endswith(f"/p2p/{member.peer_id}")]


def test_router_with_upnp_maps_a_port_and_the_invite_carries_the_mapped_address(netbed):
    if not (shutil.which("miniupnpd") and shutil.which("nft")):
        pytest.skip("no UPnP gateway here: apt-get install miniupnpd nftables")
    pub = netbed.member(netbed.public("pub"), "pub")
    a = netbed.member(netbed.home("a", upnp=True), "a")
    c = netbed.member(netbed.home("c"), "c")
    start(pub)
    start(a, initial_peers=pub.invite)
    verdict = last_verdict(a)
    assert verdict["status"] == "reachable" and verdict["via"] == "port_mapping", verdict
    assert verdict["public_ip"] == a.host.public_ip and verdict["checked_by"] == 1
    mapped = [addr for addr in verdict["addresses"] if addr.startswith(f"/ip4/{a.host.public_ip}/tcp/")]
    assert mapped and own(a, a.invite)[0] == mapped[0], a.invite
    assert not a.state()["client_mode"], "a node its router forwards a port to serves the DHT"
    mappings = netbed.run(a.host.router_netns, ["nft", "list", "chain", "inet", "miniupnpd", "prerouting_upnp"]).stdout
    assert f"dnat ip to {a.host.ip}:" in mappings, mappings
    # a friend behind another router joins with the mapped address alone: no public member in the invite
    start(c, initial_peers=mapped[:1])
    seen = exchange_rounds([a, c], rounds=range(1, 3))
    assert seen["c"] >= {a.peer_id} and seen["a"] >= {c.peer_id}, seen


def test_a_friend_joins_through_the_relay_circuit_of_a_home_member(netbed):
    pub = netbed.member(netbed.public("pub"), "pub")
    a = netbed.member(netbed.home("a"), "a")
    b = netbed.member(netbed.home("b"), "b")
    start(pub)
    start(a, initial_peers=pub.invite)
    circuit = [addr for addr in a.invite if "/p2p-circuit/" in addr]
    assert circuit, a.invite
    start(b, initial_peers=circuit)  # only the home member's relayed address: its invite works by itself
    seen = exchange_rounds([a, b], rounds=range(1, 3))
    assert seen["b"] >= {a.peer_id} and seen["a"] >= {b.peer_id}, seen


def test_a_node_rejoins_through_peers_it_met_when_its_invite_is_gone(netbed):
    pub = netbed.member(netbed.public("pub"), "pub")
    pub2 = netbed.member(netbed.public("pub2"), "pub2")
    b = netbed.member(netbed.home("b"), "b")
    start(pub)
    start(pub2, initial_peers=pub.invite)
    start(b, initial_peers=pub2.invite)
    contacts = b.state()["contacts"]
    assert pub2.peer_id in contacts, contacts
    known = [addr for addrs in contacts.values() for addr in addrs]
    b.stop()
    pub2.stop()  # the member whose invite b had is gone
    again = netbed.member(b.host, "b2")
    again.identity = b.identity
    start(again, initial_peers=pub2.invite, known_peers=known + [f"/ip4/{pub.host.ip}/tcp/1/p2p/{pub.peer_id}"])
    seen = exchange_rounds([pub, again], rounds=range(1, 2))
    assert seen["b2"] == {pub.peer_id}, seen


def test_a_home_host_is_told_that_nobody_outside_can_reach_it(netbed):
    a = netbed.member(netbed.home("a"), "a")
    b = netbed.member(netbed.home("b"), "b")
    start(a)
    verdict = last_verdict(a)
    assert verdict["status"] == "unreachable" and verdict["checked_by"] == 0, verdict
    assert verdict["addresses"] == [] and verdict["local"], verdict
    with pytest.raises(Exception, match="only holds addresses inside the inviting computer.s own network"):
        start(b, initial_peers=a.invite, start_timeout=30.0)


def test_the_host_learns_from_the_members_who_join_whether_it_is_reachable(netbed):
    pub = netbed.member(netbed.public("pub"), "pub")
    a = netbed.member(netbed.home("a"), "a")
    start(pub)
    assert not last_verdict(pub)["checked_by"]
    start(a, initial_peers=pub.invite)
    deadline = time.monotonic() + 60
    while not last_verdict(pub)["checked_by"] and time.monotonic() < deadline:
        time.sleep(1)
    verdict = last_verdict(pub)
    assert verdict["status"] == "reachable" and verdict["checked_by"] >= 1, verdict
    assert verdict["public_ip"] == pub.host.ip


def wait_until(condition, deadline_s: float, poll_s: float = 0.5) -> bool:
    deadline = time.monotonic() + deadline_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(poll_s)
    return condition()


def test_rounds_published_while_the_public_members_link_is_down_reach_everyone_once_it_is_back(netbed):
    # The public member holds every record and relays for the homes: while its link is down nobody can store
    # anything. 22 s of 1-s rounds: more rounds than a member stores around the current one (ROUNDS_BEHIND). c joined
    # before the cut but plays its first round during it: nobody has read a pointer of it before it comes back.
    pub = netbed.member(netbed.public("pub"), "pub")
    a = netbed.member(netbed.home("a"), "a")
    b = netbed.member(netbed.home("b"), "b")
    c = netbed.member(netbed.home("c"), "c")
    start(pub)
    for member in (a, b, c):
        start(member, initial_peers=pub.invite)
    clock = {"epoch": float(int(time.time())), "round_seconds": 1.0}
    for member in (pub, a, b):
        member.call("feed", **clock)

    def rounds_of(receiver, sender) -> set[int]:
        return {r for peer, r, _, _ in receiver.call("report")["arrivals"] if peer == sender.peer_id}

    assert wait_until(lambda: rounds_of(b, a) and rounds_of(a, b), 60), "no exchange before the cut"
    netbed.link(pub.host, up=False)
    cut = time.time()
    c.call("feed", **clock)
    time.sleep(22)
    netbed.link(pub.host, up=True)
    restored = time.time()
    # fresh (2 minutes by default) when the link is back: nothing of the cut may be missing
    members = (pub, a, b, c)
    for sender in (a, b, c):
        published = {int(r): t for r, t in sender.call("report")["published"].items()}
        during = {r for r, t in published.items() if cut + 1 < t < restored - 1}
        assert len(during) > ROUNDS_BEHIND, published
        for receiver in (m for m in members if m is not sender):
            assert wait_until(lambda: during <= rounds_of(receiver, sender), 60), (
                f"{receiver.name} lacks {sender.name}'s rounds {sorted(during - rounds_of(receiver, sender))} of the "
                f"cut {sorted(during)}; log of {sender.name}:\n{sender.tail(without=STORAGE_LINES)}\nlog of "
                f"{receiver.name}:\n{receiver.tail(without=STORAGE_LINES)}")
