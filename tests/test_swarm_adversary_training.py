"""Two honest node processes (tiny model, real hivemind) train while an adversarial peer attacks the swarm.

The adversary has its own identity and joins by invite like anyone, from a network of its own (the honest nodes
have theirs: three /24s of the loopback); it announces far-future rounds, publishes for a round out of reach, floods
with many identities whose groups copy an honest task and question but carry a payload in an answer block before
the graded one, and stuffs junk keys with long expiry. The honest nodes must keep training together on rounds near
each other, each round bounded in time, fetch each other's groups whatever the number of identities, and a node
restarted after the attack must run. A node never waits for peers, so how many rounds pass before the other's groups
and the forged ones arrive depends on the machine's load: the honest nodes run until both have happened, then stop.
"""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace

import pytest

from node.clock import SwarmClock
from node.swarm.dht import DhtExchange, shard_of
from node.swarm.identity import load_or_create
from node.swarm.records import (
    MAX_ROUND, GroupRecord, Pointer, RoundRecord, SharedGroup, encode_group_record, encode_pointer,
)
from tests.nodes import NodeProcess, run_until, tiny_config
from tests.test_swarm_attack import PAYLOAD, store_as, sybils

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
MAX_ROUNDS = 400  # a bound never reached: the honest nodes are stopped once what the test checks has happened
HOSTS = {"a": "127.0.1.1", "b": "127.0.2.1", "attacker": "127.0.9.1"}  # three networks (/24s) on the loopback


def _config(tiny_model_dir, data_dir, *, rounds, join=(), host=HOSTS["a"]):
    return tiny_config(
        tiny_model_dir, data_dir,
        training={"external_groups": 2, "drop_zero_advantage": False},
        swarm={"swarm_name": "test", "initial_peers": list(join), "gather_timeout_s": 20.0, "host": host},
        run={"rounds": rounds, "checkpoint_every_rounds": 1},
    )


def hidden_payload(group: SharedGroup) -> SharedGroup:
    """The group's task and question, each completion a payload in an answer block nobody grades, then an answer."""
    return SharedGroup(group.task, group.question,
                       tuple(f"<answer>{PAYLOAD * 3}</answer> so <answer>4</answer>" for _ in group.completions),
                       group.finished)


def replay(group: SharedGroup) -> SharedGroup:
    """An honest group as it was: valid, verified like any other; what identities buy is the slot it takes."""
    return group


class Adversary:
    """Attacks in a thread until stopped: clock, a flood of groups copied from honest tasks (``forge`` makes each
    identity's texts), junk keys."""

    def __init__(self, swarm: DhtExchange, targets: list[str], identities: int = 12,
                 forge=hidden_payload) -> None:
        self.swarm = swarm
        self.targets = [SimpleNamespace(peer_id=p) for p in targets]
        self.identities = sybils(identities)
        self.forge = forge
        self.stop = threading.Event()
        self.rounds_flooded: set[int] = set()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _store(self, key, entries):
        coroutine = store_as(self.swarm._node, key, self.targets, entries)
        return asyncio.run_coroutine_threadsafe(coroutine, self.swarm._loop).result(30)

    def _run(self) -> None:
        ns = self.swarm._namespace
        far = RoundRecord(self.swarm.peer_id, MAX_ROUND, self.swarm_groups_placeholder())
        clock = SwarmClock()
        while not self.stop.is_set():
            self.swarm.publish(far)  # a round nobody plays
            now = clock.now()
            for seen in (now - 1, now):  # an honest group, to copy a task every node regenerates
                self.swarm._rounds.pop(seen, None)
                honest = self.swarm.gather(seen).records
                if not honest:
                    continue
                group, prompt_format = honest[0].groups[0], honest[0].prompt_format
                # flood this round and the next ones, so that the groups are there when honest nodes look
                for round_ in range(seen, seen + 4):
                    if round_ in self.rounds_flooded:
                        continue
                    self.rounds_flooded.add(round_)
                    forged = self.forge(group)
                    for key, peer in self.identities:
                        shard = shard_of(peer, self.swarm._shards)
                        self._store(key, [
                            (f"{ns}/d/{round_}/{shard}", f"|d/{round_}/{shard}".encode(),
                             encode_pointer(Pointer(peer, round_, 1, (0,)))),
                            (f"{ns}/g/{round_}/{peer}/0", b"|g/" + str(round_).encode() + b"/0",
                             encode_group_record(GroupRecord(peer, round_, 0, forged, prompt_format))),
                            (f"test/junk/{peer}", b"|g/1/0", b"\0" * 50_000),
                        ])
            self.stop.wait(1.0)

    def swarm_groups_placeholder(self):
        from tests.test_swarm import record

        return record(self.swarm.peer_id, MAX_ROUND, groups=1, completions=2, completion_chars=50).groups


def _fetched_from(node: NodeProcess, peer_id: str) -> set[int]:
    return {s.round for s in node.events_of("rollout_sample") if s.source_peer == peer_id}


def _payloads_dropped(nodes: list[NodeProcess]) -> int:
    return sum(r.rejected_reasons.get("payload_outside_answer", 0) for n in nodes
               for r in n.events_of("round_finished"))


def test_honest_nodes_keep_training_under_attack_and_a_restarted_node_runs(tiny_model_dir, tmp_path):
    a = NodeProcess(_config(tiny_model_dir, tmp_path / "a", rounds=MAX_ROUNDS), name="a")
    a.send("pause")
    nodes = [a]
    adversary = None
    try:
        started_a = a.wait_for(lambda e: e.kind == "node_started")
        b = NodeProcess(_config(tiny_model_dir, tmp_path / "b", rounds=MAX_ROUNDS, join=started_a.invite,
                                host=HOSTS["b"]), name="b")
        b.send("pause")
        nodes.append(b)
        started_b = b.wait_for(lambda e: e.kind == "node_started")
        for node in nodes:
            node.wait_for(lambda e: e.kind == "state_changed" and e.state == "paused")
        attacker = DhtExchange(load_or_create(tmp_path / "attacker.key"), swarm_name="test", host=HOSTS["attacker"],
                         initial_peers=started_a.invite, groups_wanted=1, call_timeout=5.0)
        attacker.start()
        adversary = Adversary(attacker, [started_a.peer_id, started_b.peer_id])
        adversary.thread.start()
        for node in nodes:
            node.send("resume")
        ids = {"a": started_a.peer_id, "b": started_b.peer_id}
        run_until(nodes, lambda: (_fetched_from(a, ids["b"]) and _fetched_from(b, ids["a"])
                                  and _payloads_dropped(nodes) >= 1),
                  timeout=500, what="did both honest nodes train on each other's groups and catch a forged one")
        for node in nodes:
            node.send("stop")
        for node in nodes:
            assert node.finish(timeout=300) == 0, node.stderr()
        adversary.stop.set()
        adversary.thread.join(60)
        attacker.shutdown()

        for node in nodes:
            rounds = node.events_of("round_finished")
            assert [r.round for r in rounds] == list(range(len(rounds)))  # the node's own rounds, none lost
            assert all(r.seconds_gather < 1.0 for r in rounds)  # never waiting: taken from the buffer at once
            assert sum(r.groups_used for r in rounds) >= 1
        # a dozen identities from one network take one peer's turn in the background feed: each honest node still
        # fetched and trained on the other's groups (with a feed that samples identities uniformly, neither did).
        # How often, against rounds that never wait, is bench/attack.py's measure (docs/protocol-security.md).
        for node, other in ((a, "b"), (b, "a")):
            assert _fetched_from(node, ids[other]), (node.name, "trained on none of the other honest node's groups")
        assert adversary.rounds_flooded and _payloads_dropped(nodes) >= 1  # the payload groups were caught
        for node in nodes:  # shown to the user as rejected, never trained on
            payloads = [s for s in node.events_of("rollout_sample") if not s.local and "Ignore all" in s.completion]
            assert all(s.fate == "rejected:payload_outside_answer" for s in payloads), {s.fate for s in payloads}
    finally:
        if adversary is not None:
            adversary.stop.set()
        for node in nodes:
            if node.process.poll() is None:
                node.kill_tree()

    rounds_done = len(a.events_of("round_finished"))
    again = NodeProcess(_config(tiny_model_dir, tmp_path / "a", rounds=rounds_done + 1), name="a2")
    try:
        assert again.wait_for(lambda e: e.kind == "node_started").resumed_from_round is not None
        assert again.finish(timeout=300) == 0, again.stderr()
        assert len(again.events_of("round_finished")) == 1
    finally:
        if again.process.poll() is None:
            again.kill_tree()
