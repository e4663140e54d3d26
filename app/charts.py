"""One chart of the dashboard: a title and legend above the plot (never over the data), an explanation on hover,
whole-number round ticks, sane ranges from the first point, and a message while there is nothing to draw."""

from __future__ import annotations

import html

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


class Chart(QFrame):
    """A titled plot; ``explanation`` is what the chart means, shown on hover over the title and the plot."""

    def __init__(self, name: str, title: str, explanation: str, *, y_label: str = "", counts: bool = False,
                 fraction: bool = False, empty: str = "No rounds yet", parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName(f"chart_{name}")
        self.explanation = explanation
        self.fraction = fraction
        self.entries: list[tuple[str, str, bool]] = []  # legend: colour, label, dashed
        self.title = QLabel(f"<b>{html.escape(title)}</b>")
        self.title.setObjectName("chartTitle")
        self.title.setToolTip(explanation)
        self.legend = QLabel("")
        self.legend.setObjectName("chartLegend")
        self.legend.setWordWrap(True)
        self.legend.setAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignTop)
        self.legend.setToolTip(explanation)
        self.plot = pg.PlotWidget(axisItems={"bottom": IntegerAxis("bottom"),
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
        view = item.getViewBox()
        view.setLimits(minXRange=MIN_ROUNDS_SHOWN)
        if counts:
            view.setLimits(minYRange=MIN_COUNT_SHOWN)
        if fraction:
            view.setYRange(0, 1, padding=0.04)
            view.enableAutoRange(axis=pg.ViewBox.YAxis, enable=False)
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
        self.entries.append((color, label, dashed))
        self._legend()

    def set_empty(self, empty: bool) -> None:
        self.empty.setVisible(empty)

    def reset_zoom(self) -> None:
        view = self.item.getViewBox()
        view.enableAutoRange(axis=pg.ViewBox.XAxis)
        if self.fraction:
            view.setYRange(0, 1, padding=0.04)
        else:
            view.enableAutoRange(axis=pg.ViewBox.YAxis)

    def _legend(self) -> None:
        parts = []
        for color, label, dashed in self.entries:
            mark = "- -" if dashed else "&#9632;"
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
