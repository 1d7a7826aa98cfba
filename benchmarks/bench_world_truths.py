"""One world model scored against several truths of the test tasks, and the machine against itself.

A test config timed more than once (``tensorgym dataset remeasure --repeats N``) has a record per
moment. This fits the world model once (the train tasks' fit share, as ``tensorgym dataset
evaluate`` does) and prints TenSet's metrics of its predictions against each truth: a config's
first record alone, its k-th record alone (k = 2 .. N), and the median of its records (what the
world model's rows hold). Then the records against each other (first against second, last two
against each other): how far the machine agrees with itself across those moments.

    python benchmarks/bench_world_truths.py --dataset data/corpus-cpu.db [--seed 0] [--model xgb]

Only configs with at least ``--min-records`` timed records (default 3) are scored; no timing is
done here, so it may run beside anything.
"""
from __future__ import annotations

import argparse
import statistics
import warnings
from collections import defaultdict

import numpy as np

from tensorgym.dataset.data import Dataset
from tensorgym.dataset.world import WorldModel, split_samples, task_samples
from tensorgym.dataset.world.metrics import evaluate_tasks
from tensorgym.errors import InvalidConfigError
from tensorgym.nn.corpus import load_corpus


def timed_records(data: Dataset, sample) -> list[list[float]]:
    """Per config of ``sample`` (in its order): the medians of its timed records, oldest first."""
    by_index: dict[int, list] = defaultdict(list)
    for r in data.by_task.get(sample.task, []):
        if not r.ok or r.cold_only or r.space_name != sample.space.name:
            continue
        try:
            by_index[sample.space.from_json(r.config_json).index].append(r)
        except InvalidConfigError:
            continue
    return [[r.median for r in sorted(by_index.get(i, []), key=lambda r: r.timestamp)]
            for i in sample.indices.tolist()]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default="xgb", help="the world model's family (xgb, lgbm, mlp)")
    ap.add_argument("--min-records", type=int, default=3)
    args = ap.parse_args()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # left-out cold-only records: counted by evaluate
        data = Dataset.load(args.dataset)
        tasks = task_samples(data, test_keys=load_corpus().keys("test"))
    fit, _, test = split_samples(tasks, args.seed)
    wm = WorldModel.fit(fit, family=args.model, features="knobs", seed=args.seed)
    n = args.min_records
    truths: dict[str, list] = defaultdict(list)
    preds: list[np.ndarray] = []
    pairs: dict[str, tuple[list, list]] = {"first vs second": ([], []),
                                          "last two": ([], [])}
    for s in test:
        times = timed_records(data, s)
        keep = np.array([len(t) >= n for t in times])
        if keep.sum() < 2:
            continue
        times = [t for t, k in zip(times, keep) if k]
        preds.append(np.log(wm.predict_indices(s.workload, s.task.target,
                                               s.indices[keep]).seconds))
        truths["first record"].append(np.array([t[0] for t in times]))
        for k in range(1, n):
            truths[f"record {k + 1}"].append(np.array([t[k] for t in times]))
        truths[f"median of {n}+"].append(np.array([statistics.median(t) for t in times]))
        pairs["first vs second"][0].append(np.array([t[0] for t in times]))
        pairs["first vs second"][1].append(np.array([t[1] for t in times]))
        pairs["last two"][0].append(np.array([t[-2] for t in times]))
        pairs["last two"][1].append(np.array([t[-1] for t in times]))
    if not preds:
        print(f"no test task has two configs with {n} timed records")
        return 1
    head = f"{'truth':<28} {'tasks':>5} {'rho':>6} {'pairs':>6} {'top1':>6} {'top5':>6}"
    print(f"{args.model} world model (seed {args.seed}) against each truth of the test configs "
          f"with >= {n} timed records")
    print(head)
    for name, t in truths.items():
        m = evaluate_tasks(preds, t)
        print(f"{name:<28} {m['tasks']:>5} {m['spearman']:>6.3f} {m['pairwise']:>6.3f} "
              f"{m['top1_recall']:>6.3f} {m['top5_recall']:>6.3f}")
    print("\nthe machine against itself (one record's times taken as the prediction of another's)")
    print(head)
    for name, (a, b) in pairs.items():
        m = evaluate_tasks(a, b)
        print(f"{name:<28} {m['tasks']:>5} {m['spearman']:>6.3f} {m['pairwise']:>6.3f} "
              f"{m['top1_recall']:>6.3f} {m['top5_recall']:>6.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
