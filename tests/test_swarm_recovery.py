"""What a partition would otherwise lose (:mod:`node.swarm.recovery`): our unconfirmed entries, held bounded and
fresh only, and the past rounds read again when a peer reappears. The whole path over a cut link is
tests/test_internet.py's partition test."""

from __future__ import annotations

import pytest

from node.swarm.recovery import Reappearances, Unconfirmed

EXPIRATION = 1_800_000_600.0  # DHT time (unix seconds) the first store asked for


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def keys_of(round_: int, count: int = 2) -> tuple[list[str], list[bytes], list[bytes]]:
    keys = [f"s/g/{round_}/me/{i}" for i in range(count)] + [f"s/d/{round_}/3"]
    subkeys = [f"|g/{round_}/{i}".encode() for i in range(count)] + [f"|d/{round_}/3".encode()]
    values = [bytes(100) for _ in range(count)] + [f"pointer {round_} {count}".encode()]
    return keys, subkeys, values


def everything(entry) -> bool:
    return True


def test_entries_are_held_until_a_replica_confirms_them():
    held = Unconfirmed(now=Clock())
    keys, subkeys, values = keys_of(7)
    held.hold(7, keys, subkeys, values, expiration=EXPIRATION)
    assert len(held) == 3 and held.rounds() == [7]
    assert held.confirm(None, keys, subkeys, values) == 0  # a store that failed confirms nothing
    stored = {(keys[0], subkeys[0]): True, (keys[1], subkeys[1]): False, (keys[2], subkeys[2]): True}
    assert held.confirm(stored, keys, subkeys, values) == 2
    assert [e.key for e in held.due(everything, older_than_s=0)] == [keys[1]]


def test_a_late_answer_to_an_old_store_keeps_the_newer_pointer_held():
    clock = Clock()
    held = Unconfirmed(now=clock)
    old_keys, old_subkeys, old_values = keys_of(7, count=2)
    held.hold(7, old_keys, old_subkeys, old_values, expiration=EXPIRATION)
    keys, subkeys, values = keys_of(7, count=4)  # a second publish in the same swarm round: its pointer covers 4
    held.hold(7, keys[2:], subkeys[2:], values[2:], expiration=EXPIRATION)
    assert held.confirm({(k, s): True for k, s in zip(old_keys, old_subkeys)}, old_keys, old_subkeys, old_values) == 2
    clock.t += 10
    due = held.due(everything, older_than_s=5)
    assert sorted(e.key for e in due) == sorted(keys[2:]) and values[-1] in [e.value for e in due]


def test_only_entries_whose_own_store_had_time_to_answer_are_due():
    clock = Clock()
    held = Unconfirmed(now=clock)
    held.hold(1, *keys_of(1), expiration=EXPIRATION)
    clock.t += 4
    held.hold(2, *keys_of(2), expiration=EXPIRATION)
    clock.t += 2
    assert {e.round for e in held.due(everything, older_than_s=5)} == {1}
    clock.t += 4
    assert {e.round for e in held.due(everything, older_than_s=5)} == {1, 2}


def test_stale_entries_are_dropped_not_sent():
    clock = Clock()
    held = Unconfirmed(now=clock)
    for round_ in range(5):
        held.hold(round_, *keys_of(round_), expiration=EXPIRATION)
    clock.t += 60
    due = held.due(lambda entry: entry.round >= 3, older_than_s=0)
    assert {e.round for e in due} == {3, 4} and held.rounds() == [3, 4] and len(held) == 6
    assert held.bytes == sum(len(v) for r in (3, 4) for v in keys_of(r)[2])


@pytest.mark.parametrize("bound", ["entries", "bytes"])
def test_the_held_entries_are_bounded_and_the_oldest_go_first(bound):
    per_round = sum(len(v) for v in keys_of(0)[2])
    held = Unconfirmed(max_entries=9 if bound == "entries" else 10**6,
                       max_bytes=10**6 if bound == "entries" else 3 * per_round, now=Clock())
    for round_ in range(10):
        held.hold(round_, *keys_of(round_), expiration=EXPIRATION)
    assert held.rounds() == [7, 8, 9] and len(held) == 9 and held.dropped == 21
    assert held.bytes == 3 * per_round
    with pytest.raises(ValueError):
        Unconfirmed(max_entries=0)


def test_a_peer_that_reappears_makes_its_missing_rounds_due_a_little_later_and_after_a_timed_out_store():
    clock = Clock()
    again = Reappearances(now=clock)  # the default: 3 s, 15 s and 40 s after the reappearance
    for round_ in (10, 11):
        again.seen(round_, ["a", "b"])
    again.seen(12, ["b"])
    again.seen(17, ["a", "b"])  # a was cut off for rounds 12-16, b for 13-16
    assert again.take(0) == []  # not yet: the peer's held entries are still on their way
    clock.t += 3
    assert again.take(0) == [16, 15, 14, 13, 12]
    assert again.take(0) == []
    again.seen(18, ["a", "b"])
    clock.t += 12
    assert again.take(0) == [16, 15, 14, 13, 12]  # once more, for a store again that timed out (10 s) and its retry
    clock.t += 24
    assert again.take(0) == []
    clock.t += 1
    assert again.take(0) == [16, 15, 14, 13, 12]  # and at 40 s, for a second one that timed out or a slow link
    clock.t += 100
    assert again.take(0) == []  # and no more: a peer publishing every round makes nothing due


def test_a_peer_seen_for_the_first_time_makes_the_rounds_read_without_it_due():
    """It may have joined just before our link went down: its rounds of the cut landed after we read them empty."""
    clock = Clock()
    again = Reappearances(now=clock)
    again.seen(20, ["b"])  # our first read: a peer in it has no earlier round we read
    for round_ in range(19, 14, -1):  # the rest of the window, read newest first in the same poll
        again.seen(round_, ["b"])
    for round_ in range(21, 25):
        again.seen(round_, ["b"])
    again.seen(25, ["a", "b"])
    clock.t += 3
    assert again.take(0) == [24, 23, 22, 21, 20, 19, 18, 17]  # within the bound of a poll, newest first
    assert again.take(0) == [16, 15]
    again.seen(26, ["a", "b"])  # known now: nothing more
    clock.t += 100
    assert again.take(0) == [24, 23, 22, 21, 20, 19, 18, 17]  # the 15-s and 40-s reads, one per poll
    assert again.take(0) == [16, 15]
    assert again.take(0) == []


def test_new_identities_cannot_postpone_a_due_read_and_add_a_bounded_number_of_reads():
    clock = Clock()
    again = Reappearances(reread_after_s=(3.0, 40.0), now=clock)
    again.seen(10, ["b"])
    again.seen(11, ["a"])  # a new peer: round 10 due at 3 s and 40 s
    for n in range(400):  # a new identity every 0.1 s, each would make round 10 due 3 s later
        clock.t += 0.1
        again.seen(11, [f"sybil{n}"])
        if clock.t >= 103.0:
            break
    assert again.take(0) == [10]  # read when the first one made it due
    for _ in range(2000):
        again.seen(11, [f"sybil{clock.t}"])
        clock.t += 0.01
    assert len(again._due[10]) <= 2 * 40  # reads at least a second apart within the longest delay


def test_rereads_are_bounded_per_poll_and_forget_rounds_out_of_the_window():
    clock = Clock()
    again = Reappearances(reread_after_s=(0.0,), now=clock)
    again.seen(100, ["a"])
    again.seen(130, ["a"])
    assert again.take(110, limit=8) == list(range(129, 121, -1))
    assert again.take(118, limit=8) == [121, 120, 119, 118]  # 110-117 fell out of the freshness window meanwhile
    assert again.take(0) == []
    again.seen(120, ["a"])  # an older round read late (a first read after reconnecting) moves nothing
    again.seen(131, ["a"])
    assert again.take(0) == []


def test_an_entry_stored_again_expires_a_little_later_each_time_never_after_a_newer_one():
    """A replica keeps a value only if it expires later than the one it holds. Sent again with a fresh expiration, a
    held pointer that a newer one had replaced in flight overwrote the newer one (a reader then missed the groups of
    the later publish); sent again with its own expiration, one a replica already had would never land."""
    held = Unconfirmed(now=Clock())
    held.hold(7, *keys_of(7), expiration=EXPIRATION)
    pointer = held.due(everything, older_than_s=0.0)[-1]
    sent = [pointer.resend_expiration() for _ in range(120)]  # two minutes of retries, one a second
    assert all(later > earlier for earlier, later in zip([EXPIRATION, *sent], sent))
    assert sent[-1] < EXPIRATION + 0.001  # below a pointer published a millisecond later
