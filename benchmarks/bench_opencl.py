"""OpenCL backend benchmark: random search through the measurer on an OpenCL device (PoCL on
this CPU unless a GPU driver is installed), beside the same random search on the CPU target.

    python benchmarks/bench_opencl.py --trials 30 --workloads conv2d-C6 matmul-1024

Prints, per workload and target: the plain reference schedule's GFLOP/s and the best GFLOP/s
found, both re-measured interleaved after the search (``--rounds``), the median seconds per trial
(build + measure), and the fraction of trials that failed (invalid for the device, compile
errors, wrong answers, timeouts), with the failure kinds.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from collections import Counter

import numpy as np

from tensorgym.leaderboard import compare
from tensorgym.measure import LocalMeasurer, MeasureOptions
from tensorgym.templates import default_config, space_for
from tensorgym.workloads import get_workload


def random_search(target: str, workload, trials: int, seed: int, options: MeasureOptions,
                  batch: int, rounds: int) -> dict:
    measurer = LocalMeasurer(target, options)
    try:
        space = space_for(workload, target)
        configs = space.sample_unique(np.random.default_rng(seed), trials)
        results = []
        for i in range(0, len(configs), batch):
            results += measurer.measure(workload, configs[i:i + batch])
            best_so_far = max((r.gflops for r in results), default=0.0)
            print(f"  {workload.label} {target}: {len(results)}/{len(configs)} trials, "
                  f"best {best_so_far:.3f} GFLOP/s", file=sys.stderr, flush=True)
        device = measurer.device
        ok = [r for r in results if r.ok]
        best = max(ok, key=lambda r: r.gflops, default=None)
        # the best and the reference schedule re-measured interleaved: only these are reported
        again = {"reference": default_config(workload, target)}
        if best:
            again["best"] = best.config
        c = compare.remeasure(workload, target, again, rounds, measurer, vendor=False)
    finally:
        measurer.close()
    return {
        "workload": workload.label, "target": target, "device": device,
        "reference": c.gflops("reference"), "best": c.gflops("best"),
        "median_s_per_trial": statistics.median(r.build_time + r.run_time for r in results),
        "failed_fraction": 1 - len(ok) / len(results),
        "failures": dict(Counter(r.error.name for r in results if not r.ok)),
        "best_config": best.config.to_json() if best else "",
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", nargs="+", default=["conv2d-C6", "matmul-1024"])
    p.add_argument("--trials", type=int, default=30, help="random-search trials per target")
    p.add_argument("--targets", nargs="+", default=["opencl", "cpu"])
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--builders", type=int, default=2, help="parallel build processes")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds per config's run phase")
    p.add_argument("--build-timeout", type=float, default=120.0,
                   help="seconds per config's build (PoCL compiles big unrolled kernels slowly)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--rounds", type=int, default=3, help="re-measurement rounds of the best")
    args = p.parse_args()
    options = MeasureOptions(repeat=3, min_repeat_ms=20, timeout=args.timeout,
                             build_timeout=args.build_timeout, n_parallel=args.builders)
    cols = ["workload", "target", "reference", "best", "median_s_per_trial", "failed_fraction"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols), flush=True)
    rows = []
    for w in args.workloads:
        for t in args.targets:
            r = random_search(t, get_workload(w), args.trials, args.seed, options, args.batch,
                              args.rounds)
            rows.append(r)
            print("| " + " | ".join(f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c])
                                     for c in cols) + " |", flush=True)
    for r in rows:
        print(f"{r['workload']} on {r['device']}: failures {r['failures']}; best {r['best_config']}")
    print(f"GFLOP/s columns; {args.trials} random trials per target, seed {args.seed}")


if __name__ == "__main__":
    main()
