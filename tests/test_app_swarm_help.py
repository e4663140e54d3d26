"""The Dashboard shows what the swarm gave: per round, peer groups with spread this node lacked; after an evaluation,
held-out accuracy per task family; and one line answering "is the swarm helping me?". Events go through the app's
event adapter (the supervisor's feed, the same parser as a running node's stream)."""

from __future__ import annotations

import json

from app.swarm_help import QUESTION, swarm_help_line
from node.config import NodeConfig
from node.events import EvalFinished
from node.runstore import RunStore
from tests.apphelpers import make_window
from tests.test_swarm_help import rnd


def plain(text: str) -> str:
    return text.replace("\u00a0", " ")


def evaluation(round_: int, per_family: dict[str, float]) -> EvalFinished:
    return EvalFinished(round=round_, rounds_trained=round_, questions=60, accuracy_greedy=0.3, exact_mean=0.3,
                        score_mean=0.3, wellformed_rate=1.0, per_family=per_family,
                        per_family_questions=dict.fromkeys(per_family, 20))


def window_in(qtbot, tmp_path):
    return make_window(qtbot, NodeConfig.build({"run": {"data_dir": str(tmp_path / "data")}}))


def test_the_dashboard_says_how_the_swarm_helps_and_shows_accuracy_per_family(qtbot, tmp_path):
    window = window_in(qtbot, tmp_path)
    window.show()
    d = window.dashboard
    assert not d.swarm_help.isVisible() and not d.families.isVisible()  # nothing to say before a round
    rounds = [rnd(0, received=3, used=2, own=2, peers=2, lacked=0),
              rnd(1, received=3, used=2, own=0, peers=2, lacked=2),
              rnd(2, received=2, used=1, own=1, peers=1, lacked=1)]
    window.supervisor.feed(evaluation(0, {"basic_arithmetic": 0.35, "chain_sum": 0.10, "products": 0.25}).to_json())
    assert d.families.table.isColumnHidden(2)  # one evaluation: "Round 0" once, not twice
    for event in rounds:
        window.supervisor.feed(event.to_json())
    window.supervisor.feed(evaluation(3, {"basic_arithmetic": 0.70, "chain_sum": 0.30, "products": 0.20}).to_json())

    text = plain(d.swarm_help.text())
    assert d.swarm_help.isVisible() and text == swarm_help_line(rounds)
    assert text.startswith(f"{QUESTION} Yes: 62% of the groups this node learned from came from peers (5 of 8")
    assert "3 had spread on a task where its own questions had none" in text
    assert "in 1 round peers gave all of the signal" in text
    # per round, on the peer groups chart: the groups with spread ours lacked
    x, y = d.curves["lacked"].getData()
    shown = [(int(r), int(n)) for r, n in zip(x, y, strict=True) if n == n]  # NaN: no gap filled, nothing drawn
    assert shown == [(1, 2), (2, 1)] and d.point_count("lacked") == 2

    table = d.families.table
    assert d.families.isVisible()
    assert [table.horizontalHeaderItem(c).text() for c in range(3)] == ["Task", "Round 0", "Round 3"]
    assert not table.isColumnHidden(2)
    rows = [[table.item(r, c).text() for c in range(3)] for r in range(table.rowCount())]
    assert rows == [["Arithmetic", "35%", "70%"], ["Chain sums", "10%", "30%"], ["Products", "25%", "20%"]]
    assert table.item(2, 2).toolTip() == "Products: -5 points since round 0 (20 held-out questions: one is 5%)"

def test_a_node_alone_is_told_so_and_a_run_folder_without_the_figures_claims_nothing(qtbot, tmp_path):
    config = NodeConfig.build({"run": {"data_dir": str(tmp_path / "data")}})
    store = RunStore(config.run_dir)
    figures = ("local_groups_with_spread", "peer_groups_with_spread", "peer_groups_spread_we_lacked")
    for event in (rnd(0, received=2, used=2, own=2, peers=2), rnd(1, received=2, used=2, own=2, peers=2)):
        old = {k: v for k, v in json.loads(event.to_json()).items() if k not in figures}  # as an older node wrote it
        store.metrics_path.open("a").write(json.dumps(old) + "\n")
    window = make_window(qtbot, config)  # loads the run folder's history
    window.show()
    d = window.dashboard
    assert d.history.rounds == [0, 1]
    assert not d.swarm_help.isVisible() and d.swarm_help.text() == ""
    window.supervisor.feed(rnd(2, wanted=0, own=1).to_json())
    assert d.swarm_help.isVisible()
    assert plain(d.swarm_help.text()) == (f"{QUESTION} Not in this run: this node trains alone (it takes no peer "
                                          "groups), so everything it learned came from its own questions.")
