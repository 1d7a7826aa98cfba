"""What the contiguous write-back and the padding rows buy (issue 36 item 1), side by side.

    python benchmarks/bench_writeback.py --threads 2 --rounds 5
    python benchmarks/bench_writeback.py --layers conv2d-C1+bias+relu --threads 1

For each layer, the first vendor-class seed (``templates/cpu.micro_kernel_values``: output
channels in the lanes, packed weights, the padding materialised) is timed in four forms,
interleaved with PyTorch's op (``leaderboard.compare.remeasure``):

- ``before``: ``contiguous_writeback=0, pad_vector=0``, the kernel the tree before these knobs
  built (the accumulator scattered to the NCHW output, a scalar padding loop parallel over the
  input's channels);
- ``+writeback``: the write-back with ``ow`` as its vector loop (contiguous stores);
- ``+pad``: the padding as fused, vectorized rows;
- ``both``: the seed as it is now.

Prints GFLOP/s, the ratio to PyTorch, and each form's speedup over ``before``; then the
geometric means. The machine and its load are printed first: say which CPU a figure is from.
"""
from __future__ import annotations

import argparse
import math
import os

from tensorgym.hardware.cpu import host_cpu_name, host_isa, vector_lanes
from tensorgym.leaderboard import compare
from tensorgym.templates import space_for
from tensorgym.templates.cpu import micro_kernel_values
from tensorgym.workloads import get_workload

FORMS = {"before": (0, 0), "+writeback": (1, 0), "+pad": (0, 1), "both": (1, 1)}


def bench(name: str, threads: int, rounds: int) -> dict:
    w = get_workload(name)
    space = space_for(w, "cpu")
    lanes = vector_lanes(host_isa())
    seeds = micro_kernel_values(w, lanes, 32 if lanes == 16 else 16)
    if not seeds:
        raise SystemExit(f"{name} has no vendor-class seed on this ISA")
    names = {k.name for k in space.knobs}
    configs = {}
    for form, (contiguous, rows) in FORMS.items():
        values = dict(seeds[0], contiguous_writeback=contiguous, pad_vector=rows)
        configs[form] = space.from_values({k: v for k, v in values.items() if k in names})
    c = compare.remeasure(w, "cpu", configs, rounds, threads=threads)
    return {"layer": name, "gflops": {f: c.gflops(f) for f in (*FORMS, compare.VENDOR)},
            "vendor": c.vendor_library, "errors": c.errors,
            "ratio": {f: c.speedup(f) or math.nan for f in FORMS},
            "gain": {f: c.speedup(f, over="before") or math.nan for f in FORMS}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", nargs="+",
                   default=[f"conv2d-C{i}" for i in range(1, 13)])
    p.add_argument("--threads", type=int, default=2, help="threads for both sides")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    args = p.parse_args()
    print(f"CPU {host_cpu_name()} ({host_isa()}), {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.2f}; {args.threads} threads, {args.rounds} rounds")
    print("| layer | before GF/s | +writeback | +pad | both | PyTorch | both / PyTorch "
          "| before / PyTorch | both / before |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    rows = []
    for name in args.layers:
        r = bench(name, args.threads, args.rounds)
        rows.append(r)
        g = r["gflops"]
        print(f"| {name} | {g['before']:.1f} | {g['+writeback']:.1f} | {g['+pad']:.1f} "
              f"| {g['both']:.1f} | {g[compare.VENDOR]:.1f} | {r['ratio']['both']:.2f}x "
              f"| {r['ratio']['before']:.2f}x | {r['gain']['both']:.2f}x |"
              + (f" errors: {r['errors']}" if r["errors"] else ""), flush=True)

    def geomean(xs: list[float]) -> float:
        xs = [x for x in xs if x > 0 and math.isfinite(x)]
        return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else math.nan

    for form in FORMS:
        print(f"geomean {form}: {geomean([r['ratio'][form] for r in rows]):.2f}x PyTorch, "
              f"{geomean([r['gain'][form] for r in rows]):.2f}x before")


if __name__ == "__main__":
    main()
