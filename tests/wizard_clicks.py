"""Driving the setup wizard as a user does: through its buttons, with real mouse clicks.

The wizard's own slots (``next()``, ``accept()``) are never called here, so a page that shows the wrong button, or a
button that does nothing, fails the test the way it fails a user.
"""

from __future__ import annotations

from collections.abc import Callable

from PySide6.QtCore import QPoint, QTimer, Qt
from PySide6.QtTest import QTest
from PySide6.QtGui import QKeySequence
from PySide6.QtWidgets import (
    QAbstractButton, QAbstractSpinBox, QApplication, QCheckBox, QComboBox, QRadioButton, QTableWidget, QWidget, QWizard,
)

NEXT, FINISH, BACK, CANCEL = (QWizard.WizardButton.NextButton, QWizard.WizardButton.FinishButton,
                              QWizard.WizardButton.BackButton, QWizard.WizardButton.CancelButton)
BUTTON_NAMES = {NEXT: "Next", FINISH: "Finish", BACK: "Back", CANCEL: "Cancel"}


def shown_buttons(wizard: QWizard) -> set[str]:
    """The names of the wizard's buttons a user sees now."""
    return {name for which, name in BUTTON_NAMES.items() if wizard.button(which).isVisible()}


def click(button: QAbstractButton) -> None:
    """A left click where a user aims: a push button's middle, a check box's or radio button's box (their widgets can
    be wider than the box and its text, and a click beside the text does nothing)."""
    assert button.isVisible(), f"{button.text()!r} is not shown"
    assert button.isEnabled(), f"{button.text()!r} is greyed out"
    aim = QPoint(8, button.height() // 2) if isinstance(button, (QCheckBox, QRadioButton)) else button.rect().center()
    QTest.mouseClick(button, Qt.MouseButton.LeftButton, pos=aim)


def click_row(table: QTableWidget, row: int) -> None:
    """Clicks the middle of a row's first cell, as a user picks a row."""
    table.scrollToItem(table.item(row, 0))
    rect = table.visualItemRect(table.item(row, 0))
    assert rect.isValid(), f"row {row} is not shown"
    QTest.mouseClick(table.viewport(), Qt.MouseButton.LeftButton, pos=rect.center())
    assert table.currentRow() == row


def button_named(root: QWidget, text: str) -> QAbstractButton:
    """The one button under ``root`` that shows ``text``."""
    found = [b for b in root.findChildren(QAbstractButton) if b.text() == text]
    assert len(found) == 1, f"{len(found)} buttons named {text!r}"
    return found[0]


def choose(combo: QComboBox, data: object) -> None:
    """Picks an entry of a drop-down with the arrow keys, as a user does from the keyboard."""
    target = combo.findData(data)
    assert target >= 0, f"{data!r} is not offered"
    combo.setFocus()
    while combo.currentIndex() != target:
        QTest.keyClick(combo, Qt.Key.Key_Down if combo.currentIndex() < target else Qt.Key.Key_Up)


def type_into(field: QWidget, text: str) -> None:
    """Replaces a field's text by typing, as a user selects all and types over it."""
    target = field.lineEdit() if isinstance(field, QAbstractSpinBox) else field
    target.setFocus()
    QTest.keySequence(target, QKeySequence.StandardKey.SelectAll)
    QTest.keyClick(target, Qt.Key.Key_Delete)
    QTest.keyClicks(target, text)


def press_next(qtbot, wizard: QWizard, *, timeout: int = 5_000) -> None:
    """Waits for Next to be enabled (pages that ask the node wait for its answer), presses it and checks that the page
    changed."""
    button = wizard.button(NEXT)
    assert "Finish" not in shown_buttons(wizard), f"page {wizard.currentId()} shows Finish, not Next"
    qtbot.waitUntil(lambda: button.isVisible() and button.isEnabled(), timeout=timeout)
    before = wizard.currentId()
    click(button)
    assert wizard.currentId() != before, f"Next did nothing on page {before}"


def press_finish(qtbot, wizard: QWizard) -> None:
    """The last page shows Finish and no Next; pressing it closes the wizard with its result."""
    assert shown_buttons(wizard) >= {"Finish"} and "Next" not in shown_buttons(wizard), shown_buttons(wizard)
    button = wizard.button(FINISH)
    qtbot.waitUntil(button.isEnabled, timeout=5_000)
    click(button)


def walk_to(qtbot, wizard: QWizard, page: QWidget, *, timeout: int = 5_000) -> None:
    """Presses Next until ``page`` is shown."""
    while wizard.currentPage() is not page:
        press_next(qtbot, wizard, timeout=timeout)


class Script:
    """Steps run against whatever window is open, from a timer: for a modal wizard or dialog opened by ``exec()``
    inside the code under test, where the test cannot run code until it closes. Each step waits for its condition
    (with a deadline), then acts; a failure is kept, every open wizard is cancelled, and :meth:`check` raises it."""

    TICK_MS = 50

    def __init__(self, timeout_s: float = 60, on_error: Callable[[], None] = lambda: None) -> None:
        self.on_error = on_error
        self.steps: list[tuple[str, Callable[[], object], Callable[[], None]]] = []
        self.timeout_ms = int(timeout_s * 1000)
        self.error: BaseException | None = None
        self.waited_ms = 0

    def when(self, what: str, condition: Callable[[], object], action: Callable[[], None]) -> Script:
        self.steps.append((what, condition, action))
        return self

    def start(self) -> Script:
        self._schedule()
        return self

    @property
    def done(self) -> bool:
        return not self.steps or self.error is not None

    def _schedule(self) -> None:
        # A new single-shot timer for every tick: Qt never re-enters a timer whose handler is still running, and an
        # action may open a modal loop (a dialog's exec()) that the next steps must drive from inside.
        QTimer.singleShot(self.TICK_MS, self._tick)

    def _tick(self) -> None:
        if self.done:
            return
        what, condition, action = self.steps[0]
        self.waited_ms += self.TICK_MS
        try:
            if not condition():
                if self.waited_ms > self.timeout_ms:
                    raise TimeoutError(f"waited {self.timeout_ms} ms for: {what}")
                self._schedule()
                return
            self.steps.pop(0)
            self.waited_ms = 0
            self._schedule()  # before the action: it may not return until its modal loop closes
            action()  # actions only click; every wait is a step's condition
        except BaseException as exc:  # noqa: BLE001 - kept for the test to raise
            self.error = exc
            for widget in QApplication.topLevelWidgets():  # leave no modal loop waiting for a click
                if isinstance(widget, QWizard) and widget.isVisible():
                    widget.reject()
            self.on_error()

    def check(self) -> None:
        if self.error is not None:
            raise self.error
        assert not self.steps, f"never reached: {self.steps[0][0]}"


def open_wizard() -> QWizard | None:
    """The setup wizard on screen, if one is."""
    from app.wizard import SetupWizard

    return next((w for w in QApplication.topLevelWidgets() if isinstance(w, SetupWizard) and w.isVisible()), None)
