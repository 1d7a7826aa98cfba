"""The measurement worker: a separate process that loads kernels, checks them against NumPy
and times them, so a segfault or a hang in generated code kills only this process.

Protocol: the parent calls ``KernelWorker.run(workload, program, binary, options)`` in a
``Child`` process and receives a ``RunResult``; where the job may have left the process damaged,
its ``suspect`` is set (the parent then restarts the process). During a job it notes the start
and the end of the kernel's first run (``run_job``'s ``notify``).
"""
from __future__ import annotations

import dataclasses
import math
import os
import time
import traceback
from typing import Callable

import numpy as np

from ..errors import ErrorCode
from ..hardware.runtime import get_runtime
from .result import RunResult, spread


def tolerance(workload) -> float:
    """Allowed max |out - ref| / max |ref| for fp32 accumulation over the reduction."""
    return max(1e-5, 1e-6 * workload.reduction_length)


def relative_error(out: np.ndarray, expected: np.ndarray) -> float:
    """max |out - expected| / max |expected| (inf for another shape; NaN where ``out`` holds
    one): what ``tolerance`` bounds."""
    if out.shape != expected.shape:
        return math.inf
    return float(np.abs(out - expected).max()) / (float(np.abs(expected).max()) or 1.0)


class Reference:
    """Random inputs and the NumPy output, computed once per workload in the worker."""

    def __init__(self, seed: int) -> None:
        self.seed = seed
        self._cache: dict[str, tuple[list[np.ndarray], np.ndarray]] = {}
        self._packed: dict[tuple, list[np.ndarray]] = {}

    def inputs_for(self, workload, program) -> list[np.ndarray]:
        """The inputs in the layouts ``program`` takes (``Program.input_layouts``), packed once
        per layout: packing is done ahead of time, never timed."""
        inputs = self.get(workload)[0]
        if not any(layout is not None for layout in program.input_layouts):
            return inputs
        key = (workload.key, program.input_layouts)
        if key not in self._packed:
            if len(self._packed) > 8:
                self._packed.clear()
            packed = program.pack_inputs(inputs)
            for arr in packed:
                arr.setflags(write=False)
            self._packed[key] = packed
        return self._packed[key]

    def get(self, workload) -> tuple[list[np.ndarray], np.ndarray]:
        if workload.key not in self._cache:
            if len(self._cache) > 8:
                self._cache.clear()
            inputs = workload.random_inputs(self.seed)
            expected = workload.reference(inputs)
            for arr in (*inputs, expected):  # shared by every job: no kernel path may alter them
                arr.setflags(write=False)
            self._cache[workload.key] = (inputs, expected)
        return self._cache[workload.key]


# A kernel's checked first run is cold (freshly mapped buffers, parked pool threads, a core still
# busy with the builds). Measured on a 2-core znver4 with random configs of matmul (32^3 to 256^3)
# and conv2d C1/C6, 1 and 2 threads: first runs of a millisecond or more took at most 1.5x their
# warm median, runs of microseconds up to 40x (a fixed cost of tens of microseconds); on a 2-vCPU
# Emerald Rapids during a dataset collection, 60-microsecond depthwise kernels' first runs took
# 6-15 ms (a scheduler slice), and 14,083 records held that cold run as their only sample (and
# others, samples of a run or two sized by it). So one warm run sizes the samples and alone may
# stop the kernel: past COLD_MARGIN x the bound, once it lasts a sample's length.
COLD_MARGIN = 2.0
# A first run that outlasts its bound that way is stopped from outside once it has run this long:
# stopping it kills the worker, and a new one takes ~0.25 s to start (imports, inputs), or a few
# milliseconds as a fork of a zygote (``tensorgym.processes.zygote``), cold: its first parallel
# region starts the thread pool.
KILL_AFTER_S = {"spawn": 0.25, "fork": 0.05}


def one_run_lost(seconds: float, opts) -> bool:
    """Whether one warm run of ``seconds``, a sample's length, alone shows the kernel surely
    slower than the bound."""
    return (opts.stop_slower_than > 0 and seconds > COLD_MARGIN * opts.stop_slower_than
            and seconds >= opts.min_repeat_ms / 1e3)


def contends(fastest: float, opts) -> bool:
    """Whether a kernel whose fastest sample took ``fastest`` seconds may still beat the best,
    and so deserves samples past ``repeat``: with ``early_stop`` = r, the bound
    ``stop_slower_than`` is r x the best (the tuner's, lowered to the batch's fastest), and a
    kernel slower than the best needs no precise time; new bests are confirmed anyway."""
    if not (opts.early_stop and opts.stop_slower_than):
        return True
    return fastest <= opts.stop_slower_than / opts.early_stop


def first_run_limit(opts, start: str = "spawn") -> float:
    """Seconds after which the parent stops a kernel's first run by killing the worker (0:
    never): past the bound by COLD_MARGIN, as ``one_run_lost``, and past KILL_AFTER_S of how
    a new worker starts (``start``), since a new worker costs about that much; never with
    ``stop_first_run`` off."""
    if opts.stop_slower_than <= 0 or not getattr(opts, "stop_first_run", True):
        return 0.0
    return max(COLD_MARGIN * opts.stop_slower_than, opts.min_repeat_ms / 1e3, KILL_AFTER_S[start])


def run_job(runtime, reference: Reference, workload, program, binary, opts,
            notify: "Callable[[tuple], None] | None" = None) -> RunResult:
    """Load one kernel, run it once and check it, then time it. Checked: the output against
    NumPy (it starts NaN-filled), the canaries around every buffer, the inputs (unchanged).
    ``suspect`` is set where the job may have damaged this process: a write out of bounds, a
    runtime error, a wrong answer (the values it failed to write may have gone anywhere).
    ``notify`` hears ``("first_run", time.monotonic())`` as the first run starts and
    ``("first_run_done", seconds)`` once it ended, so that the parent can stop a first run that
    has lost (``first_run_limit``)."""
    t0 = time.perf_counter()

    def fail(code: ErrorCode, msg: str, suspect: bool = True) -> RunResult:
        return RunResult(error=code, error_msg=msg[-2000:], run_time=time.perf_counter() - t0,
                         suspect=suspect)

    def guards(after: str) -> "RunResult | None":
        damage = kernel.check_guards(bufs)
        return fail(ErrorCode.RUNTIME_DEVICE, f"the kernel wrote where it must not (seen after "
                    f"the {after}): " + "; ".join(damage)) if damage else None

    def measure() -> RunResult:
        if notify is not None:
            notify(("first_run", time.monotonic()))
        first = kernel.time(bufs, 1)  # warm-up; its output is the one checked
        if notify is not None:
            notify(("first_run_done", first))
        bad = guards("checked run")
        if bad:
            return bad
        if opts.check:
            out = np.asarray(kernel.read_output(bufs))
            err = relative_error(out, expected)
            if not err <= tolerance(workload):  # also catches NaN
                unwritten = int(np.isnan(out).sum())
                return fail(ErrorCode.WRONG_ANSWER,
                            f"max relative error {err:.3g} > {tolerance(workload):.3g}"
                            + (f"; {unwritten} of {out.size} outputs never written (NaN)"
                               if unwritten else ""))
        if first >= opts.slow_run_s:  # hopeless for a tuner: don't spend seconds more on it
            return RunResult(costs=(first,), number=1, run_time=time.perf_counter() - t0,
                             early_stop=one_run_lost(first, opts), first=first)
        one = kernel.time(bufs, 1)  # warm: it sizes the samples, and may stop the kernel
        if one_run_lost(one, opts):
            return RunResult(costs=(one,), number=1, run_time=time.perf_counter() - t0,
                             early_stop=True, first=first)
        number = opts.number or max(1, math.ceil(opts.min_repeat_ms / 1e3 / max(one, 1e-7)))
        costs, early = sample(number)
        return guards("timed runs") or RunResult(costs=tuple(costs), number=number,
                                                 run_time=time.perf_counter() - t0,
                                                 early_stop=early, first=first)

    def sample(number: int) -> tuple[list[float], bool]:
        """``repeat`` samples, more (up to ``max_repeat``) while their spread exceeds
        ``target_cv`` and the kernel contends (``contends``); stops early once even the
        fastest is slower than ``stop_slower_than``."""
        costs: list[float] = []
        while True:
            if opts.flush_cache:
                kernel.flush_cache()
            costs.append(kernel.time(bufs, number))
            if opts.stop_slower_than and min(costs) > opts.stop_slower_than:
                return costs, True
            if len(costs) >= opts.repeat and (len(costs) >= max(opts.repeat, opts.max_repeat)
                                              or spread(costs) <= opts.target_cv
                                              or not contends(min(costs), opts)):
                return costs, False

    try:
        kernel = runtime.load(binary, program)
    except Exception as e:  # noqa: BLE001 - any load failure is the kernel's fault
        return fail(ErrorCode.COMPILE_DEVICE, f"load failed: {e!r}", suspect=False)
    bufs = result = None
    try:
        expected = reference.get(workload)[1]
        bufs = kernel.alloc(reference.inputs_for(workload, program))
        result = measure()
    except Exception:  # noqa: BLE001
        result = fail(ErrorCode.RUNTIME_DEVICE, traceback.format_exc())
    finally:  # free device memory and modules now, not when the worker recycles
        try:
            if bufs is not None:
                kernel.release(bufs)
            kernel.close()
        except Exception:  # noqa: BLE001 - a runtime that cannot free is in a bad state
            if result is not None:
                result = dataclasses.replace(result, suspect=True)
    return result


def worker_env() -> dict[str, str]:
    """Variables a worker process starts with besides its parent's: ``OMP_PROC_BIND=true``
    (unless the caller set it), which libgomp reads as it loads. Unbound, the threads of a new
    worker's first parallel kernels can share one core for a while (each run then waits out time
    slices: 8 ms instead of 60 us for the calibration kernel on 2 cores, after 0.2 s or more
    idle). Given to the process's spawn, not set here: a ``KernelWorker`` made in the caller's
    own process (tests) must not bind the caller's OpenMP threads."""
    return {"OMP_PROC_BIND": os.environ.get("OMP_PROC_BIND", "true")}


class KernelWorker:
    """What the worker process serves (``Child(KernelWorker, target, runtime_kwargs, seed)``):
    one runtime and the reference inputs and outputs, kept across jobs."""

    def __init__(self, target: str, runtime_kwargs: dict, seed: int) -> None:
        self.runtime = get_runtime(target, **runtime_kwargs)
        self.reference = Reference(seed)
        self.notify: "Callable[[tuple], None] | None" = None  # set by ``child.serve``

    def warm(self, workload) -> None:
        """Compute ``workload``'s inputs and reference output now (in a zygote: once, for every
        worker forked from it later)."""
        self.reference.get(workload)

    def run(self, workload, program, binary, opts) -> RunResult:
        return run_job(self.runtime, self.reference, workload, program, binary, opts,
                       self.notify)
