"""A 16-peer swarm on loopback (real p2pd + hivemind): bounded per-node cost, uniform sampling, late join, churn."""

import asyncio
import random
import time
from collections import Counter
from contextlib import contextmanager

import pytest
from hivemind.dht.routing import DHTID
from hivemind.utils import ValueWithExpiration, get_dht_time

from node.swarm.dht import READ_REPLICAS, DhtExchange, directory_key, group_key
from node.swarm.identity import load_or_create
from node.swarm.records import GroupRecord, encode_group_record
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
    readable: set[str] = set()
    for _ in range(30):
        me._rounds.pop(1, None)  # forget what we fetched: a fresh sample each time
        for got in me.gather(1).records:
            counts[got.peer_id] += 1
        readable |= set(me._rounds[1].pool)
    # 30 x 4 picks over 15 peers: 8 each on average; a sampler stuck on the first N would leave most at 0. On a
    # loaded machine a publish may reach too few replicas to be read (seen once in a full run): that peer is not the
    # sampler's to pick, so the sample is judged over the peers whose pointers were read, nearly all of them.
    assert len(readable) >= len(counts) - 1, (len(readable), len(counts))
    assert min(counts[peer] for peer in readable) >= 1 and max(counts.values()) <= 20, counts


@contextmanager
def calls_of(swarm):
    """The network round trips a read makes inside the block: "directory" (shards read together), "groups"."""
    made = []
    import node.swarm.dht as module

    latest_many, first_replicas = module._latest_many, module._first_replicas

    async def directory(node, keys):
        made.append("directory")
        return await latest_many(node, keys)

    async def groups(node, keys, timeout):
        made.append("groups")
        return await first_replicas(node, keys, timeout)

    module._latest_many, module._first_replicas = directory, groups
    try:
        yield made
    finally:
        module._latest_many, module._first_replicas = latest_many, first_replicas


@contextmanager
def answers_to(swarm):
    """(key id, peer asked, whether it answered with a value) for each key of each find request ``swarm`` sends."""
    answers = []
    protocol = swarm._node.protocol
    original = protocol.call_find

    async def call_find(peer, keys):
        response = await original(peer, keys)
        for key in keys:
            found = response is not None and key in response and response[key][0] is not None
            answers.append((key, peer, found))
        return response

    protocol.call_find = call_find
    try:
        yield answers
    finally:
        del protocol.call_find


def test_a_gather_reads_the_directory_in_one_round_trip_once_it_knows_the_swarm(sixteen):
    swarms, _ = sixteen
    me = swarms[5]
    me.gather(1)  # learns how many peers a shard holds
    me._rounds.clear()
    with calls_of(me) as made:
        assert len(me.gather(1).records) == J
    assert made == ["directory", "groups"]


def test_a_read_is_sized_by_every_shard_the_last_one_read_not_its_densest_batch(tmp_path, monkeypatch):
    """Shards 0-3 hold one peer each, 4-7 three each: two a shard. A first read takes the sparse four, then the dense
    four; sized by that last batch (three a shard) the next read would take 7 shards, fall short and go again."""
    swarm = DhtExchange(load_or_create(tmp_path / "me.key"), swarm_name="density", groups_wanted=J)  # never started
    now = get_dht_time()
    shard_of_key = {directory_key(swarm._namespace, r, s): s for r in (1, 2) for s in range(8)}

    async def latest_many(node, keys):
        return {key: ValueWithExpiration({b"%d-%d" % (shard_of_key[key], i): ValueWithExpiration(b"", now + 60)
                                          for i in range(1 if shard_of_key[key] < 4 else 3)}, now + 60)
                for key in keys}

    monkeypatch.setattr("node.swarm.dht._latest_many", latest_many)
    monkeypatch.setattr(swarm._rng, "shuffle", list.sort)  # shards in order: the sparse ones first
    made = []

    async def counted(node, keys):
        made.append(len(keys))
        return await latest_many(node, keys)

    monkeypatch.setattr("node.swarm.dht._latest_many", counted)
    swarm._call = lambda op, make, timeout=None: asyncio.run(make(None))
    swarm.gather(1)
    assert made == [4, 4]  # 4 shards, then the other 4
    made.clear()
    swarm.gather(2)
    assert made == [8]  # all 8 at once


def test_each_group_is_received_once_and_each_shard_from_few_replicas(sixteen):
    swarms, published = sixteen
    groups, shards = Counter(), Counter()
    for me in swarms[7:11]:  # nodes that never gathered round 1: nothing of it in their cache
        with answers_to(me) as answers:
            assert len(me.gather(1).records) == J
        group_ids = {DHTID.generate(source=group_key(me._namespace, 1, peer, i)) for peer in published for i in range(8)}
        shard_ids = {DHTID.generate(source=directory_key(me._namespace, 1, s)) for s in range(me._shards)}
        groups.update((me.peer_id, key) for key, _, found in answers if found and key in group_ids)
        shards.update((me.peer_id, key) for key, _, found in answers if found and key in shard_ids)
    # a group from the first replica that has it (several lookup workers asking for it at once each got it whole);
    # a shard merged over READ_REPLICAS of its 5 replicas (one more: a worker may ask a node that proves farther)
    assert groups and max(groups.values()) == 1, groups
    assert shards and max(shards.values()) <= READ_REPLICAS + 1, shards


def test_publishing_does_not_ask_every_peer(sixteen, tmp_path):
    swarms, _ = sixteen
    me = swarms[11]
    with answers_to(me) as answers:
        assert me.publish(record(me.peer_id, 3, groups=1))
    asked = {key: {peer for k, peer, _ in answers if k == key} for key, _, _ in answers}
    # per key, the replicas (5) and as many fallbacks, not hivemind's default beam of 20: every other peer here
    assert len(asked) == 2 and max(map(len, asked.values())) <= 2 * me._node.num_replicas + 2, asked


def test_late_join_and_churn(sixteen, tmp_path):
    swarms, published = sixteen
    late = DhtExchange(
        load_or_create(tmp_path / "late.key"), swarm_name="scale", host="127.0.0.1",
        initial_peers=swarms[3].invite() + swarms[9].invite(), call_timeout=CALL_TIMEOUT, groups_wanted=J,
    )
    late.start()
    try:
        assert len(late.gather(1).records) == J  # what was published before it joined
        assert late.rebootstrap() >= 2  # both invite peers answer (and the members their invites name)
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
