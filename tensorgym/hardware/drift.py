"""Drift of the machine's speed: a fixed small kernel, timed before and after each timing phase.

These machines drift by up to 40% within half an hour (other load, clocks, thermals). Kernels
timed in one phase are compared with each other fairly, but a phase during which the calibration
kernel's speed changed was timed on a moving machine: the measurer takes it again.
"""
from __future__ import annotations

import time
from typing import TYPE_CHECKING, Optional

from ..workloads import Workload, matmul

if TYPE_CHECKING:
    from ..space import Config

#: a phase that starts this soon after the last one ended starts from that one's end calibration
#: (a confirmation right after its batch): the machine had no time to move, and timing the
#: calibration kernel again cost ~25 ms per confirmation
RECENT_S = 1.0


def calibration_workload() -> Workload:
    return matmul(256, 256, 256, name="calibration")


def calibration_config(workload: Workload, target: str) -> "Config":
    """The schedule the calibration kernel runs: on the CPU the template's first hand-derived
    micro-kernel (``seed_configs``), which keeps every core's vector units busy over 768 KB, as
    tuned kernels do. The reference schedule of a 128^3 matmul, used before, runs at a third of
    their speed, mostly thread start-up, and on a Zen 3 VM it dipped by 15% in a 25-second stretch
    where a tuned C6 kernel ran at 0.70x its speed; this one dipped by 27%, with it
    (``benchmarks/bench_speed_states.py``). Other targets: the reference schedule."""
    from ..templates.seeds import seed_configs  # noqa: PLC0415  (loads LLVM on the CPU)

    return seed_configs(workload, target, max_seeds=2)[-1]


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
