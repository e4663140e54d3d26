"""Live charts of the run: held-out accuracy and reward up top, then the signals that move while the model learns.

GRPO's loss is ~0 by construction here (one iteration, no KL term), so it is not plotted: the charts show what a
learning model changes instead (well-formed answers, groups with reward spread, advantage and gradient sizes).
"""

from __future__ import annotations

import math
import re

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, Qt
from PySide6.QtWidgets import QGridLayout, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.charts import Chart
from app.family_table import FamilyTable
from app.history import FATES, MOVING_AVERAGE_ROUNDS, PHASES, RunHistory
from app.swarm_help import swarm_help_text
from node.events import EvalFinished, RoundFinished
from node.game import STAGES

# Okabe-Ito: distinguishable for colour-blind users and on dark and light backgrounds.
COLORS = {"local": "#0072B2", "external": "#E69F00", "average": "#009E73", "accuracy": "#009E73",
          "exact_mean": "#56B4E9", "baseline": "#999999", "wellformed": "#CC79A7", "correct": "#009E73",
          "spread": "#0072B2", "advantage": "#D55E00", "grad_norm": "#E69F00", "entropy": "#56B4E9",
          "generate": "#0072B2", "share": "#F0E442", "gather": "#E69F00", "train": "#009E73",
          "used": "#009E73", "dropped": "#999999", "not_needed": "#56B4E9", "rejected": "#D55E00", "peers": "#CC79A7",
          "lacked": "#0072B2",
          "stage_answer": "#56B4E9", "stage_critique": "#CC79A7", "stage_revise": "#D55E00",
          "accuracy_answer": "#0072B2", "accuracy_swarm_final": "#009E73"}
SKIPPED_SHADE = (128, 128, 128, 45)  # rounds not played: a light grey on dark and light themes alike
# The multi-stage game's curves, added to the reward chart once a round of that game arrives (SAPO runs never
# show them): key -> legend label, dotted.
GAME_CURVES = {
    **{f"stage_{stage}": (f"{stage} stage, share of its maximum", False) for stage in STAGES},
    "accuracy_answer": ("right: own first answers", True),
    "accuracy_swarm_final": ("right: swarm's final answers", True),
}
FATE_LABELS = {"used": "trained on", "dropped": "dropped (equal rewards)", "not_needed": "not needed",
               "rejected": "rejected"}
WAITED_S = 0.5  # a round's time taking peer groups above this was spent waiting (SAPO takes them in milliseconds)
PHASE_LABELS = {"generate": "generating", "share": "sharing", "gather": "waiting for peers", "train": "training"}

EXPLAIN = {
    "accuracy": "Share of unseen questions (never trained on) the model answers exactly right: its most likely "
                "answer (greedy), and answers sampled as in training (triangles), which start far lower and are what "
                "training sharpens. This is how RL Swarm reports learning; the dashed line is the round-0 baseline.",
    "reward": f"Mean reward of this node's own completions each round (dots) and its {MOVING_AVERAGE_ROUNDS}-round "
              "average (line); peers' questions as scored by this node, in orange. In the answer-critique-revise "
              "game also each stage's mean reward as a share of its maximum, and the share of questions the "
              "node's first answers and the swarm's final answers got exactly right.",
    "wellformed": "Share of this node's completions with one complete <answer> block, and share exactly right. "
                  "A small model first has to learn the format before it can earn reward.",
    "spread": "Share of trained question groups whose completions got different rewards. Only those teach the "
              "model anything: a group where every answer scored the same gives GRPO no gradient.",
    "update": "Size of each update: mean |advantage| of the trained completions and the gradient norm. "
              "Zero means the round had nothing to learn from and the update was skipped.",
    "groups": "Peer groups received each round, by what happened to them: trained on, dropped because every "
              "completion scored the same, not needed (enough were taken), or rejected (failed our checks). "
              "The line is the number of peers seen; the diamonds count the groups trained on that had reward "
              "spread on a task family where this node's own questions of the round had none.",
    "seconds": "Wall-clock seconds of each round, split by phase.",
    "length": "Mean number of tokens per completion; it usually drops as the model learns to answer briefly.",
}


# A space beside a figure ("reward 0.60", "43 s", "(baseline 9%)", "round 11"): the summary may wrap anywhere else.
_FIGURE_SPACE = re.compile(r"(?<=\d) (?=[a-z])|(?<=%) (?=\w)|(?<![;,.:]) (?=\(?\d)")


def _glue_figures(text: str) -> str:
    """``text`` with a no-break space on each side of its figures: a label wraps between words, never splits a
    figure from its name or its unit."""
    return _FIGURE_SPACE.sub("\u00a0", text)


def _span(first: int, last: int) -> str:
    return f"round {first}" if first == last else f"rounds {first}–{last}"


class Dashboard(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        pg.setConfigOptions(antialias=True)
        self.history = RunHistory()
        self.charts: dict[str, Chart] = {}
        self.skipped: list[tuple[int, int]] = []  # rounds not played, shaded on every chart
        self.skip_marks: list[tuple[pg.PlotItem, pg.LinearRegionItem]] = []
        self.curves: dict[str, pg.PlotDataItem] = {}
        self.bars: dict[str, pg.BarGraphItem] = {}

        accuracy = self._chart("accuracy", "Accuracy on unseen tasks", zero_to_one=True,
                               empty="No held-out evaluation yet: the node runs one at round 0 and every few rounds.")
        self._curve(accuracy, "accuracy", "greedy", COLORS["accuracy"], width=3, symbol="o")
        self._curve(accuracy, "exact_mean", "sampled answers", COLORS["exact_mean"], symbol="t")
        # Named in the legend, not on the plot: a label on the line lay across the curve it is compared with.
        self.baseline = pg.InfiniteLine(angle=0, movable=False,
                                        pen=pg.mkPen(COLORS["baseline"], width=1.5, style=Qt.PenStyle.DashLine))
        self.baseline.setVisible(False)
        accuracy.item.addItem(self.baseline, ignoreBounds=True)
        accuracy.add_entry(COLORS["baseline"], "baseline", dashed=True)
        reward = self._chart("reward", "Reward per round", zero_to_one=True)
        self._curve(reward, "local", "own questions", COLORS["local"], symbol="o", width=0)
        self._curve(reward, "local_avg", f"{MOVING_AVERAGE_ROUNDS}-round average", COLORS["average"], width=3)
        self._curve(reward, "external", "peers' questions", COLORS["external"], symbol="t", width=0)
        wellformed = self._chart("wellformed", "Answer format", zero_to_one=True)
        self._curve(wellformed, "wellformed", "well-formed", COLORS["wellformed"], symbol="o")
        self._curve(wellformed, "correct", "exactly right", COLORS["correct"], symbol="s")
        spread = self._chart("spread", "Groups with reward spread", zero_to_one=True)
        self._curve(spread, "spread", "share of groups", COLORS["spread"], symbol="o")
        update = self._chart("update", "Update size")
        self._curve(update, "advantage", "mean |advantage|", COLORS["advantage"], symbol="o")
        self._curve(update, "grad_norm", "gradient norm", COLORS["grad_norm"], symbol="t")
        groups = self._chart("groups", "Peer groups by fate", counts=True,
                             empty="No peer groups yet: they appear once another peer shares a round.")
        for fate in FATES:
            self._bars(groups, fate, FATE_LABELS[fate])
        self._curve(groups, "peers", "peers", COLORS["peers"], symbol="s")
        self._curve(groups, "lacked", "spread ours lacked", COLORS["lacked"], symbol="d", width=0)
        self.curves["lacked"].setSymbolSize(10)
        self.curves["lacked"].setSymbolPen(pg.mkPen("w", width=1.5))  # a blue diamond on the bars stands out
        seconds = self._chart("seconds", "Seconds per round")
        for phase in PHASES:  # SAPO rounds never wait: "waiting for peers" joins the legend once a round did
            self._bars(seconds, phase, PHASE_LABELS[phase], legend=phase != "gather")

        grid = QGridLayout()
        grid.setSpacing(6)
        self.families = FamilyTable()
        top_left = QHBoxLayout()
        top_left.setSpacing(6)
        top_left.addWidget(accuracy, 1)
        top_left.addWidget(self.families)
        grid.addLayout(top_left, 0, 0, 1, 3)
        grid.addWidget(reward, 0, 3, 1, 3)
        for column, name in enumerate(("wellformed", "spread", "update")):
            grid.addWidget(self.charts[name], 1, column * 2, 1, 2)
        grid.addWidget(groups, 2, 0, 1, 3)
        grid.addWidget(seconds, 2, 3, 1, 3)
        grid.setRowStretch(0, 4)
        grid.setRowStretch(1, 3)
        grid.setRowStretch(2, 3)

        self.flat = QLabel("")
        self.flat.setObjectName("flatExplanation")
        self.flat.setWordWrap(True)
        self.flat.setTextFormat(Qt.TextFormat.PlainText)
        self.flat.setStyleSheet("QLabel#flatExplanation { background: #E69F00; color: black; padding: 4px 8px; "
                                "border-radius: 4px; }")
        self.flat.hide()
        self.summary = QLabel("No rounds yet: the first one finishes after generation, sharing and one update.")
        self.summary.setWordWrap(True)
        self.summary.setObjectName("roundSummary")
        self.summary.setTextFormat(Qt.TextFormat.PlainText)
        # "Is the swarm helping?", from what peers' groups added to this node's updates (app.swarm_help)
        self.swarm_help = QLabel("")
        self.swarm_help.setObjectName("swarmHelp")
        self.swarm_help.setWordWrap(True)
        self.swarm_help.setTextFormat(Qt.TextFormat.PlainText)
        self.swarm_help.setToolTip(
            "Counted over this run's rounds. A group teaches the model only when its answers got different rewards "
            "(reward spread). A peer group had spread this node lacked when the round also asked this node a "
            "question of the same task family and every one of its own answers there scored the same. In a round where "
            "peers gave all of the signal, none of this node's own groups had spread: without the peers' groups it "
            "would have skipped its update. Nothing here compares with a run alone, which this node did not make.")
        self.swarm_help.hide()
        self.reset_button = QPushButton("Reset zoom")
        self.reset_button.setToolTip("Drag to pan, scroll or right-drag to zoom; this fits every chart again")
        self.reset_button.clicked.connect(self.reset_zoom)
        bottom = QHBoxLayout()
        lines = QVBoxLayout()
        lines.setSpacing(2)
        lines.addWidget(self.summary)
        lines.addWidget(self.swarm_help)
        bottom.addLayout(lines, 1)
        bottom.addWidget(self.reset_button, 0, Qt.AlignmentFlag.AlignRight)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.flat)
        layout.addLayout(grid, 1)
        layout.addLayout(bottom)

    @property
    def plots(self) -> dict[str, pg.PlotWidget]:
        return {name: chart.plot for name, chart in self.charts.items()}

    # -- data ----------------------------------------------------------------------------------------------

    def load_history(self, metrics: list[RoundFinished], evaluations: list[EvalFinished] = ()) -> None:
        self.history = RunHistory.from_metrics(metrics, evaluations)
        self._redraw()

    def add_round(self, metrics: RoundFinished) -> None:
        if self.history.rounds and metrics.round <= self.history.rounds[-1]:
            return  # a replay of a round we already show (e.g. history loaded after the event was queued)
        self.history.add(metrics)
        self._redraw()

    def add_evaluation(self, result: EvalFinished) -> None:
        self.history.add_evaluation(result)
        self._redraw()

    def reset_zoom(self) -> None:
        for chart in self.charts.values():
            chart.reset_zoom()

    def point_count(self, curve: str) -> int:
        """Finite points shown by a curve (for tests and the screenshot script)."""
        if curve not in self.curves:
            return 0
        _, y = self.curves[curve].getData()
        return 0 if y is None else int(np.isfinite(y).sum())

    def _redraw(self) -> None:
        h = self.history
        x = np.asarray(h.rounds, dtype=float)
        series = {
            "local": h.reward_local, "external": h.reward_external, "local_avg": h.reward_local_average(),
            "wellformed": h.wellformed, "correct": h.accuracy_local, "spread": h.groups_with_spread,
            "advantage": h.mean_abs_advantage, "grad_norm": h.grad_norm, "peers": h.peers,
            "lacked": [math.nan if n == 0 else n for n in h.peer_spread_lacked],  # only rounds where peers filled a gap
        }
        series.update({f"stage_{stage}": values for stage, values in h.stage_rewards.items()})
        series.update({f"accuracy_{key}": values for key, values in h.stage_accuracy.items()})
        for key, values in series.items():
            if key not in self.curves:  # a game curve, shown from the first round of that game on
                if not np.isfinite(np.asarray(values, dtype=float)).any():
                    continue
                label, dotted = GAME_CURVES[key]
                self._curve(self.charts["reward"], key, label, COLORS[key], symbol=None if dotted else "d",
                            style=Qt.PenStyle.DotLine if dotted else Qt.PenStyle.SolidLine)
            self._set(key, x, values)
        evals = h.evaluations
        eval_x = [e.round for e in evals]
        self._set("accuracy", eval_x, [e.accuracy_greedy for e in evals])
        self._set("exact_mean", eval_x, [e.exact_mean for e in evals])
        if h.baseline is not None:
            self.baseline.setValue(h.baseline.accuracy_greedy)
            self.charts["accuracy"].set_entry(
                "baseline", f"baseline {h.baseline.accuracy_greedy:.0%} (round {h.baseline.round})")
        self.baseline.setVisible(h.baseline is not None)
        self.charts["accuracy"].set_empty(not evals)
        self.families.show_evaluations(evals)
        self._stack(self.charts["groups"], x, {fate: h.groups[fate] for fate in FATES})
        self._stack(self.charts["seconds"], x, h.seconds)
        waiting = PHASE_LABELS["gather"]
        if waiting not in self.charts["seconds"].entries and max(h.seconds["gather"], default=0.0) >= WAITED_S:
            self.charts["seconds"].add_entry(COLORS["gather"], waiting)  # a game's barrier, or a synchronous run
        for name in ("reward", "wellformed", "spread", "update", "seconds"):
            self.charts[name].set_empty(not h.rounds)
        self.charts["groups"].set_empty(not any(h.groups["received"]) and not any(h.peers))
        self.flat.setText(h.flat_explanation())
        self.flat.setVisible(bool(self.flat.text()))
        self._mark_skipped(h.skipped_rounds())
        if h.last is not None:
            self.summary.setText(self._summary())
        self.swarm_help.setText(_glue_figures(swarm_help_text(h.given)))
        self.swarm_help.setVisible(bool(self.swarm_help.text()))

    def _summary(self) -> str:
        h, m = self.history, self.history.last
        external = "no peer groups trained on" if m.reward_external is None else f"peers' questions {m.reward_external:.2f}"
        update = "update skipped (no reward spread)" if m.update_skipped else f"{m.groups_with_spread:.0%} of groups with spread"
        held_out = ""
        if h.evaluations:
            last, first = h.evaluations[-1], h.evaluations[0]
            held_out = f"Unseen tasks {last.accuracy_greedy:.0%} (baseline {first.accuracy_greedy:.0%})"
            if last.exact_mean != last.accuracy_greedy or first.exact_mean != first.accuracy_greedy:
                held_out += f", sampled answers {last.exact_mean:.0%} (baseline {first.exact_mean:.0%})"
            held_out += ". "
        if m.stage_rewards:
            external = "stages " + ", ".join(f"{stage} {reward:.2f}" for stage, reward in m.stage_rewards.items())
        return _glue_figures(f"{held_out}Last round ({m.round}): reward {m.reward_local:.2f}, {external}; "
                             f"well-formed {m.wellformed_rate:.0%}; {update}; {m.seconds_total:.0f} s. "
                             f"{h.peer_groups_text()}".rstrip() + self._skipped_text())

    def _skipped_text(self) -> str:
        if not self.skipped:
            return ""
        spans = ", ".join(_span(first, last) for first, last in self.skipped)
        return f" Not played here (shaded): {spans}; this node caught up with the swarm's round."

    def _mark_skipped(self, skipped: list[tuple[int, int]]) -> None:
        """Shade the rounds this node skipped on every chart, so a gap in the curves is explained where it shows."""
        if skipped == self.skipped:
            return
        for item, region in self.skip_marks:
            item.removeItem(region)
        self.skip_marks, self.skipped = [], skipped
        tip = ("Rounds this node did not play: it found the swarm further on (after a start, a pause or a slow round) "
               "and joined the swarm's current round.")
        for chart in self.charts.values():
            for first, last in skipped:
                region = pg.LinearRegionItem((first - 0.5, last + 0.5), movable=False, pen=pg.mkPen(None),
                                             brush=pg.mkBrush(SKIPPED_SHADE))
                region.setZValue(-10)  # behind the data
                region.setToolTip(f"{_span(first, last).capitalize()}: not played. {tip}")
                chart.item.addItem(region, ignoreBounds=True)
                self.skip_marks.append((chart.item, region))

    def _set(self, key: str, x, values) -> None:
        y = np.asarray(values, dtype=float)
        # NaN marks rounds without a value (no peer group, update skipped): gaps in the line.
        if len(y) and np.isfinite(y).any():
            self.curves[key].setData(np.asarray(x, dtype=float), y, connect="finite")
        else:
            self.curves[key].setData([], [])

    def _stack(self, chart: Chart, x: np.ndarray, heights: dict[str, list[float]]) -> None:
        base = np.zeros(len(x))
        for key, values in heights.items():
            h = np.asarray(values, dtype=float)
            self.bars[key].setOpts(x=x, height=h, y0=base.copy(), width=0.8)
            base += h
        chart.item.getViewBox().enableAutoRange(axis=pg.ViewBox.YAxis)

    # -- look ----------------------------------------------------------------------------------------------

    def _chart(self, name: str, title: str, **options) -> Chart:
        chart = Chart(name, title, EXPLAIN[name], **options)
        self.charts[name] = chart
        return chart

    def _curve(self, chart: Chart, key: str, label: str, color: str, *, width: float = 1.5,
               symbol: str | None = None, style: Qt.PenStyle = Qt.PenStyle.SolidLine) -> None:
        pen = pg.mkPen(color, width=width, style=style) if width else None
        options = {"symbol": symbol, "symbolSize": 6, "symbolBrush": color, "symbolPen": None} if symbol else {}
        self.curves[key] = chart.item.plot([], [], pen=pen, **options)
        chart.add_entry(color, label)

    def _bars(self, chart: Chart, key: str, label: str, *, legend: bool = True) -> None:
        bar = pg.BarGraphItem(x=[], height=[], width=0.8, brush=COLORS[key], pen=None)
        chart.item.addItem(bar)
        self.bars[key] = bar
        if legend:
            chart.add_entry(COLORS[key], label)

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt naming)
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            for chart in self.charts.values():
                chart.apply_palette(self.palette())
        super().changeEvent(event)
