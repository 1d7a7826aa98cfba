"""Featurizing throughput on one core, configs/s: the lowering path (lower every config, analyse its
loop AST) beside the fast path (the template's loop structure evaluated with NumPy for the whole
batch), which gives the same rows.

    python benchmarks/bench_features.py --n 2000 --rounds 5 --workloads conv2d-C6 matmul-1024

Every round times each (mode, path) once on a cold feature cache, in an order that rotates from
round to round, so both paths see the same machine; the table shows the median rate over rounds in
wall-clock time and, in brackets, CPU time (less disturbed by other processes on shared cores),
and the median of the per-round fast/lowering ratios. ``--calls`` sets how many configs each
``featurize`` call gets: the whole batch (0), and 128, what simulated annealing asks per step
(the fast path has a fixed cost per call). The last line gives other rates:
lowering alone, a warm cache (search revisiting configs; both paths share it), the lowering path
on ``--jobs`` processes, and the single path of the ``config``/``ast`` modes if asked for.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from tensorgym.features import Featurizer, default_jobs
from tensorgym.lower import lower
from tensorgym.templates import space_for
from tensorgym.workloads import get_workload

PATHS = ("lowering", "fast")


def _rate(fn, n: int, before=None) -> tuple[float, float]:
    """(wall-clock, CPU-time) configs/s of one call of ``fn``."""
    if before:
        before()
    t, c = time.perf_counter(), time.process_time()
    fn()
    return n / (time.perf_counter() - t), n / max(time.process_time() - c, 1e-9)


def _median_rate(fn, n: int, rounds: int, before=None) -> tuple[float, float]:
    rates = [_rate(fn, n, before) for _ in range(rounds)]
    return statistics.median(r[0] for r in rates), statistics.median(r[1] for r in rates)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="+", default=["conv2d-C6", "matmul-1024"])
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--n", type=int, default=2000, help="configs per batch")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--modes", nargs="+", default=["relation", "context"],
                    help="relation/context are timed on both paths; config/ast on their one path")
    ap.add_argument("--calls", type=int, nargs="+", default=[0, 128],
                    help="configs per featurize call (0: the whole batch)")
    ap.add_argument("--jobs", type=int, default=default_jobs())
    args = ap.parse_args()
    both = [m for m in args.modes if m in ("relation", "context")]
    with Featurizer() as featurizer:  # its cache emptied before each cold round (clear)
        _run(args, both, featurizer.featurize, featurizer.clear)


def _run(args, both: list[str], featurize, clear_cache) -> None:
    for name in args.workloads:
        w = get_workload(name)
        configs = space_for(w, args.target).sample(np.random.default_rng(args.seed), args.n)
        print(f"== {w.label} ({args.target}), {args.n} configs, serial, cold cache, median of "
              f"{args.rounds} interleaved rounds (CPU-time rates in brackets)")
        print(f"{'mode':<10} {'calls of':>8} {'lowering cfg/s':>18} {'fast cfg/s':>18} "
              f"{'fast/lowering':>18}")
        runs = [(mode, calls, path) for mode in both for calls in args.calls for path in PATHS]
        rates: dict[tuple, list] = {run: [] for run in runs}
        for r in range(args.rounds):
            for mode, calls, path in runs[r % len(runs):] + runs[:r % len(runs)]:
                size = calls or args.n
                parts = [configs[i:i + size] for i in range(0, args.n, size)]
                rates[mode, calls, path].append(_rate(
                    lambda: [featurize(w, p, mode, fast=path == "fast") for p in parts], args.n,
                    clear_cache))
        for mode in both:
            for calls in args.calls:
                low, fast = rates[mode, calls, "lowering"], rates[mode, calls, "fast"]
                med = [[statistics.median(x[k] for x in rs) for k in (0, 1)] for rs in (low, fast)]
                ratio = [statistics.median(f[k] / s[k] for s, f in zip(low, fast)) for k in (0, 1)]
                cols = ([f"{a:.0f} ({b:.0f})" for a, b in med]
                        + [f"{ratio[0]:.1f}x ({ratio[1]:.1f}x)"])
                print(f"{mode:<10} {calls or args.n:>8} " + " ".join(f"{c:>18}" for c in cols))
        other = [("lower only", _median_rate(lambda: [lower(w, c) for c in configs], args.n,
                                             args.rounds))]
        for mode in args.modes:
            if mode in both:
                featurize(w, configs, mode)
                other.append((f"{mode} warm", _median_rate(lambda: featurize(w, configs, mode),
                                                           args.n, args.rounds)))
                other.append((f"{mode} lowering on {args.jobs} jobs", _median_rate(
                    lambda: featurize(w, configs, mode, n_jobs=args.jobs, fast=False), args.n,
                    args.rounds, clear_cache)))
            else:
                other.append((f"{mode}", _median_rate(lambda: featurize(w, configs, mode),
                                                      args.n, args.rounds, clear_cache)))
        print("other rates: " + "; ".join(f"{k} {a:.0f} ({b:.0f})" for k, (a, b) in other))
        print()


if __name__ == "__main__":
    main()
