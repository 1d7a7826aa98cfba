"""Shared plumbing of the paper's component studies (bench_paper_fig*.py): runs on real envs,
a cache of finished runs, tables and PNG figures like the paper's Figures 4-8. Curves
(``metrics.best_so_far``), re-measurement (``compare``) and plots (``plots.plot_curves``) come
from ``tensorgym.leaderboard``.

Every method measures only through ``env.unwrapped.session.measure`` on a fresh env per (method,
workload, seed) with its own records database, so runs do not serve each other cached results.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from typing import Callable, Iterable, Sequence

import numpy as np

from tensorgym import make_env
from tensorgym.leaderboard import compare
from tensorgym.leaderboard.metrics import best_so_far
from tensorgym.leaderboard.plots import plot_curves
from tensorgym.search import tune

Curve = np.ndarray  # best GFLOP/s so far after trial 1..n (metrics.best_so_far)


# ---------------------------------------------------------------------------------------------
# running, tables, figures
class Run:
    """One (method, workload, seed) run: best-so-far curve, best config (JSON), seconds."""

    def __init__(self, curve: Curve, best: "str | None", secs: float) -> None:
        self.curve, self.best, self.secs = curve, best, secs

    def to_json(self) -> dict:
        return {"curve": [float(x) for x in self.curve], "best": self.best, "secs": self.secs}

    @classmethod
    def from_json(cls, d: dict) -> "Run":
        return cls(np.asarray(d["curve"], np.float64), d["best"], float(d["secs"]))


def agent_key(agent: object) -> str:
    """The settings of an agent as text (simple attributes only), to recognise a repeated run."""
    simple = (int, float, str, bool, type(None))
    items = []
    for k, v in sorted(vars(agent).items()):
        if isinstance(v, (list, tuple)) and all(isinstance(x, simple) for x in v):
            v = list(v)
        elif isinstance(v, dict) and all(isinstance(x, simple) for x in v.values()):
            v = dict(sorted(v.items()))
        elif not isinstance(v, simple):
            continue
        items.append(f"{k}={v!r}")
    return f"{type(agent).__name__}({', '.join(items)})"


class RunCache:
    """Runs kept in a JSON file, so that studies sharing a method (Figure 4's GBT is Figure 5's
    rank and Figure 6's lambda=2) measure it once. Keyed by agent settings, workload, target,
    trials and seed; runs with a records database for transfer are never cached."""

    def __init__(self, path: "str | None") -> None:
        self.path = path
        self.runs: dict[str, dict] = {}
        if path and os.path.exists(path):
            with open(path) as f:
                self.runs = json.load(f)

    def get(self, key: str) -> "Run | None":
        d = self.runs.get(key)
        return Run.from_json(d) if d else None

    def put(self, key: str, run: Run) -> None:
        if not self.path:
            return
        self.runs[key] = run.to_json()
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(self.runs, f)
        os.replace(tmp, self.path)  # a kill never leaves a half-written file


def run_method(make_agent: Callable[[], object], workload: str, target: str, trials: int,
               seed: int, records=None, cache: "RunCache | None" = None) -> Run:
    agent = make_agent()
    cacheable = cache is not None and getattr(agent, "records", None) is None
    key = f"{agent_key(agent)}|{workload}|{target}|{trials}|{seed}"
    if cacheable and (hit := cache.get(key)) is not None:
        return hit
    if records is None:  # a throwaway database: runs never serve each other cached results
        records = os.path.join(tempfile.mkdtemp(prefix="tg-bench-"), "records.db")
    env = make_env(workload, target, budget=trials, records=records)
    t = time.time()
    try:
        history = tune(env, agent, trials, seed=seed)
    finally:
        env.close()
    ok = [r for r in history if r.ok]
    best = max(ok, key=lambda r: r.gflops).config.to_json() if ok else None
    run = Run(best_so_far(history, trials), best, time.time() - t)
    if cacheable:
        cache.put(key, run)
    return run


Curves = dict[str, dict[str, list[Curve]]]


def run_study(methods: dict[str, Callable[[], object]], workloads: Iterable[str], target: str,
              trials: int, seeds: int, records=None, cache: "RunCache | None" = None,
              remeasure_rounds: int = 3) -> tuple[Curves, dict[str, dict[str, list[float]]]]:
    """Curves per workload and method (one per seed) and, when ``remeasure_rounds`` > 0, each
    run's best config re-measured beside the other methods' bests of the same seed. The order
    of the methods rotates with the seed, so slow drift of the machine does not favour one."""
    curves: Curves = {}
    again: dict[str, dict[str, list[float]]] = {}
    names = list(methods)
    for w in workloads:
        curves[w] = {name: [] for name in names}
        again[w] = {name: [] for name in names}
        for seed in range(seeds):
            bests = {}
            k = seed % len(names)
            for name in names[k:] + names[:k]:
                run = run_method(methods[name], w, target, trials, seed, records, cache)
                curves[w][name].append(run.curve)
                bests[name] = run.best
                print(f"  {w:<12} {name:<24} seed {seed}: best {run.curve[-1]:8.2f} GFLOP/s "
                      f"({run.secs:6.1f} s)", file=sys.stderr, flush=True)
            if remeasure_rounds > 0:
                c = compare.remeasure(w, target, {k: b for k, b in bests.items() if b},
                                      remeasure_rounds, vendor=False)
                for name in names:
                    again[w][name].append(c.gflops(name))
    return curves, again


def print_table(curves: Curves, title: str,
                again: "dict[str, dict[str, list[float]]] | None" = None) -> None:
    methods = list(next(iter(curves.values())))
    checkpoints = sorted({len(c[0]) for m in curves.values() for c in m.values()})
    n = checkpoints[-1]
    marks = sorted({max(1, n // 4), max(1, n // 2), n})
    print(f"\n{title}: best GFLOP/s so far, mean (min-max) over seeds")
    extra = f" {'best re-measured':>18}" if again else ""
    print(f"{'workload':<12} {'method':<24} " + " ".join(f"{'@' + str(m):>22}" for m in marks)
          + extra)
    for w, per_method in curves.items():
        for name in methods:
            arr = np.stack(per_method[name])
            at = [arr[:, m - 1] for m in marks]
            cells = [f"{a.mean():8.2f} ({a.min():.1f}-{a.max():.1f})" for a in at]
            tail = ""
            if again and again[w][name]:
                tail = f" {np.mean(again[w][name]):18.2f}"
            print(f"{w:<12} {name:<24} " + " ".join(f"{c:>22}" for c in cells) + tail)
    if again:
        print("best re-measured: each seed's best config measured again, interleaved with the "
              "other methods' bests, median of the rounds, mean over seeds")


def save_figure(curves: Curves, path: str, title: str) -> None:
    plot_curves(curves, path, title, center="mean")  # the tables show means too
    print(f"wrote {path}")


def base_parser(description: str, workloads: Sequence[str], trials: int) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--trials", type=int, default=trials, help="measurements per run")
    p.add_argument("--seeds", type=int, default=3, help="runs per method (seeds 0..N-1)")
    p.add_argument("--workloads", nargs="+", default=list(workloads))
    p.add_argument("--target", default="cpu")
    p.add_argument("--batch-size", type=int, default=64, help="trials per model update (b)")
    p.add_argument("--sa-steps", type=int, default=None,
                   help="annealing steps of the first batch (default: the tuner's)")
    p.add_argument("--out", default="results", help="folder for the PNG figures")
    p.add_argument("--db", default=None,
                   help="records database every run writes to (default: a throwaway one per "
                        "run); runs never read measurements back from it")
    p.add_argument("--reuse", default=None,
                   help="JSON file of finished runs: a run with the same agent settings, "
                        "workload, trials and seed is read from it instead of repeated")
    p.add_argument("--remeasure-rounds", type=int, default=3,
                   help="interleaved re-measurement rounds of every run's best (0: skip)")
    return p


def tuner_options(args: argparse.Namespace, **extra) -> dict:
    steps = {} if args.sa_steps is None else {"sa_steps": args.sa_steps}
    return dict(batch_size=args.batch_size, **steps, **extra)


def study(methods: dict[str, Callable[[], object]], args, table_title: str, png: str,
          plot_title: str) -> dict:
    """Run every method on every workload and seed, print the table, write the figure."""
    curves, again = run_study(methods, args.workloads, args.target, args.trials, args.seeds,
                              records=args.db, cache=RunCache(args.reuse),
                              remeasure_rounds=args.remeasure_rounds)
    print_table(curves, table_title, again)
    save_figure(curves, os.path.join(args.out, png), f"{plot_title} ({args.target})")
    return curves
