"""The vendor library on the same task and machine: PyTorch's conv2d (with groups), linear, bmm
and matmul, then the epilogue's other ops as a model calls them (oneDNN/MKL on CPU
with the kernels' thread count, cuDNN/cuBLAS in fp32 on CUDA, where a sample is a CUDA graph of
the runs timed by CUDA events, like tensorgym's kernels: ``VendorTimer._replay`` says why).
``VendorTimer`` is the one timer that the CLI, the leaderboard and the benchmarks interleave with
tensorgym's kernels (``compare.remeasure``). Targets without a vendor library (OpenCL), tasks
it has no op for (``unsupported``: grouped conv2d, dense, batch_matmul, fused epilogues) and
machines without PyTorch get a timer that is ``skipped``, with the reason.

The allocator is warmed on purpose (``warm_allocator``): every call of the vendor op allocates
its output (and oneDNN a blocked copy of it) and frees it again. In a fresh process glibc serves
these multi-MB blocks with ``mmap`` and returns them with ``munmap``, so every call pays 1,536
page faults: oneDNN's C1 (2 threads, Zen 4) measured 61-68 GFLOP/s that way and 184-198 once
anything had freed a large block (the NumPy reference), which raises glibc's dynamic mmap
threshold so the blocks are reused from the heap. The steady state is the fair figure, so the timer reaches it before the
first run instead of depending on what the process did before.
"""
from __future__ import annotations

import ctypes
import math
import os
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from tensorgym.measure.result import spread
from tensorgym.workloads import Workload


#: glibc adopts a freed mmapped block's size as its mmap threshold (and twice it as its trim
#: threshold) only up to DEFAULT_MMAP_THRESHOLD_MAX, 32 MiB on 64-bit; 31 MiB stays under it
WARM_BLOCK_BYTES = 31 << 20


def warm_allocator() -> str:
    """Raise glibc's dynamic mmap threshold to ~31 MiB by allocating and freeing one block of
    that size (mapped, never touched: no page faults, microseconds), as any large temporary
    does in a process that has worked a while. Blocks up to that size are then reused from the
    heap instead of being mapped and faulted in on every call. Process-wide and lasting, like
    glibc's own adjustment (``mallopt`` would instead switch the dynamic threshold off for good).
    Returns what was done; other C libraries (musl, macOS) have no dynamic threshold to warm."""
    libc = ctypes.CDLL(None)
    try:
        version = libc.gnu_get_libc_version
    except AttributeError:
        return "not glibc: no dynamic mmap threshold to warm"
    version.restype = ctypes.c_char_p
    libc.malloc.restype = ctypes.c_void_p
    libc.malloc.argtypes = [ctypes.c_size_t]
    libc.free.argtypes = [ctypes.c_void_p]
    block = libc.malloc(WARM_BLOCK_BYTES)
    if not block:
        raise MemoryError(f"could not allocate {WARM_BLOCK_BYTES} bytes to warm the allocator")
    libc.free(block)
    return f"glibc {version().decode()}: mmap threshold warmed to {WARM_BLOCK_BYTES >> 20} MiB"


def _op(workload: Workload) -> Callable[..., Any]:
    """The workload as PyTorch runs it eagerly, from the workload's input arrays to its output
    array: the operator (its bias passed to conv2d/linear, as a model's layer does), then each
    other epilogue op as the separate call a model makes (relu, hardtanh, gelu, +=)."""
    import torch
    import torch.nn.functional as F

    p, ops = workload.params, workload.epilogue
    out_shape = workload.output.shape
    if workload.op == "conv2d":
        _, _, _, _, oc, k, stride, pad = p[:8]
        groups = workload.groups

        def operator(x, w, b=None):
            return F.conv2d(x, w.reshape(oc, -1, k, k), b.reshape(-1) if b is not None else None,
                            stride=stride, padding=pad, groups=groups).reshape(out_shape)
    elif workload.op == "dense":
        def operator(x, w, b=None):
            return F.linear(x, w, b)
    elif workload.op == "batch_matmul":
        def operator(a, b, bias=None):
            return torch.bmm(a, b) if bias is None else torch.baddbmm(bias, a, b)
    elif workload.op == "matmul":
        def operator(a, b, bias=None):
            return a @ b if bias is None else torch.addmm(bias, a, b)
    else:
        raise ValueError(f"no vendor op for {workload.op}")
    activation = {"relu": F.relu, "relu6": F.relu6, "gelu": F.gelu}
    n_operator = 2 + ("bias" in ops)

    def run(*args):
        y = operator(*args[:n_operator])
        for op in ops:
            if op == "add":
                y = y + args[-1]
            elif op in activation:
                y = activation[op](y)
        return y

    return run


class VendorTimer:
    """Times the vendor op: ``sample(n)`` gives ``n`` samples, seconds per run, each sample
    running the op ``number`` times so that it lasts at least ``min_seconds``. Every call sets
    PyTorch's CPU threads (and CUDA's fp32 and cuDNN autotuning flags) and restores them after,
    runs under ``torch.no_grad()``. Built with a warm-up run checked against the workload's
    reference. ``skipped`` says why there is nothing to time ("" when there is). On the CPU the
    C allocator is warmed first (``warm_allocator``, the module docstring says why); ``allocator``
    says what was done."""

    def __init__(self, workload: Workload, target: str, threads: "int | None" = None,
                 min_seconds: float = 0.01, cuda_graph: bool = True) -> None:
        self.workload, self.target, self.min_seconds = workload, target, min_seconds
        self.library, self.skipped, self.number, self.allocator = "torch", "", 1, ""
        self.cuda_graph = cuda_graph
        self._graphs: dict[int, Any] = {}  # runs per replay -> the captured CUDA graph
        try:
            import torch
        except ImportError as e:
            self.skipped = f"PyTorch is not installed ({e})"
            return
        if target not in ("cpu", "cuda"):
            self.library = "none"
            self.skipped = ("no vendor library for OpenCL" if target == "opencl"
                            else f"unknown target {target!r}")
            return
        if workload.op not in ("conv2d", "matmul", "dense", "batch_matmul"):
            self.skipped = f"no vendor op for {workload.op}"
            return
        if target == "cuda" and not torch.cuda.is_available():
            self.library, self.skipped = "cuDNN via torch", "torch has no CUDA device here"
            return
        self.device = "cuda" if target == "cuda" else "cpu"
        self.threads = (threads or os.cpu_count() or 1) if self.device == "cpu" else 0
        self.library = (f"torch {torch.__version__} " +
                        (f"cuDNN/cuBLAS{', CUDA graph' if cuda_graph else ''}"
                         if self.device == "cuda" else
                         f"CPU (oneDNN/MKL), {self.threads} threads"))
        self._op = _op(workload)
        if self.device == "cpu":
            self.allocator = warm_allocator()
        with self._settings():
            self._args = [torch.from_numpy(x).to(self.device) for x in workload.random_inputs(0)]
            out = self._op(*self._args)  # warm-up (cuDNN picks its algorithm here)
            ref = workload.reference(workload.random_inputs(0))
            err = float(abs(out.float().cpu().numpy() - ref).max())
            if err > 1e-2 * max(1.0, float(abs(ref).max())):
                self.skipped = f"wrong answer (err {err:.3g})"
                return
            # the fastest of a few runs: one run slowed by another process must not leave
            # ``number`` at 1 and every sample a single millisecond-long run
            try:
                per_run = min(self._time(1) for _ in range(5))
            except RuntimeError as e:  # a capture refused: said in every figure's label
                if not (self.device == "cuda" and cuda_graph):
                    raise
                self.cuda_graph = False
                self.library = self.library.replace(
                    ", CUDA graph", f" (CUDA graph capture failed: {str(e)[:200]}; timed call "
                    "by call, host time included)")
                per_run = min(self._time(1) for _ in range(5))
            cap = 1 << 12 if self.device == "cuda" and self.cuda_graph else 1 << 20  # graph nodes
            self.number = max(1, min(cap, math.ceil(min_seconds / max(per_run, 1e-9))))

    @contextmanager
    def _settings(self) -> Iterator[None]:
        import torch

        saved = (torch.get_num_threads(), torch.backends.cudnn.benchmark,
                 torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32)
        try:
            if self.device == "cpu":
                torch.set_num_threads(self.threads)
            else:  # fp32 arithmetic like tensorgym's kernels; the fastest cuDNN algorithm
                torch.backends.cudnn.benchmark = True
                torch.backends.cudnn.allow_tf32 = False
                torch.backends.cuda.matmul.allow_tf32 = False
            with torch.no_grad():
                yield
        finally:
            torch.set_num_threads(saved[0])
            (torch.backends.cudnn.benchmark, torch.backends.cudnn.allow_tf32,
             torch.backends.cuda.matmul.allow_tf32) = saved[1:]

    def _sync(self) -> None:
        if self.device == "cuda":
            import torch

            torch.cuda.synchronize()

    def _time(self, number: int) -> float:
        if self.device == "cuda" and self.cuda_graph:
            return self._replay(number)
        self._sync()
        t0 = time.perf_counter()
        for _ in range(number):
            self._op(*self._args)
        self._sync()
        return (time.perf_counter() - t0) / number

    def _replay(self, number: int) -> float:
        """Seconds per run of ``number`` runs captured in one CUDA graph, timed by CUDA events:
        the GPU's time alone, as tensorgym's kernels are timed (on an H200, calling C6's cuDNN
        convolution from Python run by run added 2-6%: ``benchmarks/bench_vendor_cuda.py``)."""
        import torch

        graph = self._graphs.get(number)
        if graph is None:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # capture needs the op warmed on a side stream
                self._op(*self._args)
            torch.cuda.current_stream().wait_stream(side)
            graph = self._graphs[number] = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                for _ in range(number):
                    self._op(*self._args)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e-3 / number

    def sample(self, n: int, max_n: int = 0, target_cv: float = 0.0) -> list[float]:
        """``n`` timed samples, seconds per run, and more up to ``max_n`` while their
        coefficient of variation exceeds ``target_cv`` ([] when skipped)."""
        if self.skipped:
            return []
        with self._settings():
            out = [self._time(self.number) for _ in range(n)]
            while len(out) < max_n and spread(out) > target_cv:
                out.append(self._time(self.number))
        return out
