"""Measurement side by side: the one place configs are re-measured against each other and the
vendor library. The CLI, the leaderboard and every benchmark script use it.

These machines drift by up to 40% within half an hour, so figures measured at different times do
not compare: ``remeasure`` times every config and the vendor op once per round, in an order that
rotates each round, and reports medians over the rounds' samples.

    c = remeasure("conv2d-C6", "cpu", {"best": best, "reference": ref}, rounds=3)
    c.gflops("best"), c.speedup("best"), c.speedup("best", over="reference")
"""
from __future__ import annotations

import json
import math
import statistics
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Iterator, Mapping, Sequence, Union

from tensorgym.measure import LocalMeasurer, MeasureOptions, Measurer
from tensorgym.measure.result import spread
from tensorgym.processes.host import DeviceLock
from tensorgym.hardware.target import get_target
from tensorgym.space import Config
from tensorgym.templates import space_for
from tensorgym.workloads import Workload, get_workload

from .harness import device_threads, runtime_options
from .results import VendorResult
from .vendor import VendorTimer

VENDOR = "vendor"  # the vendor library's name in a Comparison
ConfigLike = Union[Config, str, dict]  # a Config, or its JSON (text or parsed)


def remeasure_options(base: "MeasureOptions | None" = None) -> MeasureOptions:
    """``base`` (its timeouts, builders, inputs) with sampling fit for re-measuring: 5 samples of
    at least 10 ms, up to 15 while their spread exceeds 3%, the calibration kernel on (a phase
    timed while the machine's speed moved is taken again), no early stop. Many short samples and
    their median, not a few long ones: on shared cores a long sample always includes other
    processes' time slices, a short one often does not."""
    return replace(base or MeasureOptions(), repeat=5, max_repeat=15, target_cv=0.03,
                   min_repeat_ms=10.0, calibrate=True, stop_slower_than=0.0)


@dataclass
class Comparison:
    """Configs (by name) and the vendor library (``VENDOR``) timed in interleaved rounds.

    ``order[r]``: the names in the order round ``r`` timed them; ``samples[name]``: per round
    that timed ``name``, its seconds-per-run samples (empty for the round it failed in). A name
    that failed is in ``errors`` and not timed in later rounds."""

    workload: str  # key
    target: str
    flops: int
    names: list[str]  # the configs' names, in the order given (the vendor not included)
    samples: dict[str, list[list[float]]] = field(default_factory=dict)
    order: list[list[str]] = field(default_factory=list)
    errors: dict[str, str] = field(default_factory=dict)
    # the calibration kernel's speed after / before, for rounds the machine's speed moved in
    drift: dict[str, list[float]] = field(default_factory=dict)
    vendor_library: str = ""
    vendor_skipped: str = ""  # why the vendor library was not timed ("" if it was)
    # the calibration kernel's slowdown (``Measurer.slowdown``) in each round set aside
    slow_rounds: list[float] = field(default_factory=list)

    def costs(self, name: str) -> list[float]:
        """Every sample of ``name``, all rounds."""
        return [c for r in self.samples.get(name, []) for c in r]

    def median(self, name: str) -> float:
        """Seconds per run: the median of every sample (inf when there is none)."""
        costs = self.costs(name)
        return statistics.median(costs) if costs else math.inf

    def gflops(self, name: str) -> float:
        t = self.median(name)
        return self.flops / t / 1e9 if math.isfinite(t) and t > 0 else 0.0

    def speedup(self, name: str, over: str = VENDOR) -> "float | None":
        """How many times faster ``name`` runs than ``over`` (None if either has no time)."""
        a, b = self.median(name), self.median(over)
        return b / a if math.isfinite(a) and math.isfinite(b) else None

    def spread(self, name: str) -> float:
        """Coefficient of variation of every sample of ``name``, all rounds."""
        return spread(self.costs(name))

    def round_medians(self, name: str) -> list[float]:
        """The median of each round (how they move shows the machine's drift)."""
        return [statistics.median(r) for r in self.samples.get(name, []) if r]

    def vendor_result(self) -> VendorResult:
        return VendorResult(self.workload, self.target, self.vendor_library or "none",
                            self.gflops(VENDOR), self.costs(VENDOR), self.vendor_skipped)


def remeasure(workload: "Workload | str", target: str,
              configs: "Mapping[str, ConfigLike] | Sequence[ConfigLike]", rounds: int = 3,
              measurer: "Measurer | None" = None, vendor: bool = True, threads: int = 0,
              options: "MeasureOptions | None" = None, slow: float = 0.2,
              slow_retakes: int = 2, slow_wait: float = 2.0) -> Comparison:
    """Time every config and (``vendor``) the vendor op once per round, for ``rounds`` rounds;
    round ``r`` starts at item ``r % n`` of [configs..., vendor] and wraps around. Configs go
    through ``measurer`` (default: a new one for ``target`` with ``threads``), one config per
    call, with ``options`` (default: ``remeasure_options`` of the measurer's). The vendor op is
    sampled by the same rule (``repeat`` samples of at least ``min_repeat_ms``, more up to
    ``max_repeat`` while their spread exceeds ``target_cv``), holding the device's timing lock,
    with the kernels' CPU thread count (``threads``, else the measurer's). A sequence of configs
    is named "0", "1", ...

    A round during which the calibration kernel ran more than ``slow`` slower than it usually
    did for the measurer (``Measurer.slowdown``: a tune's measurer brings the tune's history) is
    set aside whole, vendor included, and taken again after ``slow_wait`` seconds, at most
    ``slow_retakes`` times (``slow_rounds``): on a 2-core VM whole seconds run at two thirds of
    the machine's speed, and a round caught in one would weigh on one side only."""
    w = get_workload(workload) if isinstance(workload, str) else workload
    kind = get_target(target)
    target = kind.kind
    named = dict(configs) if isinstance(configs, Mapping) else \
        {str(i): c for i, c in enumerate(configs)}
    if VENDOR in named:
        raise ValueError(f"{VENDOR!r} names the vendor library, not a config")
    space = space_for(w, target)
    todo = {k: c if isinstance(c, Config) else
            space.from_json(c if isinstance(c, str) else json.dumps(c)) for k, c in named.items()}
    out = Comparison(w.key, target, w.flops, list(todo))
    own = measurer is None
    m = measurer or LocalMeasurer(target, remeasure_options(), **runtime_options(target, threads))
    lock = DeviceLock(kind.timer_key(m.runtime_kwargs))
    try:
        opts = options or remeasure_options(m.options)
        timer = None
        if vendor:
            vendor_threads = threads or device_threads(m.device) or None
            with lock.exclusive():  # its warm-up and calibration are timed runs too
                timer = VendorTimer(w, target, vendor_threads, opts.min_repeat_ms / 1e3)
            out.vendor_library, out.vendor_skipped = timer.library, timer.skipped
        items = list(todo) + ([VENDOR] if timer and not timer.skipped else [])
        with _options(m, opts):
            r = 0
            while r < (rounds if items else 0):
                k = r % len(items)
                order = [n for n in items[k:] + items[:k] if n not in out.errors]
                mark = m.calibrations()
                taken = {name: _vendor(timer, lock, opts) if name == VENDOR else
                         _config(m, w, todo[name], name, out) for name in order}
                slowdown = m.slowdown(mark)
                if slowdown is not None and slowdown > 1.0 + slow and \
                        len(out.slow_rounds) < slow_retakes:
                    out.slow_rounds.append(slowdown)
                    time.sleep(slow_wait)
                    continue
                out.order.append(order)
                for name in order:
                    out.samples.setdefault(name, []).append(taken[name])
                r += 1
    finally:
        lock.close()
        if own:
            m.close()
    return out


def _config(m: Measurer, w: Workload, config: Config, name: str,
            out: Comparison) -> list[float]:
    r = m.measure(w, [config])[0]
    if not r.ok:
        out.errors[name] = f"{r.error.name}: {r.error_msg}"
        return []
    if r.drift is not None:
        out.drift.setdefault(name, []).append(r.drift)
    return list(r.costs)


def _vendor(timer: VendorTimer, lock: DeviceLock, opts: MeasureOptions) -> list[float]:
    with lock.exclusive():  # no kernel of another tensorgym process is timed meanwhile
        return timer.sample(opts.repeat, opts.max_repeat, opts.target_cv)


@contextmanager
def _options(m: Measurer, options: MeasureOptions) -> Iterator[None]:
    """``m`` measures with ``options`` inside (a shared measurer keeps its own outside)."""
    saved, m.options = m.options, options
    try:
        yield
    finally:
        m.options = saved


__all__ = ["VENDOR", "Comparison", "remeasure",
           "remeasure_options"]
