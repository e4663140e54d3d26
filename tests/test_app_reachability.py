"""The header says whether friends outside this network can reach the node, from the node's reachability event."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt

from node.config import NodeConfig
from node.events import ReachabilityChanged
from node.swarm.reachability import Verdict, explain
from tests.apphelpers import make_window

PEER = "QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N"


def config_in(folder: Path, **swarm) -> NodeConfig:
    return NodeConfig.build({"run": {"data_dir": str(folder / "data")}, "swarm": swarm})


def event(verdict: Verdict, *, starting_swarm: bool) -> ReachabilityChanged:
    summary, advice = explain(verdict, starting_swarm=starting_swarm, port=31337, reachable_networks=["203.0.113.0/24"])
    return ReachabilityChanged(status=verdict.status, via=verdict.via, checked=verdict.checked,
                               public_address=verdict.public_ip, addresses=[],
                               local_addresses=[f"/ip4/192.168.1.7/tcp/31337/p2p/{PEER}"],
                               client_mode=False, summary=summary, advice=advice)


def test_a_home_host_sees_that_friends_outside_cannot_join_and_what_to_do(qtbot, tmp_path):
    window = make_window(qtbot, config_in(tmp_path))  # no invite: this node starts a new swarm
    header = window.header
    assert not header.reach.isVisibleTo(header)
    window.supervisor.feed(event(Verdict("unreachable", "none", 0), starting_swarm=True))
    assert header.reach.isVisibleTo(header) and "Not reachable from outside your network" in header.reach.text()
    # the advice waits behind a button (three lines at 1024 px squeezed the charts); pressing it shows it in full
    assert header.reach_more.isVisibleTo(header) and not header.reach_note.isVisibleTo(header)
    qtbot.mouseClick(header.reach_more, Qt.MouseButton.LeftButton)
    note = header.reach_note.text()
    assert header.reach_note.isVisibleTo(header)
    assert "Friends on your own network can join" in note and "Friends elsewhere cannot" in note
    assert "forward TCP port 31337" in note and "UPnP" in note


def test_a_reachable_member_of_a_joined_swarm_gets_a_short_line(qtbot, tmp_path):
    window = make_window(qtbot, config_in(tmp_path, initial_peers=[f"/ip4/203.0.113.7/tcp/1/p2p/{PEER}"]))
    header = window.header
    window.supervisor.feed(event(Verdict("reachable", "port_mapping", 2, "203.0.113.9", (40211,)),
                                 starting_swarm=False))
    assert header.reach.text() == "Reachable from the internet" and "UPnP" in header.reach.toolTip()
    assert not header.reach_note.isVisibleTo(header) and not header.reach_more.isVisibleTo(header)
    window.supervisor.feed(event(Verdict("relayed", "relay", 1, "203.0.113.9", (),
                                         (f"/ip4/203.0.113.7/tcp/1/p2p/{PEER}",)), starting_swarm=False))
    assert header.reach.text() == "Reachable through a relay" and header.reach_more.isVisibleTo(header)
    qtbot.mouseClick(header.reach_more, Qt.MouseButton.LeftButton)
    assert header.reach_note.isVisibleTo(header)
    qtbot.mouseClick(header.reach_more, Qt.MouseButton.LeftButton)
    assert not header.reach_note.isVisibleTo(header)
