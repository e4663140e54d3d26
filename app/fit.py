"""Will a model train on this computer? Read from the node's ``hardware --json`` answer, decoded into
:class:`node.api.HardwareReport` (the GUI never imports torch).

The label follows the computer's total memory (GPU memory with CUDA), so it does not flip between runs with what
happens to be free; when free RAM is short right now, a separate note says to close other programs.
"""

from __future__ import annotations

from node.api import Hardware, ModelFit
from node.units import format_bytes

TIGHT = 0.7  # past 70 % of the memory it is "tight": fragmentation and other programs eat the rest (node.models)


def budget(hardware: Hardware | None) -> int:
    return hardware.budget_bytes if hardware else 0


def label(required: int, available: int) -> str:
    if available <= 0:
        return "unknown"
    if required > available:
        return "won't fit"
    return "tight" if required > TIGHT * available else "fits"


def required(model: ModelFit, *, sequences_per_pass: int, max_new_tokens: int) -> int:
    """Peak bytes of one training step for this round shape (the node's estimate, linear in tokens per pass)."""
    if not model.bytes_per_token:
        return model.required_bytes  # an older node: only the figure for the recommended shape
    return model.base_bytes + model.bytes_per_token * sequences_per_pass * (model.prompt_tokens + max_new_tokens)


def free_ram_note(hardware: Hardware | None, need: int) -> str:
    """A note when the RAM free right now is less than the node needs (only where the model trains in RAM)."""
    if hardware is None or hardware.kind == "cuda":
        return ""
    free = hardware.available_ram_bytes
    if free and need > free:
        return (f"Only {format_bytes(free)} of RAM is free right now: close other programs before training, "
                f"or choose a smaller round.")
    return ""


def describe(model: ModelFit, hardware: Hardware | None, *, sequences_per_pass: int, max_new_tokens: int) -> tuple[str, str]:
    """(label, one line for the user) for ``model`` with this round shape."""
    need = required(model, sequences_per_pass=sequences_per_pass, max_new_tokens=max_new_tokens)
    total = budget(hardware)
    verdict = label(need, total)
    where = "GPU memory" if hardware and hardware.kind == "cuda" else "RAM"
    text = f"Needs about {format_bytes(need)} of {format_bytes(total)} {where}: {verdict}."
    note = free_ram_note(hardware, need)
    return verdict, f"{text} {note}".strip()
