"""The task scheduler with and without ``carry`` (each task's annealing chains and configs'
features kept for its next batch), on replay: no timing noise, so the search's own time and
the final estimated latency compare cleanly. Seeds interleave which side runs first.

    python benchmarks/bench_scheduler_carry.py bert_layer 400 0,1,2,3

Prints each run's final estimated latency and wall time, then the medians of each side.
"""
import sys, time, statistics
from tensorgym.dataset.replay import ReplayMeasurer
from tensorgym.dataset.replay import Dataset
from tensorgym.nn.scheduler import TaskScheduler, model_tasks_of
model, budget, seeds = sys.argv[1], int(sys.argv[2]), [int(s) for s in sys.argv[3].split(',')]
ds = Dataset.load(sys.argv[4] if len(sys.argv) > 4 else 'data/corpus-cpu.db')
res = {True: [], False: []}
for seed in seeds:
    for carry in ((True, False) if seed % 2 else (False, True)):
        m = ReplayMeasurer(ds, on_miss="surrogate")
        s = TaskScheduler(model, model_tasks_of(model), None, budget, measurer=m, seed=seed)
        if not carry:
            s._agent_options.pop("carry", None)
        t = time.perf_counter()
        with s:
            rep = s.run(progress=False)
        wall = time.perf_counter() - t
        res[carry].append((rep.latency * 1e3, wall))
        print(f"seed {seed} carry {carry}: latency {rep.latency*1e3:.3f} ms, wall {wall:.1f} s", flush=True)
for c in (False, True):
    print(c, 'median latency', round(statistics.median(l for l, _ in res[c]), 3), 'median wall', round(statistics.median(w for _, w in res[c]), 1))
