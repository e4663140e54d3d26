"""A one-line label that never widens its window: text that does not fit is cut with "…" and shown whole on hover."""

from __future__ import annotations

from PySide6.QtCore import QSize, Qt
from PySide6.QtGui import QPainter, QPaintEvent, QResizeEvent
from PySide6.QtWidgets import QLabel, QSizePolicy, QWidget

# Least width it asks of a layout: a few words, so a long text shrinks the label rather than grows the window.
MIN_WIDTH = 80


class ElidedLabel(QLabel):
    """Plain text on one line; ``text()`` stays whole (for the tooltip, copying and tests), only the drawing is cut."""

    def __init__(self, text: str = "", parent: QWidget | None = None) -> None:
        super().__init__(text, parent)
        self.setTextFormat(Qt.TextFormat.PlainText)
        self.setWordWrap(False)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Fixed)
        self._auto_tip = ""

    def minimumSizeHint(self) -> QSize:  # noqa: N802 (Qt naming)
        hint = super().minimumSizeHint()
        return QSize(min(hint.width(), MIN_WIDTH), hint.height())

    def shown_text(self) -> str:
        """What is drawn: the text, or its start and "…" when it does not fit."""
        width = self.contentsRect().width() - 2 * self.margin()
        return self.fontMetrics().elidedText(self.text(), Qt.TextElideMode.ElideRight, max(width, 0))

    def is_elided(self) -> bool:
        return self.shown_text() != self.text()

    def paintEvent(self, event: QPaintEvent) -> None:  # noqa: N802
        painter = QPainter(self)
        rect = self.contentsRect().adjusted(self.margin(), self.margin(), -self.margin(), -self.margin())
        self.style().drawItemText(painter, rect, int(self.alignment()), self.palette(), self.isEnabled(),
                                  self.shown_text(), self.foregroundRole())

    def setText(self, text: str) -> None:  # noqa: N802
        super().setText(text)
        self._update_tip()

    def resizeEvent(self, event: QResizeEvent) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._update_tip()

    def _update_tip(self) -> None:
        """The whole text on hover where it is cut; a tooltip the caller set is left alone."""
        if self.toolTip() in ("", self._auto_tip):
            self._auto_tip = self.text() if self.is_elided() else ""
            self.setToolTip(self._auto_tip)
