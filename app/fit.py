"""Will a model train on this computer? Read from the node's ``hardware --json`` answer, decoded into
:class:`node.api.HardwareReport` (the GUI never imports torch).

The label follows the computer's total memory (GPU memory with CUDA), so it does not flip between runs with what
happens to be free; when free RAM is short right now, a separate note says to close other programs.
"""

from __future__ import annotations

from node.api import Hardware, ModelFit
from node.units import format_bytes

TIGHT = 0.7  # past 70 % of the memory it is "tight": fragmentation and other programs eat the rest (node.learning.models)


def budget(hardware: Hardware | None) -> int:
    return hardware.budget_bytes if hardware else 0


def label(required: int, available: int) -> str:
    if available <= 0:
        return "unknown"
    if required > available:
        return "won't fit"
    return "tight" if required > TIGHT * available else "fits"


def required(model: ModelFit, *, sequences_per_pass: int, max_new_tokens: int, reference: bool = False) -> int:
    """Peak bytes of one training step for this round shape (the node's estimate: linear in tokens per pass, above a
    floor no round shape changes), with ``reference`` plus the copy of the starting weights that the KL's reference
    model (``training.beta`` > 0) or the pull toward the start (``training.anchor_decay`` > 0) keeps, one for both."""
    extra = model.reference_bytes if reference else 0
    if not model.bytes_per_token:
        return model.required_bytes + extra  # an older node: only the figure for the recommended shape
    linear = model.base_bytes + model.bytes_per_token * sequences_per_pass * (model.prompt_tokens + max_new_tokens)
    return max(model.floor_bytes, linear) + extra


def free_ram_note(hardware: Hardware | None, need: int) -> str:
    """A note when the RAM free right now is less than the node needs (only where the model trains in RAM, and only
    where it fits the computer's memory at all: closing programs cannot make room that is not there)."""
    if hardware is None or hardware.kind == "cuda" or need > budget(hardware):
        return ""
    free = hardware.available_ram_bytes
    if free and need > free:
        return (f"Only {format_bytes(free)} of RAM is free right now: close other programs before training, "
                f"or choose a smaller round.")
    return ""


def describe(model: ModelFit, hardware: Hardware | None, *, sequences_per_pass: int, max_new_tokens: int,
             reference: bool = False) -> tuple[str, str]:
    """(label, one line for the user) for ``model`` with this round shape."""
    need = required(model, sequences_per_pass=sequences_per_pass, max_new_tokens=max_new_tokens, reference=reference)
    total = budget(hardware)
    verdict = label(need, total)
    where = "GPU memory" if hardware and hardware.kind == "cuda" else "RAM"
    text = f"Needs about {format_bytes(need)} of {format_bytes(total)} {where}: {verdict}."
    if reference and model.reference_bytes:
        # The settings that keep it are in the config file only, so say which they are.
        text += (f" {format_bytes(model.reference_bytes)} of it is a copy of the starting weights, kept for beta or "
                 "anchor_decay in the config file.")
    note = free_ram_note(hardware, need)
    return verdict, f"{text} {note}".strip()


def what_fits(model: ModelFit, others: list[ModelFit], hardware: Hardware | None, *, groups_per_pass: int,
              generations: int, max_new_tokens: int, reference: bool = False) -> str:
    """For a setup that won't fit: the changes that would, in Settings' words ("" when none is known)."""
    total = budget(hardware)

    def need(candidate: ModelFit, g: int, tokens: int, copy: bool = reference) -> int:
        return required(candidate, sequences_per_pass=groups_per_pass * g, max_new_tokens=tokens, reference=copy)

    def fits(candidate: ModelFit, g: int, tokens: int, copy: bool = reference) -> bool:
        return label(need(candidate, g, tokens, copy), total) != "won't fit"

    ways = []
    if model.bytes_per_token:  # an older node gives no figures for other round shapes
        g = next((g for g in range(generations - 1, 1, -1) if fits(model, g, max_new_tokens)), None)
        if g is not None:
            ways.append(f"{g} or fewer completions per question")
        tokens = next((t for t in range(max_new_tokens - 16, 15, -16) if fits(model, generations, t)), None)
        if tokens is not None:
            ways.append(f"max tokens {tokens} or fewer")
    smaller = [m for m in others if m.id != model.id and fits(m, generations, max_new_tokens)]
    if smaller:  # the one that needs the most of those that fit: the strongest this computer trains
        best = max(smaller, key=lambda m: need(m, generations, max_new_tokens))
        ways.append(f"the model {best.name}")
    if reference and fits(model, generations, max_new_tokens, copy=False):
        without = ("beta = 0 and anchor_decay = 0 in the config file: this round fits without the copy of the "
                   "starting weights they keep.")
        return f"Choose {_either(ways)}, or set {without}" if ways else f"Set {without}"
    if not ways:
        return "Choose a smaller model or a smaller round."
    return "Choose " + _either(ways) + "."


def _either(ways: list[str]) -> str:
    return ways[0] if len(ways) == 1 else ", ".join(ways[:-1]) + " or " + ways[-1]
