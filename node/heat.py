"""Temperatures of the CPU and GPU where the system lets a program read them, and a guard that slows training
down above a threshold and lets it run again only once the machine has cooled below a lower one (hysteresis, so a
fan's hum does not start and stop with every round).

Sources: ``psutil.sensors_temperatures`` (Linux and FreeBSD: coretemp, k10temp, acpitz, ...), NVIDIA's NVML through
``pynvml`` when installed, else ``nvidia-smi`` when on the PATH. macOS and Windows offer no CPU temperature to
programs without administrator rights or a vendor driver, and virtual machines usually none at all: then
:func:`read_temperatures` says so in words (:attr:`Reading.note`), and the guard never slows anything down.
"""

from __future__ import annotations

import logging
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

NVIDIA_SMI_TIMEOUT_S = 5.0
# psutil's chip names that report the CPU package or its cores; others (NVMe, Wi-Fi, battery) are not the CPU
CPU_CHIPS = ("coretemp", "k10temp", "zenpower", "cpu_thermal", "cpu-thermal", "acpitz", "soc_thermal")


@dataclass(frozen=True)
class Reading:
    celsius: dict[str, float] = field(default_factory=dict)  # "cpu", "gpu0", ... -> the hottest sensor of each
    note: str = ""  # why nothing could be read, in plain words

    @property
    def hottest(self) -> float | None:
        return max(self.celsius.values()) if self.celsius else None


def read_temperatures() -> Reading:
    celsius: dict[str, float] = {}
    celsius.update(_cpu())
    celsius.update(_nvidia())
    if celsius:
        return Reading(celsius)
    if sys.platform == "darwin":
        note = "macOS does not let programs read the CPU temperature without administrator rights"
    elif sys.platform == "win32":
        note = "Windows does not let programs read the CPU temperature without a vendor driver"
    else:
        note = "this computer exposes no temperature sensors (usual in virtual machines and containers)"
    return Reading(note=note)


def _cpu() -> dict[str, float]:
    import psutil

    sensors = getattr(psutil, "sensors_temperatures", None)
    if sensors is None:
        return {}
    try:
        chips = sensors()
    except (OSError, RuntimeError) as exc:
        log.debug("no CPU temperatures: %s", exc)
        return {}
    values = [entry.current for name, entries in chips.items() if name.lower() in CPU_CHIPS
              for entry in entries if entry.current and 0 < entry.current < 150]
    return {"cpu": max(values)} if values else {}


def _nvidia() -> dict[str, float]:
    try:
        import pynvml
    except ImportError:
        pynvml = None
    if pynvml is not None:
        try:
            pynvml.nvmlInit()
            return {f"gpu{i}": float(pynvml.nvmlDeviceGetTemperature(pynvml.nvmlDeviceGetHandleByIndex(i),
                                                                      pynvml.NVML_TEMPERATURE_GPU))
                    for i in range(pynvml.nvmlDeviceGetCount())}
        except Exception as exc:  # noqa: BLE001 - NVML's errors are its own exception tree
            log.debug("NVML gave no temperatures: %s", exc)
    tool = shutil.which("nvidia-smi")
    if tool is None:
        return {}
    try:
        out = subprocess.run([tool, "--query-gpu=temperature.gpu", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=NVIDIA_SMI_TIMEOUT_S, check=True).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        log.debug("nvidia-smi gave no temperatures: %s", exc)
        return {}
    return {f"gpu{i}": float(line) for i, line in enumerate(out.split()) if line.replace(".", "", 1).isdigit()}


class HeatGuard:
    """Hot above ``max_celsius``; cool again only below ``resume_celsius``. Nothing readable = never hot."""

    def __init__(self, max_celsius: float | None, resume_celsius: float,
                 read: Callable[[], Reading] = read_temperatures) -> None:
        self.max_celsius = max_celsius
        self.resume_celsius = resume_celsius
        self.read = read
        self.hot = False
        self.last = Reading()

    def check(self) -> bool:
        self.last = self.read()
        hottest = self.last.hottest
        if self.max_celsius is None or hottest is None:
            self.hot = False
        elif hottest > self.max_celsius:
            self.hot = True
        elif hottest < self.resume_celsius:
            self.hot = False
        return self.hot
