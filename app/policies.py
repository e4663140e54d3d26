"""Automatic pauses: on battery, and while the user is at the computer (both opt-in, checked every few seconds)."""

from __future__ import annotations

from collections.abc import Callable

import psutil
from PySide6.QtCore import QObject, QTimer, Signal

from app.idle import idle_seconds
from node.config import DesktopSettings

BATTERY = "battery"
USER_ACTIVE = "user_active"


def on_battery() -> bool:
    battery = psutil.sensors_battery() if hasattr(psutil, "sensors_battery") else None
    return battery is not None and not battery.power_plugged


class PausePolicies(QObject):
    """Emits ``hold(reason, on)``; the supervisor pauses while any reason holds."""

    hold = Signal(str, bool)

    def __init__(self, settings: DesktopSettings, *, interval_ms: int = 5000,
                 battery: Callable[[], bool] = on_battery, idle: Callable[[], float | None] = idle_seconds) -> None:
        super().__init__()
        self.settings = settings
        self._battery = battery
        self._idle = idle
        self.active: dict[str, bool] = {BATTERY: False, USER_ACTIVE: False}
        self.timer = QTimer(self, interval=interval_ms)
        self.timer.timeout.connect(self.check)
        self.timer.start()

    def idle_supported(self) -> bool:
        return self._idle() is not None

    def apply(self, settings: DesktopSettings) -> None:
        self.settings = settings
        self.check()

    def check(self) -> None:
        self._set(BATTERY, self.settings.pause_on_battery and self._battery())
        idle = self._idle() if self.settings.pause_when_user_active else None
        self._set(USER_ACTIVE, idle is not None and idle < self.settings.idle_minutes * 60)

    def _set(self, reason: str, on: bool) -> None:
        if self.active[reason] != on:
            self.active[reason] = on
            self.hold.emit(reason, on)
