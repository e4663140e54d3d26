"""Live plots of the run: rewards, loss, completion length, time per phase and peers, per round."""

from __future__ import annotations

import numpy as np
import pyqtgraph as pg
from PySide6.QtCore import QEvent, Qt
from PySide6.QtGui import QColor, QPalette
from PySide6.QtWidgets import QGridLayout, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app.history import PHASES, RunHistory
from node.events import RoundMetrics
from node.game import STAGES

# Okabe-Ito: distinguishable for colour-blind users and on dark and light backgrounds.
COLORS = {"local": "#0072B2", "external": "#E69F00", "average": "#009E73", "loss": "#D55E00",
          "length": "#CC79A7", "peers": "#56B4E9",
          "generate": "#0072B2", "share": "#F0E442", "gather": "#E69F00", "train": "#009E73",
          "groups_received": "#56B4E9", "groups_used": "#009E73", "groups_rejected": "#D55E00",
          "stage_answer": "#56B4E9", "stage_critique": "#CC79A7", "stage_revise": "#D55E00",
          "accuracy_answer": "#56B4E9", "accuracy_swarm_final": "#D55E00"}
# Curves of the multi-stage game, added to the reward plot once a round of that game arrives: key -> label, style.
GAME_CURVES = {
    **{f"stage_{stage}": (f"{stage} stage reward", "d") for stage in STAGES},
    "accuracy_answer": ("share right: own first answers", None),
    "accuracy_swarm_final": ("share right: swarm's final answers", None),
}
PLOTS = ("reward", "loss", "length", "seconds", "peers", "groups")


class RoundAxis(pg.AxisItem):
    """Rounds are whole numbers: no ticks at 0.5."""

    def tickValues(self, minVal: float, maxVal: float, size: float):  # noqa: N802, N803
        return [(max(spacing, 1.0), [v for v in values if float(v).is_integer()])
                for spacing, values in super().tickValues(minVal, maxVal, size)]

    def tickStrings(self, values, scale, spacing):  # noqa: N802
        return [str(int(v)) for v in values]


class Dashboard(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        pg.setConfigOptions(antialias=True)
        self.history = RunHistory()
        self.plots: dict[str, pg.PlotWidget] = {}
        self.curves: dict[str, pg.PlotDataItem] = {}
        self.bars: dict[str, pg.BarGraphItem] = {}

        grid = QGridLayout()
        grid.setSpacing(8)
        reward = self._plot("reward", "Reward per round", "mean reward")
        reward.setYRange(0, 1, padding=0.05)
        self._curve(reward, "local", "local (own questions)", COLORS["local"], symbol="o")
        self._curve(reward, "external", "external (peers' questions)", COLORS["external"], symbol="t")
        self._curve(reward, "local_avg", "local, 10-round average", COLORS["average"], width=3)
        self._curve(reward, "external_avg", "external, 10-round average", COLORS["external"], width=3,
                    style=Qt.PenStyle.DashLine)
        loss = self._plot("loss", "GRPO loss", "loss")
        self._curve(loss, "loss", "loss", COLORS["loss"], symbol="o")
        length = self._plot("length", "Completion length", "tokens")
        self._curve(length, "length", "mean tokens per completion", COLORS["length"], symbol="o")
        phases = self._plot("seconds", "Seconds per round, by phase", "seconds")
        for phase in PHASES:
            bar = pg.BarGraphItem(x=[], height=[], width=0.8, brush=COLORS[phase], name=phase, pen=None)
            phases.addItem(bar)
            self.bars[phase] = bar
        peers = self._plot("peers", "Peers seen", "peers")
        self._curve(peers, "peers", "peers seen this round", COLORS["peers"], symbol="s")
        groups = self._plot("groups", "Rollout groups per round", "groups")
        for key, label in (("received", "received from peers"), ("used", "trained on"), ("rejected", "rejected")):
            self._curve(groups, f"groups_{key}", label, COLORS[f"groups_{key}"], symbol="o")

        for index, name in enumerate(PLOTS):
            grid.addWidget(self.plots[name], index // 2, index % 2)

        self.summary = QLabel("No rounds yet: the first one finishes after generation, sharing and one update.")
        self.summary.setWordWrap(True)
        self.summary.setObjectName("roundSummary")
        self.reset_button = QPushButton("Reset zoom")
        self.reset_button.setToolTip("Drag to pan, scroll or right-drag to zoom; this fits every plot again")
        self.reset_button.clicked.connect(self.reset_zoom)
        bottom = QHBoxLayout()
        bottom.addWidget(self.summary, 1)
        bottom.addWidget(self.reset_button, 0, Qt.AlignmentFlag.AlignRight)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(grid, 1)
        layout.addLayout(bottom)
        self._apply_palette()

    # -- data ----------------------------------------------------------------------------------------------

    def load_history(self, metrics: list[RoundMetrics]) -> None:
        self.history = RunHistory.from_metrics(metrics)
        self._redraw()

    def add_round(self, metrics: RoundMetrics) -> None:
        if self.history.rounds and metrics.round <= self.history.rounds[-1]:
            return  # a replay of a round we already show (e.g. history loaded after the event was queued)
        self.history.add(metrics)
        self._redraw()

    def reset_zoom(self) -> None:
        for plot in self.plots.values():
            plot.getPlotItem().enableAutoRange()

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
            "external_avg": h.reward_external_average(), "loss": h.loss, "length": h.completion_length,
            "peers": h.peers, **{f"groups_{key}": h.groups[key] for key in ("received", "used", "rejected")},
        }
        series.update({f"stage_{stage}": values for stage, values in h.stage_rewards.items()})
        series.update({f"accuracy_{key}": values for key, values in h.accuracy.items()})
        for key, values in series.items():
            y = np.asarray(values, dtype=float)
            if key not in self.curves:  # a game curve: shown from the first round of that game on
                if not np.isfinite(y).any():
                    continue
                label, symbol = GAME_CURVES[key]
                style = Qt.PenStyle.DotLine if key.startswith("accuracy") else Qt.PenStyle.SolidLine
                self._curve(self.plots["reward"], key, label, COLORS[key], symbol=symbol, style=style)
                self.plots["reward"].getPlotItem().enableAutoRange(axis="y")  # game rewards go above 1
            # NaN marks rounds without peer groups: gaps in the line, and nothing at all without a single point.
            if np.isfinite(y).any():
                self.curves[key].setData(x, y, connect="finite")
            else:
                self.curves[key].setData([], [])
        base = np.zeros(len(x))
        for phase in PHASES:
            heights = np.asarray(h.seconds[phase], dtype=float)
            self.bars[phase].setOpts(x=x, height=heights, y0=base.copy(), width=0.8)
            base += heights
        self.plots["seconds"].getPlotItem().enableAutoRange()
        if h.last is not None:
            m = h.last
            external = "no peer groups trained on" if m.reward_external is None else f"external {m.reward_external:.3f}"
            if m.stage_rewards:
                external = "stages " + ", ".join(f"{stage} {reward:.3f}" for stage, reward in m.stage_rewards.items())
            self.summary.setText(
                f"Round {m.round}: reward local {m.reward_local:.3f}, {external}; loss {m.loss:+.4f}; "
                f"{m.seconds_total:.0f} s ({m.generation_tokens_per_s:.0f} tokens/s generating); "
                f"{h.totals['rounds']} rounds shown."
            )

    # -- look ----------------------------------------------------------------------------------------------

    def _plot(self, name: str, title: str, y_label: str) -> pg.PlotWidget:
        plot = pg.PlotWidget(axisItems={"bottom": RoundAxis("bottom")})
        plot.setObjectName(f"plot_{name}")
        plot.setMinimumSize(260, 170)
        item = plot.getPlotItem()
        item.setTitle(title)
        item.setLabel("left", y_label)
        item.setLabel("bottom", "round")
        item.showGrid(x=True, y=True, alpha=0.2)
        item.addLegend(offset=(-8, 8), labelTextSize="8pt")
        item.setMenuEnabled(True)
        item.getAxis("left").enableAutoSIPrefix(False)
        self.plots[name] = plot
        return plot

    def _curve(self, plot: pg.PlotWidget, key: str, label: str, color: str, *, width: float = 1.5,
               symbol: str | None = None, style: Qt.PenStyle = Qt.PenStyle.SolidLine) -> None:
        pen = pg.mkPen(color, width=width, style=style)
        options = {"symbol": symbol, "symbolSize": 5, "symbolBrush": color, "symbolPen": None} if symbol else {}
        self.curves[key] = plot.plot([], [], pen=pen, name=label, **options)

    def changeEvent(self, event: QEvent) -> None:  # noqa: N802 (Qt naming)
        if event.type() in (QEvent.Type.PaletteChange, QEvent.Type.ApplicationPaletteChange):
            self._apply_palette()
        super().changeEvent(event)

    def _apply_palette(self) -> None:
        """pyqtgraph draws with its own colours; follow the app's palette so dark and light themes both read."""
        palette = self.palette()
        background = palette.color(QPalette.ColorRole.Base)
        foreground = palette.color(QPalette.ColorRole.Text)
        for plot in self.plots.values():
            plot.setBackground(background)
            item = plot.getPlotItem()
            item.titleLabel.setText(item.titleLabel.text, color=foreground.name())
            for axis in ("left", "bottom"):
                ax = item.getAxis(axis)
                ax.setPen(pg.mkPen(foreground))
                ax.setTextPen(pg.mkPen(foreground))
            legend = item.legend
            if legend is not None:
                legend.setLabelTextColor(foreground)
                legend.setBrush(pg.mkBrush(QColor(background.red(), background.green(), background.blue(), 200)))
