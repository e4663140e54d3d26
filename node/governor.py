"""How much of the computer training may use right now: the schedule's profile (node.schedule) and the heat guard
(node.heat) combined, applied to torch's threads through a callback, and told through typed events.

The runner asks :meth:`ResourceGovernor.hold` before every round: it returns at once at full speed, waits while the
schedule pauses training (waking at the profile's end, or earlier to notice a stop), and waits ``cooldown_s``
between rounds while the machine is too hot. The clock, the wait and the sensors are injected, so tests need no
sleeping and no hot laptop.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

from node.events import Event, ResourceLimitChanged, TemperaturesRead
from node.heat import HeatGuard
from node.schedule import Limit, Profile, describe, limit_at

MAX_WAIT_S = 60.0  # a paused node looks again at least this often (a clock change, a new day)


class ResourceGovernor:
    def __init__(self, profiles: Sequence[Profile], heat: HeatGuard | None, *, threads_when_hot: int,
                 cooldown_s: float, set_threads: Callable[[int | None], None], emit: Callable[[Event], None],
                 now: Callable[[], datetime] = datetime.now) -> None:
        self.profiles = tuple(profiles)
        self.heat = heat
        self.threads_when_hot = threads_when_hot
        self.cooldown_s = cooldown_s
        self.set_threads = set_threads
        self.emit = emit
        self.now = now
        self.limit = Limit()
        self.summary = ""
        self._told: tuple | None = None
        self._threads: int | None = None
        self._temperatures: tuple | None = None

    @property
    def hot(self) -> bool:
        return self.heat is not None and self.heat.hot

    def check(self) -> Limit:
        """The limit now; applies a change of threads and tells it (and changed temperatures) as events."""
        now = self.now()
        scheduled = limit_at(self.profiles, now) if self.profiles else Limit()
        hot = self._check_heat()
        threads = [t for t in (scheduled.threads, self.threads_when_hot if hot else None) if t is not None]
        limit = Limit(threads=None if scheduled.paused or not threads else min(threads), paused=scheduled.paused,
                      until=scheduled.until if scheduled.limited else None)
        reason = " and ".join(r for r, on in (("schedule", scheduled.limited), ("heat", hot)) if on)
        summary = describe(limit, reason=reason, now=now)
        if hot and self.heat is not None:
            degrees = ", ".join(f"{name.upper()} {value:.0f} °C" for name, value in self.heat.last.celsius.items())
            summary = f"{summary}: {degrees}" + (f", {self.cooldown_s:g} s pause between rounds"
                                                 if self.cooldown_s and not limit.paused else "")
        if limit.threads != self._threads:
            self._threads = limit.threads
            self.set_threads(limit.threads)
        told = (reason, limit.threads, limit.paused, limit.until)
        if told != self._told:
            self._told = told
            self.emit(ResourceLimitChanged(reason=reason, threads=limit.threads, paused=limit.paused,
                                           until=limit.until.timestamp() if limit.until else None, summary=summary))
        self.limit, self.summary = limit, summary
        return limit

    def hold(self, wait: Callable[[float], bool]) -> bool:
        """After :meth:`check`, wait as its limit asks before the next round; ``wait(seconds)`` returns True when
        the node stops, and so does this."""
        limit = self.limit
        while limit.paused:
            left = (limit.until - self.now()).total_seconds() if limit.until else MAX_WAIT_S
            if wait(min(max(left, 1.0), MAX_WAIT_S)):
                return True
            limit = self.check()
        if self.hot and self.cooldown_s:
            return wait(self.cooldown_s)
        return False

    def _check_heat(self) -> bool:
        if self.heat is None:
            return False
        hot = self.heat.check()
        reading = self.heat.last
        shown = (tuple(sorted((k, round(v)) for k, v in reading.celsius.items())), reading.note, hot)
        if shown != self._temperatures:
            self._temperatures = shown
            self.emit(TemperaturesRead(celsius=dict(reading.celsius), note=reading.note, hot=hot))
        return hot
