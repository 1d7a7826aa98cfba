"""How well does the machine rank a task's configs against itself? The frame for a world model's
test-task metrics (issue 33's Must: pairwise accuracy >= 0.85, top-5 recall >= 0.5).

    python benchmarks/bench_world_ceiling.py --dataset data/corpus-cpu.db [--tasks 10] [--seed 0]

On this machine, which must be the dataset's device: the first ``--tasks`` corpus test tasks
(a seeded draw) each have every config the dataset times measured again, in one batch per task,
with the campaign's early stop (4x the task's best) and today's worker. The new medians are
scored against the dataset's times (``world.samples``: the median over a config's timed records)
with the world model's metrics (``world.metrics``), as if the re-measurement were a perfect
model's prediction: its pairwise accuracy is what the hardware's own run-to-run noise and drift
leave. Beside it, on the same tasks, the world model's (``--family``, fitted on the train tasks
as ``tensorgym dataset evaluate`` fits it). Nothing is written to the dataset.
"""
from __future__ import annotations

import argparse
import sys
import warnings

import numpy as np

from tensorgym.dataset.data import Dataset
from tensorgym.dataset.world import models
from tensorgym.dataset.world.cli import corpus_test_keys
from tensorgym.dataset.world.metrics import NAMES, evaluate_tasks
from tensorgym.dataset.world.model import WorldModel
from tensorgym.dataset.world.samples import split_samples, task_samples
from tensorgym.measure import MeasureOptions
from tensorgym.session import make_measurer


def main(argv: "list[str] | None" = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", required=True)
    p.add_argument("--tasks", type=int, default=10)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--family", default="xgb", choices=models.REGRESSORS)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--early-stop", type=float, default=4.0)
    args = p.parse_args(argv)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the cold-only records' count: said by evaluate
        tasks = task_samples(Dataset.load(args.dataset), None, corpus_test_keys())
    fit, _, test = split_samples(tasks, args.seed)
    rng = np.random.default_rng(args.seed)
    chosen = [test[i] for i in sorted(rng.permutation(len(test))[:args.tasks])]
    measurer = make_measurer("cpu", options=MeasureOptions(stop_first_run=False),
                             num_threads=args.threads)
    if measurer.device != chosen[0].task.device:
        measurer.close()
        print(f"this machine is {measurer.device}; the dataset's tasks are of "
              f"{chosen[0].task.device}: run it there", file=sys.stderr)
        return 1
    wm = WorldModel(models.Constant(), models.Constant(), models.Constant(), args.family)
    rows = wm.training_rows(fit)
    t = rows["time_rows"]
    model = models.make(args.family, args.seed).fit(rows["X"][t], rows["y_time"][t],
                                                    rows["groups"][t])
    again, predicted, truth = [], [], []
    try:
        for s in chosen:
            timed = np.isfinite(s.seconds)
            configs = [s.space.get(int(i)) for i in s.indices[timed]]
            best = float(np.min(s.seconds[timed]))
            results = measurer.measure(s.workload, configs,
                                       stop_slower_than=args.early_stop * best,
                                       early_stop=args.early_stop)
            new = np.array([r.median if r.ok else np.nan for r in results])
            again.append(new)
            truth.append(s.seconds[timed])
            predicted.append(model.predict(wm.inputs(s.workload, s.task.target,
                                                     s.indices[timed])))
            one = evaluate_tasks([new], [s.seconds[timed]])
            print(f"{s.task.workload:<48} configs {timed.sum():>4}  re-measured pairs "
                  f"{one['pairwise']:.3f}  model pairs "
                  f"{evaluate_tasks([predicted[-1]], [truth[-1]])['pairwise']:.3f}", flush=True)
    finally:
        measurer.close()
        wm.close()
    # a config the re-measurement failed is left out of both scores
    keep = [np.isfinite(a) for a in again]
    machine = evaluate_tasks([a[k] for a, k in zip(again, keep)], [x[k] for x, k in zip(truth, keep)])
    world = evaluate_tasks([p[k] for p, k in zip(predicted, keep)], [x[k] for x, k in zip(truth, keep)])
    print(f"\n{len(chosen)} test tasks on {measurer.device}; mean over tasks:")
    print(f"{'ranker':<22}" + "".join(f"{n:>13}" for n in NAMES))
    for name, m in (("re-measured (machine)", machine), (f"world model ({args.family})", world)):
        print(f"{name:<22}" + "".join(f"{m[n]:>13.3f}" for n in NAMES))
    return 0


if __name__ == "__main__":
    sys.exit(main())
