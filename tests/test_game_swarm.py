"""The multi-stage game with the tiny model: three players in one process (in-memory exchange), a late joiner, and
two real node processes over the hivemind DHT."""

from __future__ import annotations

import threading
import time

import pytest
import torch

from node.events import EventBus
from node.game import STAGES
from node.game.driver import GameDriver, GameSettings, game_seed
from node.game.exchange import InMemoryGameHub, clock_value
from node.game.rewards import answer_reward
from node.learning import models
from node.learning.grpo import GrpoLearner, Policy
from node.tasks.source import TaskSource
from tests.nodes import NodeProcess, tiny_config

FAMILIES = {"chain_sum": 1.0, "basic_arithmetic": 1.0}
# Prompts are cut from the left to this: the update's cost grows with the prompt (TRL scores every position over the
# whole vocabulary), and a random model reads nothing anyway.
PROMPT_TOKENS = 192


# A random model writes gibberish, so every reward would be 0 and no stage would update. One completion per group
# is replaced by this text, readable in all three formats (and wrong), so every stage's group has reward spread.
PLANTED = "<majority>none</majority><think>x</think><answer>0</answer><correct>none</correct><why>x</why>"


class GatedPolicy:
    """A real policy that plants :data:`PLANTED` as each group's first completion, and whose ``gate_call``-th
    generation waits for ``gate`` (to hold a stage until a peer is in)."""

    def __init__(self, policy: Policy, *, gate=None, gate_call=0, on_first=None) -> None:
        self._policy, self._gate, self._gate_call, self._on_first = policy, gate, gate_call, on_first
        self.calls = 0

    def prompt_ids(self, messages):
        return self._policy.prompt_ids(messages)

    def generate(self, prompts, **kwargs):
        self.calls += 1
        if self.calls == 1 and self._on_first is not None:
            self._on_first.set()
        if self.calls == self._gate_call:
            assert self._gate.wait(60)
        groups = self._policy.generate(prompts, **kwargs)
        planted = self._policy.encode_completion(PLANTED, finished=True, max_new_tokens=kwargs["max_new_tokens"])
        return [[planted, *group[1:]] for group in groups]


def tiny_player(tiny_model_dir, tmp_path, hub, name, **gating):
    model, tokenizer = models.load(
        models.resolve(str(tiny_model_dir)), cache_dir=tmp_path / "models", dtype=torch.float32, device="cpu"
    )
    policy = Policy(model, tokenizer, generation_dtype=torch.float32, max_prompt_tokens=PROMPT_TOKENS)
    learner = GrpoLearner(
        policy, output_dir=tmp_path / name, device="cpu", mixed_bf16=False, num_generations=2, max_new_tokens=12,
        learning_rate=1e-4, beta=0.0, epsilon=0.2, epsilon_high=0.28, loss_type="grpo", max_grad_norm=1.0, seed=0,
    )
    driver = GameDriver(
        settings=GameSettings(questions=2, num_generations=2, max_new_tokens=12, temperature=1.0, top_p=1.0,
                              gather_timeout_s=60.0),
        policy=GatedPolicy(policy, **gating), learner=learner, tasks=TaskSource(FAMILIES, seed=game_seed("t", None)),
        exchange=hub.exchange(name), bus=EventBus(),
    )
    return driver, learner


def test_three_tiny_models_play_every_stage_with_a_late_joiner(tiny_model_dir, tmp_path):
    hub = InMemoryGameHub()
    late_in = threading.Event()
    # The first two hold their critique until the late joiner has started critiquing.
    first = {n: tiny_player(tiny_model_dir, tmp_path, hub, n, gate=late_in, gate_call=2) for n in ("peer-a", "peer-b")}
    late, late_learner = tiny_player(tiny_model_dir, tmp_path, hub, "peer-c", on_first=late_in)
    results, errors = {}, []

    def play(name, driver):
        try:
            outcome = driver.play_round(None, 0)
            results[name] = (outcome.metrics, outcome.samples)
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=play, args=(n, d)) for n, (d, _) in first.items()]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 120
    # both at the critique stage: the swarm's position is where most networks are (here: the slower of the two)
    while (len(hub.clock()) < 2 or min(hub.clock().values()) < clock_value(0, 2)) and time.monotonic() < deadline:
        time.sleep(0.05)
    play("peer-c", late)
    for t in threads:
        t.join(120)
    assert not errors, errors

    assert {n: list(m.stage_rewards) for n, (m, _) in results.items()} == {
        "peer-a": list(STAGES), "peer-b": list(STAGES), "peer-c": ["critique", "revise"],
    }
    assert all(learner.global_step == 3 for _, learner in first.values()) and late_learner.global_step == 2
    # records crossed: everyone's work of every stage it played is in the exchange, and was read by the others
    assert {stage: sorted(author for author, _ in hub.entries(0, stage)) for stage in (1, 2, 3)} == {
        1: ["peer-a", "peer-b"], 2: ["peer-a", "peer-b", "peer-c"], 3: ["peer-a", "peer-b", "peer-c"],
    }
    for name, (metrics, samples) in results.items():
        seen = {(s.stage, s.source_peer) for s in samples if not s.local}
        others = set(results) - {name}
        assert {peer for stage, peer in seen if stage == "critique"} == others
        assert {peer for stage, peer in seen if stage == "answer"} == {"peer-a", "peer-b"} - {name}
        assert metrics.groups_rejected == 0 and metrics.groups_received > 0
        assert not metrics.update_skipped and metrics.groups_with_spread == 1.0
    # rewards come from our own regenerated ground truth
    questions = {q.question: q for q in first["peer-a"][0]._questions(0)}
    for metrics, samples in results.values():
        for sample in samples:
            assert sample.expected == questions[sample.question].answer
            if sample.stage == "answer":
                assert sample.reward == pytest.approx(answer_reward(questions[sample.question], sample.completion))


@pytest.mark.slow
def test_two_nodes_play_the_game_over_the_dht(tiny_model_dir, tmp_path):
    def config(name, join=()):
        return tiny_config(
            tiny_model_dir, tmp_path / name,
            training={"num_generations": 2, "max_new_tokens": 12, "max_prompt_tokens": PROMPT_TOKENS},
            swarm={"swarm_name": "game-test", "game": "multistage", "initial_peers": list(join), "gather_timeout_s": 60.0},
            tasks={"weights": FAMILIES},
            run={"rounds": 2, "checkpoint_every_rounds": 5},
        )

    first = NodeProcess(config("a"), name="a")
    first.send("pause")
    nodes = [first]
    try:
        started = first.wait_for(lambda e: e.kind == "node_started")
        assert started.game == "multistage"
        second = NodeProcess(config("b", started.invite), name="b")
        second.send("pause")
        nodes.append(second)
        for node in nodes:
            node.wait_for(lambda e: e.kind == "state_changed" and e.state == "paused")
        for node in nodes:
            node.send("resume")
        for node in nodes:
            assert node.finish(timeout=300) == 0, node.stderr()
    finally:
        for node in nodes:
            if node.process.poll() is None:
                node.kill_tree()
    for node in nodes:
        me = node.events_of("node_started")[0].peer_id
        rounds = node.events_of("round_finished")
        assert [r.round for r in rounds] == [0, 1] and all(r.game == "multistage" for r in rounds)
        assert all(list(r.stage_rewards) == list(STAGES) for r in rounds), [r.stage_rewards for r in rounds]
        assert all(r.groups_rejected == 0 and r.peers_seen == 1 for r in rounds)
        assert all(r.update_skipped for r in rounds)  # a random model's rewards are all 0: no spread, no update
        peer_work = {s.stage for s in node.events_of("rollout_sample") if not s.local and s.source_peer != me}
        assert peer_work == set(STAGES)


def test_two_nodes_play_the_game_through_the_runner_in_memory(tiny_model_dir, tmp_path):
    """build_node with swarm.game = "multistage" on an in-memory board: the runner dispatches to the game, the held-out
    evaluation runs before the round, and the two nodes, evaluating at their own pace, still play every stage."""
    from node.runner import build_node
    from node.swarm.exchange import InMemoryBoard, InMemoryExchange

    board = InMemoryBoard()
    nodes, events, paused = [], {}, []
    for name in ("a", "b"):
        config = tiny_config(
            tiny_model_dir, tmp_path / name,
            training={"num_generations": 2, "max_new_tokens": 8, "max_prompt_tokens": PROMPT_TOKENS},
            swarm={"swarm_name": "game-test", "game": "multistage", "gather_timeout_s": 60.0},
            tasks={"weights": FAMILIES}, evaluation={"every_rounds": 1, "questions": 2 if name == "a" else 6},
            run={"rounds": 1, "checkpoint_every_rounds": 5},
        )
        bus, seen, ready = EventBus(), [], threading.Event()
        bus.subscribe(seen.append)
        bus.subscribe(lambda e, ready=ready: ready.set() if e.kind == "state_changed" and e.state == "paused" else None)
        node = build_node(config, bus=bus, exchange=lambda cfg, identity, peers: InMemoryExchange(board, identity.peer_id))
        node.pause()  # both set up (and in the game) before either plays
        nodes.append(node)
        events[name] = seen
        paused.append(ready)
    threads = [threading.Thread(target=node.run) for node in nodes]
    for thread in threads:
        thread.start()
    try:
        deadline = time.monotonic() + 900
        # a node that fails while setting up ends its thread: stop waiting for it then, not at the deadline
        while not all(ready.is_set() for ready in paused) and all(t.is_alive() for t in threads):
            assert time.monotonic() < deadline, "the nodes did not set up in time"
            paused[0].wait(0.2)
        assert all(ready.is_set() for ready in paused), "a node's thread ended before it was ready"
        for node in nodes:
            node.resume()
        for thread in threads:
            thread.join(600)
    finally:
        for node in nodes:
            node.stop()
    for name, seen in events.items():
        kinds = [e.kind for e in seen]
        assert "eval_finished" in kinds and kinds.index("eval_finished") < kinds.index("round_finished"), name
        rounds = [e for e in seen if e.kind == "round_finished"]
        assert len(rounds) == 1 and rounds[0].game == "multistage"
        assert list(rounds[0].stage_rewards) == list(STAGES), (name, rounds[0].stage_rewards)
        assert next(e for e in seen if e.kind == "node_started").game == "multistage"
        assert seen[-1].kind == "state_changed" and seen[-1].state == "stopped"
    hub = board.game_hub
    assert {stage: len(hub.entries(0, stage)) for stage in (1, 2, 3)} == {1: 2, 2: 2, 3: 2}
