"""The game in the app: the wizard's game choice, reward per stage on the dashboard, gossip as threads."""

from __future__ import annotations

import dataclasses
import threading

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QTreeWidgetItem

from app.dashboard import Dashboard
from app.gossip import AUTHOR, FATE, MAX_QUESTIONS, REWARD, SAMPLE_ROLE, GossipView
from node.events import RolloutSample, RoundFinished, event_from_json
from node.game.exchange import InMemoryGameHub
from node.swarm.identity import peer_name
from node.swarm.invite import format_invite, parse_invite
from tests.apphelpers import recorded_events
from tests.test_app_wizard import PEER, open_wizard
from tests.test_game_driver import answers_of, honest, play_all, player
from tests.wizard_clicks import click, press_finish, type_into, walk_to


def metrics(number: int, **game) -> RoundFinished:
    return RoundFinished(
        round=number, rounds_trained=number + 1, reward_local=0.5, reward_external=None, reward_train=0.5, loss=0.0,
        kl=None, completion_length=10.0, tokens_generated=10, generation_tokens_per_s=1.0, seconds_generate=1.0,
        seconds_share=0.1, seconds_gather=0.1, seconds_train=1.0, seconds_total=2.2, peers_seen=2, groups_shared=2,
        groups_received=4, groups_used=4, groups_zero_advantage=0, groups_rejected=0, rejected_reasons={}, **game,
    )


def test_dashboard_shows_reward_per_stage_once_the_game_is_played(qtbot):
    dashboard = Dashboard()
    qtbot.addWidget(dashboard)
    dashboard.add_round(metrics(0))
    assert dashboard.point_count("stage_answer") == 0 and "stage_answer" not in dashboard.curves  # SAPO: no clutter
    dashboard.add_round(metrics(1, game="multistage", stage_rewards={"answer": 1.0, "critique": 0.75, "revise": 1.5},
                                stage_accuracy={"answer": 0.5, "revise": 0.75, "swarm_final": 1.0}))
    dashboard.add_round(metrics(2, game="multistage", stage_rewards={"answer": 0.25},
                                stage_accuracy={"answer": 0.0}))  # alone: the answer stage only
    assert dashboard.point_count("stage_answer") == 2
    assert dashboard.point_count("stage_critique") == dashboard.point_count("stage_revise") == 1
    assert dashboard.point_count("accuracy_swarm_final") == 1 and dashboard.point_count("accuracy_answer") == 2
    assert "stages answer 0.25" in dashboard.summary.text().replace("\u00a0", " ")
    _, y = dashboard.curves["stage_revise"].getData()
    assert y[1] == 1.5 / 1.75  # a share of the stage's maximum reward


def test_gossip_names_the_stage_of_each_game_sample(qtbot):
    from app.gossip import SampleModel
    from node.events import RolloutSample

    model = SampleModel()
    sample = dict(round=0, source_peer="Qm", source_name="a-b-c", local=False, family="chain_sum", question="1+2=",
                  completion="<correct>A</correct><why>3</why>", reward=1.25)
    model.add([RolloutSample(**sample, stage="critique"), RolloutSample(**sample)])
    from app.names import task_name

    name = task_name("chain_sum")
    assert model.data(model.index(0, 2)) == f"{name} · critique" and model.data(model.index(1, 2)) == name


def test_wizard_offers_the_game_and_the_invite_carries_it(qtbot, tmp_path):
    wizard = open_wizard(qtbot, tmp_path)
    walk_to(qtbot, wizard, wizard.swarm_page)
    swarm = wizard.swarm_page
    assert swarm.game.currentData() == "sapo" and parse_invite(swarm.invite_preview.text()).game == "sapo"
    assert "own questions" in swarm.game_info.text()
    swarm.game.setFocus()
    qtbot.keyClick(swarm.game, Qt.Key.Key_Down)  # the next game in the list
    assert swarm.game.currentData() == "multistage"
    assert "critique" in swarm.game.currentText().lower() and "judges" in swarm.game_info.text()
    assert parse_invite(swarm.invite_preview.text()).game == "multistage"
    press_finish(qtbot, wizard)
    config = wizard.result_config
    assert config.swarm.game == "multistage"


def test_joining_with_a_game_invite_plays_its_game(qtbot, tmp_path):
    wizard = open_wizard(qtbot, tmp_path)
    walk_to(qtbot, wizard, wizard.swarm_page)
    swarm = wizard.swarm_page
    click(swarm.join)
    type_into(swarm.invite_text, format_invite("critics", [f"/ip4/192.168.1.7/tcp/31337/p2p/{PEER}"], "multistage"))
    assert swarm.isComplete() and "Answer, critique, revise" in swarm.invite_status.text()
    press_finish(qtbot, wizard)
    assert wizard.result_config.swarm.game == "multistage" and wizard.result_config.swarm.swarm_name == "critics"


def game_round_samples() -> list[RolloutSample]:
    """One round of three scripted players through the real game driver, as the first one's node writes its samples
    (JSON lines); one peer writes markup into its reasoning."""
    questions = answers_of(0)
    hub = InMemoryGameHub()
    start = threading.Barrier(3)
    plain = honest(questions, start)

    def markup(stage, task, messages):
        return [text.replace("<think>", "<think><b>x</b> ", 1) for text in plain(stage, task, messages)]

    drivers = {"me": player(hub, "me", honest(questions, start))[0], "peer-b": player(hub, "peer-b", honest(questions, start))[0],
               "peer-m": player(hub, "peer-m", markup)[0]}
    _, samples = play_all(drivers)["me"]
    return [event_from_json(s.to_json()) for s in samples]


def children(item: QTreeWidgetItem) -> list[QTreeWidgetItem]:
    return [item.child(i) for i in range(item.childCount())]


def test_gossip_threads_a_game_round_per_question_and_stage(qtbot):
    samples = game_round_samples()
    gossip = GossipView()
    qtbot.addWidget(gossip)
    for sample in samples:  # one event at a time, as the window gets them
        gossip.add_samples([sample])
    assert gossip.game and gossip.views.currentWidget() is gossip.threads
    assert gossip.fate.isHidden() and gossip.peers_only.isHidden()
    threads = gossip.threads
    questions = [threads.topLevelItem(i) for i in range(threads.topLevelItemCount())]
    assert len(questions) == 2
    authors = {"this node", peer_name("peer-b"), peer_name("peer-m")}
    for question in questions:
        task = question.data(0, SAMPLE_ROLE)
        assert task.question.split()[0] in question.text(0) and question.text(0).endswith(f"(expected {task.expected})")
        stages = children(question)
        assert [s.text(0) for s in stages] == ["Answers (3)", "Critiques (3)", "Revisions (3)"]
        for stage in stages:
            entries = children(stage)
            assert {e.text(AUTHOR) for e in entries} == authors
            assert all(e.data(0, SAMPLE_ROLE).question == task.question for e in entries)
        answers, critiques, revisions = ({e.text(AUTHOR): e for e in children(s)} for s in stages)
        assert answers["this node"].text(REWARD) == "1.25" and answers["this node"].text(FATE) == "trained on"
        assert answers[peer_name("peer-b")].text(FATE) == "read by our model"
        assert critiques[peer_name("peer-b")].text(FATE) == "read by our model"
        assert revisions[peer_name("peer-b")].text(FATE) == "scored for winners"
        assert revisions[peer_name("peer-b")].text(REWARD) == "1.00"  # our verifier's score of its final answer
    assert gossip.counters.text() == "Shown: 2 questions; 6 answers, 6 critiques, 6 revisions (12 of them from peers)."

    # A peer's markup is text: drawn as written (item views draw plain text), escaped in tooltips, literal in detail.
    marked = next(e for q in questions for e in children(children(q)[0]) if e.text(AUTHOR) == peer_name("peer-m"))
    assert marked.text(0).startswith("<think><b>x</b> sum</think>")
    assert "&lt;b&gt;x&lt;/b&gt;" in marked.toolTip(0) and "<b>x" not in marked.toolTip(0)
    threads.setCurrentItem(marked)
    assert "<b>x</b>" in gossip.detail.toPlainText() and "ANSWER by " in gossip.detail.toPlainText()
    threads.setCurrentItem(children(children(questions[0])[1])[0])
    assert "CRITIQUE by " in gossip.detail.toPlainText()

    gossip.search.setText(peer_name("peer-m"))
    assert threads.shown_questions() == 2 and gossip.empty.isHidden()
    gossip.search.setText("zzz-no-such-text")
    assert threads.shown_questions() == 0 and "Nothing matches" in gossip.empty.text()
    gossip.search.setText("")

    # A SAPO run (a new run after clear) keeps the table.
    gossip.clear()
    gossip.add_samples([e for e in recorded_events() if isinstance(e, RolloutSample)])
    assert not gossip.game and gossip.views.currentWidget() is gossip.table and not gossip.fate.isHidden()
    assert threads.topLevelItemCount() == 0 and "groups of this node" in gossip.counters.text()


def test_gossip_keeps_the_last_questions_and_stages_in_game_order(qtbot):
    sample = next(s for s in game_round_samples() if s.local and s.stage == "answer")
    gossip = GossipView()
    qtbot.addWidget(gossip)
    for number in range(MAX_QUESTIONS + 5):
        gossip.add_samples([dataclasses.replace(sample, round=number)])
    threads = gossip.threads
    assert threads.topLevelItemCount() == MAX_QUESTIONS and threads.counts()["questions"] == MAX_QUESTIONS
    rounds = [threads.topLevelItem(i).data(0, SAMPLE_ROLE).round for i in range(MAX_QUESTIONS)]
    assert rounds == list(range(MAX_QUESTIONS + 4, 4, -1))  # newest first; the five oldest are gone
    # a late joiner's round: its revision arrives before any answer, the thread still reads in the game's order
    late = MAX_QUESTIONS + 10
    gossip.add_samples([dataclasses.replace(sample, round=late, stage="revise")])
    gossip.add_samples([dataclasses.replace(sample, round=late, stage="answer")])
    assert [s.text(0) for s in children(threads.topLevelItem(0))] == ["Answers (1)", "Revisions (1)"]
