"""``tensorgym dataset collect | remeasure | export | import | info | fit-world | evaluate``
(registered by ``tensorgym/cli.py``)."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any


def add_parser(sub: Any, positive: Any, non_negative: Any) -> None:
    """Add the ``dataset`` command to the subparsers ``sub`` of the ``tensorgym`` parser."""
    d = sub.add_parser("dataset", help="collect, export and summarise measurement datasets")
    dsub = d.add_subparsers(dest="action", required=True, parser_class=type(d))
    c = dsub.add_parser("collect", help="measure configs of workloads into a records database "
                        "(resumable: configs this device measured before are skipped)")
    c.add_argument("workloads", nargs="*", metavar="WORKLOAD",
                   help="registered names (conv2d-C6) or shapes (matmul:333,517,129)")
    c.add_argument("--target", default=None, help="cpu (default), llvm, opencl or cuda; with "
                   "--suite: the suite's")
    c.add_argument("--configs", type=positive, metavar="N",
                   help="random: N configs besides the reference schedule; agent: N trials "
                   "(without --suite)")
    c.add_argument("--suite", help="collect over a leaderboard suite's tasks (corpus-train-cpu, "
                   "corpus-test-cpu, ...) in rounds until --time-budget is spent; resumable")
    c.add_argument("--time-budget", metavar="DURATION",
                   help="with --suite: how long to collect (2h, 90m, 1h30m, seconds)")
    c.add_argument("--chunk", type=positive, default=32, metavar="N",
                   help="with --suite: random configs and agent trials per task and round")
    c.add_argument("--parts", default="random,agent",
                   help="with --suite: what each round measures (random, agent or both)")
    c.add_argument("--early-stop", type=float, default=4.0, metavar="RATIO",
                   help="with --suite: stop timing a kernel surely RATIO x slower than the "
                   "task's best (0: off); such records are flagged early_stop")
    c.add_argument("--rounds", type=non_negative, default=0,
                   help="with --suite: stop after this many rounds (0: only the budget)")
    c.add_argument("--strategy", choices=("random", "agent"), default="random")
    c.add_argument("--agent", default="xgb", help="the agent of --strategy agent")
    c.add_argument("--db", required=True, help="records database to write")
    c.add_argument("--threads", type=non_negative, default=0,
                   help="CPU threads of the kernels' parallel loops (default: all cores)")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--ray", nargs="?", const="", default=None, metavar="ADDRESS",
                   help="measure through Ray (a cluster's address, or none for the default; an "
                   "address where no Ray cluster answers fails within $TENSORGYM_RAY_TIMEOUT s, "
                   "default 10)")
    c.add_argument("--no-progress", action="store_true")
    c.add_argument("--json", action="store_true", help="print one JSON object per workload")
    r = dsub.add_parser("remeasure", help="time again the configs whose records hold only a "
                        "kernel's cold first run (Record.cold_only), on this machine's device; "
                        "resumable")
    r.add_argument("--db", required=True, help="records database to read and write")
    r.add_argument("--suite", help="only the tasks of this leaderboard suite")
    r.add_argument("--target", default="cpu")
    r.add_argument("--time-budget", metavar="DURATION", help="stop after this long (2h, 90m, "
                   "seconds; default: until done)")
    r.add_argument("--threads", type=non_negative, default=0,
                   help="CPU threads of the kernels' parallel loops (default: all cores; the "
                   "records' device says how many they had)")
    r.add_argument("--early-stop", type=float, default=4.0, metavar="RATIO",
                   help="stop timing a kernel surely RATIO x slower than the task's best")
    r.add_argument("--repeats", type=positive, default=1, metavar="N",
                   help="then time every timed config again until it has N timed records, one "
                   "pass per record (default 1: only the cold-only configs)")
    r.add_argument("--no-progress", action="store_true")
    r.add_argument("--json", action="store_true")
    e = dsub.add_parser("export", help="write a records database as Parquet or JSON lines")
    e.add_argument("--db", required=True)
    e.add_argument("--out", required=True, help="FILE.parquet or FILE.jsonl")
    i = dsub.add_parser("import", help="write an export (or another database) into a records "
                        "database")
    i.add_argument("source", help="FILE.parquet, FILE.jsonl or a records database")
    i.add_argument("--db", required=True)
    from .world.cli import add_parsers as add_world_parsers

    add_world_parsers(dsub)
    s = dsub.add_parser("info", help="workloads, configs, devices, best and failure rate")
    s.add_argument("path", help="a records database or an export")
    s.add_argument("--json", action="store_true")


def cmd_dataset(args: argparse.Namespace) -> int:
    from .data import Dataset

    if args.action == "collect":
        return _collect(args)
    if args.action == "remeasure":
        return _remeasure(args)
    if args.action in ("fit-world", "evaluate"):
        from .world.cli import cmd_world

        return cmd_world(args)
    if args.action == "export":
        n = Dataset.load(args.db).export(args.out)
        print(f"{n} records written to {args.out}")
        return 0
    if args.action == "import":
        data = Dataset.load(args.source)
        n = data.to_records(args.db)
        held = f", {len(data) - n} held there already" if n < len(data) else ""
        print(f"{n} records of {args.source} written to {args.db}{held} "
              f"(digest {data.digest[:16]})")
        return 0
    summary = Dataset.load(args.path).summary()
    if args.json:
        print(json.dumps(summary))
    else:
        print(info_text(summary), end="")
    return 0


def _collect(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from ..errors import TensorGymError

    if args.suite is not None:
        return _campaign(args)
    if args.time_budget is not None:
        raise TensorGymError("--time-budget goes with --suite; without it, --configs says how "
                             "many configs each workload gets")
    if not args.workloads or args.configs is None:
        raise TensorGymError("dataset collect needs WORKLOAD names and --configs N, or "
                             "--suite NAME --time-budget DURATION")
    args.target = args.target or "cpu"

    from .collection import collect

    reports = collect(args.workloads, args.target, args.configs, args.strategy, args.db,
                      threads=args.threads, seed=args.seed, ray=args.ray,
                      progress=not (args.no_progress or args.json), agent=args.agent)
    for r in reports:
        if args.json:
            print(json.dumps(asdict(r)))
        else:
            print(f"{r.workload} ({r.strategy}) on {r.device}: {r.measured} measured "
                  f"({r.failures} failed), {r.skipped} already in {args.db}, "
                  f"{r.seconds:.1f}s; best {r.best_gflops:.2f} GFLOP/s", file=sys.stdout)
    return 0


def _campaign(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from ..errors import TensorGymError
    from .campaign import Campaign, parse_duration

    if args.workloads or args.configs is not None:
        raise TensorGymError("--suite takes its tasks from the suite: give no WORKLOAD and no "
                             "--configs (--chunk sizes a round)")
    if args.time_budget is None:
        raise TensorGymError("--suite needs --time-budget DURATION (2h, 90m, seconds)")
    budget = parse_duration(args.time_budget)
    suite = args.suite_object  # resolved by tensorgym/cli.py, which sits above the leaderboard
    targets = {t for _, t in suite.tasks}
    target = args.target or (targets.pop() if len(targets) == 1 else None)
    if target is None:
        raise TensorGymError(f"suite {suite.name} spans targets {sorted(targets)}; pick one "
                             "with --target")
    works = [w for w, t in suite.tasks if t == target]
    if not works:
        raise TensorGymError(f"suite {suite.name} has no task on {target}; its targets: "
                             f"{', '.join(sorted({t for _, t in suite.tasks}))}")
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    with Campaign(works, args.db, target=target, chunk=args.chunk, parts=parts,
                  early_stop=args.early_stop, threads=args.threads, seed=args.seed,
                  ray=args.ray, agent=args.agent) as campaign:
        report = campaign.run(budget, max_rounds=args.rounds,
                              progress=not (args.no_progress or args.json))
    if args.json:
        print(json.dumps({**asdict(report), "records_per_second": report.records_per_second}))
    else:
        covered = sum(n > 0 for n in report.per_task.values())
        print(f"{suite.name} on {report.device}: {report.measured} records measured "
              f"({report.failures} failed) in {report.seconds:.0f} s, "
              f"{report.records_per_second:.2f} records/s, {report.rounds} round(s)"
              f"{' until the budget ran out' if report.stopped_by_budget else ''}; "
              f"{sum(report.per_task.values())} records over {covered} of "
              f"{len(report.per_task)} tasks in {args.db}")
    return 0


def _remeasure(args: argparse.Namespace) -> int:
    from dataclasses import asdict

    from .campaign import parse_duration
    from .remeasure import remeasure

    works = None
    if args.suite is not None:
        works = [w for w, t in args.suite_object.tasks if t == args.target]
    budget = parse_duration(args.time_budget) if args.time_budget else 0.0
    report = remeasure(args.db, args.target, works, budget, threads=args.threads,
                       early_stop=args.early_stop, progress=not (args.no_progress or args.json),
                       repeats=args.repeats)
    if args.json:
        print(json.dumps({**asdict(report), "records_per_second": report.records_per_second}))
        return 0
    print(f"remeasured on {report.device}: {report.measured} configs ({report.failures} "
          f"failed) in {report.seconds:.0f} s, {report.records_per_second:.2f} records/s, "
          f"over {len(report.per_task)} tasks; {report.left} left (budget)"
          + (f"; {report.other_devices} cold-only configs of other devices (measure them on "
             "their machines)" if report.other_devices else ""))
    return 0


def info_text(summary: dict) -> str:
    lines = [f"{summary['path']}: {summary['records']} records, {summary['workloads']} "
             f"workloads, devices: {', '.join(summary['devices']) or 'none'}",
             f"digest {summary['digest']}",
             f"{'workload':<16} {'target':<7} {'records':>7} {'configs':>7} {'failed':>7} "
             f"{'best GFLOP/s':>12}  strategies"]
    for t in sorted(summary["tasks"], key=lambda t: (t["device"], t["workload"])):
        strategies = ", ".join(f"{k} {v}" for k, v in sorted(t["strategies"].items()))
        lines.append(f"{t['workload']:<16} {t['target']:<7} {t['records']:>7} {t['configs']:>7} "
                     f"{t['failure_rate']:>7.1%} {t['best_gflops']:>12.2f}  {strategies}")
        if len(summary["devices"]) > 1:
            lines.append(f"  on {t['device']}")
    return "\n".join(lines) + "\n"
