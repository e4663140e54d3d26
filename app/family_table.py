"""Held-out accuracy per task family beside the accuracy chart: the run's first evaluation against its latest."""

from __future__ import annotations

from collections.abc import Sequence

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QAbstractItemView, QFrame, QHeaderView, QLabel, QTableWidget, QTableWidgetItem, QVBoxLayout

from app.names import task_name
from app.swarm_help import family_accuracy
from node.events import EvalFinished

EXPLAIN = ("Share of unseen questions of each task family answered exactly right (greedy), at the run's first "
           "held-out evaluation and at its latest. Each family has only part of the held-out questions, so one "
           "question moves its figure by more than it moves the chart.")


class FamilyTable(QFrame):
    """Hidden until an evaluation reports accuracy per family."""

    def __init__(self) -> None:
        super().__init__()
        self.setObjectName("familyAccuracy")
        self.title = QLabel("<b>By task family</b>")
        self.title.setToolTip(EXPLAIN)
        self.table = QTableWidget(0, 3)
        self.table.setObjectName("familyAccuracyTable")
        self.table.setToolTip(EXPLAIN)
        self.table.verticalHeader().hide()
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        self.table.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.table.setShowGrid(False)
        self.table.setWordWrap(False)
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        for column in (1, 2):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.ResizeToContents)
        self.table.verticalHeader().setDefaultSectionSize(self.fontMetrics().height() + 6)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 2, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.title)
        layout.addWidget(self.table, 1)
        self.setMinimumWidth(230)
        self.setMaximumWidth(320)
        self.hide()

    def show_evaluations(self, evaluations: Sequence[EvalFinished]) -> None:
        rows = family_accuracy(evaluations)
        self.setVisible(bool(rows))
        if not rows:
            return
        first, last = evaluations[0], evaluations[-1]
        self.table.setHorizontalHeaderLabels(["Task", f"Round {first.round}", f"Round {last.round}"])
        self.table.setColumnHidden(2, last is first)  # one evaluation so far: one column, not the same one twice
        self.table.setRowCount(len(rows))
        for index, row in enumerate(rows):
            tip = task_name(row.family)
            if row.change is not None:
                tip += f": {row.change * 100:+.0f} points since round {first.round}"
            if row.questions:
                tip += f" ({row.questions} held-out questions: one is {1 / row.questions:.0%})"
            cells = [task_name(row.family), "-" if row.first is None else f"{row.first:.0%}", f"{row.last:.0%}"]
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if column:
                    item.setTextAlignment(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
                item.setToolTip(tip)
                self.table.setItem(index, column, item)
