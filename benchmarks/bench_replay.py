"""Env steps/s on replay (recorded measurements) beside the live env (building and timing
kernels), in one run.

    python benchmarks/bench_replay.py --workload conv2d-C6 --dataset data/reference.parquet
    python benchmarks/bench_replay.py --workload matmul:64,64,64 --collect 16   # makes a dataset

Without ``--dataset`` it first collects ``--collect`` random configs of the workload into a
temporary records database (real measurements). The live env then steps ``--live-steps``
recorded configs; the replay envs (on one core: the process is pinned to its first CPU after the
live run, whose helper processes keep theirs) step ``--steps`` actions cycling through the
recorded configs in a shuffled order, in rounds that alternate the observation modes. The table
gives the median steps/s over rounds in wall-clock time and, in brackets, CPU time of this
process (less disturbed by other processes on shared cores; meaningless for the live env, whose
work is in its builder and worker processes), and the ratio of wall-clock rates to the live env.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import gymnasium as gym
import numpy as np

import tensorgym  # noqa: F401  (registers the envs)
from tensorgym.dataset import Dataset, ReplayMeasurer, collect
from tensorgym.workloads import get_workload

MODES = ("config", "relation", "context")


def _steps(env, actions) -> tuple[float, float]:
    """(wall-clock, CPU-time) steps/s of stepping ``actions`` after a reset."""
    env.reset(seed=0)
    t, c = time.perf_counter(), time.process_time()
    for a in actions:
        env.step(a)
    n = len(actions)
    return n / (time.perf_counter() - t), n / max(time.process_time() - c, 1e-9)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", default="conv2d-C6")
    p.add_argument("--dataset", help="records database or export (default: collect one)")
    p.add_argument("--collect", type=int, default=16, help="configs to collect without --dataset")
    p.add_argument("--steps", type=int, default=20000)
    p.add_argument("--live-steps", type=int, default=5)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    w = get_workload(args.workload)
    tmp = None
    path = args.dataset
    if path is None:
        tmp = tempfile.TemporaryDirectory()
        path = os.path.join(tmp.name, "bench.db")
        print(f"collecting {args.collect} random configs of {w.label} into {path} ...")
        collect([w], n_configs=args.collect, db=path, threads=args.threads, progress=False)
    data = Dataset.load(path)
    replay = ReplayMeasurer(data, workload=w)
    configs = list(replay.task(w).configs)
    np.random.default_rng(0).shuffle(configs)
    actions = [np.array(c.choices, np.int64) for c in configs]
    cycle = [actions[i % len(actions)] for i in range(args.steps)]

    live = gym.make("TensorSched-v0", workload=w, budget=args.live_steps + 1, records=False,
                    num_threads=args.threads, obs_mode="config")
    live.unwrapped.session.reference_seconds  # noqa: B018  (measured once, outside the timing)
    live_rate = _steps(live, actions[:args.live_steps])
    live.close()

    cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpus[0]})  # replay runs on one core
    envs = {m: gym.make("TensorSched-v0", workload=w, measure="replay", dataset=data,
                        dataset_device=replay.device, budget=args.steps + 1, records=False,
                        obs_mode=m) for m in MODES}
    for env in envs.values():  # warm: feature rows cached beside the dataset, the reference
        _steps(env, cycle[:len(actions)])
    rates: dict[str, list[tuple[float, float]]] = {m: [] for m in MODES}
    for r in range(args.rounds):
        for m in MODES[r % len(MODES):] + MODES[:r % len(MODES)]:
            rates[m].append(_steps(envs[m], cycle))
    os.sched_setaffinity(0, set(cpus))

    print(f"{w.label}: {len(configs)} recorded configs on {replay.device}; "
          f"{args.steps} replay steps x {args.rounds} rounds on one core, "
          f"{args.live_steps} live steps")
    print(f"{'env':<28} {'steps/s (CPU)':>24} {'x live':>10}")
    print(f"{'live, obs config':<28} {live_rate[0]:>12.2f} ({'-':>9}) {1:>10.0f}")
    for m in MODES:
        wall = statistics.median(x for x, _ in rates[m])
        cpu = statistics.median(c for _, c in rates[m])
        print(f"{'replay, obs ' + m:<28} {wall:>12,.0f} ({cpu:>9,.0f}) "
              f"{wall / live_rate[0]:>10,.0f}")
    for env in envs.values():
        env.close()
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
