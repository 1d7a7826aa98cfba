"""What the Ray runner costs per trial: N configs measured through the local runner and through
Ray on this machine (one node: a local ``ray.init``), then through a two-node cluster simulated
on this machine (``ray.cluster_utils.Cluster``), in interleaved rounds (local, Ray, local, Ray,
... ; this machine drifts and its cores are shared).

    python benchmarks/bench_ray.py                 # 32 configs of matmul 32x32x32, 3 rounds
    python benchmarks/bench_ray.py --configs 64 --rounds 5 --workload matmul:64,64,64

Printed per round: trials/s of each runner and the ratio Ray / local; then the medians and the
overhead per trial in ms. The compile cache is warm after the first round for every runner alike
(the same configs), so the figures are the measuring path's own cost, not the compiler's. On one
machine two simulated nodes share its cores and its device lock: they can only show the
overhead, not a speedup; N real machines would each time their own kernels and build their own
configs, so a farm's trials/s scales with N less this overhead per trial.
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import ray
from ray.cluster_utils import Cluster

from tensorgym.measure import LocalMeasurer, MeasureOptions, Measurer
from tensorgym.measure.ray import RayMeasurer
from tensorgym.templates import space_for
from tensorgym.workloads import get_workload

MB = 2**20


def trials_per_s(m: Measurer, workload, configs) -> float:
    t0 = time.perf_counter()
    results = m.measure(workload, configs)
    assert len(results) == len(configs)
    return len(configs) / (time.perf_counter() - t0)


def side_by_side(label: str, local: Measurer, farm: Measurer, workload, configs,
                 rounds: int) -> None:
    print(f"\n{label}: {len(configs)} configs of {workload.key}, {farm.device}")
    print(f"{'round':>5} {'local trials/s':>15} {'ray trials/s':>13} {'ray/local':>10}")
    pairs = []
    for r in range(rounds):
        order = [("local", local), ("ray", farm)] if r % 2 == 0 else [("ray", farm),
                                                                       ("local", local)]
        got = {name: trials_per_s(m, workload, configs) for name, m in order}
        pairs.append((got["local"], got["ray"]))
        ratio = got["ray"] / got["local"]
        print(f"{r:>5} {got['local']:>15.2f} {got['ray']:>13.2f} {ratio:>10.2f}")
    lo = statistics.median(p[0] for p in pairs)
    ry = statistics.median(p[1] for p in pairs)
    print(f"median: local {lo:.2f} trials/s, ray {ry:.2f} trials/s, ray/local {ry / lo:.2f}; "
          f"overhead {1e3 * (1 / ry - 1 / lo):+.1f} ms per trial")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workload", default="matmul:32,32,32")
    p.add_argument("--configs", type=int, default=32)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    w = get_workload(args.workload)
    configs = space_for(w, "cpu").sample(np.random.default_rng(0), args.configs)
    opts = MeasureOptions(repeat=3, min_repeat_ms=2)
    local = LocalMeasurer("cpu", opts, num_threads=args.threads)
    try:
        ray.init(num_cpus=2, object_store_memory=200 * MB, include_dashboard=False,
                 log_to_driver=False)
        farm = RayMeasurer("cpu", opts, num_threads=args.threads)
        trials_per_s(farm, w, configs[:2])  # start the Ray workers and their builders
        side_by_side("one node (ray.init)", local, farm, w, configs, args.rounds)
        farm.close()
        ray.shutdown()

        node = dict(num_cpus=1, object_store_memory=100 * MB)
        cluster = Cluster(initialize_head=True, head_node_args={**node, "include_dashboard": False})
        cluster.add_node(**node)
        ray.init(address=cluster.address, log_to_driver=False)
        farm = RayMeasurer("cpu", opts, num_threads=args.threads)
        trials_per_s(farm, w, configs[:2])
        side_by_side("two simulated nodes (one CPU each, same machine)", local, farm, w, configs,
                     args.rounds)
        farm.close()
        ray.shutdown()
        cluster.shutdown()
    finally:
        local.close()
        if ray.is_initialized():
            ray.shutdown()


if __name__ == "__main__":
    main()
