"""How the app tells the user that something went wrong: one short sentence, what to do, and the details behind
an expander. Every error a user can meet goes through :class:`Problem` and one of the two widgets below."""

from __future__ import annotations

import html
from dataclasses import dataclass

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QLabel, QMessageBox, QPlainTextEdit, QToolButton, QVBoxLayout, QHBoxLayout, QWidget

from node.errors import NodeError

ERROR_COLOR = "#D55E00"


def sentence(text: str) -> str:
    """Capitalised, ending with a full stop: hints are written as clauses ("check the ...") for the CLI."""
    text = " ".join(text.split())
    if not text:
        return ""
    text = text[0].upper() + text[1:]
    return text if text[-1] in ".!?…" else text + "."


@dataclass(frozen=True)
class Problem:
    summary: str  # one short sentence: what happened
    advice: str = ""  # what to do about it
    details: str = ""  # the raw text (exception, log lines) for a bug report

    @classmethod
    def of(cls, exc: BaseException, *, advice: str = "") -> Problem:
        if isinstance(exc, NodeError):
            return cls(sentence(exc.message), sentence(exc.hint or advice), f"{exc.code}: {exc}")
        return cls("Something unexpected went wrong.",
                   sentence(advice or "try again; if it keeps happening, copy the diagnostics from the Logs tab "
                                      "into a bug report"),
                   f"{type(exc).__name__}: {exc}")

    def text(self) -> str:
        return " ".join(part for part in (sentence(self.summary), sentence(self.advice)) if part)


def error_dialog(parent: QWidget | None, title: str, problem: Problem, *,
                 icon: QMessageBox.Icon = QMessageBox.Icon.Critical) -> QMessageBox:
    """A message box with the sentence, the advice and a "Show Details..." expander; the caller shows it."""
    box = QMessageBox(icon, title, sentence(problem.summary), parent=parent)
    box.setTextFormat(Qt.TextFormat.PlainText)
    box.setInformativeText(sentence(problem.advice))
    if problem.details:
        box.setDetailedText(problem.details)
    return box


class ErrorLabel(QWidget):
    """An inline error: the sentence and advice in one line, and a Details toggle with the raw text."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.problem: Problem | None = None
        self.label = QLabel("")
        self.label.setObjectName("errorText")
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.toggle = QToolButton(text="Details")
        self.toggle.setCheckable(True)
        self.toggle.toggled.connect(lambda on: self.details.setVisible(on))
        self.details = QPlainTextEdit(readOnly=True)
        self.details.setObjectName("errorDetails")
        self.details.setMaximumHeight(90)
        self.details.hide()
        row = QHBoxLayout()
        row.setContentsMargins(0, 0, 0, 0)
        row.addWidget(self.label, 1)
        row.addWidget(self.toggle, 0, Qt.AlignmentFlag.AlignTop)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addLayout(row)
        layout.addWidget(self.details)
        self.clear()

    def show_problem(self, problem: Problem) -> None:
        self.problem = problem
        advice = f" {html.escape(sentence(problem.advice))}" if problem.advice else ""
        self.label.setText(f"<span style='color:{ERROR_COLOR}'><b>{html.escape(sentence(problem.summary))}</b></span>"
                           f"{advice}")
        self.details.setPlainText(problem.details)
        self.toggle.setVisible(bool(problem.details))
        self.toggle.setChecked(False)
        self.show()

    def show_info(self, text: str) -> None:
        """A neutral line (progress, success) in the same place."""
        self.problem = None
        self.label.setText(html.escape(text))
        self.toggle.hide()
        self.toggle.setChecked(False)
        self.show()

    def clear(self) -> None:
        self.problem = None
        self.label.setText("")
        self.toggle.hide()
        self.toggle.setChecked(False)

    def text(self) -> str:
        return self.problem.text() if self.problem else self.label.text()
