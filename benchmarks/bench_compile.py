"""What a CPU kernel's build costs at each LLVM level, and what its run time pays for it, side by
side in one run.

    python benchmarks/bench_compile.py                       # 16 configs per workload: ~5 min
    python benchmarks/bench_compile.py --configs 8 --workloads conv2d-C6

Each config is lowered and rendered once, then compiled by five compilers, each in a process of
its own (LLVM's pass options are process-wide):
  before  what main compiled before this study: O3 (IR pipeline and backend), LLVM's loop
          vectorizer and unroller off, LoopLoadElimination on
  O1 O2 O3  CPURuntime(opt_level=L, codegen_level=L): this tree, LoopLoadElimination off
  policy  CPURuntime() as tensorgym builds: O3, the backend's level chosen per kernel
Build cost is the compiling process's CPU time (two shared cores: wall time would charge other
people's load), plus lowering and rendering, which every compiler shares. All binaries are then
loaded here, checked against NumPy and timed interleaved on the same buffers: ``--rounds`` rounds,
each in a new random order, each sample at least ``--sample-ms``; the median per binary, over
before's. A kernel whose first run takes longer than ``--max-run`` is built but not timed (a tuner
times it once, far from its best). Identical objects run identically, so "same object" counts
the kernels whose run time cannot have changed, and O3 beside before shows the timing noise.
``--known`` adds configs seen to build slowly, printed apart from the random sample.
"""
from __future__ import annotations

import argparse
import multiprocessing
import statistics
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

VARIANTS = ("before", "O1", "O2", "O3", "policy")
_COMPILER = None


def _start(variant: str, num_threads: int) -> None:
    global _COMPILER
    if variant == "before":
        _COMPILER = _BeforeCompiler()
    else:
        from tensorgym.hardware.cpu import CPURuntime

        level = {"O1": 1, "O2": 2, "O3": 3}.get(variant)
        rt = CPURuntime(num_threads, **({"opt_level": level, "codegen_level": level}
                                         if level else {}))
        _COMPILER = rt


def _compile(source: str, program) -> tuple[bytes, float, dict]:
    t0 = time.process_time()
    binary = _COMPILER.compile(source, program)
    cpu = time.process_time() - t0
    info = _COMPILER.compile_info(program, source) if hasattr(_COMPILER, "compile_info") else {}
    return binary, cpu, info


class _BeforeCompiler:
    """CPURuntime.compile as main had it, in a process where tensorgym never sets LLVM options."""

    def __init__(self) -> None:
        import llvmlite.binding as llvm

        llvm.initialize_native_target()
        llvm.initialize_native_asmprinter()
        target = llvm.Target.from_triple(llvm.get_process_triple())
        self.llvm = llvm
        self.tm = target.create_target_machine(cpu=llvm.get_host_cpu_name(),
                                               features=llvm.get_host_cpu_features().flatten(),
                                               opt=3, reloc="default", codemodel="jitdefault")

    def compile(self, source: str, program) -> bytes:
        llvm, tm = self.llvm, self.tm
        mod = llvm.parse_assembly(source)
        mod.triple = llvm.get_process_triple()
        mod.data_layout = str(tm.target_data)
        mod.verify()
        pto = llvm.create_pipeline_tuning_options(speed_level=3)
        pto.loop_vectorization = False
        pto.loop_unrolling = False
        pb = llvm.create_pass_builder(tm, pto)
        pb.getModulePassManager().run(mod, pb)
        return tm.emit_object(mod)


def _time_binaries(rt, w, program, binaries: dict, args, rng) -> dict:
    """Per variant: the median seconds per run (None when untimed) and the check's error."""
    from tensorgym.measure.worker import tolerance

    kernels = {v: rt.load(b, program) for v, b in binaries.items()}
    inputs = w.random_inputs(args.seed)
    ref = w.reference(inputs)
    bufs = kernels["before"].alloc(inputs)
    out = bufs[len(inputs)].array
    try:
        first = {}
        for v, k in kernels.items():
            out[:] = np.nan  # each binary must write every output itself
            t0 = time.perf_counter()
            k.time(bufs, 1)
            first[v] = time.perf_counter() - t0
            err = float(np.abs(k.read_output(bufs) - ref).max() / np.abs(ref).max())
            if not err <= tolerance(w):
                raise AssertionError(f"{v} binary of {program.name} is wrong: error {err:.2e}")
        if first["before"] > args.max_run:
            return {v: None for v in kernels}
        number = max(1, int(args.sample_ms / 1e3 / first["before"]))
        samples: dict = {v: [] for v in kernels}
        for _ in range(args.rounds):
            for v in rng.permutation(list(kernels)):
                samples[v].append(kernels[v].time(bufs, number))
        return {v: statistics.median(s) for v, s in samples.items()}
    finally:
        kernels["before"].release(bufs)


def _measure(w, config, rt, pools: dict, args, rng) -> dict:
    from tensorgym.lower import lower

    t0 = time.process_time()
    program = lower(w, config)
    source = rt.render(program)
    render = time.process_time() - t0
    built = {}
    for v in rng.permutation(list(VARIANTS)):  # interleaved: the machine drifts
        built[v] = pools[v].submit(_compile, source, program).result()
    run = _time_binaries(rt, w, program, {v: b[0] for v, b in built.items()}, args, rng)
    return {"unroll": config["unroll_max_step"], "lines": source.count("\n"), "render": render,
            "compile": {v: built[v][1] for v in VARIANTS}, "run": run,
            "same": {v: built[v][0] == built["before"][0] for v in VARIANTS},
            "info": built["policy"][2]}


def _summary(label: str, rows: list[dict]) -> None:
    timed = [r for r in rows if r["run"]["before"] is not None]
    for v in VARIANTS:
        comp = [r["compile"][v] for r in rows]
        build = [r["render"] + r["compile"][v] for r in rows]
        ratio = [r["run"][v] / r["run"]["before"] for r in timed]
        saved = 1 - sum(build) / sum(r["render"] + r["compile"]["before"] for r in rows)
        run = (f"{statistics.median(ratio):6.3f} {max(ratio):6.3f}" if ratio else
               f"{'-':>6} {'-':>6}")
        print(f"{label:<12} {v:<7} {statistics.median(comp):7.3f} {statistics.mean(comp):7.3f} "
              f"{max(comp):7.2f} {statistics.median(build):7.3f} {statistics.mean(build):7.3f} "
              f"{saved:+7.0%} {sum(r['same'][v] for r in rows):>3}/{len(rows):<3} "
              f"{len(timed):>3}  {run}")
        label = ""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workloads", nargs="+",
                    default=["conv2d-C6", "conv2d-C1", "conv2d-C7", "matmul-1024"])
    ap.add_argument("--configs", type=int, default=16, help="random configs per workload")
    ap.add_argument("--known", nargs="*", default=["conv2d-C1:97962856"],
                    help="workload:config-index pairs reported apart")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--sample-ms", type=float, default=20.0)
    ap.add_argument("--max-run", type=float, default=0.25, help="seconds; slower kernels untimed")
    ap.add_argument("--threads", type=int, default=0)
    args = ap.parse_args()

    from tensorgym.hardware.cpu import LARGE_SOURCE_LINES, CPURuntime
    from tensorgym.templates import space_for
    from tensorgym.workloads import get_workload

    rng = np.random.default_rng(args.seed)
    rt = CPURuntime(args.threads)
    ctx = multiprocessing.get_context("spawn")
    pools = {v: ProcessPoolExecutor(1, ctx, initializer=_start, initargs=(v, rt.num_threads))
             for v in VARIANTS}
    t_start = time.time()
    results: dict[str, list[dict]] = {}
    try:
        jobs = [(name, c) for name in args.workloads
                for c in space_for(get_workload(name), "cpu").sample(rng, args.configs)]
        for spec in args.known:
            name, index = spec.rsplit(":", 1)
            jobs.append((f"{name}:{index}", space_for(get_workload(name), "cpu").get(int(index))))
        for i, (label, config) in enumerate(jobs):
            w = get_workload(label.split(":")[0])
            row = _measure(w, config, rt, pools, args, rng)
            results.setdefault(label, []).append(row)
            print(f"[{i + 1}/{len(jobs)}] {label} {config.index}: {row['lines']} lines, "
                  f"compile before {row['compile']['before']:.2f} s policy "
                  f"{row['compile']['policy']:.2f} s", flush=True)
    finally:
        for pool in pools.values():
            pool.shutdown()

    print(f"\n{rt.device_name()}; {time.time() - t_start:.0f} s. Seconds of CPU per kernel "
          f"(compile: the compiling process; build: + lowering and rendering); run: median time "
          f"over before's, median and worst over the timed kernels.")
    print(f"{'':<12} {'':<7} {'compile s':^23} {'build s':^15} {'build':>7} {'same':>7} "
          f"{'timed':>5}  {'run / before':^13}")
    print(f"{'workload':<12} {'variant':<7} {'median':>7} {'mean':>7} {'max':>7} {'median':>7} "
          f"{'mean':>7} {'saved':>7} {'object':>7} {'':>5}  {'median':>6} {'worst':>6}")
    sampled = [r for label in args.workloads for r in results.get(label, [])]
    for label, rows in results.items():
        _summary(label, rows)
    if len(args.workloads) > 1:
        _summary("all sampled", sampled)

    print(f"\npolicy: O3, backend at level 1 for sources of {LARGE_SOURCE_LINES}+ lines "
          f"({sum(r['info'].get('codegen_level') == 1 for r in sampled)}/{len(sampled)} sampled "
          f"kernels). Mean compile s by the unroll knob (sampled kernels), before -> policy:")
    for u in sorted({r["unroll"] for r in sampled}):
        rows = [r for r in sampled if r["unroll"] == u]
        print(f"  unroll_max_step {u:>3}: {len(rows):>3} kernels, "
              f"{statistics.mean(r['lines'] for r in rows):7.0f} lines, "
              f"{statistics.mean(r['compile']['before'] for r in rows):.3f} -> "
              f"{statistics.mean(r['compile']['policy'] for r in rows):.3f}")


if __name__ == "__main__":
    main()
