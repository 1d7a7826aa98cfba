"""Env steps/s on replay beside the live env, in one run: the single env on recorded configs and
on random actions (misses answered by the surrogate), and the native vector env
(``ReplayVectorEnv``) on both.

    python benchmarks/bench_replay.py --workload conv2d-C6 --dataset data/reference.parquet
    python benchmarks/bench_replay.py --workload matmul:64,64,64 --collect 16   # makes a dataset

Without ``--dataset`` it first collects ``--collect`` random configs of the workload into a
temporary records database (real measurements). The live env steps ``--live-steps`` recorded
configs; then the process is pinned to one CPU (the live run's helper processes keep theirs)
and, in ``--rounds`` rounds whose order rotates, each replay side steps:

- single env, recorded: ``--steps`` actions cycling through the recorded configs, obs config;
- single env, random: ``--single-random`` uniform random actions (nearly all misses), obs config;
- vector env, recorded / random: ``--vector-steps`` steps of ``--num-envs`` envs (steps/s counts
  env steps: a vector step of 1,024 envs is 1,024 of them).

The table gives the median steps/s over rounds in wall-clock time and, in brackets, in CPU time
of this process (less disturbed by other processes on a shared machine), the share of answers
from the surrogate, and the ratio to the live env. Issue 33's targets: >= 50,000 steps/s for the
vector env on random actions, >= 5,000 for a single env.
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from typing import Callable

import gymnasium as gym
import numpy as np

import tensorgym  # noqa: F401  (registers the envs)
from tensorgym.dataset import Dataset, ReplayMeasurer, collect
from tensorgym.envs.replay_vector import ReplayVectorEnv
from tensorgym.workloads import get_workload


def _rate(run: Callable[[], int]) -> tuple[float, float]:
    """(wall-clock, CPU-time) steps/s of ``run``, which returns the steps it took."""
    t, c = time.perf_counter(), time.process_time()
    n = run()
    return n / (time.perf_counter() - t), n / max(time.process_time() - c, 1e-9)


def _single(env, actions) -> Callable[[], int]:
    def run() -> int:
        env.reset(seed=0)
        for a in actions:
            env.step(a)
        return len(actions)
    return run


def _vector(env: ReplayVectorEnv, batches) -> Callable[[], int]:
    def run() -> int:
        env.reset(seed=0)
        for a in batches:
            env.step(a)
        return len(batches) * env.num_envs
    return run


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workload", default="conv2d-C6")
    p.add_argument("--dataset", help="records database or export (default: collect one)")
    p.add_argument("--collect", type=int, default=16, help="configs to collect without --dataset")
    p.add_argument("--steps", type=int, default=20000)
    p.add_argument("--single-random", type=int, default=2000)
    p.add_argument("--num-envs", type=int, default=1024)
    p.add_argument("--vector-steps", type=int, default=50)
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
    rng = np.random.default_rng(0)
    rng.shuffle(configs)
    recorded = [np.array(c.choices, np.int64) for c in configs]
    cycle = [recorded[i % len(recorded)] for i in range(args.steps)]
    space = replay.task(w).space
    dims = np.array(space.dims, np.int64)
    randoms = [rng.integers(0, dims) for _ in range(args.single_random)]

    live = gym.make("TensorSched-v0", workload=w, budget=args.live_steps + 1, records=False,
                    num_threads=args.threads, obs_mode="config")
    live.unwrapped.session.reference_seconds  # noqa: B018  (measured once, outside the timing)
    live_rate = _rate(_single(live, recorded[:args.live_steps]))
    live.close()

    cpus = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpus[0]})  # replay runs on one core
    common = dict(measure="replay", dataset=data, dataset_device=replay.device, records=False,
                  obs_mode="config", on_miss="surrogate", confirm_best=False)
    single = gym.make("TensorSched-v0", workload=w, budget=args.steps + 1, **common)
    vec = ReplayVectorEnv(w, data, num_envs=args.num_envs, budget=args.vector_steps + 1,
                          dataset_device=replay.device)
    vec_recorded = [np.stack([recorded[(i * args.num_envs + e) % len(recorded)]
                              for e in range(args.num_envs)]) for i in range(args.vector_steps)]
    vec_random = [rng.integers(0, dims, size=(args.num_envs, len(dims)))
                  for _ in range(args.vector_steps)]
    sides = {"single env, recorded": _single(single, cycle),
             "single env, random": _single(single, randoms),
             "vector env, recorded": _vector(vec, vec_recorded),
             "vector env, random": _vector(vec, vec_random)}
    for run in sides.values():  # warm: feature rows, the surrogate, the reference
        run()
    names = list(sides)
    rates: dict[str, list[tuple[float, float]]] = {n: [] for n in names}
    sources: dict[str, float] = {}
    for r in range(args.rounds):
        for n in names[r % len(names):] + names[:r % len(names)]:
            before = dict(single.unwrapped.session.measurer.sources), vec.sources.copy()
            rates[n].append(_rate(sides[n]))
            if n.startswith("single"):
                after = single.unwrapped.session.measurer.sources
                got = {k: after[k] - before[0].get(k, 0) for k in after}
                sources[n] = got.get("surrogate", 0) / max(sum(got.values()), 1)
            else:
                got = vec.sources - before[1]
                sources[n] = got[1] / max(got.sum(), 1)
    os.sched_setaffinity(0, set(cpus))

    print(f"{w.label}: {len(configs)} recorded configs on {replay.device}; {args.rounds} "
          f"rounds on one core; vector env of {args.num_envs} envs; {args.live_steps} live steps")
    print(f"{'env':<24} {'steps/s (CPU)':>24} {'surrogate':>10} {'x live':>10}")
    print(f"{'live, obs config':<24} {live_rate[0]:>12.2f} ({'-':>9}) {'-':>10} {1:>10.0f}")
    for n in names:
        wall = statistics.median(x for x, _ in rates[n])
        cpu = statistics.median(c for _, c in rates[n])
        print(f"{n:<24} {wall:>12,.0f} ({cpu:>9,.0f}) {sources[n]:>10.1%} "
              f"{wall / live_rate[0]:>10,.0f}")
    single.close()
    vec.close()
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()
