"""Whole SAPO rounds without a network: two nodes (tiny model) over an in-memory exchange, plus a hostile peer.
No round waits for a peer: peers' groups reach a buffer in the background and rounds take what is there."""

from __future__ import annotations

import dataclasses
import random
import time
import zlib
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from node.learning.grpo import GrpoLearner, Policy
from node.sapo.round import RoundParts, RoundSettings, connect_peers, disconnect_peers, play_round
from node.swarm.exchange import InMemoryBoard, InMemoryExchange
from node.swarm.records import RoundRecord, SharedGroup
from node.tasks.curriculum import SMALL_MODEL_LADDERS, Curriculum
from node.tasks.prompts import PROMPT_FORMAT
from node.tasks.source import Grade, Task, TaskSource

G = 4
SETTINGS = RoundSettings(local_questions=2, external_groups=2, num_generations=G, max_new_tokens=8, temperature=1.0,
                         top_p=1.0, format_reward_weight=0.0, drop_zero_advantage=True)


class _SpreadParts(RoundParts):
    """A random tiny model never answers right; this grader gives different texts different rewards (a hash)."""

    def grade(self, task: Task, text: str, finished: bool) -> Grade:
        reward = zlib.crc32(text.encode()) / 2**32
        return Grade(reward, reward > 0.5, reward, True, "correct" if reward > 0.5 else "wrong_value")


class _FlatOwnParts(_SpreadParts):
    """Every completion of this node's own questions scores 0 (no spread); its peers' get the hash's spread."""

    def grade(self, task: Task, text: str, finished: bool) -> Grade:
        if task.ref.seed == self.tasks.seed:
            return Grade(0.0, False, 0.0, True, "wrong_value")
        return super().grade(task, text, finished)


class _OwnByFamilyParts(RoundParts):
    """Its own groups: every products completion right, every other one wrong (its accuracy per family); peers'
    groups: graded by the real verifier."""

    def grade(self, task: Task, text: str, finished: bool) -> Grade:
        if task.ref.seed == self.tasks.seed:
            right = task.ref.family == "products"
            return Grade(float(right), right, float(right), True, "correct" if right else "wrong_value")
        return super().grade(task, text, finished)


class _Registry:
    def __init__(self, registered: set[str]) -> None:
        self.registered, self.asked = registered, set()

    def registered_peers(self, peer_ids) -> set[str]:
        self.asked |= set(peer_ids)
        return self.registered & self.asked


def _policy(model_dir: Path) -> Policy:
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    return Policy(model, AutoTokenizer.from_pretrained(model_dir), generation_dtype=torch.float32,
                  max_prompt_tokens=256)


def _parts(model_dir: Path, tmp_path: Path, board: InMemoryBoard, peer_id: str, *, seed: int,
           cls=RoundParts, members=(), scale_rewards: str = "group") -> RoundParts:
    tasks = TaskSource({family: 1.0 for family in SMALL_MODEL_LADDERS}, seed=seed, ladders=SMALL_MODEL_LADDERS)
    policy = _policy(model_dir)
    learner = GrpoLearner(
        policy, output_dir=tmp_path / peer_id, device="cpu", mixed_bf16=False, num_generations=G, max_new_tokens=8,
        learning_rate=1e-4, beta=0.0, epsilon=0.2, epsilon_high=0.28, loss_type="grpo", max_grad_norm=1.0, seed=0,
        scale_rewards=scale_rewards,
    )
    return cls(peer_id=peer_id, tasks=tasks, policy=policy, learner=learner,
               exchange=InMemoryExchange(board, peer_id, members=members),
               curriculum=Curriculum({f: len(levels) for f, levels in tasks.levels.items()}), settings=SETTINGS)


def _play(parts: RoundParts, number: int, results: dict, events: list) -> None:
    results[parts.peer_id] = play_round(parts, number, seed=f"{parts.peer_id}:{number}", rounds_trained=0,
                                        should_stop=lambda: False, report=events.append)


def _connect(*nodes: RoundParts, **bounds) -> None:
    for parts in nodes:
        connect_peers(parts, **({"max_bytes": 2**24, "max_per_peer": 8, "max_age_s": None} | bounds))


def test_two_nodes_build_byte_identical_prompt_token_ids(tiny_model_dir):
    mine = TaskSource({f: 1.0 for f in SMALL_MODEL_LADDERS}, seed=1, ladders=SMALL_MODEL_LADDERS)
    peer = TaskSource({f: 1.0 for f in SMALL_MODEL_LADDERS}, seed=2, ladders=SMALL_MODEL_LADDERS)
    policy_a, policy_b = _policy(tiny_model_dir), _policy(tiny_model_dir)
    for task in mine.sample(10, random.Random(0), {"products": 1}):
        ids = policy_a.prompt_ids(mine.messages(task))
        assert ids == policy_b.prompt_ids(peer.messages(peer.regenerate(task.ref)))
        assert policy_a.tokenizer.decode(ids).count("<answer>") >= 2  # system prompt + worked example


@pytest.mark.slow
def test_a_round_trains_on_verified_peer_groups_and_accounts_for_every_one(tiny_model_dir, tmp_path):
    board = InMemoryBoard()
    a = _parts(tiny_model_dir, tmp_path, board, "QmNodeA", seed=1, cls=_SpreadParts, members=["QmNodeB"])
    b = _parts(tiny_model_dir, tmp_path, board, "QmNodeB", seed=2, cls=_SpreadParts, members=["QmNodeA"])
    _connect(a, b)
    results, events = {}, []
    before, started = a.clock.now(), time.time()
    _play(b, 0, results, events)  # B publishes its two groups
    # A hostile peer: a valid ref with a forged question, and a record in another prompt format.
    task = b.tasks.sample(1, random.Random(9))[0]
    forged = SharedGroup(task=task.ref, question="Calculate 40 + 2.", completions=("<answer>42</answer>",) * G,
                         finished=(True,) * G)
    now = a.clock.now()
    InMemoryExchange(board, "QmEvil").publish(RoundRecord("QmEvil", now, (forged,), prompt_format=PROMPT_FORMAT))
    InMemoryExchange(board, "QmOld").publish(RoundRecord("QmOld", now, (dataclasses.replace(forged),)))
    a.registry = _Registry({"QmNodeB"})  # as a chain would say: B is registered on the coordinator
    a.buffer.verify_pending()  # what the verifier thread does meanwhile, done now: the test knows what is in
    a.settings = dataclasses.replace(SETTINGS, peer_advantages="positive")
    stepped, step = [], a.learner.step
    a.learner.step = lambda groups: stepped.append(groups) or step(groups)
    _play(a, 0, results, events)
    m = results["QmNodeA"].metrics
    # our own groups keep GRPO's push down; the peer's lose it (peer_advantages = "positive")
    assert [g.push_down for g in stepped[0]] == [True] * 2 + [False] * m.groups_used
    assert m.rejected_reasons == {"question_mismatch": 1, "prompt_format_mismatch": 1}
    # B's two groups: both trained (J = 2, one peer: a second group of a peer once every peer has one) or dropped
    assert m.groups_received == 4 and m.groups_used + m.groups_zero_advantage == 2 and m.groups_used >= 1
    assert m.external_groups_wanted == 2 and m.peer_groups_buffered == 0
    # ages: no older than the time since B began its round (a loaded machine makes that several swarm rounds)
    assert m.peer_group_age_rounds_max <= a.clock.now() - before
    assert 0 <= m.peer_group_age_s_mean <= m.peer_group_age_s_max <= time.time() - started
    assert m.groups_from_registered == m.groups_used and a.registry.asked >= {"QmNodeB"}
    assert results["QmNodeB"].metrics.groups_from_registered is None  # no chain: nothing counted
    assert m.seconds_gather < 1.0  # taken at once
    assert not m.update_skipped and a.learner.global_step == 1 and m.grad_norm is not None
    assert m.difficulty == {family: 0 for family in SMALL_MODEL_LADDERS}
    samples = results["QmNodeA"].samples
    fates = sorted(s.fate for s in samples if not s.local)
    assert len(fates) == 4 and "rejected:question_mismatch" in fates and "rejected:prompt_format_mismatch" in fates
    for sample in samples:
        if sample.local or sample.fate in ("trained", "dropped_equal_rewards"):
            assert sample.expected is not None and len(sample.group_rewards) == G
        if sample.local:  # the update ran: a group of equal rewards was in it, but taught nothing
            assert sample.fate == ("no_signal" if len(set(sample.group_rewards)) == 1 else "trained"), sample
    assert {e.phase for e in events} >= {"generating", "sharing", "training"}
    disconnect_peers(a), disconnect_peers(b)


@pytest.mark.slow
def test_a_round_never_waits_for_a_peer_and_a_late_peers_groups_are_used_later(tiny_model_dir, tmp_path):
    board = InMemoryBoard()
    a = _parts(tiny_model_dir, tmp_path, board, "QmFast", seed=1, cls=_SpreadParts, members=["QmLate"])
    late = _parts(tiny_model_dir, tmp_path, board, "QmLate", seed=2, cls=_SpreadParts, members=["QmFast"])
    _connect(a, late)
    results, events = {}, []
    _play(a, 0, results, events)  # the peer is live (a member) but has published nothing yet
    first = results["QmFast"].metrics
    assert first.groups_used == 0 and first.peer_group_age_s_max is None and first.seconds_gather < 0.5
    assert "waiting_for_peers" not in {e.phase for e in events}
    assert not first.update_skipped  # trained on what it had: its own groups
    before = a.clock.now()
    _play(late, 0, results, [])  # the late peer publishes now, while A is between rounds
    a.buffer.verify_pending()
    _play(a, 1, results, events)
    second = results["QmFast"].metrics
    assert second.groups_used >= 1 and second.reward_external is not None
    assert {s.source_peer for s in results["QmFast"].samples if s.fate == "trained" and not s.local} == {"QmLate"}
    assert second.peer_group_age_rounds_max <= a.clock.now() - before and second.seconds_gather < 0.5
    disconnect_peers(a), disconnect_peers(late)


@pytest.mark.slow
def test_a_round_counts_the_peer_groups_that_brought_spread_its_own_groups_lacked(tiny_model_dir, tmp_path):
    board = InMemoryBoard()
    a = _parts(tiny_model_dir, tmp_path, board, "QmStuck", seed=1, cls=_FlatOwnParts, members=["QmHelper"])
    b = _parts(tiny_model_dir, tmp_path, board, "QmHelper", seed=2, cls=_SpreadParts, members=["QmStuck"])
    _connect(a, b)
    results: dict = {}
    _play(b, 0, results, [])
    a.buffer.verify_pending()
    _play(a, 0, results, [])
    m, samples = results["QmStuck"].metrics, results["QmStuck"].samples
    own_families = {s.family for s in samples if s.local}
    from_peers = [s for s in samples if not s.local and s.fate == "trained"]
    assert m.groups_used == len(from_peers) >= 1
    # none of our groups had spread, so every peer group trained on supplied the round's whole signal
    assert m.local_groups_with_spread == 0 and m.peer_groups_with_spread == len(from_peers)
    assert not m.update_skipped and a.learner.global_step == 1
    assert m.peer_groups_spread_we_lacked == sum(s.family in own_families for s in from_peers)
    # the helper's own groups had spread; it took nothing from the stuck node (all equal rewards, dropped)
    helper = results["QmHelper"].metrics
    assert helper.local_groups_with_spread >= 1 and helper.peer_groups_with_spread == 0
    assert helper.peer_groups_spread_we_lacked == 0
    disconnect_peers(a), disconnect_peers(b)


@pytest.mark.slow
def test_teaching_first_takes_the_peer_groups_of_the_family_where_our_own_accuracy_is_lowest(tiny_model_dir, tmp_path):
    board = InMemoryBoard()
    a = _parts(tiny_model_dir, tmp_path, board, "QmLearner", seed=1, cls=_OwnByFamilyParts)
    a.tasks = TaskSource({"products": 1.0, "chain_sum": 1.0}, seed=1, ladders=SMALL_MODEL_LADDERS)
    a.settings = dataclasses.replace(SETTINGS, local_questions=4, peer_choice="teaching")
    _connect(a)
    # 8 peers, one group each, all alike in spread (one right answer of G): 2 of chain_sum, 6 of products
    for i, family in enumerate(["chain_sum"] * 2 + ["products"] * 6):
        task = TaskSource({family: 1.0}, seed=2, ladders=SMALL_MODEL_LADDERS).sample(1, random.Random(i))[0]
        texts = (f"<answer>{task.answer}</answer>",) + (f"<answer>{task.answer}1</answer>",) * (G - 1)
        peer = f"QmPeer{i}"
        InMemoryExchange(board, peer).publish(RoundRecord(peer, a.clock.now(), (
            SharedGroup(task=task.ref, question=task.question, completions=texts, finished=(True,) * G),),
            prompt_format=PROMPT_FORMAT))
    a.buffer.verify_pending()
    assert len(a.buffer.candidates()) == 8
    results: dict = {}
    _play(a, 0, results, [])
    # the round's own groups, graded before it took: products all right, chain_sum all wrong
    assert (a.own_accuracy.of("products"), a.own_accuracy.of("chain_sum")) == (1.0, 0.0)
    taken = [s.family for s in results["QmLearner"].samples if not s.local and s.fate == "trained"]
    assert taken == ["chain_sum", "chain_sum"]  # the uniform choice: 1 chance in 28
    disconnect_peers(a)


@pytest.mark.slow
def test_a_round_without_reward_spread_skips_the_update(tiny_model_dir, tmp_path):
    board = InMemoryBoard()
    solo = _parts(tiny_model_dir, tmp_path, board, "QmSolo", seed=3)  # real verifier: a random model scores 0
    solo.settings = dataclasses.replace(SETTINGS, external_groups=0)
    generate, generated = solo.policy.generate, []

    def half_finished(*args, **kwargs):  # as if every other completion had ended with end-of-sequence
        groups = [[dataclasses.replace(c, finished=i % 2 == 0) for i, c in enumerate(g)]
                  for g in generate(*args, **kwargs)]
        generated.extend(c for g in groups for c in g)
        return groups

    solo.policy.generate = half_finished
    results: dict = {}
    _play(solo, 0, results, [])
    m = results["QmSolo"].metrics
    assert m.update_skipped and solo.learner.global_step == 0 and m.grad_norm is None
    # the length an update would have reported: a finished completion's end-of-sequence token counted
    assert m.completion_length == pytest.approx(sum(len(c.ids) + c.finished for c in generated) / len(generated))
    assert m.reward_local == 0.0 and m.groups_with_spread == 0.0 and m.accuracy_local == 0.0
    # Nothing was trained on, and the gossip view must not say otherwise.
    assert all(s.fate == "update_skipped" and s.reason in ("no_answer_block", "cut_at_token_limit", "wrong_value")
               for s in results["QmSolo"].samples)


@pytest.mark.slow
def test_build_node_plays_rounds_and_evaluates_over_an_in_memory_exchange(tiny_model_dir, tmp_path, monkeypatch):
    from node import allocator
    from node.events import EventBus
    from node.runner import build_node
    from node.runstore import RunStore
    from tests.nodes import tiny_config

    config = tiny_config(tiny_model_dir, tmp_path, run={"rounds": 2, "checkpoint_every_rounds": 5},
                         evaluation={"every_rounds": 1, "questions": 5},
                         training={"peer_choice": "teaching", "peer_advantages": "positive", "scale_rewards": "none"})
    board, bus, events = InMemoryBoard(), EventBus(), []
    bus.subscribe(events.append)
    trims = []  # rounds finished when the heap was trimmed: once after each round, none for an evaluation
    monkeypatch.setattr(allocator, "trim_heap",
                        lambda: trims.append(sum(e.kind == "round_finished" for e in events)) or True)
    node = build_node(config, bus=bus, exchange=lambda cfg, identity, peers: InMemoryExchange(board, identity.peer_id))
    node.run()
    assert node.parts.settings.peer_choice == "teaching"  # the config's choices reach the round
    assert node.parts.settings.peer_advantages == "positive"
    assert node.learner.trainer.args.scale_rewards == "none"
    assert trims == [1, 2]
    kinds = [e.kind for e in events]
    evaluations = [e for e in events if e.kind == "eval_finished"]
    assert [e.rounds_trained for e in evaluations] == [0, 1, 2]  # baseline, every round, and after the last one
    assert kinds.index("eval_finished") < kinds.index("round_finished")
    assert all(e.questions == 5 and e.seconds > 0 for e in evaluations)
    # per family: how many held-out questions each accuracy rests on, and the accuracy itself
    assert all(sum(e.per_family_questions.values()) == 5 and set(e.per_family_questions) == set(e.per_family)
               for e in evaluations)
    assert RunStore(config.run_dir).evaluations() == evaluations
    assert [e.round for e in events if e.kind == "round_finished"] == [0, 1]
    assert len(board.records) >= 1 and all(r > 1_000_000 for r in board.records)  # published under the swarm clock
    phases = {e.phase for e in events if e.kind == "round_progress"}
    assert {"evaluating", "generating", "sharing", "checkpoint"} <= phases


@pytest.mark.parametrize("scale_rewards", ["group", "none"])
def test_the_reported_advantage_follows_the_learners_scaling(tiny_model_dir, tmp_path, scale_rewards):
    """The Dashboard's mean |advantage| is the one trained: divided by the group's standard deviation only where the
    learner divides, and by the same one TRL divides by (torch's sample std plus 1e-4)."""
    board = InMemoryBoard()
    solo = _parts(tiny_model_dir, tmp_path, board, "QmSolo", seed=1, cls=_SpreadParts, scale_rewards=scale_rewards)
    solo.settings = dataclasses.replace(SETTINGS, external_groups=0)
    results: dict = {}
    _play(solo, 0, results, [])
    trained = [s.group_rewards for s in results["QmSolo"].samples if s.fate == "trained"]
    assert trained  # the hash grader gives every group spread
    expected = []
    for rewards in trained:
        mean = sum(rewards) / G
        scale = float(torch.tensor(rewards).std()) + 1e-4 if scale_rewards == "group" else 1.0
        expected += [abs(r - mean) / scale for r in rewards]
    assert results["QmSolo"].metrics.mean_abs_advantage == pytest.approx(sum(expected) / len(expected))


@pytest.mark.slow
def test_a_training_round_raises_no_deprecation_warning_for_the_logs_tab(tiny_model_dir, tmp_path):
    """The node logs warnings as WARN lines in the app's Logs tab: a transformers FutureWarning at every start is
    noise a user can do nothing about. Our calls use the current names; TRL's old ones are silenced narrowly."""
    import warnings

    from node.learning.grpo import silence_known_deprecations

    board = InMemoryBoard()
    solo = _parts(tiny_model_dir, tmp_path, board, "QmSolo", seed=1, cls=_SpreadParts)
    solo.settings = dataclasses.replace(SETTINGS, external_groups=0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # every warning, however often it was seen before in this process
        silence_known_deprecations()  # the node's own filter, as set when node.learning.grpo is imported
        results: dict = {}
        _play(solo, 0, results, [])
    assert not results["QmSolo"].metrics.update_skipped  # the update ran: the trainer's code paths were taken
    future = [f"{w.filename}:{w.lineno}: {w.message}" for w in caught if issubclass(w.category, FutureWarning)]
    assert future == []
