"""Is it the kernel or the machine? One config timed again and again for ``--seconds``,
interleaved with the workload's starting (reference) schedule, the drift monitor's calibration
kernel and PyTorch, one sample of each (~``--sample-ms``) per pass, all in this process; then the
median GFLOP/s of each per window of ``--window`` seconds, and how each moved with the config;
beside them, the share of CPU time the guest's /proc/stat counts as stolen by the hypervisor.

    tensorgym tune conv2d-C6 --agent xgb --threads 2 --json > best.json
    python benchmarks/bench_speed_states.py conv2d-C6 best.json --seconds 120

On the 2-core VMs this project is measured on, a tuned C6 kernel steps between two speeds
(~193 and ~214 GFLOP/s) for stretches of seconds to minutes while the calibration kernel, the
reference schedule and a pure-FMA loop keep theirs: a re-measurement taken in the other state
reads ~10% off, whatever either measurement does. This prints what the machine does meanwhile.
On a 2-core Zen 3 VM the whole machine slows instead (PyTorch with the config: window
correlation 0.81 over 200 s of matmul-1024), and no steal time is reported meanwhile (0-3% in
every window, correlation -0.06).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("OMP_PROC_BIND", "true")  # as the measuring worker runs kernels

from tensorgym.leaderboard.harness import runtime_options  # noqa: E402
from tensorgym.leaderboard.vendor import VendorTimer  # noqa: E402
from tensorgym.measure.drift import calibration_config, calibration_workload  # noqa: E402
from tensorgym.hardware.runtime import get_runtime  # noqa: E402
from tensorgym.measure.worker import Reference, relative_error, tolerance  # noqa: E402
from tensorgym.lower import lower  # noqa: E402
from tensorgym.templates import default_config, space_for  # noqa: E402
from tensorgym.workloads import get_workload  # noqa: E402


def sampler(runtime, reference: Reference, workload, config, sample_s: float):
    """A function timing one sample of ``config`` (runs enough for ``sample_s``), in GFLOP/s,
    once its first run's output (NaN-filled before it) matched NumPy's."""
    program = lower(workload, config)
    kernel = runtime.load(runtime.compile(runtime.render(program), program), program)
    bufs = kernel.alloc(reference.inputs_for(workload, program))
    kernel.time(bufs, 1)
    expected = reference.get(workload)[1]
    err = relative_error(np.asarray(kernel.read_output(bufs)), expected)
    if not err <= tolerance(workload):  # also NaN: an output never written
        raise SystemExit(f"{workload.label} {config.to_json()}: wrong answer (max relative "
                         f"error {err:.3g})")
    per_run = min(kernel.time(bufs, 1) for _ in range(3))
    number = max(1, int(sample_s / per_run))
    return lambda: workload.flops / kernel.time(bufs, number) / 1e9


def cpu_ticks() -> "tuple[int, int] | None":
    """(steal, all) clock ticks of every CPU so far from /proc/stat (Linux), or None: steal is
    time a hypervisor ran something else while this VM's vCPUs wanted to run."""
    try:
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n")[0].split()[1:]]
    except (OSError, ValueError):
        return None
    return (fields[7] if len(fields) > 7 else 0), sum(fields[:8])


def steal_share(a: "tuple[int, int] | None", b: "tuple[int, int] | None") -> float:
    """The share of CPU time stolen between two ``cpu_ticks`` readings (NaN where unknown)."""
    if a is None or b is None or b[1] <= a[1]:
        return float("nan")
    return (b[0] - a[0]) / (b[1] - a[1])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("workload")
    p.add_argument("config", help="a JSON file: a config, or tune --json's summary")
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--window", type=float, default=2.0, help="seconds per printed row")
    p.add_argument("--sample-ms", type=float, default=10.0)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--no-torch", action="store_true", help="leave PyTorch out")
    args = p.parse_args()

    w = get_workload(args.workload)
    doc = json.loads(Path(args.config).read_text())
    space = space_for(w, "cpu")
    config = space.from_json(json.dumps(doc.get("best_config", doc)))
    runtime = get_runtime("cpu", **runtime_options("cpu", args.threads))
    reference = Reference(0)
    s = args.sample_ms / 1e3
    cal = calibration_workload()
    timers = {"config": sampler(runtime, reference, w, config, s),
              "reference": sampler(runtime, reference, w, default_config(w, "cpu"), s),
              "calibration": sampler(runtime, reference, cal, calibration_config(cal, "cpu"), s)}
    if not args.no_torch:  # in this process: its threads and the kernels' never overlap
        vendor = VendorTimer(w, "cpu", threads=args.threads, min_seconds=s)
        if vendor.skipped:
            print(f"PyTorch left out: {vendor.skipped}")
        else:
            timers["torch"] = lambda: w.flops / vendor.sample(1)[0] / 1e9
    names = list(timers)
    rows: list[list[float]] = []
    start = last = time.perf_counter()
    marks = [0]  # the first row of each window
    steals: list[float] = []  # per window
    ticks = cpu_ticks()
    print(f"{w.label}, {args.threads} threads; GFLOP/s, median per {args.window:g} s window; "
          "steal: % of CPU time the hypervisor gave to others")
    print("   s | " + " | ".join(f"{n:>11}" for n in names) + " | steal %")
    while (now := time.perf_counter()) - start < args.seconds:
        rows.append([timers[n]() for n in names])
        if now - last >= args.window:
            window = np.array(rows[marks[-1]:])
            steals.append(100 * steal_share(ticks, ticks := cpu_ticks()))
            print(f"{now - start:4.0f} | " + " | ".join(
                f"{statistics.median(window[:, j]):11.1f}" for j in range(len(names)))
                + f" | {steals[-1]:7.1f}", flush=True)
            last = now
            marks.append(len(rows))
    summary(np.array(rows), names, marks, np.array(steals))


def summary(a: np.ndarray, names: list[str], marks: list[int], steals: np.ndarray) -> None:
    """Each timer's lowest and highest window median, how its windows follow the config's, and
    how the config's windows follow the steal time."""
    med = np.array([np.median(a[i:j], axis=0) for i, j in zip(marks, marks[1:]) if j > i])
    if not len(med):  # shorter than one window
        med = np.median(a, axis=0)[None]
    print(f"\n{len(a)} passes; per window: lowest / highest median, and the correlation of "
          "the window medians with the config's")
    for j, n in enumerate(names):
        corr = np.corrcoef(med[:, 0], med[:, j])[0, 1] if len(med) > 2 else float("nan")
        print(f"{n:>11}: {med[:, j].min():7.1f} / {med[:, j].max():7.1f} "
              f"({med[:, j].max() / med[:, j].min():.2f}x)  correlation {corr:.2f}")
    n = min(len(med), len(steals))
    if n > 2 and np.isfinite(steals[:n]).all() and np.ptp(steals[:n]) > 0:
        print(f"steal %: {steals.min():.1f} / {steals.max():.1f}; correlation of the config's "
              f"window medians with it {np.corrcoef(med[:n, 0], steals[:n])[0, 1]:.2f}")


if __name__ == "__main__":
    main()
