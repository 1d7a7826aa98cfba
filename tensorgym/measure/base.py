"""What every measurer offers: the ``Measurer`` protocol, its options, and the early-stop bound.

Three measurers implement it, each in its own module: ``LocalMeasurer`` (``measure.local``: this
machine's builder and worker processes), ``RayMeasurer`` (``measure.ray``: the devices of a Ray
cluster) and ``ReplayMeasurer`` (``dataset.replay``: answers recorded in a dataset). A tuning
session (``tensorgym.session``) holds one and never asks which it is.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Iterator, Optional, Protocol, Sequence, runtime_checkable

import numpy as np

from ..errors import TensorGymError
from ..space import Config
from ..workloads import Workload
from .result import MeasureResult


@dataclass(frozen=True)
class MeasureOptions:
    number: int = 0  # runs per sample; 0: enough for one sample to last min_repeat_ms
    repeat: int = 3  # samples
    min_repeat_ms: float = 5.0  # a sample lasts at least this long (runs per sample from the first)
    timeout: float = 10.0  # seconds allowed for one config's run phase in the worker
    # AutoTVM's default. The templates' builds take a median 0.13 s (C6); the rare one past 10 s
    # (20 s seen) is a huge unrolled kernel, and a batch waits for its slowest build.
    build_timeout: float = 10.0
    flush_cache: bool = False  # evict the last-level cache before every sample
    check: bool = True  # compare with NumPy before timing
    n_parallel: int = 0  # builder processes; 0: one per core this process may use
    seed: int = 0  # of the random inputs
    recycle_after: int = 500  # restart the worker after this many kernels (frees JIT memory)
    slow_run_s: float = 0.5  # a kernel whose checked run takes longer is timed by that run alone
    compile_cache: bool = True  # reuse binaries of sources compiled before on this machine
    # more samples, up to this many, while their spread exceeds target_cv (with early_stop: only
    # for a kernel that may beat the best, worker.contends)
    max_repeat: int = 10
    target_cv: float = 0.05  # coefficient of variation a measurement aims for
    stop_slower_than: float = 0.0  # seconds; stop timing once a kernel is surely slower (0: off)
    early_stop: float = 0.0  # ratio; also stop once slower than this x the batch's fastest (0: off)
    # stop a first run that outlasts its bound by killing the worker (an unchecked lower bound);
    # False: every kernel's first run ends and is checked, as a dataset wants
    stop_first_run: bool = True
    confirm_repeat: int = 10  # samples of a confirmation (``Measurer.confirm``)
    confirm_min_repeat_ms: float = 10.0  # and their least length
    calibrate: bool = True  # time a calibration kernel around each timing phase (drift)
    drift_tolerance: float = 0.2  # a larger change of its speed re-takes the phase


Features = Callable[[list[Config]], np.ndarray]


@runtime_checkable
class Measurer(Protocol):
    """Measures configs of one target on one device. ``measure`` never raises for a bad kernel
    (a failure is an error code in its result); it raises ``TargetUnavailableError`` when the
    target has no device here."""

    target: str  # the canonical target name
    options: MeasureOptions
    seconds: dict[str, float]  # wall seconds spent in "build" and "run" phases so far
    #: whether results are timed now (False: answers recorded earlier, nothing to re-time)
    timed: bool

    @property
    def device(self) -> str:
        """The fingerprint of the device measured on (what records are keyed by)."""

    def measure(self, workload: Workload, configs: Sequence[Config],
                stop_slower_than: float = 0.0, early_stop: float = 0.0) -> list[MeasureResult]:
        """One result per config, in order. ``stop_slower_than`` (seconds, 0: off) stops timing
        a kernel once even its fastest sample is slower (flagged ``early_stop``);
        ``early_stop`` (a ratio, 0: off) lowers that bound within the batch to that ratio times
        the batch's fastest median so far."""

    def measure_iter(self, workload: Workload, configs: Sequence[Config],
                     stop_slower_than: float = 0.0,
                     early_stop: float = 0.0) -> Iterator[tuple[int, MeasureResult]]:
        """``measure`` as ``(index into configs, result)`` pairs, as results come in."""

    def confirm(self, workload: Workload, result: MeasureResult) -> MeasureResult:
        """``result``'s config timed again with ``confirm_repeat`` samples, flagged
        ``confirmed``; its first samples kept in ``extra["screened_costs"]``."""

    def calibrations(self) -> int:
        """A mark for :meth:`slowdown`: how many calibration timings were taken so far."""

    def slowdown(self, since: int) -> Optional[float]:
        """How much slower than usual the machine ran since mark ``since`` (None: unknown)."""

    def reference_seconds(self, workload: Workload, config: Config) -> Optional[float]:
        """The reference schedule's seconds where the measurer knows them without timing
        (recorded answers); None: measure it."""

    def features(self, workload: Workload, configs: Sequence[Config], mode: str,
                 compute: Features) -> np.ndarray:
        """Feature rows of ``configs``: ``compute(configs)``, or rows the measurer keeps."""

    def reseed(self, seed: int) -> None:
        """Start the measurer's own random draws (a replay's) again from ``seed``."""

    def describe(self) -> dict:
        """How it measures, JSON-serializable (kept with each record)."""

    def close(self) -> None:
        """Stop its processes; it measures nothing afterwards."""


class MeasurerDefaults:
    """The protocol's methods that only some measurers give meaning to, with neutral answers:
    a measurer that times on hardware has no recorded rows, no reference it knows untimed, and
    no draws to reseed."""

    timed = True

    def measure_iter(self, workload: Workload, configs: Sequence[Config],
                     stop_slower_than: float = 0.0,
                     early_stop: float = 0.0) -> Iterator[tuple[int, MeasureResult]]:
        yield from enumerate(self.measure(workload, configs, stop_slower_than, early_stop))

    def calibrations(self) -> int:
        return 0

    def slowdown(self, since: int) -> Optional[float]:
        return None

    def reference_seconds(self, workload: Workload, config: Config) -> Optional[float]:
        return None

    def features(self, workload: Workload, configs: Sequence[Config], mode: str,
                 compute: Features) -> np.ndarray:
        return compute(list(configs))

    def reseed(self, seed: int) -> None:
        pass


def stop_bound(fixed: float, ratio: float, fastest: float) -> float:
    """Seconds past which a kernel's timing stops (0: never): the least of ``fixed`` (0: none)
    and ``ratio`` (0: off) times ``fastest`` (the batch's fastest median so far; inf: none)."""
    bounds = [fixed] if fixed > 0 else []
    if ratio > 0 and fastest < math.inf:
        bounds.append(ratio * fastest)
    return min(bounds, default=0.0)


def with_stop(options: MeasureOptions, stop_slower_than: float,
              early_stop: float) -> MeasureOptions:
    """``options`` with a call's early-stop bound and ratio, checked."""
    if stop_slower_than < 0 or not (early_stop == 0 or early_stop >= 1):
        raise TensorGymError(f"stop_slower_than must be >= 0 seconds and early_stop 0 (off) or a "
                             f"ratio >= 1, got {stop_slower_than!r} and {early_stop!r}")
    return replace(options, stop_slower_than=stop_slower_than, early_stop=early_stop)


def confirm_options(options: MeasureOptions) -> MeasureOptions:
    """The options of a confirmation: ``confirm_repeat`` samples of at least
    ``confirm_min_repeat_ms`` each."""
    return replace(options, repeat=options.confirm_repeat, max_repeat=options.confirm_repeat,
                   min_repeat_ms=max(options.min_repeat_ms, options.confirm_min_repeat_ms))


def confirmed(first: MeasureResult, again: MeasureResult) -> MeasureResult:
    """``again`` (a confirmation of ``first``) with ``first``'s build time, both run times, and
    ``first``'s samples in ``extra["screened_costs"]``."""
    return replace(again, build_time=first.build_time, run_time=first.run_time + again.run_time,
                   confirmed=True, extra={**again.extra, "screened_costs": first.costs})
