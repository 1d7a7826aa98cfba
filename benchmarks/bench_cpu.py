"""CPU backend benchmark: reference schedule, random search, a local search from the best random
config, and PyTorch (oneDNN), measured side by side in one run on this machine.

    python benchmarks/bench_cpu.py --trials 200 --threads 2

Prints GFLOP/s, the ratio of the best found to PyTorch, median seconds per trial (build +
measure, and wall clock with parallel builds), and the fraction of configs that failed. The best
program and the reference schedule are re-measured interleaved with PyTorch
(``tensorgym.leaderboard.compare``) before they are reported (the best of many noisy samples is
optimistic); random_best and local_best are the searches' own figures.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from tensorgym.leaderboard import compare
from tensorgym.measure import LocalMeasurer, MeasureOptions
from tensorgym.templates import default_config, space_for
from tensorgym.workloads import get_workload


def search(measurer, workload, space, configs, batch):
    results, walls = [], []
    for i in range(0, len(configs), batch):
        t0 = time.perf_counter()
        chunk = measurer.measure(workload, configs[i:i + batch])
        walls.append((time.perf_counter() - t0) / len(chunk))
        results += chunk
    return results, walls


def local_search(measurer, workload, space, start, trials, batch, rng, seen):
    """Greedy: measure random neighbours of the current best, move when one is faster."""
    best = start
    results = []
    while len(results) < trials:
        cands = []
        while len(cands) < batch:
            c = space.random_neighbor(best.config, rng)
            if c.index not in seen:
                seen.add(c.index)
                cands.append(c)
        for r in measurer.measure(workload, cands):
            results.append(r)
            if r.ok and r.median < best.median:
                best = r
    return results, best


def bench(name: str, args) -> dict:
    w = get_workload(name)
    space = space_for(w, "cpu")
    opts = MeasureOptions(timeout=20)  # what the env uses, but a longer timeout
    m = LocalMeasurer("cpu", opts, num_threads=args.threads)
    rng = np.random.default_rng(args.seed)
    try:
        configs = space.sample_unique(rng, args.trials)
        results, walls = search(m, w, space, configs, args.batch)
        ok = [r for r in results if r.ok]
        best_random = max(ok, key=lambda r: r.gflops)
        seen = {c.index for c in configs}
        local, best = local_search(m, w, space, best_random, args.local_trials, args.batch, rng,
                                   seen)
        # The best program, the reference schedule and PyTorch re-measured interleaved.
        c = compare.remeasure(w, "cpu", {"best": best.config,
                                         "reference": default_config(w, "cpu")},
                              args.rounds, m, threads=args.threads)
    finally:
        m.close()
    ours_gf, torch_gf = c.gflops("best"), c.gflops(compare.VENDOR) or float("nan")
    per_trial = [r.build_time + r.run_time for r in results]
    return {
        "workload": name, "reference": c.gflops("reference"), "random_best": best_random.gflops,
        "local_best": best.gflops, "best_remeasured": ours_gf, "pytorch": torch_gf,
        "ratio_to_pytorch": c.speedup("best") or float("nan"),
        "median_s_per_trial": statistics.median(per_trial),
        "median_wall_s_per_trial": statistics.median(walls),
        "failed_fraction": 1 - len(ok) / len(results),
        "failures": sorted({r.error.name for r in results if not r.ok}),
        "best_config": best.config.to_json(),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", nargs="+", default=["conv2d-C6", "matmul-1024"])
    p.add_argument("--trials", type=int, default=200, help="random-search trials")
    p.add_argument("--local-trials", type=int, default=200, help="local-search trials after it")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--threads", type=int, default=2, help="threads for both sides")
    p.add_argument("--rounds", type=int, default=5, help="interleaved re-measurement rounds")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    rows = [bench(name, args) for name in args.workloads]
    cols = ["workload", "reference", "random_best", "local_best", "best_remeasured", "pytorch",
            "ratio_to_pytorch", "median_s_per_trial", "median_wall_s_per_trial", "failed_fraction"]
    print("| " + " | ".join(cols) + " |")
    print("|" + "---|" * len(cols))
    for r in rows:
        print("| " + " | ".join(f"{r[c]:.3f}" if isinstance(r[c], float) else str(r[c])
                                 for c in cols) + " |")
    for r in rows:
        print(f"{r['workload']}: failures {r['failures']}; best config {r['best_config']}")
    print("GFLOP/s columns; ratio = best re-measured / PyTorch, both on", args.threads, "threads")


if __name__ == "__main__":
    main()
