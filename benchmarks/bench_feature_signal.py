"""Do the features carry signal? Measure random configs for real, fit XGBoost on log(GFLOPS)
and report the Spearman rank correlation on held-out configs per feature mode, plus zero-shot
transfer between every ordered pair of workloads (train on one, rank the other).

    python benchmarks/bench_feature_signal.py --n 120 --seed 0 \\
        --workloads conv2d:1,32,28,28,32,3,1,1 matmul:256,256,256

Measuring costs about 1-2 s per config on the CPU; ``--cache`` keeps the measurements.
"""
from __future__ import annotations

import argparse
import json
import os

import numpy as np
import xgboost as xgb

from tensorgym.features import featurize
from tensorgym.templates import space_for
from tensorgym.workloads import get_workload


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    ra, rb = np.argsort(np.argsort(a)), np.argsort(np.argsort(b))
    return float(np.corrcoef(ra, rb)[0, 1])


def _fit(x: np.ndarray, y: np.ndarray, seed: int) -> xgb.Booster:
    params = {"max_depth": 4, "eta": 0.1, "subsample": 0.8, "nthread": 1, "seed": seed}
    return xgb.train(params, xgb.DMatrix(x, y - y.mean()), 200)


def _measure(workload, configs, cache: str) -> np.ndarray:
    key = f"{workload.key}|{len(configs)}|{configs[0].index}"
    store = json.load(open(cache)) if cache and os.path.exists(cache) else {}
    if key not in store:
        from tensorgym.measure import LocalMeasurer, MeasureOptions  # noqa: PLC0415

        measurer = LocalMeasurer("cpu", MeasureOptions(repeat=3, min_repeat_ms=5, n_parallel=1))
        store[key] = [r.gflops for r in measurer.measure(workload, configs)]
        if cache:
            json.dump(store, open(cache, "w"))
    return np.array(store[key])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", nargs="+",
                    default=["conv2d:1,32,28,28,32,3,1,1", "matmul:256,256,256"])
    ap.add_argument("--n", type=int, default=120, help="configs measured per workload")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--splits", type=int, default=5, help="random 70/30 splits to average")
    ap.add_argument("--cache", default="", help="JSON file to keep measurements in")
    args = ap.parse_args()

    data = {}
    for i, name in enumerate(args.workloads):
        w = get_workload(name)
        configs = space_for(w, "cpu").sample(np.random.default_rng(args.seed + i), args.n)
        gflops = _measure(w, configs, args.cache)
        ok = gflops > 0
        configs = [c for c, good in zip(configs, ok) if good]
        data[w.label] = (w, configs, np.log(gflops[ok]))
        print(f"{w.label}: {ok.sum()}/{args.n} valid, GFLOPS {gflops[ok].min():.2f}.."
              f"{gflops[ok].max():.2f}")
    modes = ("relation", "context", "config")
    print(f"{'in-domain':<44} " + " ".join(f"{m:>9}" for m in modes))
    for label, (w, configs, y) in data.items():
        rhos = {m: [] for m in modes}
        for m in modes:
            x = featurize(w, configs, m)
            for s in range(args.splits):
                perm = np.random.default_rng(s).permutation(len(y))
                cut = int(0.7 * len(y))
                tr, te = perm[:cut], perm[cut:]
                rhos[m].append(_spearman(_fit(x[tr], y[tr], s).predict(xgb.DMatrix(x[te])), y[te]))
        print(f"{label:<44} " + " ".join(f"{np.mean(rhos[m]):>9.3f}" for m in modes))
    print(f"{'zero-shot transfer':<44} " + " ".join(f"{m:>9}" for m in modes[:2]))
    for (src, (ws, cs, ys)), (dst, (wd, cd, yd)) in (
            (a, b) for a in data.items() for b in data.items() if a[0] != b[0]):
        row = []
        for m in modes[:2]:
            rho = [_spearman(_fit(featurize(ws, cs, m), ys, s).predict(
                xgb.DMatrix(featurize(wd, cd, m))), yd) for s in range(3)]
            row.append(np.mean(rho))
        print(f"{src + ' -> ' + dst:<44} " + " ".join(f"{r:>9.3f}" for r in row))


if __name__ == "__main__":
    main()
