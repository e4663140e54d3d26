"""Reachability verdicts, invite addresses, the dial-back protocol's bounds and remembered peers, without a network."""

from __future__ import annotations

import asyncio
import json

from node.swarm import known_peers
from node.swarm.reachability import (
    Answer,
    Verdict,
    _decode_answer,
    _decode_request,
    _encode,
    _hop_status,
    answers_libp2p,
    combine,
    explain,
    invite_addresses,
    local_verdict,
)

ME = "QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N"
RELAY = "QmQJ1GuouYqZ5LTFK85ecnRutKZFm5AqwQFiFS3r7GwRmi"
OTHER = "QmVkb1eVno6PGrP13GjfWv11Hr69BCUeVf5xcsajpyEEEY"
PUBLIC = ["203.0.113.0/24"]


def answer(ip, open_ports=(), public=False, peer=RELAY):
    return Answer(peer, ip, tuple(open_ports), public, ())


def test_most_dialbacks_decide_and_a_lone_liar_cannot():
    assert combine([], 4001, []) is None
    assert combine([answer(None)], 4001, []) is None  # seen only through a relay: no verdict
    open_ = combine([answer("203.0.113.9", [4001]), answer("203.0.113.9", [4001], peer=OTHER)], 4001, [])
    assert (open_.status, open_.via, open_.public_ip, open_.checked_by) == ("reachable", "public_address", "203.0.113.9", 2)
    mapped = combine([answer("203.0.113.9", [40211])], 4001, [40211])
    assert (mapped.status, mapped.via, mapped.ports) == ("reachable", "port_mapping", (40211,))
    liar = combine([answer("203.0.113.9", [4001]), answer("203.0.113.9", peer=OTHER),
                    answer("203.0.113.9", peer=ME)], 4001, [])
    assert liar.status == "unreachable" and liar.checked_by == 3


def test_without_peers_a_lan_address_is_not_reachable_and_a_mapping_or_public_address_is():
    lan = local_verdict([f"/ip4/127.0.0.1/tcp/4001/p2p/{ME}", f"/ip4/198.51.100.2/tcp/4001/p2p/{ME}"], 4001, PUBLIC)
    assert lan.status == "unreachable" and not lan.checked
    mapped = local_verdict(["/ip4/198.51.100.2/tcp/4001", "/ip4/203.0.113.101/tcp/40211"], 4001, PUBLIC)
    assert (mapped.status, mapped.via, mapped.public_ip) == ("reachable", "port_mapping", "203.0.113.101")
    assert local_verdict(["/ip4/203.0.113.5/tcp/4001"], 4001, PUBLIC).via == "public_address"
    assert local_verdict(["/ip4/203.0.113.5/tcp/4001"], 4001, []).status == "unreachable"  # not global


def test_invites_say_which_addresses_work_from_outside_and_never_offer_only_loopback_and_lan():
    visible = [f"/ip4/127.0.0.1/tcp/4001/p2p/{ME}", f"/ip4/198.51.100.2/tcp/4001/p2p/{ME}"]
    relayed = Verdict("relayed", "relay", 1, "203.0.113.101", (), (f"/ip4/203.0.113.11/tcp/4001/p2p/{RELAY}",))
    outside, local = invite_addresses(ME, visible, relayed, PUBLIC)
    assert outside == [f"/ip4/203.0.113.11/tcp/4001/p2p/{RELAY}/p2p-circuit/p2p/{ME}"]
    assert local == [f"/ip4/198.51.100.2/tcp/4001/p2p/{ME}"]
    mapped = Verdict("reachable", "port_mapping", 1, "203.0.113.101", (40211,))
    outside, _ = invite_addresses(ME, visible, mapped, PUBLIC)
    assert outside == [f"/ip4/203.0.113.101/tcp/40211/p2p/{ME}"]
    outside, local = invite_addresses(ME, [f"/ip4/127.0.0.1/tcp/4001/p2p/{ME}"], Verdict("unreachable", "none", 0), [])
    assert outside == [] and local == [f"/ip4/127.0.0.1/tcp/4001/p2p/{ME}"]  # a loopback-only node: this computer


def test_dialback_requests_and_answers_are_bounded_and_validated():
    assert _decode_request(_encode({"v": 1, "ports": [4001, 4001, 40211]})) == [4001, 40211]
    assert _decode_request(_encode({"v": 1, "ports": list(range(1, 10))})) is None  # too many ports
    assert _decode_request(_encode({"v": 1, "ports": [0]})) is None
    assert _decode_request(_encode({"v": 2, "ports": [4001]})) is None
    assert _decode_request(b"\xff" * 5000) is None
    vouched = _decode_answer(RELAY, _encode({"v": 1, "ip": "203.0.113.9", "open": [4001], "public": True, "addrs": [
        f"/ip4/203.0.113.11/tcp/4001/p2p/{RELAY}", f"/ip4/203.0.113.66/tcp/4001/p2p/{OTHER}", "junk"]}))
    assert vouched.addresses == (f"/ip4/203.0.113.11/tcp/4001/p2p/{RELAY}",)  # a helper vouches only for itself
    assert _decode_answer(RELAY, _encode({"v": 1, "ip": "not an ip", "open": [], "addrs": []})) is None


def test_relay_reservation_status_is_read_past_the_reservation_and_limit_fields():
    voucher = bytes(654)
    message = bytes.fromhex("0802") + bytes.fromhex("1a8e05") + voucher + bytes.fromhex("2206087810808008") + b"\x28\x64"
    assert _hop_status(message) == 100
    assert _hop_status(bytes.fromhex("0802") + b"\x28\xcc\x01") == 204  # RESERVATION_REFUSED
    assert _hop_status(bytes.fromhex("1a05")) is None  # truncated


def test_dialback_needs_a_libp2p_daemon_to_answer():
    async def run():
        async def greet(reader, writer):
            writer.write(b"\x13/multistream/1.0.0\n")
            await writer.drain()
            writer.close()

        async def silent(reader, writer):
            writer.close()

        libp2p = await asyncio.start_server(greet, "127.0.0.1", 0)
        other = await asyncio.start_server(silent, "127.0.0.1", 0)
        ports = [s.sockets[0].getsockname()[1] for s in (libp2p, other)]
        try:
            return [await answers_libp2p("127.0.0.1", p, timeout=2) for p in ports]
        finally:
            libp2p.close()
            other.close()

    assert asyncio.run(run()) == [True, False]


def test_known_peers_keep_the_newest_valid_addresses_and_ignore_a_damaged_file(tmp_path):
    good = f"/ip4/203.0.113.11/tcp/4001/p2p/{RELAY}"
    known_peers.save(tmp_path, "s", {RELAY: [good, f"/ip4/203.0.113.11/tcp/4001/p2p/{OTHER}"], ME: [good]},
                     own_peer_id=ME)
    assert known_peers.load(tmp_path, "s") == [good]  # not another peer's address under its id, not our own
    def peer(i):  # a base58 peer id (no 0)
        return "Qm" + str(i).replace("0", "z").rjust(44, "z")

    for i in range(known_peers.MAX_PEERS + 3):
        known_peers.save(tmp_path, "s", {peer(i): [f"/ip4/203.0.113.{i}/tcp/1/p2p/{peer(i)}"]}, own_peer_id=ME)
    loaded = known_peers.load(tmp_path, "s")
    assert len(loaded) == known_peers.MAX_PEERS and loaded[0].endswith(peer(known_peers.MAX_PEERS + 2))
    path = tmp_path / "swarms" / "s" / "known_peers.json"
    path.write_text(json.dumps({"version": 1, "peers": {"x": "not a list"}}))
    assert known_peers.load(tmp_path, "s") == []
    path.write_text("{broken")
    assert known_peers.load(tmp_path, "s") == []


def test_a_check_by_peers_on_the_same_network_says_nothing_about_the_internet():
    local = Verdict("reachable", "public_address", 2, "127.0.0.1", (4001,))
    assert explain(local, starting_swarm=True)[0] == "Reachable on your own network"
    public = Verdict("reachable", "public_address", 2, "203.0.113.7", (4001,))
    assert explain(public, starting_swarm=True, reachable_networks=PUBLIC)[0] == "Reachable from the internet"
    summary, advice = explain(Verdict("unreachable", "none", 0), starting_swarm=False, port=4001)
    assert "not yet confirmed" in summary and "forward TCP port 4001" in advice
    _, advice = explain(Verdict("unreachable", "none", 2, "203.0.113.101"), starting_swarm=False, port=4001)
    assert "the internet sees your network at 203.0.113.101" in advice


def test_a_node_starting_a_swarm_is_not_held_back_by_remembered_peers_that_are_gone(tmp_path):
    from node.swarm.dht import DhtExchange
    from node.swarm.identity import load_or_create

    swarm = DhtExchange(load_or_create(tmp_path / "id.key"), swarm_name="s", host="127.0.0.1", start_timeout=30,
                        known_peers=[f"/ip4/127.0.0.1/tcp/9/p2p/{RELAY}"])
    swarm.start()
    try:
        assert swarm.invite() and swarm.reachability().status == "unreachable"  # loopback only: this computer
    finally:
        swarm.shutdown()


def test_a_headless_node_prints_its_reachability_and_the_advice(capsys, tmp_path):
    from node.cli.main import _HumanProgress
    from node.events import ReachabilityChanged

    summary, advice = explain(Verdict("unreachable", "none", 0), starting_swarm=True, port=31337)
    _HumanProgress(tmp_path / "node.log")(ReachabilityChanged(
        status="unreachable", via="none", checked=False, public_address=None, addresses=[],
        local_addresses=[f"/ip4/192.168.1.7/tcp/31337/p2p/{ME}"], client_mode=False, summary=summary, advice=advice))
    out = capsys.readouterr().out
    assert "Not reachable from outside your network" in out and "forward TCP port 31337" in out
