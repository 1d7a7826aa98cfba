"""Re-measure the best configs that records databases hold for a workload, interleaved with
PyTorch on the same threads, and print the ratio (the best of many noisy samples is optimistic,
so only the re-measured medians count).

    python benchmarks/bench_best_vs_torch.py --workload conv2d-C6 --threads 2 --db a.db b.db
"""
from __future__ import annotations

import argparse

from tensorgym.leaderboard import compare
from tensorgym.records import Records
from tensorgym.workloads import get_workload


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", default="conv2d-C6")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--db", nargs="+", required=True)
    p.add_argument("--top", type=int, default=5, help="candidates taken from the records")
    p.add_argument("--rounds", type=int, default=5)
    args = p.parse_args()
    w = get_workload(args.workload)
    recorded: dict[str, float] = {}
    for path in args.db:
        for r in Records(path).best(w.key, "cpu", k=args.top):
            recorded.setdefault(r.config_json, r.gflops)
    best = sorted(recorded, key=lambda c: -recorded[c])[: args.top]
    c = compare.remeasure(w, "cpu", best, args.rounds, threads=args.threads)
    print(f"{w.label}, {args.threads} threads, {args.rounds} interleaved rounds; "
          f"PyTorch {c.gflops(compare.VENDOR):.2f} GFLOP/s"
          + (f" (skipped: {c.vendor_skipped})" if c.vendor_skipped else ""))
    for i, config in enumerate(best):
        ratio = c.speedup(str(i))
        print(f"  recorded {recorded[config]:7.2f}  re-measured {c.gflops(str(i)):7.2f} GFLOP/s"
              f"  ratio to PyTorch {ratio if ratio is not None else float('nan'):.2f}"
              + (f"  ({c.errors[str(i)]})" if str(i) in c.errors else ""))


if __name__ == "__main__":
    main()
