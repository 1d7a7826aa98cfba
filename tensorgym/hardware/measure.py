"""Build configs (in parallel processes) and time them (one at a time, in an isolated worker).

Protocol per config: lower -> render -> compile in a builder process; then in the worker: load,
run once on random inputs and compare with NumPy (a wrong result is an error, never a time),
pick ``number`` so one sample lasts at least ``min_repeat_ms``, and take ``repeat`` samples. A
kernel whose first run already takes ``slow_run_s`` is reported with that one sample: it is far
from the best anyway, and timing it again would cost a tuner seconds per trial.
The statistic reported is the median of the samples (``MeasureResult.median``); every sample is
kept in ``costs``.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures.process import BrokenProcessPool
from dataclasses import asdict, dataclass
from typing import Any, Sequence

from ..errors import ErrorCode, InvalidConfigError
from ..space import Config
from ..templates import canonical_target
from ..workloads import Workload
from .result import MeasureResult
from .runtime import get_runtime
from .worker import worker_main

_CTX = mp.get_context("spawn")  # no fork: the parent may hold threads (BLAS, torch, libgomp)


@dataclass(frozen=True)
class MeasureOptions:
    number: int = 0  # runs per sample; 0: enough for one sample to last min_repeat_ms
    repeat: int = 3  # samples
    min_repeat_ms: float = 10.0
    timeout: float = 10.0  # seconds allowed for one config's run phase in the worker
    build_timeout: float = 60.0
    flush_cache: bool = False  # evict the last-level cache before every sample
    check: bool = True  # compare with NumPy before timing
    n_parallel: int = 0  # builder processes; 0: one per core
    seed: int = 0  # of the random inputs
    recycle_after: int = 500  # restart the worker after this many kernels (frees JIT memory)
    slow_run_s: float = 0.5  # a kernel whose checked run takes longer is timed by that run alone


# ---------------------------------------------------------------- build (any process)

_RUNTIMES: dict = {}


def _runtime(target: str, kwargs: dict):
    key = (target, tuple(sorted(kwargs.items())))
    if key not in _RUNTIMES:
        _RUNTIMES[key] = get_runtime(target, **kwargs)
    return _RUNTIMES[key]


def build(target: str, runtime_kwargs: dict, workload: Workload, config: Config) -> dict:
    """Lower, render and compile one config. Never raises: errors come back as codes."""
    from ..lower import lower
    from ..templates import check_config

    t0 = time.perf_counter()
    runtime = _runtime(target, runtime_kwargs)
    try:
        check_config(workload, config, runtime.limits())
        program = lower(workload, config)
    except InvalidConfigError as e:
        return {"error": ErrorCode.INSTANTIATION_ERROR, "msg": str(e), "time": time.perf_counter() - t0}
    except Exception as e:  # noqa: BLE001
        return {"error": ErrorCode.INSTANTIATION_ERROR, "msg": f"lowering failed: {e!r}",
                "time": time.perf_counter() - t0}
    try:
        source = runtime.render(program)
        binary = runtime.compile(source, program)
    except Exception as e:  # noqa: BLE001
        code = ErrorCode.COMPILE_HOST if target == "cpu" else ErrorCode.COMPILE_DEVICE
        return {"error": code, "msg": f"{type(e).__name__}: {e}"[-2000:],
                "time": time.perf_counter() - t0}
    return {"error": ErrorCode.NO_ERROR, "program": program, "binary": binary,
            "time": time.perf_counter() - t0}


# ---------------------------------------------------------------- the worker, from the parent


class _Worker:
    def __init__(self, target: str, runtime_kwargs: dict, seed: int) -> None:
        self.args = (target, runtime_kwargs, seed)
        self.proc = None
        self.conn = None
        self.jobs = 0

    def start(self) -> None:
        parent, child = _CTX.Pipe()
        self.proc = _CTX.Process(target=worker_main, args=(child, *self.args), daemon=True)
        self.proc.start()
        child.close()
        self.conn = parent
        self.jobs = 0
        if not parent.poll(120) or parent.recv() != "ready":
            self.kill()
            raise RuntimeError("the measurement worker did not start")

    def kill(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.join(5)
        if self.conn is not None:
            self.conn.close()
        self.proc = self.conn = None

    def run(self, job: tuple, timeout: float, recycle_after: int) -> dict:
        if self.proc is None or not self.proc.is_alive() or self.jobs >= recycle_after:
            self.kill()
            self.start()
        self.jobs += 1
        t0 = time.perf_counter()
        try:
            self.conn.send(job)
            if self.conn.poll(timeout):
                return self.conn.recv()
            self.kill()
            return {"costs": (), "error": ErrorCode.RUN_TIMEOUT, "run_time": timeout,
                    "error_msg": f"no result within {timeout:g} s: the kernel hangs or is too slow"}
        except (EOFError, OSError, BrokenPipeError):
            code = self.proc.exitcode if self.proc is not None else None
            self.kill()
            return {"costs": (), "error": ErrorCode.RUNTIME_DEVICE,
                    "run_time": time.perf_counter() - t0,
                    "error_msg": f"the measurement worker died (exit code {code}): the kernel "
                                 "crashed"}


class Measurer:
    """Measures configs of one target. ``measure`` never raises for a bad kernel; it raises
    ``TargetUnavailableError`` when the target has no device here."""

    def __init__(self, target: str = "cpu", options: "MeasureOptions | None" = None,
                 **runtime_kwargs: Any) -> None:
        self.target = canonical_target(target)
        self.options = options or MeasureOptions()
        self.runtime_kwargs = runtime_kwargs
        self.runtime = get_runtime(self.target, **runtime_kwargs)
        self._pool: "ProcessPoolExecutor | None" = None
        self._worker = _Worker(self.target, runtime_kwargs, self.options.seed)
        self._device: "str | None" = None

    @property
    def device(self) -> str:
        if self._device is None:
            self.runtime.check_available()
            self._device = self.runtime.device_name()
        return self._device

    def _builds(self, workload: Workload, configs: Sequence[Config]) -> list[dict]:
        n = self.options.n_parallel or os.cpu_count() or 1
        if n == 1 or len(configs) == 1:
            return [build(self.target, self.runtime_kwargs, workload, c) for c in configs]
        out: list = [None] * len(configs)
        pending = list(range(len(configs)))
        while pending:  # each round settles at least its first config, so this ends
            if self._pool is None:
                self._pool = ProcessPoolExecutor(n, mp_context=_CTX)
            futures = [(i, self._pool.submit(build, self.target, self.runtime_kwargs, workload,
                                             configs[i])) for i in pending]
            pending, lost = [], False
            for i, f in futures:
                if lost:  # the builders were killed or died: keep what finished, redo the rest
                    if f.done() and not f.cancelled() and f.exception() is None:
                        out[i] = f.result()
                    else:
                        pending.append(i)
                    continue
                try:
                    out[i] = f.result(timeout=self.options.build_timeout)
                except FutureTimeout:
                    out[i] = {"error": ErrorCode.BUILD_TIMEOUT, "time": self.options.build_timeout,
                              "msg": f"build took over {self.options.build_timeout:g} s"}
                    # a stuck compiler would hold its builder (and close()) for good
                    self._kill_pool()
                    lost = True
                except BrokenProcessPool as e:
                    self._pool = None
                    out[i] = {"error": ErrorCode.COMPILE_HOST, "time": 0.0,
                              "msg": f"the builder process died: {e}"}
                    lost = True
        return out

    def _kill_pool(self) -> None:
        pool, self._pool = self._pool, None
        if pool is None:
            return
        # ProcessPoolExecutor cannot cancel a running task; terminate its processes instead
        for proc in list((getattr(pool, "_processes", None) or {}).values()):
            proc.terminate()
        pool.shutdown(wait=False, cancel_futures=True)

    def run_program(self, workload: Workload, program, config: Config) -> MeasureResult:
        """Measure a hand-built loop AST (tests inject crashing or hanging kernels this way)."""
        self.runtime.check_available()
        t0 = time.perf_counter()
        binary = self.runtime.compile(self.runtime.render(program), program)
        b = {"error": ErrorCode.NO_ERROR, "program": program, "binary": binary,
             "time": time.perf_counter() - t0}
        return self._run(workload, config, b)

    def _run(self, workload: Workload, config: Config, b: dict) -> MeasureResult:
        common = dict(config=config, flops=workload.flops, build_time=b["time"],
                      timestamp=time.time())
        if b["error"] != ErrorCode.NO_ERROR:
            return MeasureResult(costs=(), error=ErrorCode(b["error"]), error_msg=b["msg"],
                                 **common)
        opts = self.options
        r = self._worker.run((workload, b["program"], b["binary"], opts), opts.timeout,
                             opts.recycle_after)
        return MeasureResult(costs=tuple(r["costs"]), error=ErrorCode(r["error"]),
                             error_msg=r["error_msg"], run_time=r["run_time"], **common)

    def measure(self, workload: Workload, configs: Sequence[Config]) -> list[MeasureResult]:
        self.runtime.check_available()
        builds = self._builds(workload, configs)
        return [self._run(workload, c, b) for c, b in zip(configs, builds)]

    def close(self) -> None:
        self._worker.kill()
        self._kill_pool()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    # A measurer owns processes: copies share it, pickles (e.g. an env spec) rebuild a fresh one.
    def __deepcopy__(self, memo: dict) -> "Measurer":
        return self

    def __reduce__(self):
        return (_new_measurer, (self.target, self.options, self.runtime_kwargs))

    def describe(self) -> dict:
        return {"target": self.target, "device": self.device, **asdict(self.options)}


def _new_measurer(target: str, options: MeasureOptions, runtime_kwargs: dict) -> Measurer:
    return Measurer(target, options, **runtime_kwargs)
