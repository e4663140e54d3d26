"""Home computers behind NAT routers host and join swarms, on a simulated internet (:mod:`tests.netbed`)."""

from __future__ import annotations

import time

import pytest

from tests.netbed import INTERNET

pytestmark = pytest.mark.timeout(300)

PUBLIC = [str(INTERNET)]  # the bed's internet: every member can reach it


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
