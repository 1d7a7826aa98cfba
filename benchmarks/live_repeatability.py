"""How well two live runs of bench_sim_to_real.py agree with each other: per task both files
hold, the Kendall tau between the agents' live bests of one run and of the other, and its mean.
It is the hardware's own ceiling for replay-against-live tau on those tasks.

    python benchmarks/live_repeatability.py benchmarks/results/sim_to_real-emeraldrapids.json \\
        benchmarks/results/sim_to_real-speed-emeraldrapids.json
"""
from __future__ import annotations

import argparse
import json
import statistics

from scipy.stats import kendalltau


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("first")
    p.add_argument("second")
    args = p.parse_args()
    a, b = (json.load(open(path)) for path in (args.first, args.second))
    other = {t["workload"]: t for t in b["tasks"]}
    taus = []
    for t in a["tasks"]:
        u = other.get(t["workload"])
        if u is None:
            continue
        agents = [g for g in t["agents"] if g in u["agents"]]
        tau = kendalltau([t["agents"][g]["live"] for g in agents],
                         [u["agents"][g]["live"] for g in agents])[0]
        taus.append(tau)
        print(f"{t['label'][:48]:48s} tau {tau:+.2f}")
    print(f"{len(taus)} tasks in both runs: mean live-against-live tau "
          f"{statistics.mean(taus):.3f}" if taus else "no task in both runs")


if __name__ == "__main__":
    main()
