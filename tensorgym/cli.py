"""``tensorgym`` command line: list | tune | tune-model | bench-model | leaderboard run/show |
validate | dataset | tasks | corpus.

Bad arguments and tensorgym errors print one line and exit non-zero, never a traceback. With
the agent registry (``tensorgym.registry``, which imports them by name on its first lookup), this
is the only module of ``tensorgym`` that imports ``tensorgym.baselines`` / ``tensorgym.agents``,
and the only one outside ``tensorgym.leaderboard`` that imports the leaderboard, each only
inside the commands that need an agent or the leaderboard.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from .errors import TensorGymError

# Each command imports what it needs when it runs: `tensorgym --help` and `tensorgym list` load
# no LLVM, and only the agent or option asked for loads torch, xgboost or ray.


class UsageError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def _int_list(text: str) -> list[int]:
    try:
        return [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")


def _positive(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return n


def _non_negative(text: str) -> int:
    try:
        n = int(text)
    except ValueError:
        n = -1
    if n < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}")
    return n


def _world_seed(text: str) -> "int | str":
    return text if text == "seed" else _non_negative(text)


def _replay_speed(text: str) -> "float | str":
    if text == "live":
        return text
    try:
        x = float(text)
    except ValueError:
        x = 0.0
    if not 0 < x < math.inf:
        raise argparse.ArgumentTypeError(f"expected 'live' or a positive number, got {text!r}")
    return x


def _options(pairs: Sequence[str]) -> dict[str, Any]:
    """``key=value`` agent options; values parsed as JSON where they can be."""
    out = {}
    for p in pairs:
        key, sep, value = p.partition("=")
        if not sep or not key:
            raise UsageError(f"agent option {p!r} is not key=value")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog="tensorgym", description="Learning to optimize tensor programs: "
                "Gymnasium environments with real measurements, agents and a leaderboard.")
    p.add_argument("--traceback", action="store_true",
                   help="show the full traceback of an unexpected error")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    ls = sub.add_parser("list", help="workloads, targets, envs, suites and agents")
    ls.add_argument("what", nargs="?", default="all",
                    choices=["all", "workloads", "targets", "envs", "suites", "agents",
                             "models"])
    ls.add_argument("--options", action="store_true", help="list each agent's options")

    t = sub.add_parser("tune", help="tune one workload on one target")
    t.add_argument("workload", help="a registered name (conv2d-C6) or a shape "
                   "(conv2d:1,96,17,17,160,3,1,1, conv2d:1,32,112,112,32,3,1,1,32 with groups, "
                   "matmul:333,517,129, dense:128,768,3072, batch_matmul:12,128,64,128), "
                   "optionally with a fused epilogue: +bias+relu (docs/operators.md)")
    t.add_argument("--target", default="cpu")
    t.add_argument("--trials", type=_positive, default=64)
    t.add_argument("--agent", default="random")
    t.add_argument("--seed", type=int, default=0)
    t.add_argument("--opt", action="append", default=[], metavar="KEY=VALUE",
                   help="an agent option (repeatable), e.g. --opt batch_size=4")
    t.add_argument("--db", help="records database path (default: the user cache dir); "
                   "earlier measurements of this task in it are reused, never re-measured")
    reuse = t.add_mutually_exclusive_group()
    reuse.add_argument("--resume", action="store_true", help="count the earlier measurements "
                       "of this task toward --trials (continue a killed tune)")
    reuse.add_argument("--fresh", action="store_true", help="ignore earlier measurements: "
                       "measure every trial now")
    t.add_argument("--threads", type=_non_negative, default=0,
                   help="CPU threads of the kernels' parallel loops (default: all cores)")
    t.add_argument("--export-source", metavar="FILE", help="write the best kernel's source")
    t.add_argument("--json", action="store_true", help="print the summary as one JSON object")
    t.add_argument("--compare", action="store_true",
                   help="with --json: also re-measure the best beside the starting schedule and "
                   "the vendor library, as the text summary always does (under \"compare\")")
    t.add_argument("--no-progress", action="store_true")
    _ray_arg(t, "build and time on a Ray cluster's devices (docs/distributed.md)")

    from .nn.tune_cli import add_parser as add_tune_model_parser

    add_tune_model_parser(sub, _positive, _non_negative)

    from .nn.bench_cli import add_parser as add_bench_model_parser

    add_bench_model_parser(sub, _positive)

    tk = sub.add_parser("tasks", help="the tunable tasks of a built-in model (tensorgym.nn)")
    tk.add_argument("model", help="a built-in model (tensorgym list models)")
    tk.add_argument("--md", metavar="FILE", help="also write the Markdown table here")

    c = sub.add_parser("corpus", help="the corpus of all built-in models' tasks and its fixed "
                       "train/test split by model (tensorgym.nn.corpus)")
    c.add_argument("--split", choices=["train", "test", "all"],
                   help="list this split's task keys with their models, not the tables")
    c.add_argument("--md", metavar="FILE", help="also write the Markdown printed here")
    c.add_argument("--regenerate", action="store_true", help="extract the built-in models "
                   "again (needs torch and torchvision) and rewrite the corpus file")
    c.add_argument("--out", metavar="FILE", help="with --regenerate: write the corpus here "
                   "instead of the package's own file")

    lb = sub.add_parser("leaderboard", help="run or show a leaderboard")
    lsub = lb.add_subparsers(dest="action", required=True, parser_class=_Parser)
    run = lsub.add_parser("run", help="run a suite and write a results document")
    run.add_argument("suite")
    run.add_argument("--agents", default="random,grid,ga", help="comma-separated agent names")
    run.add_argument("--trials", type=_positive, help="trial budget (default: the suite's)")
    run.add_argument("--seeds", type=_int_list, help="e.g. 0,1,2 (default: the suite's)")
    run.add_argument("--remeasure", type=_non_negative, default=3,
                     help="re-measurements of each run's best config before reporting")
    run.add_argument("--no-vendor", action="store_true", help="skip the vendor library")
    run.add_argument("--db", help="records database path")
    run.add_argument("--threads", type=_non_negative, default=0,
                     help="CPU threads of the kernels and of the vendor library (0: all cores)")
    run.add_argument("--out", required=True, help="results JSON to write")
    _ray_arg(run, "run every (agent, task, seed) as a Ray task; a rerun after a failure "
             "resumes from OUT.partial.jsonl (docs/distributed.md)")
    run.add_argument("--replay", metavar="DATASET",
                     help="the replay track: answer trials from this dataset (docs/dataset.md), "
                     "then re-measure each best live here; ranked apart from live runs")
    run.add_argument("--on-miss", default="surrogate",
                     choices=["surrogate", "draw", "nearest", "error"],
                     help="with --replay: how a config the dataset lacks is answered")
    run.add_argument("--replay-speed", type=_replay_speed, default=1.0, metavar="live|X",
                     help="with --replay: divide the replay's seconds by this machine's speed "
                     "against the records' (X), or read it per task here (live: its fastest "
                     "recorded configs timed again); docs/dataset.md")
    run.add_argument("--world-seed", type=_world_seed, default=0, metavar="N|seed",
                     help="with --replay --on-miss draw: the field of draws (0), or 'seed' for "
                     "each seed's own drawn world (docs/dataset.md)")
    run.add_argument("--track", choices=["live", "generalization"], default="live",
                     help="generalization: score each run's best of its first k trials (--ks) "
                     "live, against the vendor and the reference tuner (xgb, run beside), with "
                     "each agent's declared training (docs/dataset.md); ranked apart")
    run.add_argument("--ks", type=_int_list, default=[8, 32, 128],
                     help="with --track generalization: the budgets scored (default 8,32,128)")
    run.add_argument("--task-sample", type=_positive, metavar="N",
                     help="run N of the suite's tasks, spread evenly over its list")
    _output_args(run)
    show = lsub.add_parser("show", help="merge results documents and print the leaderboard")
    show.add_argument("results", nargs="+")
    show.add_argument("--out", help="also write the merged document here")
    show.add_argument("--validation", action="append", default=[], metavar="REPORT",
                      help="a report of `tensorgym validate --out` (repeatable): entries it "
                      "reproduced are marked validated, entries it rejected are not ranked")
    show.add_argument("--validated-only", action="store_true",
                      help="rank only validated entries")
    _output_args(show)

    v = sub.add_parser("validate", help="check results files and re-measure their best "
                       "configs here; exits 1 unless every entry reproduces")
    v.add_argument("results", nargs="+")
    v.add_argument("--tolerance", type=_fraction, default=0.25,
                   help="flag claims whose re-measured median is more than this fraction "
                   "slower than the claimed median")
    v.add_argument("--repeats", type=_positive, default=3,
                   help="measurements (of several samples each) per attempt")
    v.add_argument("--attempts", type=_positive, default=2,
                   help="re-measure a claim that fails up to this many times")
    v.add_argument("--threads", type=_non_negative, default=0,
                   help="CPU threads to measure with (default: all of this machine's cores; "
                   "never taken from the file)")
    v.add_argument("--allow-skip", action="store_true",
                   help="exit 0 even if entries could not be checked here (another device)")
    v.add_argument("--any-device", action="store_true",
                   help="also re-measure other devices' entries, for reference (still skipped)")
    v.add_argument("--out", metavar="REPORT", help="write the verdicts as JSON for "
                   "`leaderboard show --validation`")
    pk = sub.add_parser("peak", help="measure this CPU's FMA peak (spaced samples) and show the "
                        "best kept for it, which the leaderboard's peak %% divides by")
    pk.add_argument("--threads", type=_non_negative, default=0,
                    help="threads (default: every core this process may use)")
    pk.add_argument("--book", metavar="PATH", help="the file the best is kept in (default: "
                    "fma-peak.json in the user cache dir, where runs read it)")
    pk.add_argument("--json", action="store_true", help="print JSON")
    from .dataset.cli import add_parser as add_dataset_parser

    add_dataset_parser(sub, _positive, _non_negative)
    return p


def _ray_arg(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--ray", nargs="?", const="", metavar="ADDRESS",
                   help=f"{what}; ADDRESS: 'auto' (the cluster started on this machine), "
                   "host:port or ray://host:port (one where no Ray cluster answers fails within "
                   "$TENSORGYM_RAY_TIMEOUT s, default 10); none: ray.init's default")


def _ray_measurer(target: str, address: str, threads: int) -> Any:
    """A measurer on the Ray cluster at ``address`` ("": ray.init's default)."""
    from .session import make_measurer

    return make_measurer(target, num_threads=threads, ray=address)


def _fraction(text: str) -> float:
    try:
        x = float(text)
    except ValueError:
        x = -1.0
    if not 0 <= x < 1:
        raise argparse.ArgumentTypeError(f"expected a number in [0, 1), got {text!r}")
    return x


def _output_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--md", metavar="FILE", help="write the Markdown table")
    p.add_argument("--csv", metavar="FILE", help="write the per-task table as CSV")
    p.add_argument("--plots", metavar="DIR", help="write best-so-far PNGs here")


def cmd_list(args: argparse.Namespace) -> int:
    from .templates import TARGETS
    from .workloads import WORKLOADS

    what = args.what
    if what in ("all", "workloads"):
        print("workloads:")
        for name, w in WORKLOADS.items():
            print(f"  {name:<20} {w.key:<34} {w.flops / 1e9:8.3f} GFLOP")
        print("  (or any shape: conv2d:N,IC,H,W,OC,K,STRIDE,PAD[,GROUPS] / matmul:M,N,K / "
              "dense:ROWS,IN,OUT / batch_matmul:B,M,K,N, each optionally +bias, +relu, +relu6, "
              "+gelu, +add: docs/operators.md)")
    if what in ("all", "targets"):
        print("targets:", ", ".join(TARGETS))
    if what in ("all", "envs"):
        import gymnasium as gym

        from . import envs  # noqa: F401  (registers the envs)

        ids = sorted(i for i in gym.registry if i.startswith("TensorSched"))
        print(f"envs ({len(ids)}):")
        for i in ids:
            print(f"  {i}")
    if what in ("all", "suites"):
        from tensorgym.leaderboard.suites import SUITES

        print("suites:")
        for s in SUITES.values():
            print(f"  {s.name:<19} {len(s.tasks):>3} tasks, {s.trials} trials, seeds "
                  f"{','.join(map(str, s.seeds))}: {s.description}")
    if what in ("all", "models"):
        from .nn.models import DESCRIPTIONS, MODELS

        print("models (tensorgym tasks MODEL; needs torchvision):")
        for name, (_, shape) in MODELS.items():
            print(f"  {name:<17} {'x'.join(map(str, shape)):<13} {DESCRIPTIONS[name]}")
    if what in ("all", "agents"):
        from . import registry

        print("agents:" + ("" if args.options else " (--options lists their options)"))
        for spec in registry.specs():
            print(f"  {spec.name:<16} {spec.help}")
            for o in spec.options if args.options else ():
                print(f"      {o.describe()}")
    return 0


def cmd_tune(args: argparse.Namespace) -> int:
    from .templates import canonical_target
    from .workloads import get_workload

    workload = get_workload(args.workload)
    args.target = canonical_target(args.target)
    from . import registry
    from .search import ProgressBar, tune
    from .session import TuningSession

    agent = registry.make(args.agent, **_options(args.opt))
    farm = _ray_measurer(args.target, args.ray, args.threads) if args.ray is not None else None
    u = TuningSession(workload, args.target, records=args.db, measurer=farm,
                      use_cache=not args.fresh, num_threads=args.threads)
    bar = None
    try:
        for side, n in u.records.restore_unsaved():  # batches a failed write had to set aside
            print(f"restored {n} measurements into {u.records.path} from {side}", file=sys.stderr)
        # earlier measurements of this task (workload, space, target, device): reused, not redone
        prior = [] if args.fresh else u.records.results(u.task, u.space)
        n_new = max(0, args.trials - len(prior)) if args.resume else args.trials
        if prior and not args.json:
            print(_reuse_line(agent, prior, n_new, args, u.records.path), flush=True)
        if n_new and not (args.no_progress or args.json):
            bar = ProgressBar(n_new, f"{args.agent} {workload.label}",
                              max((r.gflops for r in prior if r.ok), default=0.0))
        start = u.meter.copy()
        t0 = time.perf_counter()
        history = []
        if n_new:
            history = tune(u, agent, n_new, seed=args.seed, prior=prior,
                           callbacks=[bar] if bar is not None else [])
        if bar is not None:
            bar.close()
            bar = None
        ok = [r for r in history if r.ok]
        pool = [r for r in prior if r.ok] + ok
        found = max(pool, key=lambda r: r.gflops) if pool else None
        # the figure to report is the machine's speed now, minutes after some bests were timed
        best = u.reconfirm(pool) if pool else None
        wall = time.perf_counter() - t0
        spent = u.meter.since(start)
        speedups = _speedups(u, farm, best, args) if best is not None and (
            args.compare or not args.json) else {}
    finally:
        if bar is not None:
            bar.close()
        u.close()
        if farm is not None:
            farm.close()
    summary = {
        "workload": workload.key, "label": workload.label, "target": args.target,
        "agent": args.agent, "seed": args.seed, "trials": len(history),
        "failures": len(history) - len(ok), "reused": len(prior), "wall_time": round(wall, 3),
        **_best_fields(best, found),
        "time": {k: round(v, 3) for k, v in spent.report(wall).items()},
    }
    if speedups.get("figures"):  # re-measured after wall_time: the figures of the same rounds
        summary["compare"] = speedups["figures"]
    warm = getattr(agent, "warm_start_summary", None)  # what a tuner's warm start used
    if warm is not None:
        summary["warm_start"] = {**vars(warm), "text": str(warm)}
    if best is not None and args.export_source:
        from .hardware.runtime import get_runtime
        from .lower import lower
        from .session import runtime_kwargs

        source = get_runtime(args.target, **runtime_kwargs(args.target, args.threads)).render(
            lower(workload, best.config))
        Path(args.export_source).write_text(source)
        summary["source"] = args.export_source
    if args.json:
        print(json.dumps(summary))
    else:
        reused = f", {len(prior)} earlier measurements reused" if prior else ""
        print(f"{workload.label} on {args.target}: {len(history)} trials "
              f"({summary['failures']} failed) in {wall:.1f}s{reused}")
        print(spent.line(wall))
        if warm is not None:
            print(warm)
        if best is None:
            print("no valid config found")
        else:
            print(_best_line(best, found, summary))
            for line in speedups.get("lines", []):
                print(line)
            print(f"config: {best.config.to_json()}")
            if args.export_source:
                print(f"source written to {args.export_source}")
    return 0 if best is not None else 1


def _best_fields(best: Any, found: Any) -> dict:
    """``tune --json``'s figures of the best: as reported and as found, and its sets of rounds."""
    return {
        "best_gflops": best.gflops if best else 0.0,
        "best_gflops_found": found.gflops if found else 0.0,
        "best_config": json.loads(best.config.to_json()) if best else None,
        "best_reused": bool(found and found.cached),
        # sets of end-of-tune rounds taken (more than 1: the first disagreed with the tune's figure)
        "best_sets": best.extra.get("sets", 1) if best is not None and best.extra.get(
            "reconfirmed") else 0,
        # each set's figure, where there were several (the last one is best_gflops)
        "best_set_gflops": best.extra.get("set_gflops", []) if best is not None else [],
        # sets set aside because the calibration kernel ran slow meanwhile (taken again)
        "best_slow_retakes": best.extra.get("slow_retakes", 0) if best is not None else 0,
        # per set: the calibration kernel's time then over its usual time through the tune
        "best_set_slowdowns": best.extra.get("set_slowdowns", []) if best is not None else [],
    }


def _best_line(best: Any, found: Any, summary: dict) -> str:
    """The line ``tune`` prints of the best: its figure now, as found, and its sets of rounds."""
    earlier = " (found in an earlier tune)" if found.cached else ""
    if summary["best_sets"] > 1:  # its first set of rounds disagreed with the tune's
        figures = ", then ".join(f"{g:.1f}" for g in summary["best_set_gflops"])
        earlier += (f"; timed in {summary['best_sets']} sets of rounds ({figures} "
                    "GFLOP/s), the machine's speed having moved"
                    + ("" if summary["best_set_gflops"][-1] == best.gflops
                       else ", and the median set reported"))
    if summary["best_slow_retakes"]:
        earlier += (f"; {summary['best_slow_retakes']} set(s) of rounds taken again, "
                    "the machine having run slow meanwhile")
    return (f"best: {best.gflops:.2f} GFLOP/s ({best.median * 1e3:.4f} ms), timed again "
            f"at the end of the tune (as found: {found.gflops:.2f}){earlier}")


def _reuse_line(agent: Any, prior: list, n_new: int, args: argparse.Namespace,
                path: str) -> str:
    line = f"reusing {len(prior)} earlier measurements of this task from {path}"
    if args.resume:
        line += f" (--resume: {n_new} of {args.trials} trials left)"
    else:
        line += f" (not counted in --trials {args.trials}; --resume counts them)"
    from .search import takes_prior

    if not takes_prior(agent):
        line += f"; agent {args.agent} does not learn from them, configs it proposes again " \
                "are served from the database"
    return line


def _speedups(session: Any, farm: Any, best: Any, args: argparse.Namespace) -> dict:
    """Re-measure the best program, the reference schedule and the vendor library side by side
    (these runs are not trials) and report the speedups, medians over interleaved rounds:
    ``lines`` to print and ``figures`` (``tune --json --compare``'s "compare")."""
    from tensorgym.leaderboard.compare import remeasure

    rounds = 3
    configs = {"best": best.config, "reference": session.reference_config}
    w, target = session.workload, session.target
    if farm is not None:  # side by side with the vendor library, on the device's node
        threads = farm.devices[0].runtime_kwargs.get("num_threads", 0)
        c = farm.on_device_node(remeasure, w, target, configs, rounds, None, True, threads)
    else:
        c = remeasure(w, target, configs, rounds=rounds, measurer=session.measurer,
                      threads=args.threads)
    if "best" in c.errors:
        return {"lines": [f"re-measuring the best failed: {c.errors['best']}"],
                "figures": {"rounds": rounds, "error": c.errors["best"]}}
    ref, vendor = c.speedup("best", over="reference"), c.speedup("best")
    moved = [d for ds in c.drift.values() for d in ds]
    figures = {"rounds": rounds, "best_gflops": c.gflops("best"), "best_spread": c.spread("best"),
               "speedup_reference": ref, "vendor_library": c.vendor_library or None,
               "vendor_gflops": c.gflops("vendor") if vendor is not None else None,
               "speedup_vendor": vendor, "vendor_skipped": c.vendor_skipped or None,
               "drift": moved, "slow_rounds": c.slow_rounds}
    lines = [f"re-measured best: {c.gflops('best'):.2f} GFLOP/s (spread {c.spread('best'):.0%})"]
    if ref is not None:
        lines.append(f"speedup over the starting (reference) schedule: {ref:.2f}x")
    if vendor is not None:
        lines.append(f"speedup over {c.vendor_library}: {vendor:.2f}x "
                     f"({c.gflops('vendor'):.2f} GFLOP/s, spread {c.spread('vendor'):.0%})")
    elif c.vendor_skipped:
        lines.append(f"vendor library not measured: {c.vendor_skipped}")
    if c.slow_rounds:
        lines.append(f"{len(c.slow_rounds)} round(s) taken again: the machine ran slow meanwhile "
                     f"(calibration kernel at up to x{max(c.slow_rounds):.2f} its usual time)")
    if moved:
        lines.append(f"warning: this machine's speed moved while re-measuring (x{min(moved):.2g}"
                     f"..x{max(moved):.2g}); these ratios are unreliable")
    return {"lines": lines, "figures": figures}


def _write_outputs(doc: Any, args: argparse.Namespace, validated: Any = frozenset(),
                   rejected: Any = None) -> None:
    from tensorgym.leaderboard import tables
    from tensorgym.leaderboard.results import split_tracks, track_heading

    tracks = split_tracks(doc)  # live and replay runs are never ranked together
    if len(tracks) > 1 and (args.csv or args.plots):
        raise UsageError("the results hold live and replay runs: write --csv or --plots from "
                         "each track's documents on their own")
    parts = list(tracks.values()) or [doc]  # the entries left out are listed once, last
    text = "".join(track_heading(d) + tables.markdown(d, validated, rejected if d is parts[-1]
                                                      else None) for d in parts)
    print(text, end="")
    if args.md:
        Path(args.md).write_text(text)
    if args.csv:
        Path(args.csv).write_text(tables.csv_text(doc, validated))
    if args.plots:
        from tensorgym.leaderboard.plots import plot_results

        for path in plot_results(doc, args.plots):
            print(f"plot: {path}")


def cmd_leaderboard(args: argparse.Namespace) -> int:
    if args.action == "show":
        from tensorgym.leaderboard.validate import load_all, load_verdicts, screen

        doc, malformed = load_all(args.results)
        if args.out:
            doc.save(args.out)
        bad_checks: list = []
        verdicts = load_verdicts(args.validation, bad_checks)
        board = screen(doc, verdicts, malformed, args.validated_only)
        _write_outputs(board.doc, args, board.validated, board.rejected + bad_checks)
        return 0
    from tensorgym.leaderboard.run import RunOptions, run_suite

    from . import registry
    from tensorgym.leaderboard.suites import get_suite

    suite = get_suite(args.suite)
    if args.task_sample:
        suite = suite.sample(args.task_sample)
    agents = [a for a in args.agents.split(",") if a]
    if not agents:
        raise UsageError("--agents is empty")
    for a in agents:
        registry.make(a)  # fail on a bad name before measuring anything
    if args.replay is None and args.replay_speed != 1.0:
        raise UsageError("--replay-speed scales a replay's answers: it needs --replay DATASET")
    if args.world_seed != 0 and (args.replay is None or args.on_miss != "draw"):
        raise UsageError("--world-seed picks a replay's drawn answers: it needs --replay DATASET "
                         "--on-miss draw")
    if args.replay is not None and (args.ray is not None or args.db):
        raise UsageError("--replay does not go with --ray or --db: replayed trials are not "
                         "measurements")
    if args.ray is not None and args.db:
        raise UsageError("--db does not go with --ray: the runs measure on cluster nodes, their "
                         "trials are in the results document")
    if args.track == "generalization" and (args.replay is not None or args.ray is not None):
        raise UsageError("--track generalization runs live here: not with --replay or --ray")
    options = RunOptions(trials=args.trials, seeds=args.seeds, remeasure=args.remeasure,
                         vendor=not args.no_vendor, records=args.db, threads=args.threads,
                         ray=args.ray, journal=f"{args.out}.partial.jsonl",
                         replay=args.replay, on_miss=args.on_miss,
                         replay_speed=args.replay_speed, world_seed=args.world_seed,
                         track=args.track,
                         ks=tuple(args.ks))
    doc = run_suite(suite, agents, options,
                    progress=lambda msg: print(msg, file=sys.stderr, flush=True))
    doc.save(args.out)
    print(f"results written to {args.out}", file=sys.stderr)
    _write_outputs(doc, args)
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    from tensorgym.leaderboard.validate import (REJECTED, load_all, passed, report,
                                                save_report, validate)

    doc, malformed = load_all(args.results)
    checks = validate(doc, args.tolerance, args.repeats, args.threads, args.attempts,
                      args.any_device, malformed)
    print(report(checks), end="")
    n = {s: sum(c.status == s for c in checks) for s in ("ok", "skipped", *REJECTED)}
    print(f"{n['ok']} of {len(checks)} entries reproduced; "
          f"{sum(n[s] for s in REJECTED)} rejected ({n['NOT REPRODUCED']} not reproduced, "
          f"{n['invalid']} invalid, {n['error']} failed here); {n['skipped']} not checked")
    if n["skipped"] and not args.allow_skip:
        print("entries that could not be checked here fail the validation "
              "(--allow-skip accepts them)")
    if args.out:
        save_report(checks, args.out, results=list(args.results), tolerance=args.tolerance,
                    repeats=args.repeats, attempts=args.attempts, threads=args.threads)
    return 0 if passed(checks, args.allow_skip) else 1


def cmd_tune_model(args: argparse.Namespace) -> int:
    from .nn.tune_cli import cmd_tune_model as run

    return run(args)


def cmd_bench_model(args: argparse.Namespace) -> int:
    from .nn.bench_cli import cmd_bench_model as run

    return run(args)


def cmd_tasks(args: argparse.Namespace) -> int:
    from .nn import model_tasks

    text = model_tasks(args.model).markdown()
    print(text, end="")
    if args.md:
        Path(args.md).write_text(text)
    return 0


def cmd_corpus(args: argparse.Namespace) -> int:
    from .nn.corpus import DATA, load_corpus, write_corpus
    from .nn.corpus_tables import markdown, split_markdown

    if args.out and not args.regenerate:
        raise UsageError("--out goes with --regenerate")
    if args.regenerate:
        corpus = write_corpus(args.out)
        print(f"corpus written to {args.out or DATA}", file=sys.stderr)
    else:
        corpus = load_corpus()
    text = split_markdown(corpus, args.split) if args.split else markdown(corpus)
    print(text, end="")
    if args.md:
        Path(args.md).write_text(text)
    return 0


def cmd_dataset(args: argparse.Namespace) -> int:
    from .dataset.cli import cmd_dataset as run

    if getattr(args, "suite", None) is not None:
        from .leaderboard.suites import get_suite

        args.suite_object = get_suite(args.suite)

    return run(args)


def cmd_peak(args: argparse.Namespace) -> int:
    from .leaderboard.peak import PeakBook, device_peak_gflops
    from .processes.host import available_cpus

    book = PeakBook(args.book)
    threads = args.threads or available_cpus()
    before = book.best(threads)
    best = device_peak_gflops("cpu", threads, book=book)
    now = book.last.gflops if book.last else None
    info = {"key": book.key(threads), "threads": threads, "measured_now": now,
            "samples": list(book.last.samples) if book.last else [], "best_before": before,
            "best": best, "book": str(book.path)}
    if args.json:
        print(json.dumps(info))
        return 0
    print(f"{info['key']}: FMA peak {best:.1f} GFLOP/s on {threads} thread(s) (the best kept, "
          f"{book.path})")
    print(f"  measured now: {now:.1f} GFLOP/s, samples "
          + ", ".join(f"{x:.1f}" for x in info["samples"])
          + (f"; best before: {before:.1f}" if before else "; nothing kept before"))
    return 0


COMMANDS = {"list": cmd_list, "tune": cmd_tune, "leaderboard": cmd_leaderboard,
            "validate": cmd_validate, "dataset": cmd_dataset, "tasks": cmd_tasks,
            "tune-model": cmd_tune_model, "bench-model": cmd_bench_model,
            "corpus": cmd_corpus, "peak": cmd_peak}


def main(argv: "Sequence[str] | None" = None) -> int:
    args = None
    try:
        args = build_parser().parse_args(argv)
        return COMMANDS[args.command](args)
    except UsageError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except TensorGymError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except SystemExit as e:  # --help
        return e.code if isinstance(e.code, int) else 0
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # output piped into head & co.
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115  (keep the interpreter's flush quiet)
        return 0
    except Exception as e:  # noqa: BLE001  (a bug or a broken install: still one line)
        if args is not None and args.traceback:
            raise
        print(f"error: unexpected {type(e).__name__}: {e} (rerun with --traceback for "
              "details)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
