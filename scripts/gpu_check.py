"""Check the GPU template on an NVIDIA GPU, standalone (no measurer, no records):

1. correctness of ``--check`` random valid configs of the workload (default conv2d-C6) vs NumPy;
2. a ``--trials`` random search on it, printing the best kernel's TFLOP/s beside PyTorch's cuDNN
   conv2d on the same GPU (skipped when torch has no CUDA).

    python scripts/gpu_check.py [--check 50] [--trials 200] [--seed 0] [--jobs 16]

Without a CUDA device it stops at once with the runtime's "no CUDA device" error (exit code 2).
Compiles run in a thread pool (NVRTC or nvcc release the GIL); timed runs are sequential.
"""
from __future__ import annotations

import argparse
import math
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from tensorgym.errors import TargetUnavailableError
from tensorgym.hardware.runtime import Runtime, get_runtime
from tensorgym.lower.gpu import lower_gpu
from tensorgym.templates.gpu import sample_valid_configs
from tensorgym.workloads import get_workload


def tolerance(workload) -> float:
    return max(1e-5, 1e-6 * workload.reduction_length)


def build_all(runtime: Runtime, workload, configs, limits, jobs: int):
    """(config, program, binary or exception) for every config, compiled in parallel."""
    def build(config):
        program = lower_gpu(workload, config, limits)
        try:
            return config, program, runtime.compile(runtime.render(program), program)
        except Exception as e:  # noqa: BLE001 - reported per config
            return config, program, e

    with ThreadPoolExecutor(jobs) as pool:
        return list(pool.map(build, configs))


def run(runtime, program, binary, inputs, expected, min_ms: float = 2.0, repeat: int = 3):
    """(median seconds, max relative error) of one kernel."""
    kernel = runtime.load(binary, program)
    bufs = kernel.alloc(inputs)
    try:
        first = kernel.time(bufs, 1)
        out = kernel.read_output(bufs)
        err = float(np.abs(out - expected).max() / (np.abs(expected).max() or 1.0))
        number = max(1, math.ceil(min_ms * 1e-3 / max(first, 1e-7)))
        return statistics.median(kernel.time(bufs, number) for _ in range(repeat)), err
    finally:
        kernel.release(bufs)
        kernel.close()


def torch_cudnn_seconds(workload) -> "float | None":
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available() or workload.op != "conv2d":
        return None
    n, ic, h, w, oc, k, stride, pad = workload.params
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False  # fp32 arithmetic, like our kernels
    x = torch.randn(n, ic, h, w, device="cuda")
    weight = torch.randn(oc, ic, k, k, device="cuda")
    conv = lambda: torch.nn.functional.conv2d(x, weight, stride=stride, padding=pad)  # noqa: E731
    for _ in range(20):
        conv()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(5):
        start.record()
        for _ in range(100):
            conv()
        end.record()
        torch.cuda.synchronize()
        samples.append(start.elapsed_time(end) * 1e-3 / 100)
    return statistics.median(samples)


def main(argv: "list[str] | None" = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workload", default="conv2d-C6")
    ap.add_argument("--check", type=int, default=50, help="random configs checked vs NumPy")
    ap.add_argument("--trials", type=int, default=200, help="random-search trials")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--jobs", type=int, default=16, help="parallel compiles")
    ap.add_argument("--target", default="cuda", choices=["cuda", "opencl"],
                    help="opencl runs the same checks on any OpenCL device (e.g. PoCL)")
    args = ap.parse_args(argv)

    runtime = get_runtime(args.target)
    try:
        runtime.check_available()
    except TargetUnavailableError as e:
        print(f"gpu_check: {e}", file=sys.stderr)
        return 2
    workload = get_workload(args.workload)
    limits = runtime.limits()
    print(f"device {runtime.device_name()}  limits {limits}")
    inputs = workload.random_inputs(args.seed)
    expected = workload.reference(inputs)
    rng = np.random.default_rng(args.seed)

    t0 = time.perf_counter()
    checked = build_all(runtime, workload, sample_valid_configs(workload, args.check, rng, limits),
                        limits, args.jobs)
    correct = 0
    for config, program, binary in checked:
        if isinstance(binary, Exception):
            print(f"  COMPILE ERROR {config}: {binary}")
            continue
        try:
            seconds, err = run(runtime, program, binary, inputs, expected, min_ms=0.1, repeat=1)
        except Exception as e:  # noqa: BLE001
            print(f"  RUN ERROR {config}: {type(e).__name__}: {e}")
            continue
        if err <= tolerance(workload):
            correct += 1
        else:
            print(f"  WRONG (max rel err {err:.3g}) {config}")
    print(f"correctness: {correct}/{len(checked)} random configs of {workload.label} match NumPy "
          f"({time.perf_counter() - t0:.0f} s)")

    t0 = time.perf_counter()
    trials = build_all(runtime, workload, sample_valid_configs(workload, args.trials, rng, limits),
                       limits, args.jobs)
    best, failures = (math.inf, None), 0
    for config, program, binary in trials:
        try:
            if isinstance(binary, Exception):
                raise binary
            seconds, err = run(runtime, program, binary, inputs, expected)
            if err > tolerance(workload):
                raise ValueError(f"wrong answer (max rel err {err:.3g})")
        except Exception as e:  # noqa: BLE001
            failures += 1
            print(f"  trial failed: {type(e).__name__}: {str(e)[:200]}")
            continue
        best = min(best, (seconds, config), key=lambda b: b[0])
    tflops = workload.flops / best[0] / 1e12 if best[1] is not None else 0.0
    print(f"random search: {len(trials)} trials, {failures} failed, "
          f"{time.perf_counter() - t0:.0f} s")
    print(f"best tensorgym kernel: {tflops:.3f} TFLOP/s ({best[0] * 1e6:.1f} us)  {best[1]}")
    torch_seconds = torch_cudnn_seconds(workload)
    if torch_seconds is not None:
        print(f"PyTorch cuDNN conv2d:  {workload.flops / torch_seconds / 1e12:.3f} TFLOP/s "
              f"({torch_seconds * 1e6:.1f} us)")
    return 0 if correct == len(checked) else 1


if __name__ == "__main__":
    sys.exit(main())
