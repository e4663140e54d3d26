"""What a node stores for others: quotas per signer, per address group and per key, fair eviction, rounds near ours."""

import time

from hivemind.dht.routing import DHTID
from hivemind.utils.timed_storage import get_dht_time

from node.swarm.storage import SENDER_GROUP, BoundedStorage, rounds_near


def subkey(owner, kind="d", round_=5, rest="0"):
    return f"[owner:{owner}]|{kind}/{round_}/{rest}".encode()


def sent_from(group, storage, *args, **kwargs):
    """Store as if a peer of ``group`` sent it (node.swarm.dht sets the group around hivemind's store handler)."""
    token = SENDER_GROUP.set(group)
    try:
        return storage.store(*args, **kwargs)
    finally:
        SENDER_GROUP.reset(token)


def entries(storage, key):
    item = storage.get(key)
    return set() if item is None else {sub for sub, _ in item.value.items()}


# Computed when the module is collected, which in a full run is many minutes before these tests run: 10 minutes
# ahead had already passed once, and every entry was refused as expired.
LATER = get_dht_time() + 6 * 3600


def test_bytes_and_entries_per_key_are_bounded():
    storage = BoundedStorage(max_bytes=10_000, max_entries_per_key=3)
    key = DHTID.generate("k")
    assert all(storage.store(key, b"x" * 10, LATER, subkey=subkey(i)) for i in range(3))
    assert not storage.store(key, b"x" * 10, LATER, subkey=subkey(3))  # a 4th entry of our own group: no room
    assert storage.store(key, b"y" * 10, LATER + 1, subkey=subkey(0))  # an existing entry may be replaced
    assert not storage.store(DHTID.generate("big"), b"z" * 10_001, LATER, subkey=subkey("big"))
    assert not storage.store(DHTID.generate("big value"), b"z" * 10_001, LATER)  # a whole value (what we cache)
    assert storage.store(DHTID.generate("value"), b"z" * 100, LATER)
    for i in range(20):
        storage.store(DHTID.generate(f"k{i}"), b"z" * 900, LATER, subkey=subkey(f"s{i}"))
    assert storage.measure() <= 10_000 and storage.refused["full"] > 0


def test_a_signer_over_its_quota_makes_room_from_its_own_oldest_entries():
    storage = BoundedStorage(max_bytes=100_000, signer_share=0.1)
    other = DHTID.generate("other")
    assert sent_from("203.0.113.0/24", storage, other, b"o" * 1000, LATER, subkey=subkey("honest", "g"))
    keys = [DHTID.generate(f"g{i}") for i in range(30)]
    for key in keys:
        assert sent_from("198.51.100.0/24", storage, key, b"x" * 1000, LATER, subkey=subkey("flooder", "g"))
    kept = [key for key in keys if entries(storage, key)]
    assert kept == keys[-len(kept):] and 8 <= len(kept) <= 9  # its newest, within 10 % of the storage
    assert entries(storage, other)  # nobody else's entry went


def test_an_address_group_over_its_quota_makes_room_from_its_own_oldest_entries():
    storage = BoundedStorage(max_bytes=100_000, group_share=0.2)
    honest = DHTID.generate("honest")
    assert sent_from("203.0.113.0/24", storage, honest, b"o" * 1000, LATER, subkey=subkey("honest", "g"))
    for i in range(100):  # a hundred identities, one address
        sent_from("198.51.100.0/24", storage, DHTID.generate(f"s{i}"), b"x" * 1000, LATER, subkey=subkey(i, "g"))
    assert storage.usage()["by_group"]["198.51.100.0/24"] <= 20_000 and entries(storage, honest)


def test_a_full_directory_shard_still_takes_the_entry_of_a_later_honest_peer():
    storage = BoundedStorage(max_bytes=1_000_000, max_entries_per_key=8)
    shard = DHTID.generate("d/5/3")
    for i in range(8):  # identities ground to hash into the shard, stored before the victim publishes
        assert sent_from("198.51.100.0/24", storage, shard, b"p" * 100, LATER, subkey=subkey(f"sybil{i}"))
    assert sent_from("203.0.113.0/24", storage, shard, b"v" * 100, LATER, subkey=subkey("victim"))
    assert subkey("victim") in entries(storage, shard) and len(entries(storage, shard)) == 8
    assert storage.evicted == 1
    # the flooder's next identity makes room from its own group only: the victim stays
    assert not sent_from("198.51.100.0/24", storage, shard, b"p" * 100, LATER, subkey=subkey("sybil9"))
    assert subkey("victim") in entries(storage, shard)


def test_a_full_storage_takes_a_newcomer_from_the_group_that_holds_the_most():
    storage = BoundedStorage(max_bytes=50_000, group_share=0.6, signer_share=1.0)
    for group, count in (("198.51.100.0/24", 27), ("192.0.2.0/24", 18)):  # 60 % and 40 %: full, each in quota
        for i in range(count):
            assert sent_from(group, storage, DHTID.generate(f"{group}{i}"), b"x" * 1000, LATER,
                             subkey=subkey(f"{group}{i}", "g"))
    before = storage.usage()["by_group"]
    honest = DHTID.generate("honest")
    assert sent_from("203.0.113.0/24", storage, honest, b"o" * 2000, LATER, subkey=subkey("honest", "g"))
    after = storage.usage()["by_group"]
    assert entries(storage, honest) and storage.measure() <= 50_000
    assert after["198.51.100.0/24"] < before["198.51.100.0/24"]  # the largest gave way
    assert after["192.0.2.0/24"] == before["192.0.2.0/24"]


def test_entries_of_rounds_far_from_ours_are_not_stored_for_others():
    current = {"round": 100}
    storage = BoundedStorage(max_bytes=1_000_000, rounds=lambda: rounds_near(current["round"]))
    far = DHTID.generate("far")
    assert not sent_from("198.51.100.0/24", storage, far, b"x", LATER, subkey=subkey("a", "g", 10**12))
    assert not sent_from("198.51.100.0/24", storage, far, b"x", LATER, subkey=subkey("a", "d", 200))
    assert sent_from("198.51.100.0/24", storage, far, b"x", LATER, subkey=subkey("a", "d", 101))
    assert sent_from("198.51.100.0/24", storage, far, b"x", LATER, subkey=subkey("b", "s", 99, "2"))
    assert sent_from("198.51.100.0/24", storage, far, b"x", LATER, subkey=f"[owner:c]|c/{3}".encode())  # no round
    assert storage.store(far, b"x", LATER, subkey=subkey("me", "g", 10**6))  # our own: any round we play
    assert storage.refused["round_not_near"] == 2


def test_expired_entries_give_their_bytes_back():
    storage = BoundedStorage(max_bytes=5_000, group_share=1.0, signer_share=1.0)
    soon = get_dht_time() + 0.3
    for i in range(4):
        assert sent_from("g", storage, DHTID.generate(f"e{i}"), b"x" * 1000, soon, subkey=subkey(i, "g"))
    time.sleep(0.4)  # entries that expire in 0.3 s: no condition to wait on but the clock
    assert storage.measure() == 0
    assert sent_from("g", storage, DHTID.generate("new"), b"x" * 4000, LATER, subkey=subkey("n", "g"))


def test_the_network_that_sent_an_authors_entries_is_remembered_even_when_they_were_refused():
    storage = BoundedStorage(max_bytes=1_000_000, rounds=lambda: rounds_near(10),
                             author_of=lambda sub: sub.split(b"]")[0][len(b"[owner:"):].decode())
    assert not sent_from("198.51.100.0/24", storage, DHTID.generate("far"), b"x", LATER,
                         subkey=subkey("sybil", "g", 10**9))
    assert storage.group_of_author("sybil") == "198.51.100.0/24"
    assert storage.store(DHTID.generate("mine"), b"x", LATER, subkey=subkey("me", "g", 10))
    assert storage.group_of_author("me") is None  # our own entries come from no network
