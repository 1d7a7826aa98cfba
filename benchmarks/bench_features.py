"""Throughput of lowering + featurizing, per feature mode (configs/s on one core).

    python benchmarks/bench_features.py --n 1000 --seed 0

"cold" clears the feature cache first (every config lowered and analysed), "warm" repeats the
same batch (served from the cache, as when simulated annealing revisits configs). Timings on a
shared machine are noisy; take the best of ``--repeat`` runs.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from tensorgym.features import FEATURE_MODES, clear_cache, featurize
from tensorgym.lower import lower
from tensorgym.templates import space_for
from tensorgym.workloads import get_workload


def _best_rate(fn, n: int, repeat: int, before=None) -> float:
    best = float("inf")
    for _ in range(repeat):
        if before:
            before()
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return n / best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="+", default=["conv2d-C6", "matmul-1024"])
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--n", type=int, default=1000, help="configs per batch")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--modes", nargs="+", default=list(FEATURE_MODES))
    args = ap.parse_args()

    print(f"{'workload':<14} {'mode':<10} {'cold cfg/s':>11} {'warm cfg/s':>11}")
    for name in args.workloads:
        w = get_workload(name)
        configs = space_for(w, args.target).sample(np.random.default_rng(args.seed), args.n)
        rate = _best_rate(lambda: [lower(w, c) for c in configs], args.n, args.repeat)
        print(f"{w.label:<14} {'lower only':<10} {rate:>11.0f} {'':>11}")
        for mode in args.modes:
            cold = _best_rate(lambda: featurize(w, configs, mode), args.n, args.repeat, clear_cache)
            warm = (_best_rate(lambda: featurize(w, configs, mode), args.n, args.repeat)
                    if mode in ("relation", "context") else float("nan"))
            print(f"{w.label:<14} {mode:<10} {cold:>11.0f} {warm:>11.0f}")


if __name__ == "__main__":
    main()
