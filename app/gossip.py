"""Recent rollouts of the swarm: which peer shared which question, what its model answered, and the reward."""

from __future__ import annotations

import time

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QSortFilterProxyModel, Qt
from PySide6.QtWidgets import (
    QCheckBox, QHBoxLayout, QHeaderView, QLineEdit, QPlainTextEdit, QSplitter, QTableView, QVBoxLayout, QWidget,
)

from node.events import RolloutSample

MAX_ROWS = 1000
COLUMNS = ("Round", "Peer", "Task", "Question", "Answer", "Reward")


class SampleModel(QAbstractTableModel):
    def __init__(self) -> None:
        super().__init__()
        self.samples: list[RolloutSample] = []

    def rowCount(self, parent: QModelIndex = QModelIndex()) -> int:  # noqa: N802
        return 0 if parent.isValid() else len(self.samples)

    def columnCount(self, parent: QModelIndex = QModelIndex()) -> int:  # noqa: N802
        return len(COLUMNS)

    def headerData(self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole):  # noqa: N802
        if role == Qt.ItemDataRole.DisplayRole and orientation == Qt.Orientation.Horizontal:
            return COLUMNS[section]
        return None

    def data(self, index: QModelIndex, role: int = Qt.ItemDataRole.DisplayRole):
        s = self.samples[index.row()]
        column = index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            return (
                s.round,
                "this node" if s.local else s.source_name,
                f"{s.family} · {s.stage}" if s.stage else s.family,  # multistage: which stage's work it is
                _one_line(s.question),
                _one_line(s.completion),
                f"{s.reward:.2f}",
            )[column]
        if role == Qt.ItemDataRole.UserRole:  # sort keys
            return (s.round, s.source_name, s.family, s.question, s.completion, s.reward)[column]
        if role == Qt.ItemDataRole.ToolTipRole and column in (3, 4):
            return (s.question if column == 3 else s.completion)[:2000]
        if role == Qt.ItemDataRole.TextAlignmentRole and column in (0, 5):
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None

    def add(self, samples: list[RolloutSample]) -> None:
        if not samples:
            return
        overflow = len(self.samples) + len(samples) - MAX_ROWS
        if overflow > 0:
            self.beginRemoveRows(QModelIndex(), 0, min(overflow, len(self.samples)) - 1)
            del self.samples[:overflow]
            self.endRemoveRows()
        samples = samples[-MAX_ROWS:]
        start = len(self.samples)
        self.beginInsertRows(QModelIndex(), start, start + len(samples) - 1)
        self.samples.extend(samples)
        self.endInsertRows()


class _Filter(QSortFilterProxyModel):
    def __init__(self) -> None:
        super().__init__()
        self.text = ""
        self.peers_only = False
        self.setSortRole(Qt.ItemDataRole.UserRole)

    def filterAcceptsRow(self, row: int, parent: QModelIndex) -> bool:  # noqa: N802
        sample = self.sourceModel().samples[row]
        if self.peers_only and sample.local:
            return False
        if not self.text:
            return True
        haystack = f"{sample.source_name} {sample.family} {sample.question} {sample.completion}".lower()
        return self.text in haystack


class GossipView(QWidget):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.model = SampleModel()
        self.proxy = _Filter()
        self.proxy.setSourceModel(self.model)
        self.search = QLineEdit(placeholderText="Filter by peer, task or text")
        self.search.setClearButtonEnabled(True)
        self.search.textChanged.connect(self._filter)
        self.peers_only = QCheckBox("Peers' questions only")
        self.peers_only.toggled.connect(self._filter)
        self.table = QTableView()
        self.table.setModel(self.proxy)
        self.table.setSortingEnabled(True)
        self.table.sortByColumn(0, Qt.SortOrder.DescendingOrder)
        self.table.setSelectionBehavior(QTableView.SelectionBehavior.SelectRows)
        self.table.setWordWrap(False)
        self.table.verticalHeader().hide()
        header = self.table.horizontalHeader()
        for column, mode in enumerate((QHeaderView.ResizeMode.ResizeToContents,) * 3
                                      + (QHeaderView.ResizeMode.Stretch,) * 2
                                      + (QHeaderView.ResizeMode.ResizeToContents,)):
            header.setSectionResizeMode(column, mode)
        self.detail = QPlainTextEdit(readOnly=True, placeholderText="Select a rollout to read it in full")
        self.table.selectionModel().currentRowChanged.connect(self._show)

        bar = QHBoxLayout()
        bar.addWidget(self.search, 1)
        bar.addWidget(self.peers_only)
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(self.table)
        splitter.addWidget(self.detail)
        splitter.setSizes([400, 160])
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(bar)
        layout.addWidget(splitter)

    def add_samples(self, samples: list[RolloutSample]) -> None:
        self.model.add(samples)

    def _filter(self) -> None:
        self.proxy.text = self.search.text().strip().lower()
        self.proxy.peers_only = self.peers_only.isChecked()
        self.proxy.invalidate()

    def _show(self, current: QModelIndex) -> None:
        if not current.isValid():
            return
        s = self.model.samples[self.proxy.mapToSource(current).row()]
        who = "this node" if s.local else f"{s.source_name} ({s.source_peer})"
        when = time.strftime("%H:%M:%S", time.localtime(s.time))
        self.detail.setPlainText(
            f"Round {s.round} · {s.family} · from {who} · reward {s.reward:.3f} (scored by this node) · {when}\n\n"
            f"QUESTION\n{s.question}\n\nANSWER by {'this node' if s.local else s.source_name}'s model\n{s.completion}"
        )


def _one_line(text: str, limit: int = 240) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
