"""``tensorgym tune-model MODEL --trials N --db X`` (registered by ``tensorgym/cli.py``)."""
from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import asdict
from typing import Any


def add_parser(sub: Any, positive: Any, non_negative: Any) -> None:
    """Add the ``tune-model`` command to the subparsers ``sub`` of the ``tensorgym`` parser."""
    p = sub.add_parser("tune-model", help="tune every task of a built-in model under one trial "
                       "budget (a task scheduler; resumable with the same --db)")
    p.add_argument("model", help="a built-in model (tensorgym list models, tensorgym corpus)")
    p.add_argument("--trials", type=positive, required=True,
                   help="the budget over all tasks, counted over every run with this --db")
    p.add_argument("--db", required=True, help="records database (a second run resumes)")
    p.add_argument("--target", default="cpu")
    p.add_argument("--scheduler", choices=("gradient", "round-robin"), default="gradient")
    p.add_argument("--batch", type=positive, default=16, help="trials a task gets at a time")
    p.add_argument("--agent", default="xgb")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=non_negative, default=0,
                   help="CPU threads of the kernels' parallel loops (default: all cores)")
    p.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="build and time through Ray (docs/distributed.md)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--no-progress", action="store_true")


def cmd_tune_model(args: argparse.Namespace) -> int:
    from .scheduler import TaskScheduler, model_tasks_of

    tasks = model_tasks_of(args.model)
    t0 = time.perf_counter()
    with TaskScheduler(args.model, tasks, args.db, args.trials, target=args.target,
                       scheduler=args.scheduler, batch=args.batch, agent=args.agent,
                       seed=args.seed, threads=args.threads, ray=args.ray) as s:
        report = s.run(progress=not (args.no_progress or args.json))
    wall = time.perf_counter() - t0
    if args.json:
        print(json.dumps({**asdict(report), "wall_time": round(wall, 3)}, default=_finite))
        return 0
    print(f"{report.model} on {report.device}: {report.trials_now} trials now "
          f"({report.trials} of {report.budget} in all) by {report.scheduler}, {wall:.0f} s "
          f"({wall / max(report.trials_now, 1):.2f} s a trial)")
    print(f"estimated latency of its {len(report.tasks)} tasks (sum of weight x best): "
          f"{_ms(report.latency)}")
    print("| task | weight | trials | best ms | GFLOP/s | share |\n|---|---:|---:|---:|---:|---:|")
    for r in sorted(report.tasks, key=lambda r: -(r["share"] or 0)):
        best = f"{r['best_ms']:.4f}" if r["best_ms"] is not None else "-"
        share = f"{r['share']:.1%}" if r["share"] is not None else "-"
        print(f"| `{r['task']}` | {r['weight']} | {r['trials']} | {best} | {r['gflops']:.1f} "
              f"| {share} |")
    return 0


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms" if math.isfinite(seconds) else "unknown (a task has no time)"


def _finite(x: Any) -> Any:
    return None if isinstance(x, float) and not math.isfinite(x) else str(x)
