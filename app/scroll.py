"""A page's content in a scroll area, for pages taller than a small screen leaves."""

from __future__ import annotations

from PySide6.QtWidgets import QFrame, QScrollArea, QWidget


def scroll_area(content: QWidget) -> QScrollArea:
    """``content`` in a frameless scroll area that follows its width: when the window is shorter than the content,
    the page scrolls rather than squeezing its rows over each other."""
    scroll = QScrollArea()
    scroll.setWidgetResizable(True)
    scroll.setFrameShape(QFrame.Shape.NoFrame)
    scroll.setWidget(content)
    return scroll
