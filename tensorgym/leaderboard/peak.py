"""The CPU's FMA peak, measured: a loop of independent fused multiply-adds on the host's widest
float32 vectors (``host_vector_lanes``), JIT-compiled for this CPU as kernels are and run on
``threads`` threads at once. Its GFLOP/s is the ceiling a convolution or matmul kernel can reach
on these cores (2 FLOPs per lane per FMA), so "share of FMA peak" says how close a layer is to it.

    peak = fma_peak(threads=2)
    print(peak.gflops, peak.lanes)

A single measurement can read low: a busy moment halves it, and a kernel then seems to run at
150% of the peak. So runs take the peak from a :class:`PeakBook`: spaced samples, the best ever
measured on this device kept on disk, and measured again when a result exceeds it.
"""
from __future__ import annotations

import ctypes
import json
import os
import threading
import time
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

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
             repeats: int = 5, spacing: float = 0.0) -> Peak:
    """The FMA loop on ``threads`` threads (default: every core this process may use) for about
    ``seconds`` per run, ``repeats`` runs ``spacing`` seconds apart; the best run is the peak (a
    slower one lost time to other processes). ``lanes`` defaults to the host's vector width."""
    threads = threads or available_cpus()
    lanes = lanes or host_vector_lanes()
    if threads < 1 or repeats < 1 or seconds <= 0 or spacing < 0:
        raise ValueError("need threads >= 1, repeats >= 1, seconds > 0 and spacing >= 0")
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
    for r in range(repeats):
        if r and spacing:
            time.sleep(spacing)  # apart in time, so one busy moment cannot lower every sample
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


def default_book_path() -> Path:
    import platformdirs  # noqa: PLC0415

    return Path(platformdirs.user_cache_dir("tensorgym")) / "fma-peak.json"


class PeakBook:
    """The best FMA peak measured on this CPU, per thread count, kept in a JSON file (default:
    the user cache dir's ``fma-peak.json``) so that one run measured in a busy moment cannot lower
    it. :meth:`measure` takes ``repeats`` spaced samples and keeps the best of them and of the
    book; :meth:`check` measures again when a result exceeds the peak and says whether it still
    does (then the result is flagged, not printed as a share over 100%)."""

    def __init__(self, path: "str | os.PathLike | None" = None, seconds: float = 0.2,
                 repeats: int = 5, spacing: float = 0.3) -> None:
        self.path = Path(path) if path else default_book_path()
        self.seconds, self.repeats, self.spacing = seconds, repeats, spacing
        self.last: "Peak | None" = None  # the latest measurement, whatever the book kept

    @staticmethod
    def key(threads: int, lanes: "int | None" = None) -> str:
        """The CPU device's fingerprint on ``threads`` threads (what records are keyed by) and
        the vector width the loop runs on."""
        from tensorgym.hardware.target import get_target  # noqa: PLC0415

        device = get_target("cpu").device_fingerprint(num_threads=threads)
        return f"{device}/{lanes or host_vector_lanes()}l"

    def _read(self) -> dict:
        try:
            book = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}  # none yet, or unreadable (a kill mid-write cannot leave one: see _write)
        return book if isinstance(book, dict) else {}

    def _write(self, book: dict) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(book, indent=1, sort_keys=True))
        os.replace(tmp, self.path)

    def best(self, threads: int) -> "float | None":
        """The best peak recorded for ``threads`` threads on this CPU, or None."""
        entry = self._read().get(self.key(threads))
        return float(entry["gflops"]) if isinstance(entry, dict) and "gflops" in entry else None

    def measure(self, threads: int) -> float:
        """Spaced samples now; the best of them and of the book, which keeps it."""
        peak = self.last = fma_peak(threads, seconds=self.seconds, repeats=self.repeats,
                                    spacing=self.spacing)
        book = self._read()
        key = self.key(threads, peak.lanes)
        kept = book[key].get("gflops", 0.0) if isinstance(book.get(key), dict) else 0.0
        if peak.gflops > kept:
            book[key] = {"gflops": round(peak.gflops, 2),
                         "samples": [round(x, 2) for x in peak.samples],
                         "measured": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            self._write(book)
        return round(max(peak.gflops, float(kept)), 2)

    def check(self, threads: int, gflops: float) -> tuple[float, bool]:
        """(the peak, whether ``gflops`` is still above it): measured again only if ``gflops``
        exceeds the recorded peak."""
        peak = self.best(threads)
        if peak is not None and gflops <= peak:
            return peak, False
        peak = self.measure(threads)
        return peak, gflops > peak


def device_peak_gflops(target: str, threads: int, gflops: float = 0.0,
                       book: "PeakBook | None" = None) -> "float | None":
    """The FMA peak of a CPU target's ``threads`` threads (0: every core this process may use),
    from the ``book`` (default :class:`PeakBook`), timed holding the host's timing lock so no
    tensorgym kernel runs meanwhile; None for other targets (a GPU's peak is not measured
    here). With ``gflops`` (a result), measured only if the result exceeds the book's peak."""
    from tensorgym.processes.host import DeviceLock  # noqa: PLC0415
    from tensorgym.hardware.target import get_target  # noqa: PLC0415

    kind = get_target(target)
    if kind.template != "cpu":
        return None
    book = book or PeakBook()
    threads = threads or available_cpus()
    lock = DeviceLock(kind.timer_key({}))
    try:
        with lock.exclusive():
            return book.check(threads, gflops)[0] if gflops else book.measure(threads)
    finally:
        lock.close()


__all__ = ["Peak", "PeakBook", "device_peak_gflops", "fma_peak"]
