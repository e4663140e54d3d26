"""The setup wizard's page order as data, apart from Qt (after Electrum's wizard: a table of view -> next view).

Every step names the step after it as a function of the user's choices, and ``None`` marks the last step (the one
that shows Finish). The Qt wizard asks this table for its next page, so no page can lead back to an earlier one by
accident, and tests walk every path here without a screen.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from enum import IntEnum


class Step(IntEnum):
    """The wizard's pages; the values are the QWizard page ids."""

    WELCOME = 0
    IDENTITY = 1
    WALLET = 2
    HARDWARE = 3
    MODEL = 4
    SWARM = 5


@dataclass(frozen=True)
class Choices:
    """What the user chose that changes which pages follow."""

    wallet: bool = False  # the identity step's "Wallet login"


START = Step.WELCOME
FLOW: dict[Step, Callable[[Choices], Step | None]] = {
    Step.WELCOME: lambda _: Step.IDENTITY,
    Step.IDENTITY: lambda choices: Step.WALLET if choices.wallet else Step.HARDWARE,
    Step.WALLET: lambda _: Step.HARDWARE,
    Step.HARDWARE: lambda _: Step.MODEL,
    Step.MODEL: lambda _: Step.SWARM,
    Step.SWARM: lambda _: None,
}
# "Step n of STEP_COUNT" in the page titles: the wallet belongs to the identity step.
NUMBERS = {Step.IDENTITY: 1, Step.WALLET: 1, Step.HARDWARE: 2, Step.MODEL: 3, Step.SWARM: 4}
STEP_COUNT = max(NUMBERS.values())


def next_step(step: Step, choices: Choices) -> Step | None:
    """The step after ``step``, or None where ``step`` is the last (Finish)."""
    return FLOW[step](choices)


def path(choices: Choices) -> list[Step]:
    """The steps a user with these choices walks, from the first to the one with Finish."""
    steps = [START]
    while (step := next_step(steps[-1], choices)) is not None:
        if step in steps:
            raise ValueError(f"the wizard's flow goes back from {steps[-1].name} to {step.name}")
        steps.append(step)
    return steps


def every_choice() -> Iterator[Choices]:
    """Every combination of the choices, for walking each path."""
    names = [field.name for field in fields(Choices)]
    for values in itertools.product((False, True), repeat=len(names)):
        yield Choices(**dict(zip(names, values, strict=True)))
