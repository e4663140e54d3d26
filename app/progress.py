"""Where the current round is: its phase in words, a progress bar, and the time left estimated from recent rounds."""

from __future__ import annotations

import statistics
import time

from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QWidget

from app.elided_label import ElidedLabel
from node.events import RoundFinished, RoundProgress

RECENT_ROUNDS = 5
ROUND_PHASES = ("generating", "sharing", "waiting_for_peers", "training")  # the ones inside a round: an ETA applies
PHASES = {
    "loading_model": "Loading the model",
    "generating": "Generating answers",
    "sharing": "Sharing with peers",
    "waiting_for_peers": "Waiting for peers",
    "training": "Training",
    "checkpoint": "Saving a checkpoint",
    "evaluating": "Evaluating on unseen tasks",
}
UNITS = {"generating": "tokens", "sharing": "groups", "waiting_for_peers": "usable peer groups",
         "training": "groups", "evaluating": "questions"}


def eta_seconds(recent_round_seconds: list[float], elapsed: float) -> float | None:
    """Seconds left in this round: the median of recent rounds minus what has passed (None without history)."""
    if not recent_round_seconds:
        return None
    return max(0.0, statistics.median(recent_round_seconds[-RECENT_ROUNDS:]) - elapsed)


def format_eta(seconds: float | None) -> str:
    if seconds is None:
        return ""
    if seconds < 5:
        return "finishing"
    if seconds < 90:
        return f"about {seconds:.0f} s left in this round"
    return f"about {seconds / 60:.0f} min left in this round"


def phase_text(progress: RoundProgress) -> str:
    text = PHASES.get(progress.phase, progress.phase.replace("_", " ").capitalize())
    if progress.detail and progress.phase == "waiting_for_peers":
        return f"{text}: {progress.detail}"  # the node's own count, with who has published: said once
    if progress.total > 0 and progress.phase in UNITS:
        text += f" ({progress.done}/{progress.total} {UNITS[progress.phase]})"
    return text


class RoundProgressView(QWidget):
    """Fed with the node's RoundProgress and RoundFinished events; idle (hidden bar) between runs."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.round_seconds: list[float] = []
        self.current: RoundProgress | None = None
        self.round_started: float | None = None  # when this round's first progress event arrived
        self.clock = time.monotonic  # the app's own clock: the node's event times may come from another machine
        self.label = ElidedLabel("")  # the wait's detail can be long: it is cut, never widens the window
        self.label.setObjectName("roundPhase")
        self.bar = QProgressBar()
        self.bar.setObjectName("roundProgress")
        self.bar.setTextVisible(False)
        self.bar.setMaximumWidth(220)
        self.bar.setMaximumHeight(12)
        self.eta = QLabel("")
        self.eta.setObjectName("roundEta")
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.label)
        layout.addWidget(self.bar)
        layout.addWidget(self.eta)
        layout.addStretch(1)
        self.timer = QTimer(self, interval=1000)
        self.timer.timeout.connect(lambda: self._update_eta(self.clock()))
        self.timer.start()
        self.idle()

    def load(self, metrics: list[RoundFinished]) -> None:
        self.round_seconds = [m.seconds_total for m in metrics][-RECENT_ROUNDS:]

    def on_progress(self, progress: RoundProgress) -> None:
        if self.current is None or progress.round != self.current.round:
            self.round_started = self.clock()
        self.current = progress
        self.label.setText(f"Round {progress.round}: {phase_text(progress)}")
        if progress.total > 0:
            self.bar.setRange(0, progress.total)
            self.bar.setValue(min(progress.done, progress.total))
        else:
            self.bar.setRange(0, 0)  # busy: no count is known
        self.bar.show()
        self._update_eta(self.clock())

    def on_round(self, metrics: RoundFinished) -> None:
        self.round_seconds = (self.round_seconds + [metrics.seconds_total])[-RECENT_ROUNDS:]
        self.current = None
        self.round_started = None
        self.label.setText(f"Round {metrics.round} done in {metrics.seconds_total:.0f} s; the next one starts")
        self.bar.setRange(0, 1)
        self.bar.setValue(0)
        self.eta.setText("")

    def idle(self, text: str = "") -> None:
        self.current = None
        self.round_started = None
        self.label.setText(text)
        self.bar.hide()
        self.eta.setText("")

    def _update_eta(self, now: float) -> None:
        if self.current is None or self.round_started is None or self.current.phase not in ROUND_PHASES:
            self.eta.setText("")
            return
        self.eta.setText(format_eta(eta_seconds(self.round_seconds, now - self.round_started)))
