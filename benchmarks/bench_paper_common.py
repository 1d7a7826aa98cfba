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
# black-box baselines
class RandomSearch:
    """Uniform samples without repeats, measured in batches."""

    name = "random"

    def __init__(self, batch_size: int = 64) -> None:
        self.batch_size = batch_size

    def tune(self, env, n_trials: int, seed: int = 0, callbacks=()) -> list[MeasureResult]:
        u = env.unwrapped
        rng = np.random.default_rng(seed)
        seen: set[int] = set()
        history: list[MeasureResult] = []
        while len(history) < n_trials:
            batch = u.space.sample_unique(rng, min(self.batch_size, n_trials - len(history)), seen)
            if not batch:
                break
            seen |= {c.index for c in batch}
            res = list(u.measure(batch))
            history += res
            for cb in callbacks:
                cb(self, res)
        return history


class MiniGA:
    """A small genetic algorithm (used when tensorgym.baselines.ga is not available): elitist
    fitness-proportional parents, uniform crossover of knob choices, per-knob mutation."""

    name = "ga"

    def __init__(self, population: int = 64, elite: int = 8, mutation: float = 0.1) -> None:
        self.population, self.elite, self.mutation = population, elite, mutation

    def tune(self, env, n_trials: int, seed: int = 0, callbacks=()) -> list[MeasureResult]:
        u = env.unwrapped
        space = u.space
        rng = np.random.default_rng(seed)
        seen: set[int] = set()
        history: list[MeasureResult] = []
        pool = space.sample_unique(rng, min(self.population, n_trials))
        while pool and len(history) < n_trials:
            pool = pool[: n_trials - len(history)]
            seen |= {c.index for c in pool}
            res = list(u.measure(pool))
            history += res
            for cb in callbacks:
                cb(self, res)
            ranked = sorted(history, key=lambda r: -r.gflops)[: self.population]
            fitness = np.array([r.gflops for r in ranked]) + 1e-9
            p = fitness / fitness.sum()
            children: list = []
            tries = 0
            while len(children) < self.population and tries < 20 * self.population:
                tries += 1
                a, b = (ranked[i].config.choices for i in rng.choice(len(ranked), 2, p=p))
                child = [x if rng.random() < 0.5 else y for x, y in zip(a, b)]
                for j, k in enumerate(space.knobs):
                    if rng.random() < self.mutation:
                        child[j] = int(rng.integers(k.size))
                c = space.from_choices(child)
                if c.index not in seen:
                    seen.add(c.index)
                    children.append(c)
            if len(children) < self.population:  # converged: top up with random samples
                extra = space.sample_unique(rng, self.population - len(children), seen)
                seen |= {c.index for c in extra}
                children += extra
            pool = children
        return history


def make_ga(batch_size: int):
    """tensorgym.baselines' GA when it is installed (assumed ``make_ga(population=...)``),
    else :class:`MiniGA`; says which on stderr."""
    try:
        from tensorgym.baselines.ga import make_ga as lib_ga  # noqa: PLC0415

        agent = lib_ga(population=batch_size)
        which = "tensorgym.baselines.ga"
    except (ImportError, TypeError):
        agent, which = MiniGA(population=batch_size), "benchmarks' MiniGA"
    print(f"  GA: {which}", file=sys.stderr)
    return agent


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
