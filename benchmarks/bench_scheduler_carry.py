"""The task scheduler with and without ``carry`` (each task's annealing chains, configs'
features and annealing helper kept for its next batch), on replay: no timing noise, so the
search's own time and the final estimated latency compare cleanly. Seeds alternate which side
runs first.

    python benchmarks/bench_scheduler_carry.py bert_layer --trials 400 --seeds 0,1,2,3 \\
        [--dataset data/corpus-cpu.db]

Prints each run's final estimated latency and wall time, then each side's medians.
"""
from __future__ import annotations

import argparse
import statistics
import time

from tensorgym.dataset.replay import Dataset, ReplayMeasurer
from tensorgym.nn.scheduler import TaskScheduler, model_tasks_of


def run(model: str, trials: int, seed: int, carry: bool, dataset: Dataset) -> tuple[float, float]:
    """(final estimated latency in ms, wall seconds) of one scheduler run on replay."""
    scheduler = TaskScheduler(model, model_tasks_of(model), None, trials, seed=seed,
                              measurer=ReplayMeasurer(dataset, on_miss="surrogate"))
    if not carry:
        scheduler._agent_options.pop("carry", None)  # as tune-model ran before carry
    start = time.perf_counter()
    with scheduler:
        report = scheduler.run(progress=False)
    return report.latency * 1e3, time.perf_counter() - start


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model")
    p.add_argument("--trials", type=int, default=400)
    p.add_argument("--seeds", default="0,1,2,3")
    p.add_argument("--dataset", default="data/corpus-cpu.db")
    args = p.parse_args()
    dataset = Dataset.load(args.dataset)
    runs: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    for seed in (int(s) for s in args.seeds.split(",")):
        for carry in ((True, False) if seed % 2 else (False, True)):
            latency, wall = run(args.model, args.trials, seed, carry, dataset)
            runs[carry].append((latency, wall))
            print(f"seed {seed} carry {carry}: latency {latency:.3f} ms, wall {wall:.1f} s",
                  flush=True)
    for carry, got in runs.items():
        print(f"carry {carry}: median latency {statistics.median(l for l, _ in got):.3f} ms, "
              f"median wall {statistics.median(w for _, w in got):.1f} s")


if __name__ == "__main__":
    main()
