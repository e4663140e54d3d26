"""The swarm clock: rounds come from time, so identities an attacker makes cannot move anyone's round.

Unit tests of :class:`node.clock.SwarmClock`, then ten free identities against two honest nodes over real p2pd
daemons on loopback: they announce far-future rounds the way the old quorum clock read them and publish under
far-future and ancient rounds; the honest nodes' rounds stay where time puts them, and each keeps receiving the
other's groups.
"""

import asyncio
import math
import threading
import time

import pytest

from node.clock import SwarmClock
from node.swarm.dht import MISSING_RETRIES_PER_PEER, shard_of
from node.swarm.records import MAX_ROUND, GroupRecord, Pointer, encode_group_record, encode_pointer
from tests.test_swarm import raw_node, record, swarms
from tests.test_swarm_attack import flood_entries, store_as, sybils

SYBILS = 10


def test_the_round_is_the_slice_of_time_since_the_epoch():
    clock = SwarmClock(epoch=1000.0, round_seconds=10.0)
    assert [clock.round_at(t) for t in (1000.0, 1009.99, 1010.0, 1125.0)] == [0, 0, 1, 12]
    assert clock.round_at(0.0) == 0 and clock.round_at(1e30) == MAX_ROUND  # never outside what records accept
    assert clock.start_of(12) == 1120.0
    assert abs(SwarmClock().now() - math.floor((time.time() - SwarmClock().epoch) / SwarmClock().round_seconds)) <= 1


def test_a_peers_round_is_accepted_only_near_ours():
    clock = SwarmClock(epoch=0.0, round_seconds=10.0)
    now = clock.now()
    assert clock.accepts(now, max_age_rounds=3) and clock.accepts(now + 1, max_age_rounds=3)  # a clock a bit fast
    assert clock.accepts(now - 3, max_age_rounds=3) and not clock.accepts(now - 4, max_age_rounds=3)
    for far in (now + 2, now + 1000, 10**9, MAX_ROUND, 0):
        assert not clock.accepts(far, max_age_rounds=3)
    assert not clock.accepts(True, max_age_rounds=3)  # a bool is no round
    assert clock.rounds_within(120.0) == 13  # a group 2 minutes old may be from 13 rounds back


@pytest.mark.parametrize("bad", [dict(round_seconds=0.0), dict(round_seconds=-1.0), dict(epoch=math.nan)])
def test_invalid_clocks_are_refused(bad):
    with pytest.raises(ValueError):
        SwarmClock(**bad)


class Sink:
    """A buffer stand-in that takes every group the feed offers."""

    def __init__(self):
        self.groups = []

    def offer(self, record, *, published_at, size, network=None):
        self.groups.append(record)
        return True

    def wants(self, peer_id, network=None):
        return 8

    def max_age_rounds(self):
        return 3


class PacedSink(Sink):
    """A sink that sets the feed's pace: a short wait after its first poll, then a long one; notes each poll."""

    def __init__(self, first_s, then_s):
        super().__init__()
        self.paces, self.polls = (first_s, then_s), []

    def poll_interval_s(self):
        self.polls.append(time.monotonic())
        return self.paces[len(self.polls) > 1]


@pytest.mark.timeout(120)
def test_without_a_fixed_pace_the_feed_polls_as_often_as_its_sink_asks(tmp_path):
    # The buffer paces the feed by this node's round time (PeerGroupBuffer.poll_interval_s): each poll reads the
    # directory through peers, so a feed polling faster than its rounds need spends their CPU and ours for nothing.
    clock = SwarmClock(epoch=time.time() - 1000.0, round_seconds=600.0)
    with swarms(tmp_path, 1) as (a,):
        sink = PacedSink(0.2, 2.0)
        a.start_feed(sink, clock)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(sink.polls) < 4:
            time.sleep(0.05)
        gaps = [later - earlier for earlier, later in zip(sink.polls, sink.polls[1:])]
        assert len(gaps) >= 3, sink.polls
        assert gaps[0] < 1.5  # the first, short wait
        assert all(gap > 1.5 for gap in gaps[1:]), gaps  # then the long one, every time


@pytest.mark.timeout(300)
def test_ten_identities_cannot_move_the_clock_nor_cut_two_honest_nodes_apart(tmp_path):
    clock = SwarmClock(epoch=time.time() - 1000.0, round_seconds=5.0)
    with swarms(tmp_path, 2, record_ttl=300.0, groups_wanted=2) as (a, b):
        before = clock.now()

        async def attack():
            node, _ = await raw_node(a)
            try:
                stored = []
                for key, peer in sybils(SYBILS):
                    shard = shard_of(peer, a._shards)
                    # what moved the quorum clock: a far-future round announced in the clock shards...
                    stored += await store_as(node, key, [a, b], [(f"{a._namespace}/c/{shard}", f"|c/{shard}".encode(),
                                                                  10**9)])
                    # ...backed by "activity" at that round, and groups under a future and an ancient round
                    for round_ in (before + 1000, 10**9, 0):
                        await store_as(node, key, [a, b], flood_entries(a, peer, round_))
                    await store_as(node, key, [a, b], [(f"{a._namespace}/d/{10**9 - 1}/{shard}",
                                                        f"|d/{10**9 - 1}/{shard}".encode(),
                                                        encode_pointer(Pointer(peer, 10**9 - 1, 1, (0,))))])
                return stored
            finally:
                await node.shutdown()

        clock_entries = asyncio.run(attack())
        assert not any(clock_entries)  # no clock key exists any more: honest storage refuses them all
        sinks = {a.peer_id: Sink(), b.peer_id: Sink()}
        a.start_feed(sinks[a.peer_id], clock, poll_s=0.2)
        b.start_feed(sinks[b.peer_id], clock, poll_s=0.2)
        received = {a.peer_id: 0, b.peer_id: 0}
        for _ in range(4):  # four honest rounds, each published under the round time says
            for me, other in ((a, b), (b, a)):
                round_ = clock.now()
                assert round_ - before <= math.ceil(time.time() - clock.start_of(before)) // 5 + 1
                assert me.publish(record(me.peer_id, round_, groups=1, completions=2, completion_chars=50),
                                  wait=False)
            deadline = time.monotonic() + 30
            wanted = {p: n + 1 for p, n in received.items()}
            while time.monotonic() < deadline and any(len(sinks[p].groups) < wanted[p] for p in wanted):
                time.sleep(0.05)
            received = {p: len(sinks[p].groups) for p in sinks}
            assert received == wanted  # each honest node got the other's new group this round
        for me, other in ((a, b), (b, a)):
            groups = sinks[me.peer_id].groups
            assert {g.peer_id for g in groups} == {other.peer_id}  # no sybil group from the rounds they forged
            assert all(before <= g.round <= clock.now() for g in groups)


def test_the_invite_carries_the_swarm_clock_and_a_joiner_takes_it(tmp_path):
    from node.cli.main import _parser, config_from_args
    from node.config import NodeConfig
    from node.swarm.invite import format_invite, parse_invite

    addr = "/ip4/192.0.2.7/tcp/31337/p2p/QmYyQSo1c1Ym7orWxLYvCrM2EmxFTANf8wXmmE7DWjhx5N"
    invite = format_invite("team", [addr], swarm_epoch=1_800_000_000.5, round_seconds=30.0)
    assert parse_invite(invite).clock == SwarmClock(1_800_000_000.5, 30.0)
    assert parse_invite(format_invite("team", [addr])).clock == SwarmClock()  # older invites: the defaults
    assert parse_invite(addr).clock is None  # a bare address: the joiner's own settings
    args = _parser().parse_args(["run", "--join", invite, "--data-dir", str(tmp_path)])
    swarm = config_from_args(args).swarm
    assert (swarm.swarm_epoch, swarm.round_seconds) == (1_800_000_000.5, 30.0)
    with pytest.raises(Exception, match="swarm clock"):
        parse_invite(invite.replace("round_s=30", "round_s=0"))
    # a config file an earlier version saved, with the quorum clock's settings, still loads
    old = NodeConfig.build({"swarm": {"round_quorum": 2, "round_quorum_fraction": 0.0, "max_round_jump": 1000}})
    assert old.swarm.round_seconds == SwarmClock().round_seconds


@pytest.mark.timeout(300)
def test_a_peer_that_publishes_after_the_feeds_first_read_is_fetched_at_the_next_poll(tmp_path):
    # Many shards: a feed that rereads one unknown shard a poll would find the latecomer after dozens of polls.
    clock = SwarmClock(epoch=time.time() - 1000.0, round_seconds=600.0)  # one round for the whole test
    with swarms(tmp_path, 2, groups_wanted=2, directory_shards=128) as (a, b):
        sink = Sink()
        a.start_feed(sink, clock, poll_s=0.5)
        round_ = clock.now()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(a._round_state(round_).shards_read) < 128:
            time.sleep(0.05)  # the feed's first read of the round: nobody had published yet
        assert len(a._round_state(round_).shards_read) == 128 and not sink.groups
        assert b.publish(record(b.peer_id, round_, groups=1, completions=2, completion_chars=50))
        published = time.monotonic()
        while time.monotonic() - published < 20 and not sink.groups:
            time.sleep(0.05)
        assert sink.groups and time.monotonic() - published < 5.0  # a poll or two, not a tour of 128 shards


@pytest.mark.timeout(300)
def test_a_group_that_lands_after_its_pointer_is_fetched_and_one_that_never_comes_costs_a_bounded_few(tmp_path):
    # A peer back from a cut stores its held entries again; the pointer may land and the group only after a retry
    # (its store timed out). A feed that found the group missing must look again when it next reads the directory.
    clock = SwarmClock(epoch=time.time() - 1000.0, round_seconds=600.0)  # one round for the whole test
    round_ = clock.now()
    (late_key, late), (never_key, never) = sybils(2)
    with swarms(tmp_path, 2, record_ttl=300.0, groups_wanted=2) as (a, b):
        ns = a._namespace

        def pointer(peer, groups):
            shard = shard_of(peer, a._shards)
            return (f"{ns}/d/{round_}/{shard}", f"|d/{round_}/{shard}".encode(),
                    encode_pointer(Pointer(peer, round_, groups, ())))

        group = GroupRecord(late, round_, 0, record(late, round_, groups=1, completions=2, completion_chars=50).groups[0])
        # The storing peer lives across both stores on a loop of its own: the group must land within the feed's
        # few retries, and starting a peer for it takes longer than that on a loaded machine.
        loop = asyncio.new_event_loop()
        threading.Thread(target=loop.run_forever, daemon=True).start()
        node, _ = asyncio.run_coroutine_threadsafe(raw_node(a), loop).result(60)

        def store(entries_of):
            async def each():
                for key, entries in entries_of:
                    assert all(await store_as(node, key, [a, b], entries))
            asyncio.run_coroutine_threadsafe(each(), loop).result(60)

        try:
            store([(late_key, [pointer(late, 1)]), (never_key, [pointer(never, 8)])])
            sink = Sink()
            a.start_feed(sink, clock, poll_s=0.5)
            state = a._round_state(round_)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and (late, 0) not in state.missing and not state.retried[late]:
                time.sleep(0.05)  # until its lookup came back empty
            assert not sink.groups
            store([(late_key, [(f"{ns}/g/{round_}/{late}/0", f"|g/{round_}/0".encode(), encode_group_record(group))])])
        finally:
            asyncio.run_coroutine_threadsafe(node.shutdown(), loop).result(60)
            loop.call_soon_threadsafe(loop.stop)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not sink.groups:
            time.sleep(0.05)
        assert sink.groups == [group]
        reads, deadline = state.directory_reads, time.monotonic() + 30
        while time.monotonic() < deadline and state.directory_reads < reads + 10 * a._shards:
            time.sleep(0.05)  # ten more polls' reads of the directory
        # the pointer to 8 groups that never come: each looked up once, then a few again, never once a poll
        assert state.retried[never] == MISSING_RETRIES_PER_PEER
        assert state.rejected["missing"] <= 8 + 1 + 2 * MISSING_RETRIES_PER_PEER
