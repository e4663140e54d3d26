"""The round clock's rule, without a network: quorum of distinct peers, bounded jumps, one bound on rounds."""

import pytest

from node.clock import ClockPolicy, follow_round, required_announcers
from node.records import MAX_ROUND, encode_record, RoundRecord

DEFAULT = ClockPolicy()


def peers(*rounds):
    return {f"peer{i}": r for i, r in enumerate(rounds)}


def test_one_peer_announcing_a_far_future_round_is_ignored():
    assert follow_round(5, peers(10**9, 6, 5), DEFAULT) == 6
    assert follow_round(5, peers(2**63 - 1, 5), DEFAULT) == 5  # out of bounds: not even counted


def test_two_nodes_still_agree():
    # with a single other peer the quorum is that peer: a swarm of two must not drift apart
    assert follow_round(3, peers(10), DEFAULT) == 10


def test_a_quorum_can_move_the_clock_but_only_by_a_bounded_jump():
    sybils = peers(10**9, 10**9, 10**9)
    assert follow_round(5, sybils, DEFAULT) == 5 + DEFAULT.max_jump
    assert follow_round(MAX_ROUND - 1, peers(MAX_ROUND, MAX_ROUND), DEFAULT) == MAX_ROUND


def test_a_fraction_of_the_active_peers_can_be_required():
    strict = ClockPolicy(quorum=2, quorum_fraction=0.5)
    honest = {f"h{i}": 7 for i in range(6)}
    attack = {f"s{i}": 10**6 for i in range(5)}
    assert follow_round(7, honest | attack, strict) == 7  # 5 of 11 < half
    assert follow_round(7, honest | attack, DEFAULT) == 7 + DEFAULT.max_jump  # what the default lets 2 sybils do
    assert required_announcers(11, strict) == 6


def test_never_backwards_and_always_encodable():
    assert follow_round(50, peers(3, 4, 5), DEFAULT) == 50
    assert follow_round(-3, {}, DEFAULT) == 0
    for current in (0, 7, MAX_ROUND - 5, MAX_ROUND, 2**63 - 1):
        for announced in (peers(), peers(MAX_ROUND, MAX_ROUND), peers(10**18, 10**18, True, "x", -1)):
            round_ = follow_round(current, announced, DEFAULT)
            assert 0 <= round_ <= MAX_ROUND
            encode_record(RoundRecord("QmPeer", round_, ()))  # never a round our own encoder refuses


@pytest.mark.parametrize("bad", [dict(quorum=0), dict(quorum_fraction=1.5), dict(max_jump=0)])
def test_invalid_policies_are_refused(bad):
    with pytest.raises(ValueError):
        ClockPolicy(**bad)
