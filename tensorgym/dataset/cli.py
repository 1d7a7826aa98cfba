"""``tensorgym dataset collect | export | import | info`` (registered by ``tensorgym/cli.py``)."""
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
    c.add_argument("workloads", nargs="+", metavar="WORKLOAD",
                   help="registered names (conv2d-C6) or shapes (matmul:333,517,129)")
    c.add_argument("--target", default="cpu")
    c.add_argument("--configs", type=positive, required=True, metavar="N",
                   help="random: N configs besides the reference schedule; agent: N trials")
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
    e = dsub.add_parser("export", help="write a records database as Parquet or JSON lines")
    e.add_argument("--db", required=True)
    e.add_argument("--out", required=True, help="FILE.parquet or FILE.jsonl")
    i = dsub.add_parser("import", help="write an export (or another database) into a records "
                        "database")
    i.add_argument("source", help="FILE.parquet, FILE.jsonl or a records database")
    i.add_argument("--db", required=True)
    s = dsub.add_parser("info", help="workloads, configs, devices, best and failure rate")
    s.add_argument("path", help="a records database or an export")
    s.add_argument("--json", action="store_true")


def cmd_dataset(args: argparse.Namespace) -> int:
    from .data import Dataset

    if args.action == "collect":
        return _collect(args)
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
