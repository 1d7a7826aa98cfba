"""Share of the FMA peak at the same moment: each layer's best recorded kernel timed in-process,
interleaved round by round with the FMA probe on the same threads, so that a host whose speed
moves by 2x within minutes (another tenant on the sibling hyperthreads) does not turn the
share into a reading of the host.

    python benchmarks/bench_peak_share.py --db r18.db --workloads conv2d-C2 conv2d-C6 \\
        [--threads 2] [--rounds 7]

Per round: the probe (``leaderboard.peak.fma_peak``, one 0.1 s run) and the kernel (the best of
3 batches of calls lasting >= 20 ms each), in alternating order. Printed per layer: the medians
of the kernel's GFLOP/s, of the probe's, and of the per-round share kernel / probe; and the
kernel's share of the peak book's best (the fastest moment ever read here: ``tensorgym peak``).
A share over 100% is flagged, not printed (the kernel outran the probe: the probe's moment was
slow), as in the leaderboard's tables; the last column keeps each round's raw ratio.
"""
from __future__ import annotations

import argparse
import statistics

import numpy as np

from tensorgym.hardware.cpu import CPURuntime, host_cpu_name
from tensorgym.leaderboard.peak import PeakBook, fma_peak
from tensorgym.leaderboard.tables import OVER_PEAK
from tensorgym.lower import lower
from tensorgym.measure.worker import tolerance
from tensorgym.records import Records
from tensorgym.templates import space_for
from tensorgym.workloads import get_workload


def best_kernel(db: str, name: str, threads: int):
    """The workload, its fastest recorded config's kernel (built here) and its buffers."""
    w = get_workload(name)
    (rec,) = Records(db).best(w.key, "cpu", k=1) or [None]
    if rec is None:
        raise SystemExit(f"{db} has no successful record of {name}")
    program = lower(w, space_for(w, "cpu").from_json(rec.config_json))
    rt = CPURuntime(num_threads=threads)
    kernel = rt.load(rt.compile(rt.render(program), program), program)
    ins = w.random_inputs(0)
    bufs = kernel.alloc(ins)
    kernel.time(bufs, 3)
    ref = w.reference(ins)
    err = float(np.abs(kernel.read_output(bufs) - ref).max() / np.abs(ref).max())
    if not err <= tolerance(w):
        raise SystemExit(f"{name}: the kernel's output is off NumPy's by {err:.3g} (relative)")
    return w, kernel, bufs


def kernel_gflops(w, kernel, bufs) -> float:
    once = kernel.time(bufs, 1)
    number = max(1, int(0.02 / max(once, 1e-6)))
    return w.flops / min(kernel.time(bufs, number) for _ in range(3)) / 1e9


def share_cell(share: float) -> str:
    """A share of a peak as printed: one over 100% is flagged, as the leaderboard does."""
    return f"{share:.0%}" if share <= 1.0 else OVER_PEAK


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--db", required=True, help="records database holding the layers' tunes")
    p.add_argument("--workloads", nargs="+",
                   default=["conv2d-C2", "conv2d-C6", "conv2d-C9", "conv2d-C12"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args()
    book = PeakBook().best(args.threads)
    print(f"CPU {host_cpu_name()}, {args.threads} thread(s), {args.rounds} rounds; the peak "
          f"book's best: {f'{book:.1f} GFLOP/s' if book else 'none yet (tensorgym peak)'}")
    print("| layer | kernel GFLOP/s | probe GFLOP/s | share of the probe (same round) "
          "| share of the book's best | kernel / probe, round by round |")
    print("|---|---:|---:|---:|---:|---|")
    for name in args.workloads:
        w, kernel, bufs = best_kernel(args.db, name, args.threads)
        fma_peak(args.threads, seconds=0.1, repeats=1)  # the probe's first run after a build
        # reads low (its rounds' shares started at 1.3-1.4 on every layer): not a round
        ks, ps, shares = [], [], []
        try:
            for r in range(args.rounds):
                if r % 2:
                    k = kernel_gflops(w, kernel, bufs)
                    pk = fma_peak(args.threads, seconds=0.1, repeats=1).gflops
                else:
                    pk = fma_peak(args.threads, seconds=0.1, repeats=1).gflops
                    k = kernel_gflops(w, kernel, bufs)
                ks.append(k)
                ps.append(pk)
                shares.append(k / pk)
        finally:
            kernel.release(bufs)
        print(f"| {w.label} | {statistics.median(ks):.1f} | {statistics.median(ps):.1f} "
              f"| {share_cell(statistics.median(shares))} "
              f"| {share_cell(statistics.median(ks) / book) if book else '-'} | "
              + " ".join(f"{s:.2f}" for s in shares) + " |", flush=True)


if __name__ == "__main__":
    main()
