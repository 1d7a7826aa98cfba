"""What rendering a kernel's LLVM IR costs with this tree's emitter and with a base revision's,
side by side on the same lowered programs in one process, and whether the kernels differ.

    python benchmarks/bench_render.py --base 2531114                 # 16 configs x 4 workloads
    python benchmarks/bench_render.py --base 2531114 --configs 32 --workloads conv2d-C6
    python benchmarks/bench_render.py --base 0e7edc7 --workloads conv2d-C6 --db records.db --top 10

The base's ``tensorgym/codegen/llvm.py`` is read with ``git show`` and loaded as a module of this
package (it needs only the loop AST). Per config, the two emitters alternate in an order that
flips each time; render and compile are CPU seconds of this process. Then both modules are
compiled to assembly: identical assembly runs identically, so only the kernels whose assembly
differs are timed, interleaved over ``--rounds`` rounds (median per kernel, new over base),
each once checked against NumPy. ``--db``: the configs a records database holds for the workload
(a tune's: the kernels a tuner builds, not random ones), instead of ``--configs`` random ones;
``--top N``: time only the N differing kernels whose base runs fastest.
"""
from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

import numpy as np

from tensorgym.codegen.llvm import emit_llvm
from tensorgym.hardware.cpu import CPURuntime
from tensorgym.measure.worker import relative_error, tolerance
from tensorgym.lower import lower
from tensorgym.records import Records
from tensorgym.templates import space_for
from tensorgym.workloads import get_workload

REPO = Path(__file__).resolve().parents[1]


def base_emitter(rev: str):
    source = subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:tensorgym/codegen/llvm.py"],
                            check=True, capture_output=True, text=True).stdout
    mod = types.ModuleType("tensorgym.codegen._bench_base_llvm")
    mod.__package__ = "tensorgym.codegen"
    sys.modules[mod.__name__] = mod  # dataclasses look their module up
    exec(compile(source, f"{rev}:tensorgym/codegen/llvm.py", "exec"), mod.__dict__)
    return mod.emit_llvm


def instructions(asm: str) -> list[str]:
    """Assembly without directives and labels, local label names erased."""
    keep = [line for line in asm.split("\n") if line.strip()
            and not line.strip().startswith((".", "#")) and not re.match(r"^\S+:", line)]
    return [re.sub(r"\.L\w+", "L", line) for line in keep]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--base", required=True, help="git revision whose emitter is compared")
    ap.add_argument("--workloads", nargs="+",
                    default=["conv2d-C1", "conv2d-C6", "conv2d-C7", "matmul-1024"])
    ap.add_argument("--configs", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--db", help="take the workload's configs from this records database")
    ap.add_argument("--top", type=int, default=0, help="time only the N fastest differing kernels")
    args = ap.parse_args()
    emitters = {"base": base_emitter(args.base), "new": emit_llvm}
    rt = CPURuntime(args.threads)
    print(f"{'workload':14s} {'render base':>11s} {'new':>7s} {'ratio':>6s} {'lines base':>10s} "
          f"{'new':>6s} {'compile base':>12s} {'new':>7s} {'same asm':>8s} {'run new/base':>12s}")
    for name in args.workloads:
        wl = get_workload(name)
        space = space_for(wl, "cpu")
        configs = ([space.from_json(c) for c in dict.fromkeys(
            r.config_json for r in Records(args.db).query(wl.key))] if args.db
            else space.sample(np.random.default_rng(args.seed), args.configs))
        cost = {k: {"render": 0.0, "compile": 0.0, "lines": 0} for k in emitters}
        same, differing = 0, []
        for i, config in enumerate(configs):
            program = lower(wl, config)
            order = list(emitters) if i % 2 == 0 else list(reversed(emitters))
            sources, binaries, asm = {}, {}, {}
            for k in order:
                t0 = time.process_time()
                sources[k] = emitters[k](program, args.threads)
                t1 = time.process_time()
                binaries[k] = rt.compile(sources[k], program)
                cost[k]["render"] += t1 - t0
                cost[k]["compile"] += time.process_time() - t1
                cost[k]["lines"] += sources[k].count("\n")
                asm[k] = instructions(rt.assembly(sources[k]))
            if asm["base"] == asm["new"]:
                same += 1
            else:
                differing.append((program, binaries))
        ratios = [r for r in (run_ratio(rt, wl, p, s, args.rounds)
                              for p, s in fastest(rt, wl, differing, args.top)) if r is not None]
        n = len(configs)
        rb, rn = (cost[k]["render"] / n * 1e3 for k in ("base", "new"))
        print(f"{name:14s} {rb:9.1f}ms {rn:5.1f}ms {rb / rn:5.1f}x {cost['base']['lines'] / n:10.0f} "
              f"{cost['new']['lines'] / n:6.0f} {cost['base']['compile'] / n * 1e3:10.0f}ms "
              f"{cost['new']['compile'] / n * 1e3:5.0f}ms {same:4d}/{n:<3d} "
              f"{' '.join(f'{r:.2f}' for r in ratios) or '-':>12s}")
        if ratios:
            print(f"{'':14s} run new/base: median {statistics.median(ratios):.2f}, "
                  f"{min(ratios):.2f}-{max(ratios):.2f}, new faster on {sum(r < 1 for r in ratios)} "
                  f"of {len(ratios)}")


def fastest(rt: CPURuntime, wl, differing: list, top: int) -> list:
    """The ``top`` (program, binaries) whose base kernel runs fastest (one run each); all if 0."""
    if not top:
        return differing
    inputs = wl.random_inputs(0)

    def first_run(program, binaries: dict) -> float:
        kern = rt.load(binaries["base"], program)
        bufs = kern.alloc(inputs)
        try:
            return kern.time(bufs, 1)
        finally:
            kern.release(bufs)

    return sorted(differing, key=lambda d: first_run(*d))[:top]


def run_ratio(rt: CPURuntime, wl, program, binaries: dict, rounds: int) -> "float | None":
    """Median run time of the new kernel over the base's, timed interleaved on the same inputs;
    None for a kernel too slow to time here (over 0.2 s a run)."""
    inputs = wl.random_inputs(0)
    kernels = {k: rt.load(binary, program) for k, binary in binaries.items()}
    bufs = {k: kern.alloc(inputs) for k, kern in kernels.items()}
    expected = wl.reference(inputs)
    try:
        if max(kern.time(bufs[k], 1) for k, kern in kernels.items()) > 0.2:
            return None
        for k, kern in kernels.items():  # each first run's output (NaN-filled before it)
            err = relative_error(np.asarray(kern.read_output(bufs[k])), expected)
            if not err <= tolerance(wl):
                raise SystemExit(f"{wl.label}: the {k} kernel gave a wrong answer ({err:.3g})")
        samples: dict[str, list[float]] = {k: [] for k in kernels}
        for r in range(rounds):
            for k in (list(kernels) if r % 2 == 0 else list(reversed(kernels))):
                samples[k].append(kernels[k].time(bufs[k], 3))
        return statistics.median(samples["new"]) / statistics.median(samples["base"])
    finally:
        for k, kern in kernels.items():
            kern.release(bufs[k])


if __name__ == "__main__":
    main()
