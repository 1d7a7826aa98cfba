"""Throughput of lowering + featurizing, per feature mode (configs/s on one core).

    python benchmarks/bench_features.py --n 1000 --seed 0

"cold" clears the feature cache first (every config lowered and analysed), "warm" repeats the
same batch (served from the cache, as when simulated annealing revisits configs), and "cold, N
jobs" lowers a cold batch on N processes (``--jobs``, default every core), as the env's
``featurize`` does for the annealer's big batches. Timings on a
shared machine are noisy: the best of ``--repeat`` runs is shown, in wall-clock and CPU time.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from tensorgym.features import FEATURE_MODES, clear_cache, default_jobs, featurize
from tensorgym.lower import lower
from tensorgym.templates import space_for
from tensorgym.workloads import get_workload


def _best_rate(fn, n: int, repeat: int, before=None) -> tuple[float, float]:
    """(wall-clock, CPU-time) configs/s, best of ``repeat``; CPU time is less disturbed by
    other processes sharing the cores."""
    wall = cpu = float("inf")
    for _ in range(repeat):
        if before:
            before()
        t, c = time.perf_counter(), time.process_time()
        fn()
        wall = min(wall, time.perf_counter() - t)
        cpu = min(cpu, time.process_time() - c)
    return n / wall, n / max(cpu, 1e-9)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="+", default=["conv2d-C6", "matmul-1024"])
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--n", type=int, default=1000, help="configs per batch")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--modes", nargs="+", default=list(FEATURE_MODES))
    ap.add_argument("--jobs", type=int, default=default_jobs())
    args = ap.parse_args()
    jobs = f"cold, {args.jobs} jobs"
    print(f"{'workload':<14} {'mode':<10} {'cold cfg/s':>11} {'(cpu)':>8} {'warm cfg/s':>11} "
          f"{jobs:>16}")
    for name in args.workloads:
        w = get_workload(name)
        configs = space_for(w, args.target).sample(np.random.default_rng(args.seed), args.n)
        wall, cpu = _best_rate(lambda: [lower(w, c) for c in configs], args.n, args.repeat)
        print(f"{w.label:<14} {'lower only':<10} {wall:>11.0f} {cpu:>8.0f}")
        for mode in args.modes:
            wall, cpu = _best_rate(lambda: featurize(w, configs, mode), args.n, args.repeat,
                                   clear_cache)
            split = mode in ("relation", "context")
            warm = (_best_rate(lambda: featurize(w, configs, mode), args.n, args.repeat)[0]
                    if split else float("nan"))
            par = (_best_rate(lambda: featurize(w, configs, mode, n_jobs=args.jobs), args.n,
                              args.repeat, clear_cache)[0] if split else float("nan"))
            print(f"{w.label:<14} {mode:<10} {wall:>11.0f} {cpu:>8.0f} {warm:>11.0f} {par:>16.0f}")

if __name__ == "__main__":
    main()
