"""The vendor library on the same task and machine, in the same run: PyTorch's conv2d/matmul
(oneDNN/MKL on CPU with the thread count matched, cuDNN/cuBLAS on CUDA). Targets without one
(OpenCL) and machines without it are skipped with the reason recorded."""
from __future__ import annotations

import os
import statistics
import time

from tensorgym.workloads import Workload

from .results import VendorResult


def _torch_inputs(workload: Workload, device: str):
    import torch

    return [torch.from_numpy(x).to(device) for x in workload.random_inputs(0)]


def _torch_op(workload: Workload):
    import torch.nn.functional as F

    if workload.op == "conv2d":
        _, _, _, _, _, _, stride, pad = workload.params
        return lambda x, w: F.conv2d(x, w, stride=stride, padding=pad)
    if workload.op == "matmul":
        return lambda a, b: a @ b
    raise ValueError(f"no vendor op for {workload.op}")


def measure_vendor(workload: Workload, target: str, repeats: int = 10,
                   min_seconds: float = 0.05, threads: "int | None" = None) -> VendorResult:
    """Median over ``repeats`` samples; each sample runs the op enough times to take
    ``min_seconds``. ``threads`` (CPU) defaults to every core, like the CPU runtime's parallel
    loops."""
    key = workload.key
    try:
        import torch
    except ImportError as e:
        return VendorResult(key, target, "torch", skipped=f"PyTorch is not installed ({e})")
    if target == "opencl":
        return VendorResult(key, target, "none", skipped="no vendor library for OpenCL")
    if target == "cuda" and not torch.cuda.is_available():
        return VendorResult(key, target, "cuDNN via torch",
                            skipped="torch has no CUDA device on this machine")
    if target not in ("cpu", "cuda"):
        return VendorResult(key, target, "none", skipped=f"unknown target {target!r}")
    device = "cuda" if target == "cuda" else "cpu"
    library = (f"torch {torch.__version__} " +
               ("cuDNN/cuBLAS" if device == "cuda" else "CPU (oneDNN/MKL)"))
    op = _torch_op(workload)
    saved_threads = torch.get_num_threads()
    if device == "cpu":
        threads = threads or os.cpu_count() or 1
        library += f", {threads} threads"
    try:
        if device == "cpu":
            torch.set_num_threads(threads)
        with torch.no_grad():
            args = _torch_inputs(workload, device)
            out = op(*args)  # warm-up and correctness check against tensorgym's reference
            ref = workload.reference(workload.random_inputs(0))
            err = float(abs(out.float().cpu().numpy() - ref).max())
            if err > 1e-2 * max(1.0, float(abs(ref).max())):
                return VendorResult(key, target, library, skipped=f"wrong answer (err {err:.3g})")
            number = _calibrate(op, args, device, min_seconds)
            costs = [_time(op, args, device, number) for _ in range(repeats)]
    finally:
        torch.set_num_threads(saved_threads)
    gflops = workload.flops / statistics.median(costs) / 1e9
    return VendorResult(key, target, library, gflops, costs)


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def _time(op, args, device: str, number: int) -> float:
    _sync(device)
    t0 = time.perf_counter()
    for _ in range(number):
        op(*args)
    _sync(device)
    return (time.perf_counter() - t0) / number


def _calibrate(op, args, device: str, min_seconds: float) -> int:
    number = 1
    while number < 1 << 20:
        if _time(op, args, device, number) * number >= min_seconds:
            return number
        number *= 4
    return number
