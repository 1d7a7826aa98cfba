"""What two threads cost a CPU kernel: the parallel region itself (libgomp's fork and join, timed
on an empty body) and, per layer, the two-thread kernel against twice its one-thread figure,
with the share of it that the split of the parallel loop explains (a loop of E iterations over
T threads runs ceil(E / T) on the slowest: imbalance).

    python benchmarks/bench_parallel.py --workloads conv2d-C1 conv2d-C6 --rounds 3 [--chunks 4]

Each config is timed at 1 thread and at 2 threads twice, its parallel loops shared as the tree
before 2026-12-06 did (one static chunk per thread) and as now (``--chunks`` k per thread,
claimed dynamically: ``tensorgym.codegen.llvm``), in interleaved rounds (alternating which goes first,
re-measurement sampling: ``compare.remeasure_options``); the table gives the medians.
``efficiency`` = GFLOP/s at 2 threads / (2 x at 1 thread), for each split; ``dyn / static`` is
the two-thread kernel's speed-up from the dynamic chunks; ``split bound`` is the best
efficiency a static split of the parallel loop allows, E / (T ceil(E / T)).
"""
from __future__ import annotations

import argparse
import ctypes
import math
import statistics
import time

from tensorgym import loopast as A
from tensorgym.codegen.llvm import CHUNKS_PER_THREAD
from tensorgym.hardware.cpu import host_cpu_name, host_isa, jit, vector_lanes
from tensorgym.leaderboard.compare import remeasure_options
from tensorgym.lower import lower
from tensorgym.measure import LocalMeasurer, MeasureOptions
from tensorgym.templates import default_config, space_for
from tensorgym.templates.cpu import micro_kernel_values
from tensorgym.workloads import get_workload

RESNET = [f"conv2d-C{i}" for i in range(1, 13)]


def empty_region_ir(threads: int) -> str:
    """``n`` calls of GOMP_parallel on a body that does nothing: the per-call fork and join."""
    return "\n".join([
        "declare void @GOMP_parallel(ptr, ptr, i32, i32)",
        "define void @body(ptr %d) { ret void }",
        "define void @regions(i64 %n) {",
        "entry:",
        "  br label %loop",
        "loop:",
        "  %i = phi i64 [0, %entry], [%i1, %loop]",
        f"  call void @GOMP_parallel(ptr @body, ptr null, i32 {threads}, i32 0)",
        "  %i1 = add i64 %i, 1",
        "  %more = icmp slt i64 %i1, %n",
        "  br i1 %more, label %loop, label %done",
        "done:",
        "  ret void",
        "}"])


def region_cost_us(threads: int, calls: int = 20000, rounds: int = 5) -> float:
    """Median microseconds of one fork + join on ``threads`` threads, libgomp's pool warm."""
    fn = ctypes.CFUNCTYPE(None, ctypes.c_int64)(jit(empty_region_ir(threads), "regions"))
    fn(1000)
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        fn(calls)
        times.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(times)


def parallel_extent(program: A.Program) -> "int | None":
    """The extent of the main parallel loop of a lowered program (the largest, if several)."""
    extents = [int(n.extent) for n in A.walk(program.body)
               if isinstance(n, A.For) and n.kind == "parallel"]
    return max(extents) if extents else None


def configs_of(name: str) -> dict:
    w = get_workload(name)
    lanes = vector_lanes(host_isa())
    space = space_for(w, "cpu")
    out = {"reference": default_config(w, "cpu")}
    for i, v in enumerate(micro_kernel_values(w, lanes, 32 if lanes == 16 else 16)[:2]):
        out[f"micro{i}"] = space.from_values(v)
    return out


def bench(name: str, rounds: int, measurers: dict) -> list[dict]:
    w = get_workload(name)
    rows = []
    for label, config in configs_of(name).items():
        g = {t: [] for t in measurers}
        for r in range(rounds):
            sides = sorted(measurers)
            for t in sides[r % len(sides):] + sides[:r % len(sides)]:  # rotated each round
                (res,) = measurers[t].measure(w, [config])
                if res.ok:
                    g[t].append(res.gflops)
        if not all(g.values()):
            continue
        g1, g2 = statistics.median(g["1t"]), statistics.median(g["2t"])
        gs = statistics.median(g["2t static"])
        extent = parallel_extent(lower(w, config))
        bound = extent / (2 * math.ceil(extent / 2)) if extent else float("nan")
        rows.append({"workload": name, "schedule": label, "gflops_1t": g1, "gflops_2t": g2,
                     "gflops_2t_static": gs, "efficiency": g2 / (2 * g1),
                     "efficiency_static": gs / (2 * g1), "dynamic_gain": g2 / gs,
                     "extent": extent, "split_bound": bound, "ms_2t": w.flops / g2 / 1e6})
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workloads", nargs="+", default=RESNET)
    p.add_argument("--rounds", type=int, default=3, help="interleaved rounds")
    p.add_argument("--chunks", type=int, default=CHUNKS_PER_THREAD,
                   help="chunks per thread of the dynamic split (the tree's default)")
    args = p.parse_args()
    print(f"CPU {host_cpu_name()} ({host_isa()})")
    for t in (2, 1):
        print(f"empty parallel region, {t} thread(s): {region_cost_us(t):.2f} us per call")
    opts = remeasure_options(MeasureOptions(timeout=60))
    measurers = {"1t": LocalMeasurer("cpu", opts, num_threads=1),
                 "2t static": LocalMeasurer("cpu", opts, num_threads=2, chunks_per_thread=0),
                 "2t": LocalMeasurer("cpu", opts, num_threads=2, chunks_per_thread=args.chunks)}
    print("| workload | schedule | GFLOP/s 1t | 2t static | 2t dynamic | efficiency static "
          "| efficiency dynamic | dyn / static | parallel extent | split bound | ms 2t |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    effs, static_effs, gains = [], [], []
    try:
        for name in args.workloads:
            for r in bench(name, args.rounds, measurers):
                effs.append(r["efficiency"])
                static_effs.append(r["efficiency_static"])
                gains.append(r["dynamic_gain"])
                print(f"| {r['workload']} | {r['schedule']} | {r['gflops_1t']:.1f} "
                      f"| {r['gflops_2t_static']:.1f} | {r['gflops_2t']:.1f} "
                      f"| {r['efficiency_static']:.3f} | {r['efficiency']:.3f} "
                      f"| {r['dynamic_gain']:.3f} | {r['extent']} "
                      f"| {r['split_bound']:.3f} | {r['ms_2t']:.3f} |", flush=True)
    finally:
        for m in measurers.values():
            m.close()
    if effs:
        print(f"median efficiency over {len(effs)} kernels: static split "
              f"{statistics.median(static_effs):.3f}, dynamic ({args.chunks} chunks per thread) "
              f"{statistics.median(effs):.3f}; dynamic / static: median "
              f"{statistics.median(gains):.3f}, geomean "
              f"{math.exp(statistics.fmean(math.log(x) for x in gains)):.3f}")


if __name__ == "__main__":
    main()
