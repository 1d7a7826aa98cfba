"""Figure 4's model comparison: GBT (XGBoost on relation features) vs the context-encoded
TreeGRU, both with the rank loss, driving the same tuner (parallel SA + diversity selection) on
real measurements; best GFLOP/s per trial budget, and each model's train / predict time.

    python benchmarks/bench_treegru.py --trials 800 --seeds 3
    python benchmarks/bench_treegru.py --trials 16 --seeds 1 --workloads matmul-1024 --batch-size 8 --sa-steps 20
    python benchmarks/bench_treegru.py --speed-only --workloads matmul-1024 conv2d-C6

``--speed-only`` skips tuning and times fit / predict on random configs of each workload (no
measurement). Timings on a shared machine are noisy; compare them within one run.
"""
from __future__ import annotations

import os
import time
from collections import defaultdict
from typing import Sequence

import numpy as np

from bench_paper_common import base_parser, print_table, run_study, save_figure, tuner_options
from tensorgym.agents import ModelTuner
from tensorgym.registry import make_model

MODELS = {"GBT (rank)": "xgb", "TreeGRU (rank)": "treegru"}


class TimedModel:
    """A cost model that adds the seconds and rows of every fit / predict to ``stats``."""

    def __init__(self, model, stats: dict) -> None:
        self.model = model
        self.stats = stats
        self.feature_mode = model.feature_mode

    def fit(self, X, y) -> None:
        t = time.perf_counter()
        self.model.fit(X, y)
        self.stats["fit_s"].append(time.perf_counter() - t)
        self.stats["fit_rows"].append(len(y))

    def predict(self, X) -> np.ndarray:
        t = time.perf_counter()
        out = self.model.predict(X)
        self.stats["predict_s"].append(time.perf_counter() - t)
        self.stats["predict_rows"].append(len(out))
        return out


def print_speed(stats: dict[str, dict], title: str) -> None:
    print(f"\n{title}")
    width = max([16, *(len(name) for name in stats)])
    print(f"{'model':<{width}} {'fits':>5} {'rows/fit':>9} {'s/fit':>8} {'fit rows/s':>11} "
          f"{'predicts':>9} {'rows/call':>10} {'ms/call':>8} {'predict rows/s':>15}")
    for name, s in stats.items():
        fit_s, fit_rows = sum(s["fit_s"]), sum(s["fit_rows"])
        pred_s, pred_rows = sum(s["predict_s"]), sum(s["predict_rows"])
        n_fit, n_pred = max(len(s["fit_s"]), 1), max(len(s["predict_s"]), 1)
        print(f"{name:<{width}} {len(s['fit_s']):>5} {fit_rows / n_fit:>9.0f} "
              f"{fit_s / n_fit:>8.2f} "
              f"{fit_rows / max(fit_s, 1e-9):>11.0f} {len(s['predict_s']):>9} "
              f"{pred_rows / n_pred:>10.0f} {1e3 * pred_s / n_pred:>8.2f} "
              f"{pred_rows / max(pred_s, 1e-9):>15.0f}")


def speed_only(workloads: Sequence[str], target: str, n_train: int, n_predict: int,
               chunk: int) -> None:
    """fit on ``n_train`` random configs (random targets) and predict ``n_predict`` configs in
    calls of ``chunk`` (the SA's chain count), per model; featurizing is not timed."""
    from tensorgym.features import featurize  # noqa: PLC0415
    from tensorgym.templates import space_for  # noqa: PLC0415
    from tensorgym.workloads import get_workload  # noqa: PLC0415

    stats: dict[str, dict] = {}
    for w_name in workloads:
        w = get_workload(w_name)
        configs = space_for(w, target).sample_unique(np.random.default_rng(0), n_train + n_predict)
        y = np.random.default_rng(1).random(n_train)
        for label, name in MODELS.items():
            model = make_model(name)
            X = featurize(w, configs, model.feature_mode)
            timed = TimedModel(model, stats.setdefault(f"{name} {w_name}", defaultdict(list)))
            timed.fit(X[:n_train], y)
            for lo in range(n_train, n_train + n_predict, chunk):
                timed.predict(X[lo:lo + chunk])
    print_speed(stats, f"model speed: fit on {n_train} configs, predict {n_predict} in calls "
                       f"of {chunk} (featurizing not timed)")


def main() -> None:
    p = base_parser(__doc__, ["conv2d-C1", "conv2d-C2", "conv2d-C6", "matmul-1024"], 800)
    p.add_argument("--n-chains", type=int, default=128, help="parallel SA chains")
    p.add_argument("--speed-only", action="store_true", help="only time fit / predict")
    p.add_argument("--n-train", type=int, default=512, help="--speed-only: configs to fit on")
    p.add_argument("--n-predict", type=int, default=4096, help="--speed-only: configs to score")
    args = p.parse_args()
    if args.speed_only:
        speed_only(args.workloads, args.target, args.n_train, args.n_predict, args.n_chains)
        return
    stats: dict[str, dict] = {label: defaultdict(list) for label in MODELS}

    def method(label: str, name: str):
        return lambda: ModelTuner(model=lambda: TimedModel(make_model(name), stats[label]),
                                  **tuner_options(args, n_chains=args.n_chains))

    methods = {label: method(label, name) for label, name in MODELS.items()}
    curves, again = run_study(methods, args.workloads, args.target, args.trials, args.seeds,
                              records=args.db, remeasure_rounds=args.remeasure_rounds)
    print_table(curves, "Figure 4 (models): GBT vs TreeGRU, rank loss", again)
    print_speed(stats, "model time inside the tuner (all workloads and seeds)")
    save_figure(curves, os.path.join(args.out, "fig4_treegru.png"),
                f"GBT vs TreeGRU cost model ({args.target})")


if __name__ == "__main__":
    main()
