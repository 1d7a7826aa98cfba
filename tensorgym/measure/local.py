"""Build configs (in parallel processes) and time them (one at a time, in an isolated worker).

Protocol per config: lower -> render -> compile in a builder process; then in the worker: load,
run once on random inputs and compare with NumPy (a wrong result is an error, never a time),
pick ``number`` so one sample lasts at least ``min_repeat_ms``, and take ``repeat`` samples. A
kernel whose first run already takes ``slow_run_s`` is reported with that one sample: it is far
from the best anyway, and timing it again would cost a tuner seconds per trial. A bound
(``stop_slower_than``, lowered within a batch by ``early_stop`` times the batch's fastest so far)
stops the timing of a kernel that has surely lost: flagged ``early_stop``, fewer samples;
with ``early_stop`` = r, the samples past ``repeat`` go only to a kernel whose fastest sample beats
bound / r, the best it must beat (``worker.contends``).
A first run that goes on long past the bound (``worker.first_run_limit``) is stopped by killing
the worker: one sample, the seconds it had run (a lower bound), flagged ``unchecked``
too, since its output was never compared with NumPy.
The statistic reported is the median of the samples (``MeasureResult.median``); every sample is
kept in ``costs``.
"""
from __future__ import annotations

import math
import statistics
import time
import warnings
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import asdict, replace
from typing import Any, Iterator, Optional, Sequence

import numpy as np

from ..errors import ErrorCode, LoweringBugWarning
from ..features import extract
from ..hardware.target import get_target
from ..loopast import Program
from ..processes.child import Child, ChildDied, ChildError, ChildPool, ChildTimeout
from ..processes.host import DeviceLock, available_cpus
from ..processes.zygote import Zygote
from ..processes.zygote import supported as zygote_supported
from ..space import Config
from ..workloads import Workload
from .base import (Features, MeasureOptions, MeasurerDefaults, confirm_options, confirmed,
                   stop_bound, with_stop)
from .build import Builder, compile_error
from .drift import DriftMonitor, calibration_config, calibration_workload
from .result import BuildResult, MeasureResult, RunResult
from .worker import KernelWorker, first_run_limit, worker_env


#: builds kept for confirmations (a batch is at most 64 configs; their binaries are small)
RECENT_BUILDS = 128


class LocalMeasurer(MeasurerDefaults):
    """Measures configs of one target on this machine (the ``Measurer`` protocol). ``measure``
    never raises for a bad kernel; it raises ``TargetUnavailableError`` when the target has no
    device here.

    Builds run in builder processes (one per available core, each build under
    ``build_timeout``), timing in one worker process; both are ``Child`` processes, so they
    never re-import the caller's ``__main__`` and die with the caller. Across processes, a timed
    run holds its device's lock exclusively and builds hold the host's lock shared.
    """

    def __init__(self, target: str = "cpu", options: "MeasureOptions | None" = None,
                 **runtime_kwargs: Any) -> None:
        self.target_info = get_target(target)
        self.target = self.target_info.kind
        self.options = options or MeasureOptions()
        self.runtime_kwargs = runtime_kwargs
        self.runtime = self.target_info.runtime(**runtime_kwargs)
        self._builders: Optional[ChildPool] = None
        # workers fork from a zygote where the runtime survives a fork (zygote.py says why)
        self._zygote = Zygote(KernelWorker, self.target, runtime_kwargs, self.options.seed,
                              name="measurement zygote", env=worker_env()) \
            if self.target == "cpu" and zygote_supported() else None
        self._worker = self._new_worker()
        self._spare: Optional[Child] = None  # started ahead once a first run had to be stopped
        self._want_spare = False
        self._host_lock = DeviceLock("host")
        self._timer_lock = DeviceLock(self.target_info.timer_key(runtime_kwargs))
        self._device: "str | None" = None
        self._drift = DriftMonitor()
        self._calibration: Optional[tuple[Workload, BuildResult]] = None
        # the last builds, by (workload, config): a confirmation times the binary it confirms
        self._recent: "OrderedDict[tuple, BuildResult]" = OrderedDict()
        self.seconds = {"build": 0.0, "run": 0.0}  # wall time in build and timing phases
        self._clocks: list[float] = []

    @contextmanager
    def _clock(self, phase: str) -> Iterator[None]:
        """Charge the wall time inside to ``phase``; a phase nested in another (the calibration
        kernel's first build, inside a timing phase) is left out of the outer one."""
        start = time.perf_counter()
        self._clocks.append(0.0)  # seconds of nested phases
        try:
            yield
        finally:
            spent = time.perf_counter() - start
            nested = self._clocks.pop()
            self.seconds[phase] += spent - nested
            if self._clocks:
                self._clocks[-1] += spent

    @property
    def device(self) -> str:
        if self._device is None:
            self._device = self.target_info.device_fingerprint(self.runtime)
        return self._device

    def build_all(self, method: str, calls: list[tuple]) -> list[BuildResult]:
        """``Builder.<method>(*call)`` for each call, in the builder processes (``build``:
        ``(workload, config)``; ``build_program``: ``(program,)``), each under
        ``build_timeout``; a lowering bug is also warned of (``LoweringBugWarning``)."""
        n = min(self.options.n_parallel or available_cpus(), len(calls))
        if self._builders is None or len(self._builders.children) < n:
            if self._builders is not None:
                self._builders.close()
            self._builders = ChildPool(Builder, self.target, self.runtime_kwargs,
                                       self.options.compile_cache, size=n, name="builder")
        limit = self.options.build_timeout
        with self._clock("build"), self._host_lock.shared():
            answers = self._builders.map(method, calls, timeout=limit)
        out = []
        for ok, value in answers:
            if ok:
                out.append(value)
            elif isinstance(value, ChildTimeout):
                out.append(BuildResult(ErrorCode.BUILD_TIMEOUT, limit,
                                       f"build took over {limit:g} s"))
            else:  # the compiler crashed its process (ChildDied), or the call failed
                out.append(BuildResult(compile_error(self.target), 0.0,
                                       f"the builder process failed: {value}"[-2000:]))
        for b in out:
            if b.lowering_bug:  # loud: a bug must not pass for an invalid config
                warnings.warn(b.error_msg.strip(), LoweringBugWarning, stacklevel=3)
        return out

    def run_program(self, workload: Workload, program: Program, config: Config) -> MeasureResult:
        """Measure a hand-built loop AST (tests inject crashing or hanging kernels this way)."""
        self.runtime.check_available()
        b = self.build_all("build_program", [(program,)])[0]
        return self.time_builds(workload, [config], [b], self.options)[0]

    def measure(self, workload: Workload, configs: Sequence[Config],
                stop_slower_than: float = 0.0, early_stop: float = 0.0) -> list[MeasureResult]:
        """Build and time ``configs``. ``stop_slower_than`` (seconds, 0: off) stops timing a
        kernel once even its fastest sample is slower: such a result is real but flagged
        ``early_stop``, with fewer samples. ``early_stop`` (a ratio, 0: off) lowers
        that bound, while the batch is timed one kernel after another, to ``early_stop`` times
        the fastest median timed so far in the batch (of an ok kernel not stopped early)."""
        self.runtime.check_available()
        if not configs:
            return []
        opts = with_stop(self.options, stop_slower_than, early_stop)
        spare = self._want_spare and (self._spare is None or not self._spare.alive)
        if spare:
            self._spare = self._new_worker()
            self._spare.spawn()  # it starts while the builders work
        builds = self.build_all("build", [(workload, c) for c in configs])
        self._keep(workload, configs, builds)
        if spare:
            self._start_spare()  # and never while a kernel is timed: its imports take a core
        return self.time_builds(workload, list(configs), builds, opts)

    def confirm(self, workload: Workload, result: MeasureResult) -> MeasureResult:
        """Time ``result``'s config again, freshly loaded, with ``confirm_repeat`` samples, so a
        best is the kernel's own speed, not the luckiest of many noisy samples. The result has
        the new samples only (independent of the selection); the first ones are kept in
        ``extra["screened_costs"]``. (A fresh worker would cost a process start, ~0.3 s, and
        every job already gets freshly mapped buffers.)"""
        b = self._recent.get(_build_key(workload, result.config))
        if b is None:
            b = self.build_all("build", [(workload, result.config)])[0]
        again = self.time_builds(workload, [result.config], [b], confirm_options(self.options))[0]
        return confirmed(result, again)

    def features(self, workload: Workload, configs: Sequence[Config], mode: str,
                 compute: Features) -> np.ndarray:
        """The row of a config this measurer just built, from the program its builder lowered
        (an env step's observation needs no second lowering); other calls ``compute``."""
        b = self._recent.get(_build_key(workload, configs[0])) if len(configs) == 1 else None
        if b is None or b.program is None or mode not in ("relation", "context"):
            return compute(list(configs))
        return extract(b.program, mode)[None, :]

    def _keep(self, workload: Workload, configs: Sequence[Config],
              builds: Sequence[BuildResult]) -> None:
        for c, b in zip(configs, builds):
            if b.ok:
                self._recent[_build_key(workload, c)] = b
                self._recent.move_to_end(_build_key(workload, c))
        while len(self._recent) > RECENT_BUILDS:
            self._recent.popitem(last=False)

    def time_builds(self, workload: Workload, configs: list[Config],
                    builds: list[BuildResult], opts: MeasureOptions) -> list[MeasureResult]:
        """Time the builds (of :meth:`build_all`); configs that lower to the same kernel share one run. With
        ``calibrate``, a calibration kernel is timed before and after: if the machine's speed
        moved by more than ``drift_tolerance`` meanwhile, the kernels are timed once more, and
        a drift that persists is flagged ``drift`` (after / before). A re-take starts
        its ``early_stop`` bound afresh, from the kernels it has timed itself."""
        with self._clock("run"):
            return self._timed_results(workload, configs, builds, opts)

    def _timed_results(self, workload: Workload, configs: list[Config],
                       builds: list[BuildResult], opts: MeasureOptions) -> list[MeasureResult]:
        out = self._time_all(workload, configs, builds, opts)
        if not opts.calibrate or not any(r.extra.get("timed") for r in out):
            return out
        drift, speed = self._phase_drift(opts)
        if abs(drift - 1.0) > opts.drift_tolerance:
            out = self._time_all(workload, configs, builds, opts)
            drift, speed = self._phase_drift(opts)
            if abs(drift - 1.0) > opts.drift_tolerance:
                out = [replace(r, drift=drift) if r.ok else r for r in out]
        if speed:  # the machine's speed as the kernels were timed: records of two moments compare
            out = [replace(r, extra={**r.extra, "calibration": speed}) if r.ok else r
                   for r in out]
        return out

    def _phase_drift(self, opts: MeasureOptions) -> tuple[float, Optional[float]]:
        """The calibration kernel's speed at the phase's end over its start, and its seconds
        during the phase (the geometric mean of the two; None if either is missing). One timing
        of it varies by ~8% (cv) on these 2-core VMs, so a 20% change is seen in a few percent
        of phases of a steady machine, and a re-take costs the whole phase: a change is looked
        at a second time, and counts only if it is still there."""
        before, after = self._drift.pop_phase()
        if not (before and after):
            return 1.0, None
        if abs(after / before - 1.0) > opts.drift_tolerance:
            again = self._calibration_time()
            if again:
                self._drift.phase_end(again)  # also the start of a phase that follows at once
                after = again
        return after / before, math.sqrt(before * after)

    def _time_all(self, workload: Workload, configs: list[Config], builds: list[BuildResult],
                  opts: MeasureOptions) -> list[MeasureResult]:
        calibrating = opts.calibrate and any(b.error == ErrorCode.NO_ERROR for b in builds)
        if calibrating:
            recent = self._drift.recent()
            self._drift.phase_start(recent if recent is not None else self._calibration_time(),
                                    timed=recent is None)
        out: list[MeasureResult] = []
        timed: dict[str, MeasureResult] = {}
        fastest = math.inf  # median of the fastest kernel timed in full so far
        for c, b in zip(configs, builds):
            first = timed.get(b.key) if b.key and b.error == ErrorCode.NO_ERROR else None
            if first is not None:
                out.append(replace(first, config=c, build_time=b.time,
                                   extra={**first.extra, "same_kernel_as": first.config.index}))
                continue
            r = self._run(workload, c, b, replace(
                opts, stop_slower_than=stop_bound(opts.stop_slower_than, opts.early_stop,
                                                  fastest)))
            out.append(r)
            if r.ok and not r.early_stop:
                fastest = min(fastest, r.median)
            if b.key:
                timed[b.key] = r
        if calibrating:
            self._drift.phase_end(self._calibration_time())
        return out

    def calibrations(self) -> int:
        """How many calibration timings were taken so far (a mark for :meth:`slowdown`)."""
        return len(self._drift.history)

    def slowdown(self, since: int) -> Optional[float]:
        """The calibration kernel's median time since mark ``since`` (:meth:`calibrations`)
        over its usual time before it, the lower quartile: above 1, the machine runs slower now
        than it usually did over this measurer's life. Not the median: most calibrations of a
        tune follow a build phase and read ~15% slower than those of back-to-back timings (its
        end-of-tune rounds read 0.68-0.99 of that median on a Zen 3 VM). None without a
        calibration since and three before it."""
        history = self._drift.history
        before, after = history[:since], history[since:]
        if len(before) < 3 or not after:
            return None
        return statistics.median(after) / statistics.quantiles(before, n=4)[0]

    def _calibration_time(self) -> Optional[float]:
        """Seconds per run of a fixed small kernel, or None where it cannot be timed."""
        if self._calibration is None:
            w = calibration_workload()
            config = calibration_config(w, self.target)
            self._calibration = (w, self.build_all("build", [(w, config)])[0])
        w, b = self._calibration
        if b.error != ErrorCode.NO_ERROR:
            return None
        opts = replace(self.options, repeat=3, max_repeat=3, min_repeat_ms=2.0,
                       stop_slower_than=0.0, early_stop=0.0)
        r, _ = self._time(w, b, opts)
        return statistics.median(r.costs) if r.ok else None

    def _run(self, workload: Workload, config: Config, b: BuildResult,
             opts: MeasureOptions) -> MeasureResult:
        extra = {"compile_cache": True} if b.cached else {}
        if b.compile_info:
            extra["compile"] = b.compile_info
        common = dict(config=config, flops=workload.flops, build_time=b.time,
                      timestamp=time.time())
        if b.error != ErrorCode.NO_ERROR:
            return MeasureResult(costs=(), error=b.error, error_msg=b.error_msg, extra=extra,
                                 **common)
        r, window = self._time(workload, b, opts)
        extra["timed"] = window  # (start, end) wall clock with the device to itself
        if r.first:
            extra["first_run"] = r.first  # the cold, checked run: no sample (worker.COLD_MARGIN)
        return MeasureResult(costs=r.costs, error=r.error, error_msg=r.error_msg,
                             run_time=r.run_time, early_stop=r.early_stop,
                             unchecked=r.unchecked, extra=extra, **common)

    def _time(self, workload: Workload, b: BuildResult,
              opts: MeasureOptions) -> tuple[RunResult, tuple[float, float]]:
        worker = self._worker
        if not worker.alive or worker.calls >= opts.recycle_after:
            if self._zygote is not None:  # the fork inherits the inputs and reference output
                try:
                    self._zygote.call("warm", workload)
                except ChildError:  # the job computes them itself, and reports what fails
                    pass
            worker.start()  # before taking the lock: starting takes a moment
        with self._timer_lock.exclusive():
            start = time.time()
            r = self._call_worker(workload, b, opts)
            window = (start, time.time())
        if r.suspect:  # the kernel may have damaged the worker: the next one gets a new one
            worker.kill()
        return r, window

    def _call_worker(self, workload: Workload, b: BuildResult,
                     opts: MeasureOptions) -> RunResult:
        worker = self._worker
        t0 = time.perf_counter()
        try:
            worker.send("run", workload, b.program, b.binary, opts)
            lost = self._first_run_lost(opts)
            if lost is not None:
                self._replace_worker()
                return lost
            return worker.result(max(0.0, opts.timeout - (time.perf_counter() - t0)))
        except ChildTimeout:
            return RunResult(error=ErrorCode.RUN_TIMEOUT, run_time=opts.timeout,
                             error_msg=f"no result within {opts.timeout:g} s: the kernel hangs "
                                       "or is too slow")
        except (ChildDied, ChildError) as e:
            worker.kill()
            return RunResult(error=ErrorCode.RUNTIME_DEVICE, run_time=time.perf_counter() - t0,
                             error_msg=f"{e}: the kernel crashed"[-2000:])

    def _new_worker(self) -> Child:
        return Child(KernelWorker, self.target, self.runtime_kwargs, self.options.seed,
                     name="measurement worker", zygote=self._zygote, env=worker_env())

    def _start_spare(self) -> None:
        try:
            self._spare.handshake()
        except ChildDied:
            self._spare = None

    def _replace_worker(self) -> None:
        """Kill the worker; the spare, if one was started, takes its place (a new one starts
        on the next call otherwise), and from now on a spare is kept."""
        self._worker.kill()
        self._want_spare = True
        spare, self._spare = self._spare, None
        if spare is not None and spare.alive:
            self._worker = spare

    def _first_run_lost(self, opts: MeasureOptions) -> Optional[RunResult]:
        """While the worker runs a job: the result of stopping its kernel's first run, once that
        has gone on past ``first_run_limit``; None when the job answered (or got past its first
        run, or ran out of ``timeout``) first. The kernel ran at least the seconds given."""
        limit = first_run_limit(opts, "spawn" if self._zygote is None else "fork")
        if not limit:
            return None
        worker, end = self._worker, time.monotonic() + opts.timeout
        while True:  # each wait ends at the answer, a progress note, the limit or the timeout
            notes = dict(note for _, note in worker.progress)
            if "first_run_done" in notes:
                return None
            started, now = notes.get("first_run"), time.monotonic()
            if started is not None and now >= started + limit:
                return RunResult(costs=(now - started,), number=1, run_time=now - started,
                                 early_stop=True, unchecked=True)
            if now >= end:
                return None
            if worker.poll(min(end, started + limit if started is not None else end) - now):
                return None

    def close(self) -> None:
        self._worker.kill()
        if self._spare is not None:
            self._spare.kill()
        if self._zygote is not None:
            self._zygote.close()
        if self._builders is not None:
            self._builders.close()
            self._builders = None
        self._host_lock.close()
        self._timer_lock.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    # A measurer owns processes: copies share it, pickles (e.g. an env spec) rebuild a fresh one.
    def __deepcopy__(self, memo: dict) -> "LocalMeasurer":
        return self

    def __reduce__(self):
        return (_new_local, (self.target, self.options, self.runtime_kwargs))

    def describe(self) -> dict:
        return {"target": self.target, "device": self.device, **asdict(self.options)}


def _build_key(workload: Workload, config: Config) -> tuple:
    return workload.key, config.space_key, config.index


def _new_local(target: str, options: MeasureOptions, runtime_kwargs: dict) -> LocalMeasurer:
    return LocalMeasurer(target, options, **runtime_kwargs)
