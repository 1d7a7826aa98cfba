"""Drift of the machine's speed: a fixed small kernel, timed before and after each timing phase.

These machines drift by up to 40% within half an hour (other load, clocks, thermals). Kernels
timed in one phase are compared with each other fairly, but a phase during which the calibration
kernel's speed changed was timed on a moving machine: the measurer takes it again.
"""
from __future__ import annotations

from typing import Optional

from ..workloads import Workload, matmul


def calibration_workload() -> Workload:
    return matmul(128, 128, 128, name="calibration")


class DriftMonitor:
    """The calibration times of the current phase, and every one seen (``history``)."""

    def __init__(self) -> None:
        self.history: list[float] = []
        self._start: Optional[float] = None
        self._end: Optional[float] = None

    def phase_start(self, seconds: Optional[float]) -> None:
        self._start, self._end = seconds, None
        if seconds:
            self.history.append(seconds)

    def phase_end(self, seconds: Optional[float]) -> None:
        self._end = seconds
        if seconds:
            self.history.append(seconds)

    def pop_phase(self) -> tuple[Optional[float], Optional[float]]:
        out = (self._start, self._end)
        self._start = self._end = None
        return out
