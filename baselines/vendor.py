"""The vendor library on the same task and machine: PyTorch's conv2d/matmul (oneDNN/MKL on CPU
with the kernels' thread count, cuDNN/cuBLAS in fp32 on CUDA). ``VendorTimer`` is the one timer
that the CLI, the leaderboard and the benchmarks interleave with tensorgym's kernels
(``compare.remeasure``). Targets without a vendor library (OpenCL) and machines without PyTorch
get a timer that is ``skipped``, with the reason."""
from __future__ import annotations

import os
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

from tensorgym.hardware.result import spread
from tensorgym.workloads import Workload


def _op(workload: Workload) -> Callable[..., Any]:
    import torch.nn.functional as F

    if workload.op == "conv2d":
        _, _, _, _, _, _, stride, pad = workload.params
        return lambda x, w: F.conv2d(x, w, stride=stride, padding=pad)
    if workload.op == "matmul":
        return lambda a, b: a @ b
    raise ValueError(f"no vendor op for {workload.op}")


class VendorTimer:
    """Times the vendor op: ``sample(n)`` gives ``n`` samples, seconds per run, each sample
    running the op ``number`` times so that it lasts at least ``min_seconds``. Every call sets
    PyTorch's CPU threads (and CUDA's fp32 and cuDNN autotuning flags) and restores them after,
    runs under ``torch.no_grad()``. Built with a warm-up run checked against the workload's
    reference. ``skipped`` says why there is nothing to time ("" when there is)."""

    def __init__(self, workload: Workload, target: str, threads: "int | None" = None,
                 min_seconds: float = 0.01) -> None:
        self.workload, self.target, self.min_seconds = workload, target, min_seconds
        self.library, self.skipped, self.number = "torch", "", 1
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
        if workload.op not in ("conv2d", "matmul"):
            self.skipped = f"no vendor op for {workload.op}"
            return
        if target == "cuda" and not torch.cuda.is_available():
            self.library, self.skipped = "cuDNN via torch", "torch has no CUDA device here"
            return
        self.device = "cuda" if target == "cuda" else "cpu"
        self.threads = (threads or os.cpu_count() or 1) if self.device == "cpu" else 0
        self.library = (f"torch {torch.__version__} " +
                        ("cuDNN/cuBLAS" if self.device == "cuda" else
                         f"CPU (oneDNN/MKL), {self.threads} threads"))
        self._op = _op(workload)
        with self._settings():
            self._args = [torch.from_numpy(x).to(self.device) for x in workload.random_inputs(0)]
            out = self._op(*self._args)  # warm-up (cuDNN picks its algorithm here)
            ref = workload.reference(workload.random_inputs(0))
            err = float(abs(out.float().cpu().numpy() - ref).max())
            if err > 1e-2 * max(1.0, float(abs(ref).max())):
                self.skipped = f"wrong answer (err {err:.3g})"
                return
            while self.number < 1 << 20 and self._time(self.number) * self.number < min_seconds:
                self.number *= 4

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
        self._sync()
        t0 = time.perf_counter()
        for _ in range(number):
            self._op(*self._args)
        self._sync()
        return (time.perf_counter() - t0) / number

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
