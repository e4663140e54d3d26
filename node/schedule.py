"""Resource profiles by time of day and day of week ("1 thread 9-18 h on weekdays, paused at weekends"), and the
limit they put on training right now, with how long it holds.

A profile names days (``mon-fri``, ``sat,sun``, ``daily``), a local start and end time (``09:00``-``18:00``; an end
before the start runs past midnight, ``24:00`` is the end of the day) and what applies meanwhile: a number of CPU
threads, or a pause. Outside every profile the node uses its configured threads. Where profiles overlap, the most
restrictive wins (paused, then the fewest threads). Everything here is pure: callers pass the local time, so tests
need no clock and no sleeping.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
DAY_ALIASES = {"daily": "mon-sun", "weekdays": "mon-fri", "weekends": "sat-sun", "weekend": "sat-sun"}
_TIME = re.compile(r"^([01]?\d|2[0-3]):([0-5]\d)$|^24:00$")
HORIZON_DAYS = 8  # a week of boundaries and a day more: every profile starts or ends within it


def parse_days(text: str) -> frozenset[int]:
    """``"mon-fri"``, ``"sat,sun"``, ``"daily"`` -> weekday numbers (Monday = 0); ValueError says what is accepted."""
    days: set[int] = set()
    for part in (p.strip().lower() for p in DAY_ALIASES.get(text.strip().lower(), text).split(",")):
        part = DAY_ALIASES.get(part, part)
        first, _, last = part.partition("-")
        if first not in DAYS or (last and last not in DAYS):
            raise ValueError(f"days {text!r}: use day names {', '.join(DAYS)}, ranges like mon-fri, lists like "
                             "sat,sun, or daily / weekdays / weekends")
        start, end = DAYS.index(first), DAYS.index(last or first)
        span = (end - start) % 7
        days.update((start + offset) % 7 for offset in range(span + 1))
    return frozenset(days)


def parse_time(text: str) -> int:
    """``"09:30"`` -> minutes after midnight (``"24:00"`` = 1440)."""
    if not _TIME.match(text.strip()):
        raise ValueError(f"time {text!r}: use 24-hour HH:MM, like 09:00 or 18:30 (24:00 = midnight at the end)")
    hours, minutes = text.strip().split(":")
    return int(hours) * 60 + int(minutes)


@dataclass(frozen=True)
class Profile:
    days: frozenset[int]
    start: int  # minutes after local midnight
    end: int  # equal to start: the whole day; before it: runs past midnight into the next day
    threads: int | None = None  # None: the configured threads
    paused: bool = False

    def covers(self, moment: datetime) -> bool:
        minute = moment.hour * 60 + moment.minute
        today, yesterday = moment.weekday(), (moment.weekday() - 1) % 7
        if self.start < self.end:
            return today in self.days and self.start <= minute < self.end
        if self.start == self.end:
            return today in self.days
        # past midnight: the evening part belongs to its own day, the morning part to the day before
        return (today in self.days and minute >= self.start) or (yesterday in self.days and minute < self.end)


@dataclass(frozen=True)
class Limit:
    """What applies now: ``threads`` None = the configured ones; ``until`` when this limit changes (None: never)."""

    threads: int | None = None
    paused: bool = False
    until: datetime | None = None

    @property
    def limited(self) -> bool:
        return self.paused or self.threads is not None


def limit_at(profiles: Sequence[Profile], moment: datetime) -> Limit:
    """The limit ``profiles`` put on training at local time ``moment`` and the moment it next changes."""
    here = _combined(profiles, moment)
    return Limit(threads=here[1], paused=here[0], until=_next_change(profiles, moment, here))


def _combined(profiles: Sequence[Profile], moment: datetime) -> tuple[bool, int | None]:
    active = [p for p in profiles if p.covers(moment)]
    paused = any(p.paused for p in active)
    threads = [p.threads for p in active if p.threads is not None and not p.paused]
    return paused, (None if paused or not threads else min(threads))


def _next_change(profiles: Sequence[Profile], moment: datetime, here: tuple[bool, int | None]) -> datetime | None:
    midnight = moment.replace(hour=0, minute=0, second=0, microsecond=0)
    boundaries = sorted({
        midnight + timedelta(days=day, minutes=minute)
        for day in range(HORIZON_DAYS) for p in profiles for minute in (p.start, p.end)
    } | {midnight + timedelta(days=day) for day in range(1, HORIZON_DAYS)})
    for boundary in boundaries:
        if boundary > moment and _combined(profiles, boundary) != here:
            return boundary
    return None


def describe(limit: Limit, *, reason: str, now: datetime) -> str:
    """One line for the header: ``"slowed down by schedule until 18:00 (1 thread)"``; "" without a limit."""
    if not limit.limited:
        return ""
    what = "paused" if limit.paused else "slowed down"
    until = ""
    if limit.until is not None:
        until = f" until {limit.until:%H:%M}" if limit.until - now < timedelta(hours=20) else \
            f" until {limit.until:%a %H:%M}"
    threads = "" if limit.paused else f" ({limit.threads} thread{'s' if limit.threads != 1 else ''})"
    return f"{what} by {reason}{until}{threads}"
