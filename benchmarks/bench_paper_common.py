"""Shared plumbing of the paper's component studies (bench_paper_fig*.py): real envs, the
black-box baselines, best-so-far curves, tables and PNG figures like the paper's Figures 4-8.

Every method measures only through ``env.unwrapped.measure`` on a fresh env per (method,
workload, seed) with its own records database, so runs do not serve each other cached results.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from typing import Callable, Iterable, Sequence

import numpy as np

from tensorgym.hardware.result import MeasureResult

Curve = np.ndarray  # best GFLOP/s so far after trial 1..n


def make_env(workload: str, target: str, budget: int, records=None):
    """A real TensorSched env. ``records``: a path / Records, or None for a throwaway database."""
    import gymnasium as gym  # noqa: PLC0415

    import tensorgym.envs  # noqa: F401,PLC0415  (registers the envs)

    if records is None:
        records = os.path.join(tempfile.mkdtemp(prefix="tg-bench-"), "records.db")
    return gym.make(f"TensorSched-{workload}-{target}", budget=budget, records=records)


def best_so_far(results: Sequence[MeasureResult], n: int) -> Curve:
    g = np.array([r.gflops for r in results[:n]], np.float64)
    curve = np.maximum.accumulate(g) if len(g) else g
    if len(curve) < n:  # the space ran out: the best stays where it was
        curve = np.r_[curve, np.full(n - len(curve), curve[-1] if len(curve) else 0.0)]
    return curve


# ---------------------------------------------------------------------------------------------
# black-box baselines: the ones of tensorgym.baselines, so the studies and the leaderboard agree
def make_random(batch_size: int):
    from tensorgym.baselines import get_agent  # noqa: PLC0415

    return get_agent("random", batch_size=batch_size)


def make_ga(batch_size: int):
    from tensorgym.baselines import get_agent  # noqa: PLC0415

    return get_agent("ga", batch_size=batch_size)


# ---------------------------------------------------------------------------------------------
# running, tables, figures
def run_method(make_agent: Callable[[], object], workload: str, target: str, trials: int,
               seed: int) -> tuple[Curve, float]:
    env = make_env(workload, target, budget=trials)
    t = time.time()
    try:
        history = make_agent().tune(env, trials, seed=seed)
    finally:
        env.close()
    return best_so_far(history, trials), time.time() - t


def run_study(methods: dict[str, Callable[[], object]], workloads: Iterable[str], target: str,
              trials: int, seeds: int) -> dict[str, dict[str, list[Curve]]]:
    curves: dict[str, dict[str, list[Curve]]] = {}
    for w in workloads:
        curves[w] = {}
        for name, factory in methods.items():
            curves[w][name] = []
            for seed in range(seeds):
                curve, secs = run_method(factory, w, target, trials, seed)
                curves[w][name].append(curve)
                print(f"  {w:<12} {name:<24} seed {seed}: best {curve[-1]:8.2f} GFLOP/s "
                      f"({secs:6.1f} s)", file=sys.stderr, flush=True)
    return curves


def print_table(curves: dict[str, dict[str, list[Curve]]], title: str) -> None:
    methods = list(next(iter(curves.values())))
    checkpoints = sorted({len(c[0]) for m in curves.values() for c in m.values()})
    n = checkpoints[-1]
    marks = sorted({max(1, n // 4), max(1, n // 2), n})
    print(f"\n{title}: best GFLOP/s so far, mean (min-max) over seeds")
    print(f"{'workload':<12} {'method':<24} " + " ".join(f"{'@' + str(m):>22}" for m in marks))
    for w, per_method in curves.items():
        for name in methods:
            arr = np.stack(per_method[name])
            at = [arr[:, m - 1] for m in marks]
            cells = [f"{a.mean():8.2f} ({a.min():.1f}-{a.max():.1f})" for a in at]
            print(f"{w:<12} {name:<24} " + " ".join(f"{c:>22}" for c in cells))


def plot_curves(curves: dict[str, dict[str, list[Curve]]], path: str, title: str) -> None:
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    n = len(curves)
    fig, axes = plt.subplots(1, n, figsize=(4.2 * n, 3.4), squeeze=False)
    for ax, (w, per_method) in zip(axes[0], curves.items()):
        for name, runs in per_method.items():
            arr = np.stack(runs)
            x = np.arange(1, arr.shape[1] + 1)
            ax.plot(x, arr.mean(axis=0), label=name)
            if len(runs) > 1:
                ax.fill_between(x, arr.min(axis=0), arr.max(axis=0), alpha=0.15)
        ax.set_title(w)
        ax.set_xlabel("Number of trials")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("GFLOP/s (best so far)")
    axes[0][-1].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"wrote {path}")


def base_parser(description: str, workloads: Sequence[str], trials: int) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--trials", type=int, default=trials, help="measurements per run")
    p.add_argument("--seeds", type=int, default=3, help="runs per method (seeds 0..N-1)")
    p.add_argument("--workloads", nargs="+", default=list(workloads))
    p.add_argument("--target", default="cpu")
    p.add_argument("--batch-size", type=int, default=64, help="trials per model update (b)")
    p.add_argument("--sa-steps", type=int, default=100, help="annealing steps per batch (max)")
    p.add_argument("--out", default="results", help="folder for the PNG figures")
    return p


def tuner_options(args: argparse.Namespace, **extra) -> dict:
    return dict(batch_size=args.batch_size, sa_steps=args.sa_steps, **extra)


def study(methods: dict[str, Callable[[], object]], args, table_title: str, png: str,
          plot_title: str) -> dict:
    """Run every method on every workload and seed, print the table, write the figure."""
    curves = run_study(methods, args.workloads, args.target, args.trials, args.seeds)
    print_table(curves, table_title)
    plot_curves(curves, os.path.join(args.out, png), f"{plot_title} ({args.target})")
    return curves
