"""Drift of the machine's speed: a fixed small kernel, timed before and after each timing phase,
and a speed probe, whose readings on a device are kept across runs.

These machines drift by up to 40% within half an hour (other load, clocks, thermals). Kernels
timed in one phase are compared with each other fairly, but a phase during which the calibration
kernel's speed changed was timed on a moving machine: the measurer takes it again.
A figure meant to stand for the kernel (the end of a tune, a comparison) asks the speed probe
whether the whole machine runs slower than it usually does (``Measurer.slowdown``).
"""
from __future__ import annotations

import hashlib
import json
import os
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import platformdirs

from ..workloads import Workload, matmul

if TYPE_CHECKING:
    from ..space import Config

#: a phase that starts this soon after the last one ended starts from that one's end calibration
#: (a confirmation right after its batch): the machine had no time to move, and timing the
#: calibration kernel again cost ~25 ms per confirmation
RECENT_S = 1.0


def calibration_workload() -> Workload:
    return matmul(128, 128, 128, name="calibration")


def calibration_config(workload: Workload, target: str) -> "Config":
    """The schedule the calibration kernel runs: the reference schedule. A fast one (a 256^3
    matmul's first micro-kernel seed) dipped with tuned kernels in a Zen 3 VM's slow moments
    (0.73x beside a tuned C6 kernel's 0.70x, where this one read 0.85x), but on that VM it also
    read slow at the start of most phases that follow a build (a vCPU waking from idle): 10-12
    phases of a 96-trial C6 tune counted as drifting and were timed again, against 2-4, and a
    256-trial tune cost 0.194 s per trial instead of 0.142 (``bench_trial_cost.py``)."""
    from ..templates import default_config  # noqa: PLC0415

    return default_config(workload, target)


#: the speed probe runs untimed this long before its samples. Without it, on a Zen 3 VM, it read
#: 1.05x its steady time after 50 ms idle and 1.08x after a build-like load on both cores; with
#: it 1.00x, and 1.36-1.41x in slow moments where a tuned matmul ran 1.5-1.6x slower (80 tries)
PROBE_WARM_MS = 20.0


def probe_workload() -> Workload:
    return matmul(256, 256, 256, name="speed probe")


def probe_config(workload: Workload, target: str) -> "Config":
    """The speed probe's schedule: on the CPU the template's first hand-derived micro-kernel
    (``seed_configs``), which keeps every core's vector units busy over 768 KB as tuned kernels
    do, and so slows with them (0.73x beside a tuned C6 kernel's 0.70x in a Zen 3 VM's slow
    stretch, where the calibration kernel read 0.85x). Other targets: the reference schedule."""
    from ..templates.seeds import seed_configs  # noqa: PLC0415  (loads LLVM on the CPU)

    return seed_configs(workload, target, max_seeds=2)[-1]


class SpeedLog:
    """A device's speed-probe readings (seconds per run), kept in a JSON file under the user
    cache dir across processes and runs, the newest ``keep``: ``usual`` is their median, the
    probe's time on this device on most days. Writes are atomic; two processes writing at once
    may lose one reading, never the file."""

    def __init__(self, device: str, directory: "str | os.PathLike | None" = None,
                 keep: int = 200) -> None:
        root = Path(directory) if directory else \
            Path(platformdirs.user_cache_dir("tensorgym")) / "speed"
        self.path = root / f"{hashlib.sha256(device.encode()).hexdigest()[:16]}.json"
        self.device, self.keep = device, keep

    def readings(self) -> list[float]:
        try:
            doc = json.loads(self.path.read_text())
            return [float(s) for _, s in doc["readings"] if s > 0] \
                if doc.get("device") == self.device else []
        except (OSError, ValueError, KeyError, TypeError):
            return []  # absent or unreadable: start afresh

    def usual(self, least: int = 5) -> Optional[float]:
        """The median reading, or None with fewer than ``least``."""
        r = self.readings()
        return statistics.median(r) if len(r) >= least else None

    def add(self, seconds: float) -> None:
        try:
            doc = json.loads(self.path.read_text())
            readings = doc["readings"] if doc.get("device") == self.device else []
        except (OSError, ValueError, KeyError, TypeError):
            readings = []
        readings = (readings + [[time.time(), seconds]])[-self.keep:]
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            tmp = self.path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"device": self.device, "readings": readings}))
            os.replace(tmp, self.path)
        except OSError:
            pass  # a log that cannot be written only leaves slow moments unseen


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
