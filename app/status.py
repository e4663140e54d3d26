"""The node's state as the user reads it, shared by the header, the tray and the status bar."""

from __future__ import annotations

LABELS = {
    "stopped": "Stopped",
    "starting": "Starting",
    "training": "Training",
    "waiting_for_peers": "Waiting for peers",
    "pausing": "Pausing after this round",
    "paused": "Paused",
    "stopping": "Stopping",
    "restarting": "Restarting",
    "crashed": "Crashed",
    "failed": "Error",
    "error": "Error",
    "finished": "Finished",
}
# Colour of the state badge; the text is always there as well, colour only helps scanning.
COLORS = {
    "training": "#009E73", "waiting_for_peers": "#E69F00", "starting": "#56B4E9", "restarting": "#E69F00",
    "pausing": "#E69F00", "paused": "#7f7f7f", "stopping": "#7f7f7f", "stopped": "#7f7f7f", "finished": "#0072B2",
    "crashed": "#D55E00", "failed": "#D55E00", "error": "#D55E00",
}
ACTIVE = {"starting", "training", "waiting_for_peers", "paused", "restarting"}
ENDED = {"stopped", "finished", "failed", "crashed"}  # no node process: Start is offered


def label(state: str, detail: str = "") -> str:
    text = LABELS.get(state, state.replace("_", " ").capitalize())
    return f"{text}: {detail}" if detail else text
