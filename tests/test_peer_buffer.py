"""The buffer of peers' groups that rounds take from without waiting: freshness, bounds, choice, accounting."""

import random
import time

import pytest

from node.clock import SwarmClock
from node.sapo.peer_buffer import PeerGroupBuffer
from node.sapo.scoring import RejectedGroup, Verification, score_group
from node.sapo.teaching import OwnAccuracy, teaching_rank
from node.swarm.records import GroupRecord, SharedGroup
from node.tasks.source import Grade, Task
from node.tasks.taskref import TaskRef

CLOCK = SwarmClock(epoch=time.time() - 10_000.0, round_seconds=10.0)


def group(peer, index, *, round_=None, rewards=(0.0, 1.0), forged=False, family="basic_arithmetic"):
    texts = tuple(f"{peer}/{index}/{i}/{r}" for i, r in enumerate(rewards))
    question = "forged" if forged else f"q{index}"
    shared = SharedGroup(TaskRef(family, "ab", 0, index), question, texts, (True,) * len(texts))
    return GroupRecord(peer, CLOCK.now() if round_ is None else round_, index, shared)


def verify(record):
    """Our 'verifier': the reward is the text's last field; a forged question fails the task check."""
    g = record.groups[0]
    if g.question == "forged":
        return Verification([], [RejectedGroup(record.peer_id, record.round, g, "question_mismatch")])
    task = Task(g.task, g.question, "1", {})
    graded = score_group(lambda t, text, done: Grade(float(text.rsplit("/", 1)[1]), False, 0.0, True, ""),
                         peer_id=record.peer_id, round=record.round, local=False, task=task, texts=g.completions,
                         finished=g.finished)
    return Verification([graded], [])


def buffer(**kwargs):
    penalized = []
    made = PeerGroupBuffer(CLOCK, verify, penalize=penalized.append, **kwargs)
    return made, penalized


def offer(buf, record, *, age_s=0.0, size=1000):
    return buf.offer(record, published_at=time.time() - age_s, size=size)


def test_stale_groups_are_refused_and_never_trained_on():
    buf, _ = buffer(max_age_s=60.0)
    assert not offer(buf, group("QmOld", 0), age_s=61.0)  # published too long ago
    assert not offer(buf, group("QmOld", 1, round_=CLOCK.now() - 8))  # from a swarm round that old
    assert not offer(buf, group("QmFuture", 2, round_=CLOCK.now() + 5))  # ahead of any honest clock
    assert offer(buf, group("QmFresh", 3), age_s=59.0)  # fresh now, stale by the time a round takes it
    buf.verify_pending()
    buf._ready[0].published_at -= 2.0
    taken = buf.take(2, random.Random(0))
    assert taken.chosen == [] and taken.expired == 1 and buf.held() == (0, 0)


def test_the_automatic_freshness_follows_this_nodes_round_time():
    buf, _ = buffer()
    assert buf.max_age_s == 120.0 and buf.max_age_rounds() == 13
    buf.round_took(300.0)  # a slow node: peers' groups of its last three rounds are still fresh for it
    assert buf.max_age_s == 900.0


def test_the_feed_looks_for_groups_a_few_times_in_each_of_this_nodes_rounds():
    buf, _ = buffer()
    assert buf.poll_interval_s() == 1.0  # before a round ended: peers' first groups as soon as they come
    buf.round_took(20.0)  # a round on a laptop's CPU: one take every 20 s, a look every 5 s is soon enough
    assert buf.poll_interval_s() == 5.0
    buf.round_took(0.3)  # a fast GPU round: still not more than a look a second
    assert buf.poll_interval_s() == 1.0
    buf.round_took(600.0)  # a very slow round: groups published meanwhile are still seen within 10 s
    assert buf.poll_interval_s() == 10.0


def test_the_buffer_is_bounded_per_peer_keeping_each_peers_newest():
    buf, _ = buffer(max_per_peer=3)
    for i in range(10):
        offer(buf, group("QmFast", i), age_s=10.0 - i)
    offer(buf, group("QmSlow", 0))
    buf.verify_pending()
    kept = sorted(item.record.index for item in buf.candidates() if item.peer_id == "QmFast")
    assert kept == [7, 8, 9] and buf.held()[0] == 4 and buf.evicted == 7


def test_the_buffer_is_bounded_in_bytes_and_a_flood_pushes_out_its_own_groups_first():
    buf, _ = buffer(max_bytes=10_000, max_per_peer=100)
    assert offer(buf, group("QmHonest", 0), size=3000)
    for i in range(20):
        offer(buf, group("QmFlood", i), size=3000)
        assert buf.held()[1] <= 10_000
    buf.verify_pending()
    peers = [item.peer_id for item in buf.candidates()]
    assert "QmHonest" in peers and peers.count("QmFlood") == 2
    assert not offer(buf, group("QmHuge", 0), size=10_001)  # larger than the whole buffer


def test_a_round_takes_j_at_once_one_per_peer_first_newest_round_first_then_they_are_gone():
    buf, penalized = buffer()
    for i in range(3):
        offer(buf, group("QmA", i))
        offer(buf, group("QmB", 10 + i, round_=CLOCK.now() - 1))
    offer(buf, group("QmC", 20, rewards=(1.0, 1.0)))  # equal rewards: no gradient, dropped
    offer(buf, group("QmEvil", 30, forged=True))
    buf.verify_pending()
    started = time.perf_counter()
    taken = buf.take(4, random.Random(1))
    assert time.perf_counter() - started < 0.1
    peers = [item.peer_id for item in taken.chosen]
    assert sorted(peers) == ["QmA", "QmA", "QmB", "QmB"] and peers[0] == "QmA"  # this round's group first
    assert taken.arrived == 8 and len(taken.dropped) == 1 and [r.reason for r in taken.rejected] == ["question_mismatch"]
    assert penalized == ["QmEvil"] and taken.left == 2
    again = buf.take(4, random.Random(1))
    assert sorted(item.peer_id for item in again.chosen) == ["QmA", "QmB"] and again.arrived == 0  # once each
    assert buf.take(4, random.Random(1)).chosen == []  # short: the round trains on what it has


def test_registered_peers_come_first_and_a_refused_candidate_leaves_as_rejected():
    buf, penalized = buffer()
    offer(buf, group("QmSybil", 0))
    offer(buf, group("QmPayload", 1))
    offer(buf, group("QmRegistered", 2))
    buf.verify_pending()
    taken = buf.take(2, random.Random(0), preferred={"QmRegistered"},
                     keep=lambda g: "payload_outside_answer" if g.peer_id == "QmPayload" else "")
    assert taken.chosen[0].peer_id == "QmRegistered"
    assert [r.peer_id for r in taken.rejected] in ([], ["QmPayload"])
    assert set(penalized) <= {"QmPayload"}


def test_groups_are_verified_in_the_background():
    buf, _ = buffer()
    buf.start()
    try:
        offer(buf, group("QmA", 0))
        deadline = time.monotonic() + 10
        while not buf.candidates() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert [item.peer_id for item in buf.candidates()] == ["QmA"] and buf.candidates()[0].group.rewards == (0, 1)
    finally:
        buf.stop()


@pytest.mark.parametrize("bad", [dict(max_bytes=0), dict(max_per_peer=0), dict(max_age_s=0.0)])
def test_bounds_must_be_positive(bad):
    with pytest.raises(ValueError):
        buffer(**bad)


def test_a_peer_counts_as_seen_while_its_groups_keep_arriving_within_the_freshness_window():
    buf, _ = buffer(max_age_s=60.0)
    offer(buf, group("QmSlow", 0))
    buf.verify_pending()
    assert buf.take(2, random.Random(0)).peers == {"QmSlow"}
    # its next group is not in yet (a slow peer): still a member of the swarm, not gone and back every round
    assert buf.take(2, random.Random(0)).peers == {"QmSlow"}
    buf._last_seen["QmSlow"] -= 61.0
    assert buf.take(2, random.Random(0)).peers == set()


def test_one_peer_flooding_groups_takes_one_slot_while_other_peers_have_groups():
    # what the per-peer rule of SAPO's choice guarantees: many groups of one peer cannot fill the J slots
    for seed in range(10):
        buf, _ = buffer(max_per_peer=20)
        for i in range(20):
            offer(buf, group("QmFlood", i))
        for i in range(3):
            offer(buf, group(f"QmHonest{i}", 100 + i))
        buf.verify_pending()
        taken = buf.take(4, random.Random(seed))
        assert sorted(item.peer_id for item in taken.chosen) == ["QmFlood", "QmHonest0", "QmHonest1", "QmHonest2"]
        assert taken.left == 19


SYBIL_NETWORK = "203.0.113.0/24"


def test_identities_from_one_network_share_one_share_of_the_buffer():
    # 150 free identities on one host, one group each: under per-identity shares they filled the buffer and their
    # turns in a round, and pushed the honest peer's groups out; as one network they are one peer among others.
    buf, _ = buffer(max_bytes=40_000, max_per_peer=4)
    for i in range(3):
        assert buf.offer(group("QmHonest", i), published_at=time.time() - 5 + i, size=3000, network="198.51.100.0/24")
    assert buf.wants("QmHonest", "198.51.100.0/24") == 1
    for i in range(150):
        peer = f"QmSybil{i}"
        if buf.wants(peer, SYBIL_NETWORK):
            buf.offer(group(peer, 0), published_at=time.time(), size=3000, network=SYBIL_NETWORK)
    buf.verify_pending()
    held = [item.source for item in buf.candidates()]
    assert held.count(SYBIL_NETWORK) == 4 and held.count("198.51.100.0/24") == 3  # the network's share, no more
    assert buf.wants("QmSybil999", SYBIL_NETWORK) == 0 and buf.wants("QmHonest", "198.51.100.0/24") == 1
    for i in range(20):  # past the byte cap, the flood's network loses its oldest groups, never the honest ones
        buf.offer(group(f"QmLate{i}", 0), published_at=time.time(), size=9000, network=SYBIL_NETWORK)
    buf.verify_pending()
    assert [item.source for item in buf.candidates()].count("198.51.100.0/24") == 3


def test_a_round_takes_one_group_per_network_before_a_second_of_any():
    buf, _ = buffer(max_per_peer=8)
    buf.offer(group("QmHonest", 0), published_at=time.time(), size=1000, network="198.51.100.0/24")
    for i in range(7):
        buf.offer(group(f"QmSybil{i}", 0), published_at=time.time(), size=1000, network=SYBIL_NETWORK)
    buf.verify_pending()
    for seed in range(10):  # whatever the draw: the honest network's one group is among the two taken
        trial, _ = buffer(max_per_peer=8)
        for item in buf.candidates():
            trial.offer(item.record, published_at=time.time(), size=1000, network=item.network)
        trial.verify_pending()
        chosen = trial.take(2, random.Random(seed)).chosen
        assert sorted(item.source for item in chosen) == ["198.51.100.0/24", SYBIL_NETWORK]


def _taken(groups, count, seed, *, rank=None, networks=None, preferred=None, **bounds):
    """Peers of ``groups`` (one group each unless a peer repeats) offered to a fresh buffer, then one take."""
    buf, _ = buffer(max_per_peer=8, **bounds)
    for record in groups:
        buf.offer(record, published_at=time.time(), size=1000, network=(networks or {}).get(record.peer_id))
    buf.verify_pending()
    return buf.take(count, random.Random(seed), rank=rank, preferred=preferred).chosen


def _own(**accuracy):
    own = OwnAccuracy()
    for family, value in accuracy.items():
        own.record(family, value)
    return own


def test_teaching_first_takes_the_widest_spread_first_and_equal_rewards_last():
    # drop_zero_advantage off: equal-reward groups are usable, and uniform takes them as often as any other
    groups = [group("QmFlat0", 0, rewards=(1.0, 1.0, 1.0, 1.0)), group("QmFlat1", 1, rewards=(0.0,) * 4),
              group("QmRare", 2, rewards=(0.0, 0.0, 0.0, 1.0)), group("QmHalf", 3, rewards=(0.0, 1.0, 0.0, 1.0))]
    rank = teaching_rank(OwnAccuracy())
    for seed in range(10):
        chosen = _taken(groups, 2, seed, rank=rank, drop_zero_advantage=False)
        assert [item.peer_id for item in chosen] == ["QmHalf", "QmRare"]  # std 0.5, then 0.43; never a flat one
    uniform = {item.peer_id for seed in range(10) for item in _taken(groups, 2, seed, drop_zero_advantage=False)}
    assert uniform == {"QmFlat0", "QmFlat1", "QmRare", "QmHalf"}


def test_teaching_first_prefers_the_family_where_our_own_recent_accuracy_is_lowest():
    groups = [group(f"QmProducts{i}", i, family="products") for i in range(4)]
    groups += [group("QmChain", 10, family="chain_sum"), group("QmGcd", 11, family="gcd")]
    own = _own(products=1.0, chain_sum=0.25)  # gcd: no group of ours yet, so no sign that we are weak there
    for seed in range(10):
        chosen = _taken(groups, 2, seed, rank=teaching_rank(own))
        assert [item.group.task.ref.family for item in chosen] == ["chain_sum", "products"]
    own.record("products", 0.0)  # a running window: the products groups we fail now count
    own.record("products", 0.0)
    assert own.of("products") == pytest.approx(1 / 3)
    for _ in range(8):  # ...and it is bounded: the last 8 groups only
        own.record("products", 0.0)
    assert own.of("products") == 0.0
    chosen = _taken(groups, 2, 0, rank=teaching_rank(own))
    assert [item.group.task.ref.family for item in chosen] == ["products", "products"]


def test_teaching_first_keeps_one_group_per_network_before_a_second_of_any():
    # many identities of one /24 publish ideal groups (the widest spread, our weakest family): they rank first, and
    # still get one slot while other networks have groups, exactly as under the uniform choice
    honest = {f"QmHonest{i}": f"198.51.100.{i}" for i in range(3)}
    sybils = {f"QmSybil{i}": SYBIL_NETWORK for i in range(7)}
    groups = [group(peer, i, rewards=(0.0, 0.0, 0.0, 1.0), family="products") for i, peer in enumerate(honest)]
    groups += [group(peer, 10 + i, rewards=(0.0, 1.0, 0.0, 1.0), family="chain_sum") for i, peer in enumerate(sybils)]
    rank = teaching_rank(_own(products=1.0, chain_sum=0.0))
    for seed in range(10):
        for choice in (rank, None):
            chosen = _taken(groups, 4, seed, rank=choice, networks=honest | sybils)
            assert sorted(item.source for item in chosen) == sorted([*honest.values(), SYBIL_NETWORK])
        chosen = _taken(groups, 2, seed, rank=rank, networks=honest | sybils)
        assert [item.source for item in chosen][0] == SYBIL_NETWORK and chosen[1].source in honest.values()


def test_teaching_first_still_takes_registered_peers_first():
    groups = [group("QmRegistered", 0, rewards=(0.0, 0.0, 0.0, 1.0)), group("QmIdeal", 1, rewards=(0.0, 1.0, 0.0, 1.0))]
    rank = teaching_rank(OwnAccuracy())
    for seed in range(5):
        assert [i.peer_id for i in _taken(groups, 2, seed, rank=rank)] == ["QmIdeal", "QmRegistered"]
        chosen = _taken(groups, 2, seed, rank=rank, preferred={"QmRegistered"})
        assert [i.peer_id for i in chosen] == ["QmRegistered", "QmIdeal"]
