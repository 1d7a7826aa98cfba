"""Issue 32's correctness figure: every operator kind x epilogue against NumPy on many random
configs, on each code path this machine has, printed as a table of passes / configs and the
max relative error per case and path.

    python scripts/check_operators.py [--configs 200] [--opencl-configs 40] [--nvcc-configs 40]
                                      [--registered 8] [--paths host,avx2,opencl,nvcc]
                                      [--jobs 1] [--quick] [--json out.json]

Cases: conv2d, depthwise conv2d, grouped conv2d (several output channels per group: the 5-D
weight), dense, batch_matmul and matmul, each with no epilogue, bias+relu6, bias+gelu and
bias+add+relu (so every epilogue op), the configs of a case spread over three small shapes of
its kind (odd sizes, stride 2, no padding, batch > 1). ``--registered N`` adds the registered
layers of the new operators and conv2d-C6 with an epilogue each (their real shapes: N random
configs, CPU paths only).

Paths (``--paths``, default all this machine has):

* ``host``: the host CPU's own code (LLVM for this CPU); ``avx2`` / ``avx512``: an LLVM target
  machine for that ISA (``CPURuntime(isa=...)``). AVX2 code runs on an AVX-512 host; on an
  AVX2 host AVX-512 code can only be compiled, which its column then says (``compiled``).
  Per shape: ``--configs``/3 distinct random configs, the default config with and without the
  accumulator, and the micro-kernel seeds (``templates.cpu.micro_kernel_values``) for the ISA.
* ``opencl``: PoCL through pyopencl; valid random GPU configs (``sample_valid_configs``, CUDA-
  like limits) and the default one. PoCL is slow (0.3-1 s a kernel, its optimiser up to 30 s on
  an unrolled one), hence fewer configs, built with ``-cl-opt-disable`` except every
  ``--opencl-optimise-every``-th.
* ``nvcc``: the same kind of GPU configs rendered as CUDA C and compiled to PTX by nvcc
  (``sm_80``), one .cu file per case: a pass is a kernel whose entry is in the PTX (no GPU here,
  so no error column).

Every case of every path runs in a fresh process (an MCJIT engine is never freed: 0.5 MB a
kernel). A kernel is correct when ``measure.worker.relative_error`` (max |out - ref| / max |ref|,
NaN where an output was never written) is within ``measure.worker.tolerance``, as in the
measurement worker. Exit code 1 if any kernel failed.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import math
import multiprocessing
import platform
import re
import subprocess
import sys
import tempfile
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np

EPILOGUES = ("", "bias+relu6", "bias+gelu", "bias+add+relu")
# each kind's shapes as conv2d / dense / batch_matmul / matmul arguments
SHAPES = {
    "conv2d": [("conv2d", (1, 16, 14, 14, 32, 3, 1, 1)), ("conv2d", (2, 3, 15, 13, 8, 3, 2, 0)),
               ("conv2d", (1, 24, 7, 7, 16, 1, 1, 0))],
    "depthwise": [("conv2d", (1, 32, 14, 14, 32, 3, 1, 1, 32)),
                  ("conv2d", (2, 8, 15, 15, 8, 3, 2, 0, 8)),
                  ("conv2d", (1, 48, 7, 7, 48, 5, 1, 2, 48))],
    "grouped": [("conv2d", (1, 32, 14, 14, 32, 3, 1, 1, 8)),
                ("conv2d", (2, 12, 9, 9, 24, 3, 2, 0, 3)),
                ("conv2d", (1, 16, 8, 8, 32, 1, 1, 0, 16))],  # depthwise, channel multiplier 2
    "dense": [("dense", (32, 64, 96)), ("dense", (7, 33, 20)), ("dense", (1, 128, 64))],
    "batch_matmul": [("batch_matmul", (4, 32, 16, 32)), ("batch_matmul", (3, 7, 13, 10)),
                     ("batch_matmul", (2, 1, 64, 48))],
    "matmul": [("matmul", (64, 48, 32)), ("matmul", (17, 9, 13)), ("matmul", (1, 96, 40))],
}
REGISTERED = ("depthwise-mbv2-112+bias+relu6", "grouped-resnext-56+bias+relu",
              "dense-bert-ffn+bias+gelu", "batch_matmul-bert-qk+add", "conv2d-C6+bias+add+relu")
CPU_PATHS = ("host", "avx2", "avx512")
CUDA_ARCH = "sm_80"


def workloads(kind: str, epilogue: str):
    from tensorgym.workloads import Workload, get_workload

    if kind == "registered":
        return [get_workload(epilogue)]
    return [Workload(op, params, epilogue=epilogue) for op, params in SHAPES[kind]]


def split(n: int, parts: int) -> list[int]:
    return [n // parts + (i < n % parts) for i in range(parts)]


# ---------------------------------------------------------------- one (path, case) per process

def run_case(path: str, kind: str, epilogue: str, n: int, seed: int, options: dict) -> dict:
    """Check ``n`` random configs (and the seeds) of one case on one path; the row's numbers."""
    t0 = time.time()
    out = {"path": path, "kind": kind, "epilogue": epilogue, "passes": 0, "configs": 0,
           "max_error": 0.0, "failures": [], "compiled_only": False}

    def failed(w, c, why):
        if len(out["failures"]) < 5:
            out["failures"].append(f"{w.key} config {c.index}: {why}")

    try:
        if path in CPU_PATHS:
            _run_cpu(path, kind, epilogue, n, seed, out, failed)
        elif path == "opencl":
            _run_opencl(kind, epilogue, n, seed, options, out, failed)
        else:
            _run_nvcc(kind, epilogue, n, seed, options, out, failed)
    except Exception:  # noqa: BLE001 - the row says what broke
        out["failures"].append(traceback.format_exc(limit=3)[-1500:])
        out["configs"] = max(out["configs"], 1)
    out["seconds"] = time.time() - t0
    return out


def _check(out, failed, w, c, got, inputs):
    from tensorgym.measure.worker import relative_error, tolerance

    err = relative_error(got, w.reference(inputs))
    out["configs"] += 1
    if err <= tolerance(w):
        out["passes"] += 1
    else:
        failed(w, c, f"relative error {err:.3g} > {tolerance(w):.3g}")
    if not math.isnan(err):
        out["max_error"] = max(out["max_error"], err)
    else:
        out["max_error"] = math.nan


def _run(runtime, program, inputs):
    kernel = runtime.load(runtime.compile(runtime.render(program), program), program)
    bufs = kernel.alloc(inputs)
    try:
        kernel.time(bufs, 1)
        got = kernel.read_output(bufs)
        damage = kernel.check_guards(bufs)
    finally:
        kernel.release(bufs)
    if damage:
        raise RuntimeError(f"guards damaged: {damage[:2]}")
    return got


def cpu_configs(w, n: int, lanes: int, seed: int) -> list:
    from tensorgym.templates import default_config, space_for
    from tensorgym.templates.cpu import micro_kernel_values
    from tensorgym.templates.seeds import register_file

    space = space_for(w, "cpu")
    default = default_config(w, "cpu")
    configs = space.sample_unique(np.random.default_rng(seed), n) + [
        default, space.from_values(dict(default.values, cache_write=1 - default["cache_write"]))]
    configs += [space.from_values(v) for v in micro_kernel_values(w, lanes, register_file(lanes))]
    return list({c.index: c for c in configs}.values())


def _run_cpu(path, kind, epilogue, n, seed, out, failed):
    from tensorgym.hardware.cpu import CPURuntime, compile_object, host_isa, vector_lanes
    from tensorgym.lower import lower

    isa = None if path == "host" else path
    runnable = isa is None or host_isa() == "avx512" or isa == "avx2" and host_isa() == "avx2"
    runtime = CPURuntime(isa=isa) if runnable else CPURuntime()
    out["compiled_only"] = not runnable
    lanes = vector_lanes(isa)
    shapes = workloads(kind, epilogue)
    for k, (w, count) in enumerate(zip(shapes, split(n, len(shapes)))):
        inputs = w.random_inputs(seed + k)
        for c in cpu_configs(w, count, lanes, seed + 1000 * k):
            try:
                program = lower(w, c)
                if not runnable:
                    obj = compile_object(runtime.render(program), isa=isa)
                    out["configs"] += 1
                    out["passes"] += obj[:4] == b"\x7fELF"
                    continue
                got = _run(runtime, program, inputs)
            except Exception as e:  # noqa: BLE001
                out["configs"] += 1
                failed(w, c, f"{type(e).__name__}: {str(e)[:300]}")
                continue
            _check(out, failed, w, c, got, inputs)


def gpu_configs(w, n: int, seed: int) -> list:
    from tensorgym.templates import default_config
    from tensorgym.templates.gpu import DEFAULT_GPU_LIMITS, sample_valid_configs

    configs = sample_valid_configs(w, n, np.random.default_rng(seed), DEFAULT_GPU_LIMITS)
    return list({c.index: c for c in [*configs, default_config(w, "opencl")]}.values())


def _run_opencl(kind, epilogue, n, seed, options, out, failed):
    from tensorgym.hardware.opencl import OpenCLRuntime
    from tensorgym.lower.gpu import lower_gpu
    from tensorgym.templates.gpu import DEFAULT_GPU_LIMITS

    fast = OpenCLRuntime(build_options=("-cl-opt-disable",))
    fast.check_available()
    optimised = OpenCLRuntime()
    every = options["opencl_optimise_every"]
    shapes = workloads(kind, epilogue)
    i = 0
    for k, (w, count) in enumerate(zip(shapes, split(n, len(shapes)))):
        inputs = w.random_inputs(seed + k)
        for c in gpu_configs(w, count, seed + 1000 * k):
            runtime = optimised if every and i % every == every - 1 else fast
            i += 1
            try:
                got = _run(runtime, lower_gpu(w, c, DEFAULT_GPU_LIMITS), inputs)
            except Exception as e:  # noqa: BLE001
                out["configs"] += 1
                failed(w, c, f"{type(e).__name__}: {str(e)[:300]}")
                continue
            _check(out, failed, w, c, got, inputs)


def _run_nvcc(kind, epilogue, n, seed, options, out, failed):
    from tensorgym.codegen.cuda import render_cuda
    from tensorgym.lower.gpu import lower_gpu
    from tensorgym.templates.gpu import DEFAULT_GPU_LIMITS

    kernels = []  # (workload, config, source)
    shapes = workloads(kind, epilogue)
    for k, (w, count) in enumerate(zip(shapes, split(n, len(shapes)))):
        for c in gpu_configs(w, count, seed + 1000 * k):
            program = dataclasses.replace(lower_gpu(w, c, DEFAULT_GPU_LIMITS),
                                          name=f"k{len(kernels)}")
            kernels.append((w, c, render_cuda(program)))
    out["configs"] = len(kernels)
    with tempfile.TemporaryDirectory() as tmp:
        def compile_(name, sources):
            cu = Path(tmp) / f"{name}.cu"
            cu.write_text("\n".join(sources))
            proc = subprocess.run([options["nvcc"], "-ptx", f"-arch={CUDA_ARCH}", str(cu), "-o",
                                   f"{cu}.ptx"], capture_output=True, text=True, timeout=1200)
            if proc.returncode:
                return set(), proc.stderr
            return set(re.findall(r"\.entry\s+(k\d+)", Path(f"{cu}.ptx").read_text())), ""

        entries, stderr = compile_("all", [s for _, _, s in kernels])
        if stderr:  # find the culprits one kernel at a time
            entries = set()
            for i, (w, c, source) in enumerate(kernels):
                got, err = compile_(f"k{i}", [source])
                entries |= got
                if err:
                    failed(w, c, err[-300:])
    out["passes"] = sum(f"k{i}" in entries for i in range(len(kernels)))


# ---------------------------------------------------------------- the table

def available_paths(nvcc) -> list[str]:
    from tensorgym.hardware.cpu import host_isa

    host = host_isa() if platform.machine() in ("x86_64", "AMD64") else "other"
    paths = ["host"] + [isa for isa in ("avx2", "avx512") if isa != host and host != "other"]
    try:
        from tensorgym.hardware.opencl import OpenCLRuntime

        OpenCLRuntime().check_available()
        paths.append("opencl")
    except Exception:  # noqa: BLE001 - no pyopencl or no device
        pass
    if nvcc:
        paths.append("nvcc")
    return paths


def cell(row: "dict | None") -> str:
    if row is None:
        return "-"
    text = f"{row['passes']}/{row['configs']}"
    if row["compiled_only"]:
        return text + " compiled"
    if row["path"] == "nvcc":
        return text + " ptx"
    err = row["max_error"]
    return f"{text} {err:.1e}" if not math.isnan(err) else f"{text} NaN"


def table(rows: list[dict], paths: list[str], host: str) -> str:
    names = {p: f"host ({host})" if p == "host" else p for p in paths}
    cases = list(dict.fromkeys((r["kind"], r["epilogue"]) for r in rows))
    by = {(r["kind"], r["epilogue"], r["path"]): r for r in rows}
    head = ["case"] + [names[p] for p in paths]
    body = [[f"{k} {'+' + e if e and k != 'registered' else e or '(none)'}"]
            + [cell(by.get((k, e, p))) for p in paths] for k, e in cases]
    totals = ["total"]
    for p in paths:
        mine = [r for r in rows if r["path"] == p]
        totals.append(f"{sum(r['passes'] for r in mine)}/{sum(r['configs'] for r in mine)}"
                      if mine else "-")
    body.append(totals)
    seconds = ["seconds"] + [f"{sum(r['seconds'] for r in rows if r['path'] == p):.0f}"
                             for p in paths]
    body.append(seconds)
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
    fmt = lambda cells: "  ".join(c.ljust(wd) for c, wd in zip(cells, widths)).rstrip()  # noqa: E731
    rule = "  ".join("-" * wd for wd in widths)
    return "\n".join([fmt(head), rule, *map(fmt, body[:-2]), rule, *map(fmt, body[-2:])])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", type=int,
                    help="random CPU configs per case and path, spread over its shapes (200)")
    ap.add_argument("--opencl-configs", type=int, help="per case, on PoCL (40)")
    ap.add_argument("--opencl-optimise-every", type=int, default=10,
                    help="build every k-th OpenCL kernel with PoCL's optimiser (0: never)")
    ap.add_argument("--nvcc-configs", type=int, help="per case, compiled by nvcc (40)")
    ap.add_argument("--registered", type=int,
                    help="random configs of each registered layer, CPU paths (8; 0: none)")
    ap.add_argument("--paths", default="", help="comma-separated: host, avx2, avx512, opencl, "
                    "nvcc (default: all this machine has)")
    ap.add_argument("--jobs", type=int, default=1, help="cases checked at once")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true",
                    help="a smoke run: 12 CPU, 3 OpenCL, 6 nvcc configs per case, no "
                    "registered layers (an explicit count still applies)")
    ap.add_argument("--json", help="also write the rows to this JSON file")
    args = ap.parse_args(argv)
    counts = (12, 3, 6, 0) if args.quick else (200, 40, 40, 8)
    for name, n in zip(("configs", "opencl_configs", "nvcc_configs", "registered"), counts):
        if getattr(args, name) is None:
            setattr(args, name, n)

    from tensorgym.hardware.cpu import host_isa
    from tensorgym.hardware.cuda import find_nvcc

    nvcc = find_nvcc()
    have = available_paths(nvcc)
    paths = [p for p in args.paths.split(",") if p] if args.paths else have
    missing = [p for p in paths if p not in have and p not in CPU_PATHS]
    if missing:
        print(f"not available here: {', '.join(missing)} (this machine has {', '.join(have)})",
              file=sys.stderr)
        return 2
    counts = {"opencl": args.opencl_configs, "nvcc": args.nvcc_configs}
    options = {"nvcc": nvcc, "opencl_optimise_every": args.opencl_optimise_every}
    tasks = []
    for p in paths:
        for i, (kind, epilogue) in enumerate((k, e) for k in SHAPES for e in EPILOGUES):
            tasks.append((p, kind, epilogue, counts.get(p, args.configs), args.seed + 7919 * i))
        if args.registered and p in CPU_PATHS:
            tasks += [(p, "registered", key, args.registered, args.seed + j)
                      for j, key in enumerate(REGISTERED)]
    t0 = time.time()
    rows = []
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(args.jobs, mp_context=ctx, max_tasks_per_child=1) as pool:
        futures = [pool.submit(run_case, *task, options) for task in tasks]
        for task, f in zip(tasks, futures):
            row = f.result()
            rows.append(row)
            print(f"{row['path']:>7} {row['kind']:>12} {row['epilogue'] or '(none)':<30} "
                  f"{cell(row):<22} {row['seconds']:6.1f}s", file=sys.stderr, flush=True)
    host = host_isa()
    print(table(rows, paths, host))
    print(f"\n{len(tasks)} cases in {time.time() - t0:.0f} s wall ({args.jobs} job(s); "
          "seconds: the sum over a path's cases). A cell is passes/configs, then the max "
          "relative error (nvcc: compiled to PTX); the configs include each shape's default "
          "config and, on the CPU, the default with the other cache_write and the micro-kernel "
          "seeds")
    failures = [f for r in rows for f in r["failures"]]
    for r in rows:
        for f in r["failures"]:
            print(f"FAIL {r['path']} {r['kind']} {r['epilogue']}: {f}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 1 if failures or any(r["passes"] < r["configs"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
