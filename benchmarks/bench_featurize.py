"""Featurizing configs/s on one core at the call sizes search asks for, this tree beside a base
revision (checked out in a temporary worktree), in interleaved rounds.

    python benchmarks/bench_featurize.py --base HEAD                 # C6 and matmul-1024
    python benchmarks/bench_featurize.py --base HEAD --rounds 7 --workloads conv2d-C6

Cases per workload, each on a cold row cache, ``n_jobs=1``, through a ``Featurizer``
(so small calls take whichever path ``featurize`` picks): calls of ``--sizes`` random configs,
fresh ones in every call (``--configs`` configs per case in all), and ``walk``: the calls a tuner
makes while simulated annealing (``agents.annealing.ParallelAnnealer``: one of the tuner's two
groups, 128 chains, 50 steps then 13 per round, ``--walk-rounds`` rounds of picking 64 configs,
behind ``agents.tuner.FeatureCache``)
walks the space under a fixed random linear model of the rows. The walk is recorded first and
its calls replayed timed, so every version featurizes the same calls.

Each round runs one process per version (order flipping from round to round); the table shows
the median rate over rounds in CPU time of that process, wall time in brackets, and new/base.
A digest of every row each version computed checks that both give the same features bit for bit.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
MODE = "relation"  # the feature mode of the tuner's default model (xgb)


def walk_calls(workload, space, rounds: int, seed: int) -> list[list]:
    """The ``featurize`` calls of a tuner's annealing walk (configs not featurized before)."""
    import numpy as np

    from agents.annealing import ParallelAnnealer
    from agents.tuner import FeatureCache
    from tensorgym.features import Featurizer, feature_length

    featurizer, calls = Featurizer(), []

    def record(configs, mode):
        calls.append(list(configs))
        return featurizer.featurize(workload, configs, mode)

    cache = FeatureCache(record, MODE)
    weights = np.random.default_rng(seed).standard_normal(feature_length(MODE))
    annealer = ParallelAnnealer(space, 128, 50, 30, seed=seed, resume_steps=13)
    taken: set[int] = set()
    for _ in range(rounds):
        found = annealer.find_maximums(lambda cs: cache(cs) @ weights, 64, exclude=taken)
        taken.update(c.index for c, _ in found)
    return calls


def measure(args) -> None:
    """One round in this process's ``tensorgym``: JSON {case: [configs, cpu s, wall s, digest]}."""
    import numpy as np

    from tensorgym.features import Featurizer
    from tensorgym.templates import space_for
    from tensorgym.workloads import get_workload

    out = {}
    for name in args.workloads:
        w = get_workload(name)
        space = space_for(w, "cpu")
        rng = np.random.default_rng(args.seed)
        cases = {f"{s}": [space.sample(rng, s) for _ in range(max(1, args.configs // s))]
                 for s in args.sizes}
        cases["walk"] = walk_calls(w, space, args.walk_rounds, args.seed)
        featurizer = Featurizer()
        featurizer.featurize(w, space.sample(rng, 256), MODE, n_jobs=1)  # imports, lru caches
        for case, calls in cases.items():
            digest, cpu, wall = hashlib.sha256(), 0.0, 0.0
            featurizer.clear()
            for configs in calls:
                if case != "walk":
                    featurizer.clear()
                c, t = time.process_time(), time.perf_counter()
                rows = featurizer.featurize(w, configs, MODE, n_jobs=1)
                cpu += time.process_time() - c
                wall += time.perf_counter() - t
                digest.update(rows.tobytes())
            out[f"{name} {case}"] = [sum(map(len, calls)), cpu, wall, digest.hexdigest()[:16]]
    print(json.dumps({"tensorgym": str(Path(sys.modules["tensorgym"].__file__).parent),
                      "cases": out}))


def base_tree(rev: str, into: Path) -> Path:
    subprocess.run(["git", "-C", str(REPO), "worktree", "add", "--detach", str(into), rev],
                   check=True, capture_output=True)
    return into


def run_round(root: Path, argv: list[str]) -> dict:
    env = dict(os.environ, PYTHONPATH=str(root))
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--measure", *argv],
                          check=True, capture_output=True, text=True, env=env, cwd=str(root))
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if Path(result["tensorgym"]).resolve() != (root / "tensorgym").resolve():
        raise RuntimeError(f"the round for {root} imported tensorgym from {result['tensorgym']}")
    return result["cases"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--base", help="git revision to compare with (default: this tree alone)")
    ap.add_argument("--workloads", nargs="+", default=["conv2d-C6", "matmul-1024"])
    ap.add_argument("--sizes", type=int, nargs="+", default=[16, 128, 1024])
    ap.add_argument("--configs", type=int, default=2048, help="configs per case of random calls")
    ap.add_argument("--walk-rounds", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--measure", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.measure:
        return measure(args)
    argv = ["--workloads", *args.workloads, "--sizes", *map(str, args.sizes), "--configs",
            str(args.configs), "--walk-rounds", str(args.walk_rounds), "--seed", str(args.seed)]
    tmp = Path(tempfile.mkdtemp(prefix="bench_featurize_"))
    try:
        roots = {"new": REPO}
        if args.base:
            roots = {"base": base_tree(args.base, tmp / "base"), **roots}
        results: dict[str, list[dict]] = {v: [] for v in roots}
        for r in range(args.rounds):
            for v in (list(roots) if r % 2 == 0 else list(reversed(roots))):
                results[v].append(run_round(roots[v], argv))
        report(results)
    finally:
        if args.base:
            subprocess.run(["git", "-C", str(REPO), "worktree", "remove", "--force",
                            str(tmp / "base")], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


def report(results: dict[str, list[dict]]) -> None:
    versions = list(results)
    head = " ".join(f"{v + ' cfg/s (wall)':>22s}" for v in versions)
    print(f"{'workload':12s} {'call':>6s} {'configs':>7s} {head}"
          + (f" {'new/base':>8s} {'same rows':>9s}" if "base" in results else ""))
    for case in results["new"][0]:
        n = results["new"][0][case][0]
        rates = {v: (statistics.median(n / r[case][1] for r in results[v]),
                     statistics.median(n / r[case][2] for r in results[v])) for v in versions}
        cells = " ".join(f"{rates[v][0]:13.0f} ({rates[v][1]:6.0f})" for v in versions)
        line = f"{case.split()[0]:12s} {case.split()[1]:>6s} {n:7d} {cells}"
        if "base" in results:
            same = len({r[case][3] for v in versions for r in results[v]}) == 1
            line += f" {rates['new'][0] / rates['base'][0]:7.2f}x {'yes' if same else 'NO':>9s}"
        print(line)


if __name__ == "__main__":
    main()
