"""How the vendor library is timed on CUDA: PyTorch's op called from Python run by run (host
time per call included once the host is slower than the GPU) against a CUDA graph of the runs
(the GPU's time alone), interleaved in each of ``--procs`` fresh processes (cuDNN picks its
algorithm per process), beside a tensorgym kernel timed by its own worker timer (``--config``: a
``gpu_check.py`` JSON, whose tuned bests are used).

    python benchmarks/bench_vendor_cuda.py [--procs 3] [--rounds 7] [--config gpu_check.json]

Prints per process and workload the median microseconds per run of each way and the host's
enqueue time per call (the time to issue the calls, before the GPU is waited for).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time



def child(workloads: list[str], rounds: int, configs: dict) -> dict:
    import torch

    from tensorgym.leaderboard.vendor import VendorTimer
    from tensorgym.workloads import get_workload

    out = {}
    for name in workloads:
        w = get_workload(name)
        loop, graph = VendorTimer(w, "cuda", cuda_graph=False), VendorTimer(w, "cuda")
        ours = _ours(w, configs.get(w.key)) if configs.get(w.key) else None
        samples = {"loop": [], "graph": [], "ours": []}
        for _ in range(rounds):
            samples["loop"] += loop.sample(1)
            samples["graph"] += graph.sample(1)
            if ours:
                samples["ours"].append(ours())
        with loop._settings():  # the host's cost of issuing one call
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(200):
                loop._op(*loop._args)
            enqueue = (time.perf_counter() - t0) / 200
            torch.cuda.synchronize()
        out[name] = {k: statistics.median(v) * 1e6 for k, v in samples.items() if v}
        out[name]["enqueue"] = enqueue * 1e6
        out[name]["flops"] = w.flops
    return out


def _ours(workload, config_json):
    """A timer of the config's kernel: runs per sample as the worker picks them (>= 5 ms)."""
    import math

    from tensorgym.hardware.runtime import get_runtime
    from tensorgym.lower.gpu import lower_gpu
    from tensorgym.templates import space_for

    rt = get_runtime("cuda")
    config = space_for(workload, "cuda").from_values(config_json["knobs"])
    program = lower_gpu(workload, config, rt.limits())
    kernel = rt.load(rt.compile(rt.render(program), program), program)
    bufs = kernel.alloc(workload.random_inputs(0))
    first = kernel.time(bufs, 1)
    number = max(1, math.ceil(5e-3 / max(first, 1e-7)))
    return lambda: kernel.time(bufs, number)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", nargs="*", default=["conv2d-C6", "matmul-1024"])
    ap.add_argument("--procs", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--config", help="gpu_check.py's JSON: time its tuned bests too")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    configs = {}
    if args.config:
        from tensorgym.workloads import get_workload

        for row in json.load(open(args.config)).get("tune", []):
            if row.get("best_config"):
                configs[get_workload(row["workload"]).key] = row["best_config"]
    if args.child:
        print(json.dumps(child(args.workloads, args.rounds, configs)))
        return
    print("| process | workload | loop us | graph us | loop/graph | enqueue us/call | "
          "graph GFLOP/s | tensorgym best us | best/graph speed |")
    print("|---|---|---|---|---|---|---|---|---|")
    for p in range(args.procs):
        cmd = [sys.executable, __file__, "--child", "--rounds", str(args.rounds),
               "--workloads", *args.workloads] + (["--config", args.config] if args.config else [])
        res = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True)
                         .stdout.strip().splitlines()[-1])
        for name, r in res.items():
            ours = r.get("ours")
            best = "- | -" if ours is None else f"{ours:.1f} | {r['graph'] / ours:.2f}"
            print(f"| {p} | {name} | {r['loop']:.1f} | {r['graph']:.1f} | "
                  f"{r['loop'] / r['graph']:.2f} | {r['enqueue']:.1f} | "
                  f"{r['flops'] / r['graph'] / 1e3:.0f} | {best} |", flush=True)


if __name__ == "__main__":
    main()
