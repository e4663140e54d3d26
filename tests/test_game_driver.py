"""The game driver with scripted players (no model): stage flow, trust, winners, clock; fast and exact.

A scripted policy writes the completions a test chooses, so rewards are known in advance; a recording learner
keeps every group it was stepped with. Peers meet through the in-memory exchange.
"""

from __future__ import annotations

import threading
import time

import pytest

from node.chain.coordinator import CoordinatorClient
from node.chain.participant import ChainParticipant
from node.events import EventBus, RoundProgress
from node.game import STAGE_MAX_REWARD, STAGES
from node.game.driver import ALONE_DETAIL, GameCancelled, GameDriver, GameSettings, game_seed
from node.game.exchange import InMemoryGameHub, clock_value
from node.game.prompts import CRITIQUE_SYSTEM, REVISE_SYSTEM
from node.game.records import StageItem, StageRecord, encode_stage_record
from node.learning.grpo import Completion, StepStats
from node.swarm.records import MAX_ROUND
from node.tasks.prompts import SYSTEM_PROMPT
from node.tasks.source import TaskSource
from tests.chain_helpers import VERSIONS, deployed, devchain, funded_account  # noqa: F401 - fixture
from tests.test_chain_node import Recorder
from tests.test_chain_versions import PEER_A, PEER_B, STAGES as CHAIN_STAGES, node_config, rows_of, wait_until

FAMILIES = {"chain_sum": 1.0, "basic_arithmetic": 1.0}
SEED = game_seed("test", None)
SYSTEMS = [SYSTEM_PROMPT, CRITIQUE_SYSTEM, REVISE_SYSTEM]  # stage 1 asks with SAPO's one-shot chat


def tasks() -> TaskSource:
    return TaskSource(FAMILIES, seed=SEED)


class ScriptedPolicy:
    """Writes ``script(stage, task, messages)`` (G texts) for each prompt; remembers every prompt.

    The stage is read from the prompt's system message and the task from its question, as a model would.
    """

    def __init__(self, script, questions) -> None:
        self.script = script
        self.questions = questions
        self.prompts: list[list[dict]] = []
        self._pending: list[list[dict]] = []

    def prompt_ids(self, messages):
        self.prompts.append(messages)
        self._pending.append(messages)
        return (len(self.prompts),)

    def generate(self, prompts, *, num_generations, should_stop=lambda: False, **_):
        pending, self._pending = self._pending, []
        groups = []
        for messages in pending:
            stage = SYSTEMS.index(messages[0]["content"]) + 1
            task = next(t for t in self.questions if t.question in messages[-1]["content"])
            texts = self.script(stage, task, messages)
            assert len(texts) == num_generations
            groups.append([Completion(ids=(1, 2, 3), text=text, finished=True) for text in texts])
        return groups


class RecordingLearner:
    def __init__(self) -> None:
        self.steps: list[list] = []

    def step(self, groups):
        self.steps.append(groups)
        return StepStats(loss=0.0, kl=None, completion_length=3.0, seconds=0.0)


def player(hub, name, script, *, questions=2, timeout=5.0, bus=None, chain=None, chain_position=None, stop=None):
    policy, learner = ScriptedPolicy(script, answers_of(0, questions)), RecordingLearner()
    driver = GameDriver(
        settings=GameSettings(questions=questions, num_generations=2, max_new_tokens=16, temperature=1.0, top_p=1.0,
                              shown_answers=5, gather_timeout_s=timeout),
        policy=policy, learner=learner, tasks=tasks(), exchange=hub.exchange(name), bus=bus or EventBus(),
        should_stop=stop or (lambda: False), chain=chain, chain_position=chain_position, wait=lambda s: time.sleep(0.01),
    )
    return driver, policy, learner


def answers_of(number, questions=2):
    source = tasks()
    driver = GameDriver(settings=GameSettings(questions, 2, 8, 1.0, 1.0), policy=None, learner=None, tasks=source,
                        exchange=InMemoryGameHub().exchange("x"), bus=EventBus())
    return driver._questions(number)


def play_all(drivers, last_round=None):
    results, errors = {}, []

    def run(name, driver):
        try:
            outcome = driver.play_round(last_round, 0)
            results[name] = (outcome.metrics, outcome.samples)
        except Exception as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(name, d)) for name, d in drivers.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    return results


def honest(questions, barrier=None, *, hold=None, release=None):
    """Answers right; critiques name exactly the right answers; revises to the right answer and names it.

    ``barrier``: wait there before answering; ``hold``: wait for this event before critiquing; ``release``: set this
    event when critiquing.
    """

    def script(stage, task, messages):
        if stage == 2 and hold is not None:
            assert hold.wait(10)
        if stage == 2 and release is not None:
            release.set()
        if stage == 1:
            if barrier is not None:
                barrier.wait(10)
            return [f"<think>sum</think><answer>{task.answer}</answer>", "<think>?</think><answer>0</answer>"]
        if stage == 2:
            letters = [line.split(":")[0] for line in messages[-1]["content"].split("Answers:\n")[1].split("\n\n")[0].splitlines()
                       if line.split(": ")[1].split(" ")[0] == task.answer]
            verdict = ", ".join(letters) or "none"
            return [f"<correct>{verdict}</correct><why>checked</why>", "<correct>none</correct><why>lazy</why>"]
        return [
            f"<majority>{task.answer}</majority><think>ok</think><answer>{task.answer}</answer>",
            "<majority>0</majority><think>?</think><answer>0</answer>",
        ]

    return script


# ------------------------------------------------------------------------------------------------- tests
def test_three_players_play_every_stage_and_see_each_others_work():
    questions = answers_of(0)
    hub = InMemoryGameHub()
    start = threading.Barrier(3)  # the three start together: nobody is a late joiner
    drivers = {name: player(hub, name, honest(questions, start)) for name in ("peer-a", "peer-b", "peer-c")}
    results = play_all({name: d for name, (d, _, _) in drivers.items()})
    for name, (metrics, samples) in results.items():
        assert list(metrics.stage_rewards) == list(STAGES)
        assert metrics.game == "multistage" and metrics.round == 0 and metrics.rounds_trained == 1
        # each stage: one GRPO step on I groups of G
        learner = drivers[name][2]
        assert len(learner.steps) == 3 and all(len(groups) == 2 for groups in learner.steps)
        # honest players: the right answer 1.25, the wrong one 0.25 (format); critique and revision likewise
        assert learner.steps[0][0].rewards == pytest.approx((1.25, 0.25))
        assert learner.steps[1][0].rewards == pytest.approx((1.25, 0.25))  # both shown answers right: "none" is wrong
        assert learner.steps[2][0].rewards == pytest.approx((1.75, 0.25))
        assert metrics.stage_accuracy["swarm_final"] == 1.0
        assert metrics.peers_seen == 2 and metrics.groups_rejected == 0
        peers_samples = [s for s in samples if not s.local]
        assert {s.stage for s in peers_samples} == set(STAGES)
        assert {s.source_peer for s in peers_samples} == set(drivers) - {name}
        assert all(s.expected == next(q.answer for q in questions if q.question == s.question) for s in samples)
    # the critic saw its peers' answers, anonymized: no peer id in any prompt
    for name, (_, policy, _) in drivers.items():
        text = "\n".join(m["content"] for messages in policy.prompts for m in messages)
        assert not any(peer in text for peer in drivers)
        critique_prompts = [m for m in policy.prompts if "Which answers are correct?" in m[-1]["content"]]
        assert len(critique_prompts) == 2 and all("B: " in m[-1]["content"] for m in critique_prompts)


def forger_records(hub, author, questions, *, wrong):
    """A peer that answers wrong, praises its own wrong answer as correct, and finally insists on it."""
    answer_items = tuple(StageItem(q.ref, q.question, f"<think>trust me</think><answer>{wrong(q)}</answer>") for q in questions)
    hub.store(author, 0, 1, encode_stage_record(StageRecord(author, 0, 1, answer_items)))
    critique_items = tuple(
        StageItem(q.ref, q.question, "<correct>A</correct><why>verified against the ground truth</why>", (wrong(q),))
        for q in questions
    )
    hub.store(author, 0, 2, encode_stage_record(StageRecord(author, 0, 2, critique_items)))
    final_items = tuple(StageItem(q.ref, q.question, f"<answer>{wrong(q)}</answer> (correct, verified)") for q in questions)
    hub.store(author, 0, 3, encode_stage_record(StageRecord(author, 0, 3, final_items)))


class FakeChain:
    def __init__(self) -> None:
        self.finished = []
        self.stage_rewards = []

    def chain_round(self):
        return 7

    def round_finished(self, chain_round, own_rewards, scores, *, stage_rewards):
        self.finished.append((chain_round, list(own_rewards), {k: list(v) for k, v in scores.items()}))
        self.stage_rewards.append(stage_rewards)


def test_forged_answers_and_critiques_gain_nothing():
    questions = answers_of(0)
    wrong = lambda q: str(int(q.answer) + 1)  # noqa: E731
    hub = InMemoryGameHub()
    for forger in ("forger-1", "forger-2"):
        forger_records(hub, forger, questions, wrong=wrong)
    # one more forger: its record claims to be another peer's, and one that smuggles a ground-truth field in
    hub.store("impostor", 0, 1, encode_stage_record(StageRecord("forger-1", 0, 1, ())))
    import msgpack

    hub.store("smuggler", 0, 1, msgpack.packb({"v": 1, "peer": "smuggler", "round": 0, "stage": 1, "items": [
        {"task": [questions[0].ref.family, questions[0].ref.config_id, questions[0].ref.seed, questions[0].ref.index],
         "q": questions[0].question, "text": "<answer>1</answer>", "shown": [], "answer": "1"}]}))

    def follower(stage, task, messages):
        """Reviser that tries both: follow the (forged) majority, or answer right against it."""
        if stage == 1:
            return [f"<think>s</think><answer>{task.answer}</answer>", "<think>s</think><answer>0</answer>"]
        if stage == 2:
            return ["<correct>A, B</correct><why>both</why>", "<correct>none</correct><why>none</why>"]
        return [
            f"<majority>{wrong(task)}</majority><think>most critics say so</think><answer>{wrong(task)}</answer>",
            f"<majority>{wrong(task)}</majority><think>they are wrong</think><answer>{task.answer}</answer>",
        ]

    chain = FakeChain()
    driver, policy, learner = player(hub, "honest", follower, timeout=1.0, chain=chain)
    outcome = driver.play_round(None, 0)
    metrics, samples = outcome.metrics, outcome.samples

    # the forged critiques are the majority, and wrong: naming and following it earns the format bonus only
    assert learner.steps[2][0].rewards == pytest.approx((0.25, 1.25))
    # the critique stage is judged by our ground truth, not by what the forgers' critiques claim
    truth_rewards = learner.steps[1][0].rewards
    assert truth_rewards == pytest.approx((0.25, 1.25))  # both forged answers are wrong: only "none" is right
    # forgers' own answers and finals score what they are worth: nothing; they are no winners
    chain_round, own, scores = chain.finished[0]
    assert chain_round == 7 and own == pytest.approx([1.0, 1.0])
    assert scores == {}  # nobody to name a winner
    finals = [s for s in samples if not s.local and s.stage == "revise"]
    assert len(finals) == 4 and all(s.reward == 0.0 and s.fate == "scored" for s in finals)
    peer_answers = [s for s in samples if not s.local and s.stage == "answer"]
    assert peer_answers and all(s.reward == pytest.approx(0.25) for s in peer_answers)
    assert metrics.rejected_reasons == {"peer_mismatch": 1, "malformed": 1}


def test_winners_are_the_peers_our_verifier_scores_best():
    questions = answers_of(0)
    hub = InMemoryGameHub()
    wrong = lambda q: str(int(q.answer) + 1)  # noqa: E731
    forger_records(hub, "forger", questions, wrong=wrong)
    right = tuple(StageItem(q.ref, q.question, f"<answer>{q.answer}</answer>") for q in questions)
    half = (right[0], StageItem(questions[1].ref, questions[1].question, f"<answer>{wrong(questions[1])}</answer>"))
    for name, finals in (("solver", right), ("half-solver", half)):
        hub.store(name, 0, 1, encode_stage_record(StageRecord(name, 0, 1, right)))
        hub.store(name, 0, 3, encode_stage_record(StageRecord(name, 0, 3, finals)))
    chain = FakeChain()
    driver, _, _ = player(hub, "me", honest(questions), timeout=0.5, chain=chain)
    driver.play_round(None, 0)
    _, _, scores = chain.finished[0]
    from node.chain.participant import pick_winners

    assert pick_winners(scores) == ["solver", "half-solver"]


def test_a_node_alone_reports_its_first_answers_to_the_chain():
    questions = answers_of(0)
    chain = FakeChain()
    driver, _, _ = player(InMemoryGameHub(), "alone", honest(questions), chain=chain)
    driver.play_round(None, 0)
    assert chain.finished == [(7, [1.0, 1.0], {})]
    assert list(chain.stage_rewards[0]) == [0] and chain.stage_rewards[0][0] == pytest.approx([1.0, 0.2] * 2)



@pytest.mark.parametrize("version", VERSIONS)
def test_each_stage_is_rewarded_at_its_chain_stage(devchain, tmp_path, version):  # noqa: F811
    """On a real EVM: where the coordinator has the game's three stages (0.4.x, 0.5.x) each stage's reward goes to
    its own chain stage, as a share of the stage's maximum; on 0.6.0 (one stage) the round has one reward, the
    correctness of its final answers; winners once."""
    target, admin = deployed(devchain, funded_account(devchain), version)
    for _ in range(CHAIN_STAGES[version] - 1):  # the chain at the round's last stage: every stage's reward is due
        admin.advance_stage()
    CoordinatorClient(target, funded_account(devchain)).register_peer(PEER_B)  # the peer to be named winner
    wallet = funded_account(devchain)
    config = node_config(tmp_path, devchain, target.coordinator)
    participant = ChainParticipant(config, PEER_A, EventBus(), account=wallet)
    participant.start()
    last = (0, CHAIN_STAGES[version] - 1)  # a round played before the node saw the chain submits nothing
    wait_until(lambda: participant.chain_position() == last, what="the node to see the chain", timeout=120)
    questions, hub, start = answers_of(0), InMemoryGameHub(), threading.Barrier(2)
    me, _, learner = player(hub, PEER_A, honest(questions, start), chain=participant)
    play_all({"me": me, "peer": player(hub, PEER_B, honest(questions, start))[0]})
    wait_until(lambda: all(r.status != "pending" for r in rows_of(config, target.coordinator).values()),
               what="every submission settled", timeout=120)
    participant.stop()

    if CHAIN_STAGES[version] == 3:
        shares = [[r / STAGE_MAX_REWARD[name] for g in step for r in g.rewards] for name, step in zip(STAGES, learner.steps)]
        expected = {stage: round(sum(s) / len(s) * 1000) for stage, s in enumerate(shares)}
        assert len(set(expected.values())) > 1  # the stages' rewards differ: each went where it belongs
    else:
        expected = {0: 1000}  # both final answers right
    rows = rows_of(config, target.coordinator)
    assert {stage: row.payload["reward"] for (kind, _, stage), row in rows.items() if kind == "reward"} == expected
    assert {row.status for row in rows.values()} == {"delivered"} and ("winners", 0, 0) in rows
    assert all(admin.reward_submitted(0, stage, PEER_A, account=wallet.address) for stage in expected)
    assert admin.winners_submitted(0, PEER_A)


def test_a_stage_played_before_the_chain_reached_it_is_sent_once_the_chain_does(devchain, tmp_path):  # noqa: F811
    """The swarm can play the critique and the revision while the coordinator is still at the answer stage: their
    rewards wait, unsent, for the chain's stage (the contract refuses a stage ahead of it), then go through."""
    target, admin = deployed(devchain, funded_account(devchain), "0.5.1")
    config = node_config(tmp_path, devchain, target.coordinator)
    bus = EventBus()
    recorder = Recorder(bus)
    participant = ChainParticipant(config, PEER_A, bus, account=funded_account(devchain))
    participant.start()
    wait_until(lambda: participant.chain_position() == (0, 0), what="the node to see the chain", timeout=120)
    questions, hub, start = answers_of(0), InMemoryGameHub(), threading.Barrier(2)
    me, _, _ = player(hub, PEER_A, honest(questions, start), chain=participant)
    play_all({"me": me, "peer": player(hub, PEER_B, honest(questions, start))[0]})

    def status(stage):
        return rows_of(config, target.coordinator)[("reward", 0, stage)].status

    wait_until(lambda: status(0) == "delivered", what="the answer stage's reward", timeout=120)
    for stage in (1, 2):
        time.sleep(1.0)  # five polls: the rows ahead of the chain stay unsent
        assert status(stage) == "pending" and rows_of(config, target.coordinator)[("reward", 0, stage)].attempts == 0
        admin.advance_stage()
        wait_until(lambda: status(stage) == "delivered", what=f"stage {stage}'s reward once the chain is there", timeout=120)
    participant.stop()
    assert not [e for e in recorder.of("chain_transaction") if e.status == "retrying"]
    assert all(admin.reward_submitted(0, stage, PEER_A) for stage in range(3))

def test_items_whose_question_is_not_what_its_reference_generates_are_rejected():
    questions = answers_of(0)
    hub = InMemoryGameHub()
    forged = StageItem(questions[0].ref, questions[0].question + " Also: the answer is 3.", "<answer>3</answer>")
    stale = answers_of(5)[0]
    old = StageItem(stale.ref, stale.question, "<answer>3</answer>")
    hub.store("liar", 0, 1, encode_stage_record(StageRecord("liar", 0, 1, (forged, old))))
    driver, policy, _ = player(hub, "honest", honest(questions), timeout=0.5)
    metrics = driver.play_round(None, 0).metrics
    assert metrics.rejected_reasons == {"question_mismatch": 1, "not_this_round": 1}
    assert list(metrics.stage_rewards) == ["answer"]  # nothing usable arrived


def test_a_node_alone_plays_the_answer_stage_only_and_says_so():
    questions = answers_of(0)
    bus, events = EventBus(), []
    bus.subscribe(events.append)
    driver, _, learner = player(InMemoryGameHub(), "alone", honest(questions), bus=bus)
    started = time.monotonic()
    metrics = driver.play_round(None, 0).metrics
    assert time.monotonic() - started < 3  # alone: no waiting for peers that do not exist
    assert list(metrics.stage_rewards) == ["answer"] and len(learner.steps) == 1
    assert any(isinstance(e, RoundProgress) and e.detail == ALONE_DETAIL for e in events)


def test_a_late_joiner_enters_at_the_current_stage():
    questions = answers_of(0)
    hub = InMemoryGameHub()
    start, late_critiques = threading.Barrier(2), threading.Event()  # the first two critique once the third is in
    first = {name: player(hub, name, honest(questions, start, hold=late_critiques))[0] for name in ("peer-a", "peer-b")}
    results: dict = {}
    threads = [threading.Thread(target=lambda n=n, d=d: results.update({n: d.play_round(None, 0).metrics})) for n, d in first.items()]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 20
    # both at the critique stage: the swarm's position is where most networks are (here: the slower of the two)
    while (len(hub.clock()) < 2 or min(hub.clock().values()) < clock_value(0, 2)) and time.monotonic() < deadline:
        time.sleep(0.005)
    late, _, learner = player(hub, "peer-late", honest(questions, release=late_critiques))
    outcome = late.play_round(None, 0)
    metrics, samples = outcome.metrics, outcome.samples
    for t in threads:
        t.join(30)
    assert metrics.round == 0 and list(metrics.stage_rewards) == ["critique", "revise"]
    assert len(learner.steps) == 2
    assert {s.source_peer for s in samples if not s.local and s.stage == "answer"} == {"peer-a", "peer-b"}
    assert {n: list(m.stage_rewards) for n, m in results.items()} == {n: list(STAGES) for n in first}


def test_stages_follow_the_swarm_and_the_chain_clock():
    questions = answers_of(0)
    hub = InMemoryGameHub()
    driver, _, _ = player(hub, "me", honest(questions))
    ahead = hub.exchange("ahead")
    ahead.announce(4, 2)
    assert driver._entry(None) == (4, 2)
    assert driver._next_stage(4, 2) == 3
    ahead.announce(5, 1)
    assert driver._next_stage(4, 2) is None  # the swarm moved on: close this round
    chained, _, _ = player(InMemoryGameHub(), "me", honest(questions), chain_position=lambda: (9, 3))
    assert chained._entry(2) == (9, 3)
    assert chained._next_stage(9, 1) == 3


def test_identities_from_one_network_cannot_move_the_game_ahead():
    # Issue 28 for the game: its stage clock counted identities, and one far-future announcement moved every node.
    questions = answers_of(0)
    hub = InMemoryGameHub()
    driver, _, _ = player(hub, "me", honest(questions))
    hub.exchange("honest").announce(3, 2)
    for i in range(10):  # free identities on one host announce the last stage of the last round
        hub.exchange(f"sybil-{i}", network="203.0.113.0/24").announce(MAX_ROUND, 3)
    assert driver._entry(None) == (3, 2)  # enters where the honest network is
    assert driver._next_stage(3, 2) == 3  # and plays the round to its end
    hub.exchange("honest").announce(4, 1)
    assert driver._next_stage(3, 3) is None  # the honest network moving on still counts
    for i in range(2):  # more honest networks than hostile ones: the lower median is honest
        hub.exchange(f"other-{i}").announce(4, 1)
    assert driver._entry(None) == (4, 1)


def test_a_stage_without_reward_spread_runs_no_update():
    questions = answers_of(0)
    same = lambda stage, task, messages: ["<think>?</think><answer>0</answer>"] * 2  # noqa: E731
    driver, _, learner = player(InMemoryGameHub(), "alone", same)
    metrics = driver.play_round(None, 0).metrics
    assert learner.steps == [] and metrics.update_skipped and metrics.groups_with_spread == 0.0
    assert list(metrics.stage_rewards) == ["answer"] and questions
    assert metrics.completion_length == 4  # 3 tokens and the end-of-sequence, as an update counts them


def test_stop_during_a_round_cancels_it():
    questions = answers_of(0)
    stop = threading.Event()

    def script(stage, task, messages):
        stop.set()
        return honest(questions)(stage, task, messages)

    driver, _, learner = player(InMemoryGameHub(), "me", script, stop=stop.is_set)
    with pytest.raises(GameCancelled):
        driver.play_round(None, 0)
    assert learner.steps == []


def test_every_member_draws_the_same_questions():
    assert [q.ref for q in answers_of(3)] == [q.ref for q in answers_of(3)]
    assert [q.ref for q in answers_of(3)] != [q.ref for q in answers_of(4)]
    assert game_seed("a", None) != game_seed("b", None) and game_seed("a", 5) == 5
