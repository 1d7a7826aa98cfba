"""Has the machine's speed moved since the dataset was recorded? The recorded time (the median of
a config's records) against the same config timed now by the leaderboard's re-measure
(compare.remeasure: 3 interleaved rounds, 10 ms samples, slow rounds taken again), for the best,
median and 80th-percentile recorded configs of the first N test tasks (default 12).

    python benchmarks/bench_record_speed.py [N]

Reads data/corpus-cpu.db; run it on the dataset's device, with nothing else running.
"""
import statistics
import sys
import warnings

import numpy as np
warnings.simplefilter("ignore")
from tensorgym.dataset.data import Dataset
from tensorgym.dataset.world import task_samples
from tensorgym.leaderboard.compare import remeasure
from tensorgym.leaderboard.suites import get_suite
from tensorgym.measure import LocalMeasurer
from tensorgym.nn.corpus import load_corpus
n = int(sys.argv[1]) if len(sys.argv) > 1 else 12
data = Dataset.load("data/corpus-cpu.db")
tasks = {s.task.workload: s for s in task_samples(data, test_keys=load_corpus().keys("test"))}
suite = get_suite("corpus-test-cpu")
m = LocalMeasurer("cpu", num_threads=2)
ratios = {"best": [], "median": [], "q80": []}
try:
    for key, _ in suite.tasks[:n]:
        s = tasks[key]
        ok = np.isfinite(s.seconds)
        idx, sec = s.indices[ok], s.seconds[ok]
        order = np.argsort(sec)
        picks = {"best": order[0], "median": order[len(order) // 2], "q80": order[int(0.8 * len(order))]}
        configs = {name: s.space.get(int(idx[i])) for name, i in picks.items()}
        c = remeasure(s.workload, "cpu", configs, rounds=3, measurer=m, vendor=False)
        line = []
        for name, i in picks.items():
            smp = [x for r in c.samples.get(name, []) for x in r]
            if not smp:
                continue
            quiet = statistics.median(smp)
            ratios[name].append(sec[i] / quiet)
            line.append(f"{name} {sec[i]*1e3:.3f}/{quiet*1e3:.3f} ms = {sec[i]/quiet:.2f}")
        print(key[:44].ljust(44), " | ".join(line), flush=True)
finally:
    m.close()
for name, r in ratios.items():
    if r:
        print(f"{name}: recorded / re-measured, median {statistics.median(r):.3f}, "
              f"geomean {float(np.exp(np.mean(np.log(r)))):.3f} over {len(r)} tasks")
