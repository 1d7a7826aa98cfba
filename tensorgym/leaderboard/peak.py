"""The CPU's FMA peak, measured: a loop of independent fused multiply-adds on the host's widest
float32 vectors (``host_vector_lanes``), JIT-compiled for this CPU as kernels are and run on
``threads`` threads at once. Its GFLOP/s is the ceiling a convolution or matmul kernel can reach
on these cores (2 FLOPs per lane per FMA), so "share of FMA peak" says how close a layer is to it.

    peak = fma_peak(threads=2)
    print(peak.gflops, peak.lanes)
"""
from __future__ import annotations

import ctypes
import threading
import time
from dataclasses import dataclass
from functools import lru_cache

from tensorgym.errors import TargetUnavailableError
from tensorgym.hardware.cpu import host_cpu_name, jit
from tensorgym.hardware.host import host_vector_lanes
from tensorgym.processes.host import available_cpus

#: independent accumulator chains: enough to cover the FMA latency times the FMA ports (4 x 2
#: on Zen 4 and most AVX-512 cores) while staying in registers (32 on AVX-512, 16 on AVX2)
ACCUMULATORS = {16: 24, 8: 12, 4: 12}

@dataclass(frozen=True)
class Peak:
    """``gflops``: the best of ``repeats`` runs on ``threads`` threads; ``lanes`` float32s per
    vector, ``accumulators`` vector chains per thread, ``samples`` every run's GFLOP/s."""

    gflops: float
    threads: int
    lanes: int
    accumulators: int
    cpu: str
    samples: tuple[float, ...]


def _ir(lanes: int, accumulators: int) -> str:
    vec = f"<{lanes} x float>"
    fma = f"@llvm.fma.v{lanes}f32"
    acc = [f"%a{i}" for i in range(accumulators)]
    lines = [
        f"declare {vec} {fma}({vec}, {vec}, {vec})",
        "define float @fma_loop(i64 %n, float %x, float %y) {",
        "entry:",
        f"  %xv0 = insertelement {vec} undef, float %x, i32 0",
        f"  %xv = shufflevector {vec} %xv0, {vec} undef, <{lanes} x i32> zeroinitializer",
        f"  %yv0 = insertelement {vec} undef, float %y, i32 0",
        f"  %yv = shufflevector {vec} %yv0, {vec} undef, <{lanes} x i32> zeroinitializer",
        "  br label %loop",
        "loop:",
        "  %i = phi i64 [0, %entry], [%i1, %loop]",
    ]
    for i, a in enumerate(acc):
        lines.append(f"  {a} = phi {vec} [%yv, %entry], [%b{i}, %loop]")
    for i, a in enumerate(acc):  # acc = acc * x + y: a chain the compiler cannot fold
        lines.append(f"  %b{i} = call {vec} {fma}({vec} {a}, {vec} %xv, {vec} %yv)")
    lines += [
        "  %i1 = add i64 %i, 1",
        "  %more = icmp slt i64 %i1, %n",
        "  br i1 %more, label %loop, label %done",
        "done:",
    ]
    total = "%b0"
    for i in range(1, accumulators):
        lines.append(f"  %s{i} = fadd {vec} {total}, %b{i}")
        total = f"%s{i}"
    lines += [f"  %r = extractelement {vec} {total}, i32 0", "  ret float %r", "}"]
    return "\n".join(lines)


@lru_cache(maxsize=None)
def _kernel(lanes: int, accumulators: int) -> "ctypes._CFuncPtr":
    fn_type = ctypes.CFUNCTYPE(ctypes.c_float, ctypes.c_int64, ctypes.c_float, ctypes.c_float)
    return fn_type(jit(_ir(lanes, accumulators), "fma_loop"))


def fma_peak(threads: "int | None" = None, lanes: "int | None" = None, seconds: float = 0.2,
             repeats: int = 5) -> Peak:
    """The FMA loop on ``threads`` threads (default: every core this process may use) for about
    ``seconds`` per run, ``repeats`` runs; the best run is the peak (a slower one lost time to
    other processes). ``lanes`` defaults to the host's vector width."""
    threads = threads or available_cpus()
    lanes = lanes or host_vector_lanes()
    if threads < 1 or repeats < 1 or seconds <= 0:
        raise ValueError("need threads >= 1, repeats >= 1 and seconds > 0")
    if lanes not in ACCUMULATORS:
        raise TargetUnavailableError(f"no FMA loop for {lanes} lanes; use one of "
                                     f"{sorted(ACCUMULATORS)}")
    accumulators = ACCUMULATORS[lanes]
    fn = _kernel(lanes, accumulators)
    flops_per_iter = 2 * lanes * accumulators
    fn(1000, 0.999, 1e-3)  # warm: page in the code
    t0 = time.perf_counter()
    fn(100_000, 0.999, 1e-3)
    per_iter = max(time.perf_counter() - t0, 1e-6) / 100_000
    n = max(1000, int(seconds / per_iter))
    samples = []
    for _ in range(repeats):
        barrier = threading.Barrier(threads + 1)

        def work() -> None:
            barrier.wait()
            fn(n, 0.999, 1e-3)  # ctypes releases the GIL during the call

        pool = [threading.Thread(target=work) for _ in range(threads)]
        for t in pool:
            t.start()
        barrier.wait()
        t0 = time.perf_counter()
        for t in pool:
            t.join()
        samples.append(threads * n * flops_per_iter / (time.perf_counter() - t0) / 1e9)
    return Peak(max(samples), threads, lanes, accumulators, host_cpu_name(),
                tuple(samples))


def device_peak_gflops(target: str, threads: int) -> "float | None":
    """The FMA peak of a CPU target's ``threads`` threads (0: every core this process may use),
    timed holding the host's timing lock so no tensorgym kernel runs meanwhile; None for other
    targets (a GPU's peak is not measured here)."""
    from tensorgym.processes.host import DeviceLock  # noqa: PLC0415
    from tensorgym.hardware.target import get_target  # noqa: PLC0415

    kind = get_target(target)
    if kind.template != "cpu":
        return None
    lock = DeviceLock(kind.timer_key({}))
    try:
        with lock.exclusive():
            return round(fma_peak(threads or None).gflops, 2)
    finally:
        lock.close()


__all__ = ["Peak", "device_peak_gflops", "fma_peak"]
