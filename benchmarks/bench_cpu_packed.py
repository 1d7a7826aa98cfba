"""The CPU template's vendor-class schedules (``templates.cpu.micro_kernel_values``: output
channels or B columns in the vector lanes, packed weights / B panels, a register-blocked
accumulator tile) against the reference schedule and the vendor library (PyTorch: oneDNN / MKL),
timed side by side in interleaved rounds (``leaderboard.compare.remeasure``).

    python benchmarks/bench_cpu_packed.py --threads 2 --workloads conv2d-C1 conv2d-C6 matmul-1024

Prints, per workload, every schedule's GFLOP/s (median of the interleaved rounds), its ratio to
the vendor library, and the one-off cost of packing its inputs ahead of time
(``hardware.runtime.packing_seconds``), which the kernel's time leaves out. ``--isa avx2``
generates AVX2 code (8 lanes, 16 registers) on an AVX-512 host.
"""
from __future__ import annotations

import argparse

from tensorgym.leaderboard import compare
from tensorgym.hardware.cpu import host_isa, vector_lanes
from tensorgym.measure import LocalMeasurer, MeasureOptions
from tensorgym.hardware.runtime import packing_seconds
from tensorgym.lower import lower
from tensorgym.templates import default_config, space_for
from tensorgym.templates.cpu import micro_kernel_values
from tensorgym.workloads import get_workload


def bench(name: str, args) -> list[dict]:
    w = get_workload(name)
    space = space_for(w, "cpu")
    isa = args.isa or host_isa()
    lanes, registers = vector_lanes(isa), 32 if isa == "avx512" else 16
    configs = {"reference": default_config(w, "cpu")}
    for i, values in enumerate(micro_kernel_values(w, lanes, registers)):
        configs[f"micro{i}"] = space.from_values(values)
    runtime_kwargs = {"isa": args.isa} if args.isa else {}
    m = LocalMeasurer("cpu", MeasureOptions(timeout=30), num_threads=args.threads, **runtime_kwargs)
    try:
        c = compare.remeasure(w, "cpu", configs, args.rounds, m, threads=args.threads)
    finally:
        m.close()
    inputs = w.random_inputs(0)
    rows = []
    for label, config in configs.items():
        gf = c.gflops(label) if label not in c.errors else float("nan")
        rows.append({"workload": name, "schedule": label, "gflops": gf,
                     "ratio": c.speedup(label) or float("nan"),
                     "pack_ms": 1e3 * packing_seconds(lower(w, config), inputs),
                     "knobs": {k: v for k, v in config.values.items()
                               if k in ("tile_oc", "tile_oh", "tile_ow", "tile_i", "tile_j",
                                        "tile_rk", "inline_pad", "unroll_max_step")},
                     "error": c.errors.get(label, "")[:200]})
    rows.append({"workload": name, "schedule": "vendor", "gflops": c.gflops(compare.VENDOR),
                 "ratio": 1.0, "pack_ms": 0.0, "knobs": c.vendor_library, "error": ""})
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", nargs="+", default=["conv2d-C1", "conv2d-C6", "conv2d-C7",
                                                      "conv2d-C8", "matmul-1024"])
    p.add_argument("--threads", type=int, default=2, help="threads for both sides")
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    p.add_argument("--isa", choices=["avx2", "avx512"], default=None,
                   help="generate code for this ISA (default: the host's)")
    args = p.parse_args()
    print(f"ISA {args.isa or host_isa()}, {args.threads} threads, {args.rounds} rounds")
    print("| workload | schedule | GFLOP/s | / vendor | packing ms | knobs |")
    print("|---|---|---|---|---|---|")
    for name in args.workloads:
        for r in bench(name, args):
            print(f"| {r['workload']} | {r['schedule']} | {r['gflops']:.1f} | {r['ratio']:.2f} "
                  f"| {r['pack_ms']:.2f} | {r['error'] or r['knobs']} |", flush=True)


if __name__ == "__main__":
    main()
