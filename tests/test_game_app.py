"""The game in the app: the wizard's game choice, and reward per stage on the dashboard."""

from __future__ import annotations

from app.dashboard import Dashboard
from node.events import RoundFinished
from node.invite import format_invite, parse_invite
from tests.test_app_wizard import PEER, open_wizard


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
    assert "stages answer 0.25" in dashboard.summary.text()
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
    for _ in range(3):
        wizard.next()
    swarm = wizard.swarm_page
    assert swarm.game.currentData() == "sapo" and parse_invite(swarm.invite_preview.text()).game == "sapo"
    assert "own questions" in swarm.game_info.text()
    swarm.game.setCurrentIndex(swarm.game.findData("multistage"))
    assert "critique" in swarm.game.currentText().lower() and "judges" in swarm.game_info.text()
    assert parse_invite(swarm.invite_preview.text()).game == "multistage"
    wizard.accept()
    config = wizard.result_config
    assert config.swarm.game == "multistage"


def test_joining_with_a_game_invite_plays_its_game(qtbot, tmp_path):
    wizard = open_wizard(qtbot, tmp_path)
    for _ in range(3):
        wizard.next()
    swarm = wizard.swarm_page
    swarm.join.setChecked(True)
    swarm.invite_text.setPlainText(format_invite("critics", [f"/ip4/192.168.1.7/tcp/31337/p2p/{PEER}"], "multistage"))
    assert swarm.isComplete() and "Answer, critique, revise" in swarm.invite_status.text()
    wizard.accept()
    assert wizard.result_config.swarm.game == "multistage" and wizard.result_config.swarm.swarm_name == "critics"
