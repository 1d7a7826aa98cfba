"""Re-measure the best configs that records databases hold for a workload, interleaved with
PyTorch on the same threads, and print the ratio (the best of many noisy samples is optimistic,
so only the re-measured medians count).

    python benchmarks/bench_best_vs_torch.py --workload conv2d-C6 --threads 2 --db a.db b.db
"""
from __future__ import annotations

import argparse
import statistics

from bench_cpu import torch_timer

from tensorgym.hardware.measure import Measurer, MeasureOptions
from tensorgym.records import Records
from tensorgym.templates import space_for
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
    space = space_for(w, "cpu")
    cands = {}
    for path in args.db:
        for r in Records(path).best(w.key, "cpu", k=args.top):
            cands.setdefault(r.config_json, r.gflops)
    best = sorted(cands, key=lambda c: -cands[c])[: args.top]
    configs = [space.from_json(c) for c in best]
    m = Measurer("cpu", MeasureOptions(repeat=5, min_repeat_ms=50), num_threads=args.threads)
    timer = torch_timer(w, args.threads)
    ours = {c.index: [] for c in configs}
    torch_s = []
    for _ in range(args.rounds):
        for c in configs:
            ours[c.index].append(m.measure(w, [c])[0].median)
            torch_s.append(timer())
    m.close()
    t_torch = statistics.median(torch_s)
    print(f"{w.label}, {args.threads} threads, {args.rounds} interleaved rounds; "
          f"PyTorch {w.flops / t_torch / 1e9:.2f} GFLOP/s")
    for c in configs:
        t = statistics.median(ours[c.index])
        print(f"  recorded {cands[c.to_json()]:7.2f}  re-measured {w.flops / t / 1e9:7.2f} GFLOP/s"
              f"  ratio to PyTorch {t_torch / t:.2f}")


if __name__ == "__main__":
    main()
