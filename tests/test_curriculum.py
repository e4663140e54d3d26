"""The adaptive curriculum: levels move with recent accuracy and spread, and peers regenerate every level."""

from __future__ import annotations

import random

from node.swarm.exchange import Exchange, InMemoryExchange
from node.tasks.curriculum import SMALL_MODEL_LADDERS, Curriculum, default_mix
from node.tasks.source import TaskSource


def test_level_rises_when_accuracy_is_high_and_falls_when_groups_lose_spread():
    curriculum = Curriculum({"gcd": 3, "products": 2}, window=4)
    for _ in range(3):
        curriculum.record("gcd", 0, accuracy=1.0, spread=False)
    assert curriculum.update() == {} and curriculum.levels["gcd"] == 0  # the window is not full yet
    curriculum.record("gcd", 0, accuracy=0.75, spread=True)
    assert curriculum.update() == {"gcd": 1}
    curriculum.record("gcd", 0, accuracy=1.0, spread=False)  # a group of the old level counts no more
    for _ in range(4):
        curriculum.record("gcd", 1, accuracy=0.0, spread=False)
    assert curriculum.update() == {"gcd": 0}
    for _ in range(4):  # wrong but with spread (e.g. well-formed or not): still learning, stay
        curriculum.record("products", 0, accuracy=0.0, spread=True)
    assert curriculum.update() == {} and curriculum.levels == {"gcd": 0, "products": 0}
    top = Curriculum({"products": 2}, window=1, start={"products": 5})
    assert top.levels == {"products": 1}  # a resumed level is clamped to the ladder
    top.record("products", 1, accuracy=1.0, spread=False)
    assert top.update() == {}  # no rung above the last


def test_a_peer_at_another_level_regenerates_our_tasks_without_a_ref_change():
    mix = default_mix(135_000_000)
    ours, theirs = (TaskSource(mix.weights, seed=seed, ladders=mix.ladders) for seed in (1, 2))
    hard = ours.sample(10, random.Random(0), {family: 3 for family in SMALL_MODEL_LADDERS})
    assert {ours.level_of(t.ref) for t in hard} == {3}
    assert [theirs.regenerate(t.ref).question for t in hard] == [t.question for t in hard]


def test_the_dht_swarm_and_the_in_memory_exchange_offer_what_a_round_uses():
    from node.swarm.dht import DhtExchange

    members = [name for name in vars(Exchange) if not name.startswith("_")]
    assert {"publish", "start_feed", "gather", "peers_seen", "start", "shutdown"} <= set(members)
    for cls in (DhtExchange, InMemoryExchange):
        assert all(callable(getattr(cls, name, None)) for name in members), cls
