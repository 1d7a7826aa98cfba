"""Drift of the machine's speed: a fixed small kernel, timed before and after each timing phase.

These machines drift by up to 40% within half an hour (other load, clocks, thermals). Kernels
timed in one phase are compared with each other fairly, but a phase during which the calibration
kernel's speed changed was timed on a moving machine: the measurer takes it again.
"""
from __future__ import annotations

import time
from typing import Optional

from ..space import Config
from ..templates import default_config
from ..workloads import Workload, matmul

#: a phase that starts this soon after the last one ended starts from that one's end calibration
#: (a confirmation right after its batch): the machine had no time to move, and timing the
#: calibration kernel again cost ~25 ms per confirmation
RECENT_S = 1.0


def calibration_workload() -> Workload:
    return matmul(128, 128, 128, name="calibration")


def calibration_config(workload: Workload, target: str) -> Config:
    """The schedule the calibration kernel runs: the reference schedule. A fast one (a 256^3
    matmul's first micro-kernel seed) dipped with tuned kernels in a Zen 3 VM's slow moments
    (0.73x beside a tuned C6 kernel's 0.70x, where this one read 0.85x), but on that VM it also
    read slow at the start of most phases that follow a build (a vCPU waking from idle): 10-12
    phases of a 96-trial C6 tune counted as drifting and were timed again, against 2-4, and a
    256-trial tune cost 0.194 s per trial instead of 0.142 (``bench_trial_cost.py``)."""
    return default_config(workload, target)


class DriftMonitor:
    """The calibration times of the current phase, and every one seen (``history``)."""

    def __init__(self) -> None:
        self.history: list[float] = []  # every calibration timed
        self._start: Optional[float] = None
        self._end: Optional[float] = None
        self._last_end: tuple[float, float] = (-float("inf"), 0.0)  # (monotonic, seconds)

    def recent(self) -> Optional[float]:
        """The last phase's end calibration, if it ended within ``RECENT_S`` seconds."""
        at, seconds = self._last_end
        return seconds if seconds and time.monotonic() - at <= RECENT_S else None

    def phase_start(self, seconds: Optional[float], timed: bool = True) -> None:
        """``timed`` False: ``seconds`` is a recent calibration used again (``recent``)."""
        self._start, self._end = seconds, None
        if seconds and timed:
            self.history.append(seconds)

    def phase_end(self, seconds: Optional[float]) -> None:
        self._end = seconds
        if seconds:
            self.history.append(seconds)
            self._last_end = (time.monotonic(), seconds)

    def pop_phase(self) -> tuple[Optional[float], Optional[float]]:
        out = (self._start, self._end)
        self._start = self._end = None
        return out
