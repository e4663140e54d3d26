"""A 16-peer swarm on loopback (real p2pd + hivemind): bounded per-node cost, uniform sampling, late join, churn."""

import random
import time

import pytest

from node.identity import load_or_create
from node.records import GroupRecord, encode_group_record
from node.swarm import DhtExchange
from tests.test_swarm import CALL_TIMEOUT, record

pytestmark = pytest.mark.timeout(300)

PEERS, J = 16, 4


@pytest.fixture(scope="module")
def sixteen(tmp_path_factory):
    folder = tmp_path_factory.mktemp("sixteen")
    rng = random.Random(16)
    started = []
    try:
        for i in range(PEERS):
            swarm = DhtExchange(
                load_or_create(folder / f"p{i}.key"), swarm_name="scale", host="127.0.0.1",
                initial_peers=rng.choice(started).invite() if started else (),  # through any earlier peer
                record_ttl=300.0, call_timeout=CALL_TIMEOUT, groups_wanted=J,
            )
            swarm.start()
            started.append(swarm)
        published = {}
        for swarm in started:
            published[swarm.peer_id] = record(swarm.peer_id, 1, groups=8, completions=8, completion_chars=1200)
            assert swarm.publish(published[swarm.peer_id])
        yield started, published
    finally:
        for swarm in started:
            swarm.shutdown()


def group_bytes(published):
    one = next(iter(published.values()))
    return len(encode_group_record(GroupRecord(one.peer_id, one.round, 0, one.groups[0])))


def test_a_node_gathers_j_groups_without_fetching_every_record(sixteen):
    swarms, published = sixteen
    me = swarms[0]
    before = me.traffic.copy()
    started = time.monotonic()
    result = me.gather(1)
    assert time.monotonic() - started < CALL_TIMEOUT
    assert len(result.records) == J and not result.rejected
    for got in result.records:  # one group per peer, exactly as published
        assert got.peer_id != me.peer_id and len(got.groups) == 1
        assert got.groups[0] in published[got.peer_id].groups
    received = me.traffic["received_bytes"] - before["received_bytes"]
    everything = sum(group_bytes(published) * len(r.groups) for r in published.values())
    # J groups plus the pointers of the shards read: nowhere near every record
    assert received < 2 * J * group_bytes(published) + result.published * 1024
    assert received < everything / 10


def test_sampling_is_uniform_over_the_peers_that_published(sixteen):
    swarms, published = sixteen
    me = swarms[1]
    counts = {peer: 0 for peer in published if peer != me.peer_id}
    for _ in range(30):
        me._rounds.pop(1, None)  # forget what we fetched: a fresh sample each time
        for got in me.gather(1).records:
            counts[got.peer_id] += 1
    # 30 x 4 picks over 15 peers: 8 each on average; a sampler stuck on the first N would leave most at 0
    assert min(counts.values()) >= 1 and max(counts.values()) <= 20, counts


def test_one_peer_announcing_a_far_future_round_is_ignored(sixteen):
    swarms, _ = sixteen
    *honest, attacker = swarms
    for swarm in honest:
        swarm.announce_round(1)
    attacker.announce_round(10**9)
    for swarm in honest[:3]:
        assert swarm.swarm_round(current=1) == 1


def test_late_join_and_churn(sixteen, tmp_path):
    swarms, published = sixteen
    late = DhtExchange(
        load_or_create(tmp_path / "late.key"), swarm_name="scale", host="127.0.0.1",
        initial_peers=swarms[3].invite() + swarms[9].invite(), call_timeout=CALL_TIMEOUT, groups_wanted=J,
    )
    late.start()
    try:
        assert len(late.gather(1).records) == J  # what was published before it joined
        assert late.rebootstrap() == 2  # both invite peers answer
        victims = swarms[12:]  # 25 % crash: their daemons vanish without a goodbye
        for victim in victims:
            victim._daemon.kill()
        alive = swarms[:12]
        for swarm in alive[1:]:
            assert swarm.publish(record(swarm.peer_id, 2, groups=8))
        for who in (alive[0], late):
            started = time.monotonic()
            got = who.gather(2).records
            while len(got) < J and time.monotonic() - started < 2 * CALL_TIMEOUT:
                got = who.gather(2).records
            assert len(got) == J and {r.peer_id for r in got} <= {s.peer_id for s in alive}
            assert time.monotonic() - started < 2 * CALL_TIMEOUT
        # records of round 1 outlive their crashed authors on the replicas
        late._rounds.clear()
        assert len(late.gather(1).records) == J
    finally:
        late.shutdown()
