"""One chart of the dashboard: a title and legend above the plot (never over the data), an explanation on hover,
whole-number round ticks, sane ranges from the first point, and a message while there is nothing to draw."""

from __future__ import annotations

import html
import math

import pyqtgraph as pg
from PySide6.QtCore import Qt
from PySide6.QtGui import QPalette
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QStackedLayout, QVBoxLayout, QWidget

# Smallest spans an axis shows, so that one point is not blown up to fill the plot (rounds, counts).
MIN_ROUNDS_SHOWN = 5
MIN_COUNT_SHOWN = 4


class IntegerAxis(pg.AxisItem):
    """Rounds and counts are whole numbers: no ticks at 0.5 and never an SI prefix like "(x0.001)"."""

    def __init__(self, orientation: str) -> None:
        super().__init__(orientation)
        self.enableAutoSIPrefix(False)

    def tickValues(self, minVal: float, maxVal: float, size: float):  # noqa: N802, N803
        return [(max(spacing, 1.0), [v for v in values if float(v).is_integer()])
                for spacing, values in super().tickValues(minVal, maxVal, size)]

    def tickStrings(self, values, scale, spacing):  # noqa: N802
        return [str(int(v)) for v in values]


class PlainAxis(pg.AxisItem):
    def __init__(self, orientation: str) -> None:
        super().__init__(orientation)
        self.enableAutoSIPrefix(False)


class RoundsViewBox(pg.ViewBox):
    """Fits the data like pyqtgraph's auto-range, but always shows ``y_span`` (0..1 for shares and rewards, 0..4 for
    counts) and every value beyond it (a correct, well-formed answer scores above 1), and starts the round axis at
    the first round with room for the next ones: one point is not centred in a range of negative rounds."""

    def __init__(self, y_span: tuple[float, float]) -> None:
        super().__init__()
        self.y_span = y_span

    def childrenBounds(self, frac=None, orthoRange=(None, None), items=None):  # noqa: N802, N803
        x, y = super().childrenBounds(frac=frac, orthoRange=orthoRange, items=items)
        if x is not None:
            # a point's round, or a bar's (bars reach 0.4 either side of theirs)
            first, last = math.ceil(x[0] - 0.5), math.floor(x[1] + 0.5)
            x = [first - 0.5, max(last, first + MIN_ROUNDS_SHOWN - 1) + 0.5]
        low, high = self.y_span
        y = [low, high] if y is None else [min(y[0], low), max(y[1], high)]
        return [x, y]


class Chart(QFrame):
    """A titled plot; ``explanation`` is what the chart means, shown on hover over the title and the plot.
    ``zero_to_one``: shares and rewards, whose axis always shows 0 to 1; ``counts``: whole numbers from 0."""

    def __init__(self, name: str, title: str, explanation: str, *, y_label: str = "", counts: bool = False,
                 zero_to_one: bool = False, empty: str = "No rounds yet", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName(f"chart_{name}")
        self.explanation = explanation
        self.entries: dict[str, tuple[str, str, bool]] = {}  # legend: key -> colour, label, dashed
        self.title = QLabel(f"<b>{html.escape(title)}</b>")
        self.title.setObjectName("chartTitle")
        self.title.setToolTip(explanation)
        self.legend = QLabel("")
        self.legend.setObjectName("chartLegend")
        self.legend.setWordWrap(True)
        self.legend.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignTop)
        self.legend.setToolTip(explanation)
        y_span = (0.0, 1.0) if zero_to_one else (0.0, MIN_COUNT_SHOWN) if counts else (0.0, 0.0)
        self.plot = pg.PlotWidget(viewBox=RoundsViewBox(y_span),
                                  axisItems={"bottom": IntegerAxis("bottom"),
                                             "left": IntegerAxis("left") if counts else PlainAxis("left")})
        self.plot.setObjectName(f"plot_{name}")
        self.plot.setToolTip(explanation)
        self.plot.setMinimumSize(200, 90)
        item = self.plot.getPlotItem()
        item.showGrid(x=True, y=True, alpha=0.25)
        # No "round" label under the axis: every title says "per round", and small charts need the height.
        if y_label:
            item.setLabel("left", y_label)
        item.hideButtons()  # the "A" auto-range button sits on the data; the dashboard has a Reset zoom button
        item.getViewBox().setLimits(minXRange=MIN_ROUNDS_SHOWN)  # zooming in stops at a few rounds
        self.empty = QLabel(empty)
        self.empty.setObjectName("chartEmpty")
        self.empty.setWordWrap(True)
        self.empty.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.empty.setAttribute(Qt.WidgetAttribute.WA_TransparentForMouseEvents)
        self.empty.setTextFormat(Qt.TextFormat.PlainText)
        stack = QStackedLayout()
        stack.setStackingMode(QStackedLayout.StackingMode.StackAll)
        stack.addWidget(self.empty)
        stack.addWidget(self.plot)
        stack.setCurrentWidget(self.empty)  # on top while there is nothing to draw

        top = QHBoxLayout()
        top.setContentsMargins(4, 0, 4, 0)
        top.setSpacing(12)  # a wrapped legend's first line must not run into the title
        top.addWidget(self.title, 0, Qt.AlignmentFlag.AlignTop)
        top.addWidget(self.legend, 1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 2, 0, 0)
        layout.setSpacing(0)
        layout.addLayout(top)
        layout.addLayout(stack, 1)
        self.apply_palette(self.palette())

    @property
    def item(self) -> pg.PlotItem:
        return self.plot.getPlotItem()

    def add_entry(self, color: str, label: str, *, dashed: bool = False) -> None:
        self.entries[label] = (color, label, dashed)
        self._legend()

    def set_entry(self, key: str, label: str) -> None:
        """Rename the legend entry first added as ``key`` (e.g. the baseline, once its value is known)."""
        color, _, dashed = self.entries[key]
        self.entries[key] = (color, label, dashed)
        self._legend()

    def set_empty(self, empty: bool) -> None:
        self.empty.setVisible(empty)
        if empty:
            self.empty.raise_()  # above the plot, which a stack of all its widgets may have drawn on top

    def reset_zoom(self) -> None:
        self.item.getViewBox().enableAutoRange()

    def _legend(self) -> None:
        parts = []
        for color, label, dashed in self.entries.values():
            mark = "&#9476;&#9476;" if dashed else "&#9632;"  # a dashed line that, unlike "- -", never wraps
            text = html.escape(label).replace(" ", "&nbsp;")  # wrap between entries, never inside one
            parts.append(f"<span style='color:{color}; font-weight:bold'>{mark}</span>&nbsp;{text}")
        self.legend.setText("&nbsp;&nbsp; ".join(parts))

    def apply_palette(self, palette: QPalette) -> None:
        """pyqtgraph draws with its own colours; follow the app's palette so dark and light themes both read."""
        background = palette.color(QPalette.ColorRole.Base)
        foreground = palette.color(QPalette.ColorRole.Text)
        self.plot.setBackground(background)
        for name in ("left", "bottom"):
            axis = self.item.getAxis(name)
            axis.setPen(pg.mkPen(foreground))
            axis.setTextPen(pg.mkPen(foreground))
        muted = palette.color(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text).name()
        self.empty.setStyleSheet(f"QLabel#chartEmpty {{ color: {muted}; padding: 12px; }}")
