"""Figure 8: transfer learning (Equation 4). A global model trained on records of C1-C6 plus a
local model, vs learning from scratch, on C7, C8, C9 and matmul-1024 (another operator type).

Source records come from --source-db; sources missing there are first tuned from scratch for
--source-trials trials each (recorded into that database). Reported: best so far, and the
trials each method needs to reach 90% of the no-transfer run's final best (paper: 2-10x fewer).

    python benchmarks/bench_paper_fig8_transfer.py --trials 200 --seeds 3 --source-trials 400
"""
from __future__ import annotations

import os
import sys

import numpy as np

from bench_paper_common import (base_parser, make_env, run_study, save_figure,
                                tuner_options)
from tensorgym.registry import make as make_agent
from tensorgym.search import tune

SOURCES = [f"conv2d-C{i}" for i in range(1, 7)]


def collect_sources(args) -> None:
    from tensorgym.records import Records  # noqa: PLC0415
    from tensorgym.templates import canonical_target  # noqa: PLC0415
    from tensorgym.workloads import get_workload  # noqa: PLC0415

    db = Records(args.source_db)
    for name in args.sources:
        have = len(db.query(workload_key=get_workload(name).key,
                            target=canonical_target(args.target)))
        if have >= args.source_trials:
            print(f"  source {name}: {have} records in {args.source_db}", file=sys.stderr)
            continue
        need = args.source_trials - have
        env = make_env(name, args.target, budget=need, records=args.source_db)
        try:
            tune(env, make_agent("xgb", **tuner_options(args)), need, seed=1000)
        finally:
            env.close()
        print(f"  source {name}: measured {need} more configs", file=sys.stderr)


def trials_to_reach(curve: np.ndarray, level: float) -> float:
    hit = np.nonzero(curve >= level)[0]
    return float(hit[0] + 1) if len(hit) else float("inf")


def main() -> None:
    p = base_parser(__doc__, ["conv2d-C7", "conv2d-C8", "conv2d-C9", "matmul-1024"], 200)
    p.add_argument("--source-db", default=os.path.join("results", "transfer_sources.db"))
    p.add_argument("--sources", nargs="+", default=SOURCES)
    p.add_argument("--source-trials", type=int, default=400, help="records per source workload")
    p.add_argument("--max-source-samples", type=int, default=30000)
    args = p.parse_args()
    os.makedirs(os.path.dirname(os.path.abspath(args.source_db)), exist_ok=True)
    collect_sources(args)

    def transfer_agent():
        from tensorgym.records import Records  # noqa: PLC0415

        return make_agent("xgb", records=Records(args.source_db), source_workloads=args.sources,
                          max_source_samples=args.max_source_samples, **tuner_options(args))

    methods = {"GBT transfer": transfer_agent,
               "GBT": lambda: make_agent("xgb", **tuner_options(args))}
    curves, again = run_study(methods, args.workloads, args.target, args.trials, args.seeds,
                              records=args.db, remeasure_rounds=args.remeasure_rounds)

    print("\nFigure 8: transfer learning. Final best GFLOP/s (mean over seeds) and trials to "
          "reach 90% of the no-transfer run's final best (per seed, mean; inf = never)")
    print(f"{'workload':<12} {'GBT':>9} {'transfer':>9} {'trials GBT':>11} "
          f"{'trials transfer':>16} {'speedup':>8} {'re-measured GBT':>16} {'transfer':>9}")
    for w, per in curves.items():
        base, tran = np.stack(per["GBT"]), np.stack(per["GBT transfer"])
        levels = 0.9 * base[:, -1]
        t_base = [trials_to_reach(c, lv) for c, lv in zip(base, levels)]
        t_tran = [trials_to_reach(c, lv) for c, lv in zip(tran, levels)]
        speedup = np.mean(t_base) / np.mean(t_tran) if np.isfinite(np.mean(t_tran)) else 0.0
        print(f"{w:<12} {base[:, -1].mean():9.2f} {tran[:, -1].mean():9.2f} "
              f"{np.mean(t_base):11.1f} {np.mean(t_tran):16.1f} {speedup:7.2f}x "
              f"{np.mean(again[w]['GBT'] or [0]):16.2f} {np.mean(again[w]['GBT transfer'] or [0]):9.2f}")
    src = "C1-C6" if args.sources == SOURCES else ",".join(args.sources)
    save_figure(curves, os.path.join(args.out, "fig8_transfer.png"),
                f"Transfer from {src} ({args.target})")


if __name__ == "__main__":
    main()
