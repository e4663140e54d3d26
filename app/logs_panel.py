"""The node's and the app's logs, live and filterable, with a "copy diagnostics" button for bug reports."""

from __future__ import annotations

import collections
import platform
import re
import sys
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

from PySide6.QtCore import QTimer
from PySide6.QtGui import QFontDatabase, QGuiApplication
from PySide6.QtWidgets import (
    QComboBox, QHBoxLayout, QLabel, QLineEdit, QPlainTextEdit, QPushButton, QVBoxLayout, QWidget,
)

MAX_LINES = 5000
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
_LEVEL = re.compile(r"\b(DEBUG|INFO|WARNING|ERROR|CRITICAL)\b")
_PACKAGES = ("rl-swarm-desktop", "torch", "transformers", "trl", "hivemind", "PySide6-Essentials", "pyqtgraph")


class LogTail:
    """Follows a log file across RotatingFileHandler rotations (the file shrinks or is replaced)."""

    def __init__(self, path: Path, source: str) -> None:
        self.path = path
        self.source = source
        self._offset = 0
        self._inode: int | None = None
        self._partial = ""

    def read_new(self) -> list[str]:
        try:
            stat = self.path.stat()
        except OSError:
            return []
        if stat.st_ino != self._inode or stat.st_size < self._offset:
            self._inode, self._offset, self._partial = stat.st_ino, 0, ""
        if stat.st_size == self._offset:
            return []
        with open(self.path, encoding="utf-8", errors="replace") as f:
            f.seek(self._offset)
            chunk = f.read(4 * 2**20)
            self._offset = f.tell()
        text = self._partial + chunk
        lines = text.split("\n")
        self._partial = lines.pop()
        return lines


class LogsPanel(QWidget):
    def __init__(self, diagnostics: Callable[[], str], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._diagnostics = diagnostics
        self.tails: list[LogTail] = []
        self.lines: collections.deque[tuple[str, int, str]] = collections.deque(maxlen=MAX_LINES)
        self.level = QComboBox()
        self.level.addItems(["All levels", "INFO and above", "WARNING and above", "ERROR and above"])
        self.level.currentIndexChanged.connect(self._refilter)
        self.source = QComboBox()
        self.source.addItems(["Node and app", "Node", "App"])
        self.source.currentIndexChanged.connect(self._refilter)
        self.search = QLineEdit(placeholderText="Filter text")
        self.search.setClearButtonEnabled(True)
        self.search.textChanged.connect(self._refilter)
        self.copy = QPushButton("Copy diagnostics")
        self.copy.setToolTip("Versions, hardware, settings and recent log lines, ready to paste into a bug report. "
                             "No keys or tokens are included.")
        self.copy.clicked.connect(self.copy_diagnostics)
        self.view = QPlainTextEdit(readOnly=True)
        self.view.setMaximumBlockCount(MAX_LINES)
        self.view.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.view.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)  # one line per round is long
        self.where = QLabel("")
        self.where.setWordWrap(True)

        bar = QHBoxLayout()
        bar.addWidget(self.level)
        bar.addWidget(self.source)
        bar.addWidget(self.search, 1)
        bar.addWidget(self.copy)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(bar)
        layout.addWidget(self.view, 1)
        layout.addWidget(self.where)
        self.timer = QTimer(self, interval=1000)
        self.timer.timeout.connect(self.poll)
        self.timer.start()

    def follow(self, node_log: Path, app_log: Path) -> None:
        if [t.path for t in self.tails] == [node_log, app_log]:
            return
        self.tails = [LogTail(node_log, "node"), LogTail(app_log, "app")]
        self.lines.clear()
        self.view.clear()
        self.where.setText(f"Node log: {node_log}\nApp log: {app_log}")
        self.poll()

    def poll(self) -> None:
        fresh = []
        for tail in self.tails:
            for line in tail.read_new():
                if line.strip():
                    entry = (tail.source, _level_of(line), line)
                    self.lines.append(entry)
                    fresh.append(entry)
        for entry in fresh:
            if self._accepts(entry):
                self.view.appendPlainText(f"[{entry[0]}] {entry[2]}")

    def recent(self, source: str, count: int) -> list[str]:
        return [line for src, _, line in self.lines if src == source][-count:]

    def copy_diagnostics(self) -> str:
        text = self._diagnostics()
        for source in ("node", "app"):
            text += f"\n\n## last {source} log lines\n" + "\n".join(self.recent(source, 80))
        QGuiApplication.clipboard().setText(text)
        return text

    def _accepts(self, entry: tuple[str, int, str]) -> bool:
        source, level, line = entry
        if self.source.currentIndex() == 1 and source != "node" or self.source.currentIndex() == 2 and source != "app":
            return False
        if level < self.level.currentIndex():
            return False
        needle = self.search.text().strip().lower()
        return not needle or needle in line.lower()

    def _refilter(self) -> None:
        self.view.setPlainText("\n".join(f"[{s}] {line}" for s, lvl, line in self.lines if self._accepts((s, lvl, line))))
        self.view.moveCursor(self.view.textCursor().MoveOperation.End)


def _level_of(line: str) -> int:
    """0 debug, 1 info, 2 warning, 3 error; continuation lines (tracebacks) count as warnings."""
    match = _LEVEL.search(line[:60])
    if not match:
        return 2
    return min(LEVELS.index(match.group(1)), 3)


def environment_report() -> str:
    versions = []
    for package in _PACKAGES:
        try:
            versions.append(f"{package} {metadata.version(package)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{package} (not installed)")
    return (f"Python {sys.version.split()[0]} on {platform.platform()} ({platform.machine()})\n"
            + ", ".join(versions))
