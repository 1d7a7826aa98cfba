"""Check the GPU path on a real device in one command, through the same measurer, tuner and CLI a
user runs, and write one JSON file of results:

1. install: the bindings, NVRTC and nvcc, the driver, the device (name, compute capability,
   limits), PyTorch and cuDNN;
2. correctness: ``--check`` random valid configs of conv2d-C6, ``--held-out`` of a shape no tuner
   was written for, matmul configs picked to use float2/float4 loads, and ``--check-ops`` of each
   newer operator's task (depthwise, grouped, dense, batch_matmul), each built, run on
   NaN-filled outputs between canaries and compared with NumPy by the measurement worker; which
   GPU features (shared memory, vector loads, unroll pragmas, explicit unrolling; and, counted
   only, double-buffered and padded tiles and vector reads of them) the checked kernels used;
3. tests: the device's own test files (``TESTS``: on CUDA the kernels on the device, the broken
   kernels' contract and ``VendorTimer``'s CUDA graphs), as pytest runs them;
4. tune: ``tensorgym tune W --target cuda --agent xgb --trials N --json --compare`` for each of
   ``--workloads`` (a subprocess, as a user runs it; default ResNet-18's C1-C12, matmul-1024 and
   one task of each newer operator): the reported best, its re-measurement interleaved with
   cuDNN / cuBLAS through PyTorch (CUDA graphs on both sides), seconds per trial, failures by
   error code; then the summary against issue 37's targets (C1-C12 geomean and worst layer
   against cuDNN, matmul-1024 against cuBLAS, wrong answers).

    python scripts/gpu_check.py --out gpu_check.json [--trials 64] [--check 50] [--held-out 20]

``--target opencl`` runs the same on an OpenCL device (PoCL on the CPU: no vendor library), the
rehearsal of a GPU run: ``--trials 4 --check 8 --held-out 4 --check-ops 4`` takes a few minutes.
Without a device it stops at once with the runtime's "no ... device" error (exit code 2). Exit
code 1 when a checked kernel was wrong or failed otherwise than by its build's timeout, when a
GPU feature went unused, or when a phase failed.
"""
from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

import numpy as np

from tensorgym.errors import ErrorCode, TargetUnavailableError
from tensorgym.measure import MeasureOptions, LocalMeasurer
from tensorgym.lower.gpu import lower_gpu
from tensorgym.records import Records
from tensorgym.templates.gpu import gpu_plan, sample_valid_configs
from tensorgym.workloads import get_workload

#: a conv2d shape none of the templates' defaults or tests were tuned on: odd sizes, stride 2
HELD_OUT = "conv2d:1,48,23,19,72,3,2,1"
#: the newer operators' tasks: checked (``--check-ops`` configs each) and tuned
NEW_OPERATORS = ("depthwise-mbv2-112", "grouped-resnext-56", "dense-bert-ffn",
                 "batch_matmul-bert-qk")
RESNET18 = tuple(f"conv2d-C{i}" for i in range(1, 13))
DEFAULT_WORKLOADS = (*RESNET18, "matmul-1024", *NEW_OPERATORS)
#: the test files that need the device, per target (pytest ``-k`` keeps the target's tests)
#: (test_gpu_cuda_run.py holds VendorTimer's CUDA-graph tests)
TESTS = {"cuda": ("tests/test_gpu_cuda_run.py", "tests/test_kernel_contract.py"),
         "opencl": ("tests/test_gpu_opencl.py",)}
REPO = Path(__file__).resolve().parents[1]
#: the source markers of each GPU feature, per target
MARKERS = {
    "cuda": {"shared memory": "__shared__", "vector loads": "*(float", "unroll pragma": "#pragma unroll"},
    "opencl": {"shared memory": "__local", "vector loads": "vload", "unroll pragma": "#pragma unroll"},
}
# the shared-memory knobs' effects (issue 37), counted but not required of a small sample:
# vector reads of shared tiles exist for matmul-like operators only
SHARED_KNOBS = ("double-buffered tiles", "padded tile rows", "vector reads of shared tiles")


def _version(package: str) -> "str | None":
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def install_info(target: str, runtime) -> dict:
    """What a user would check first: the packages, compilers, driver and device."""
    info: dict = {"python": sys.version.split()[0], "numpy": np.__version__,
                  "device": runtime.device_name(), "limits": runtime.limits()}
    if target == "cuda":
        from cuda.bindings import driver, nvrtc

        info["cuda-bindings"] = _version("cuda-bindings") or _version("cuda-python")
        err, version = driver.cuDriverGetVersion()
        info["driver_cuda_version"] = f"{version // 1000}.{version % 1000 // 10}"
        try:
            err, major, minor = nvrtc.nvrtcVersion()
            info["nvrtc"] = f"{major}.{minor}" if int(err) == 0 else f"error {err!r}"
        except Exception as e:  # noqa: BLE001 - reported, nvcc is the fallback
            info["nvrtc"] = f"not loadable: {type(e).__name__}: {e}"
        info["arch"] = runtime.arch
    else:
        info["pyopencl"] = _version("pyopencl")
    nvcc = shutil.which("nvcc")
    info["nvcc"] = nvcc and subprocess.run([nvcc, "--version"], capture_output=True,
                                           text=True).stdout.strip().splitlines()[-1]
    try:
        import torch

        info["torch"] = torch.__version__
        info["torch_cuda"] = torch.cuda.is_available() and torch.cuda.get_device_name(0)
        info["cudnn"] = torch.backends.cudnn.version() if torch.cuda.is_available() else None
    except ImportError:
        info["torch"] = None
    return info


def features(target: str, runtime, workload, config, limits) -> list[str]:
    """The GPU features the config's kernel uses, read off its source and knobs."""
    source = runtime.render(lower_gpu(workload, config, limits))
    used = [name for name, marker in MARKERS[target].items() if marker in source]
    knobs = config.values
    if knobs.get("unroll_explicit") and knobs.get("auto_unroll_max_step"):
        used.append("explicit unroll")
    plan = gpu_plan(workload, config)
    used += [name for name, on in (("double-buffered tiles", plan.stages > 1),
                                   ("padded tile rows", any(plan.pads)),
                                   ("vector reads of shared tiles", plan.shared_vector))
             if on]
    return used


def vector_configs(workload, rng, limits, n: int) -> list:
    """Up to ``n`` valid configs whose operand loads are float2 or float4 (both widths if any)."""
    by_width: dict[int, list] = {2: [], 4: []}
    for config in sample_valid_configs(workload, 400, rng, limits):
        width = max(gpu_plan(workload, config).vector_widths)
        if width in by_width and len(by_width[width]) < n - n // 2:
            by_width[width].append(config)
    return (by_width[4] + by_width[2])[:n]


def correctness(target: str, args, out: dict) -> bool:
    """Measure random configs through the measurer; a wrong answer is WRONG_ANSWER there."""
    options = MeasureOptions(repeat=1, min_repeat_ms=0.2, max_repeat=1, stop_slower_than=0.0,
                             calibrate=False, seed=args.seed)
    rng = np.random.default_rng(args.seed)
    measurer = LocalMeasurer(target, options)
    limits = measurer.runtime.limits()
    sets = {"conv2d-C6": args.check, HELD_OUT: args.held_out, "matmul-1024 (vector loads)": 10,
            **{name: args.check_ops for name in NEW_OPERATORS}}
    rows, use, ok = [], Counter(), True
    try:
        for name, n in sets.items():
            workload = get_workload(name.split(" ")[0])
            configs = (vector_configs(workload, rng, limits, n) if "vector" in name
                       else sample_valid_configs(workload, n, rng, limits))
            t0 = time.perf_counter()
            results = measurer.measure(workload, configs)
            codes = Counter(r.error.name for r in results)
            wrong = [r.config.index for r in results if r.error == ErrorCode.WRONG_ANSWER]
            failed = {str(r.config.index): f"{r.error.name}: {r.error_msg[:300]}"
                      for r in results if not r.ok}
            for c in configs:
                use.update(features(target, measurer.runtime, workload, c, limits))
            rows.append({"set": name, "configs": len(configs), "correct": codes["NO_ERROR"],
                         "wrong": len(wrong), "codes": dict(codes), "failed": failed,
                         "best_gflops": max((r.gflops for r in results), default=0.0),
                         "seconds": round(time.perf_counter() - t0, 1)})
            # a build over build_timeout is a documented failure; any other is not expected
            unexpected = set(codes) - {"NO_ERROR", "BUILD_TIMEOUT"}
            ok &= not wrong and not unexpected and len(configs) == n
    finally:
        measurer.close()
    out["correctness"] = rows
    required = [*MARKERS[target], "explicit unroll"]
    out["features"] = {f: use[f] for f in [*required, *SHARED_KNOBS]}
    return ok and all(out["features"][f] for f in required)


def tune(target: str, workload: str, args, db: Path) -> dict:
    """One ``tensorgym tune`` as a user runs it, and its failures by error code."""
    cmd = [sys.executable, "-m", "tensorgym", "tune", workload, "--target", target, "--agent",
           args.agent, "--trials", str(args.trials), "--seed", str(args.seed), "--db", str(db),
           "--json", "--compare", "--no-progress"]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.tune_timeout)
    row: dict = {"workload": workload, "command": " ".join(["tensorgym", *cmd[3:]]),
                 "returncode": proc.returncode, "seconds": round(time.perf_counter() - t0, 1)}
    if proc.returncode != 0:
        row["stderr"] = proc.stderr[-3000:]
        return row
    summary = json.loads(proc.stdout)
    records = Records(db)
    try:
        row["codes"] = dict(Counter(r.error.name for r in records.query(summary["workload"],
                                                                         target)))
    finally:
        records.close()
    compare = summary.get("compare") or {}
    row.update(trials=summary["trials"], failures=summary["failures"],
               wall_time=summary["wall_time"], s_per_trial=summary["wall_time"] / summary["trials"],
               time=summary["time"], best_gflops=summary["best_gflops"],
               best_gflops_found=summary["best_gflops_found"],
               remeasured_gflops=compare.get("best_gflops"),
               vendor_library=compare.get("vendor_library"),
               vendor_gflops=compare.get("vendor_gflops"),
               vs_vendor=compare.get("speedup_vendor"),
               vendor_skipped=compare.get("vendor_skipped"),
               best_config=summary["best_config"])
    return row


def device_tests(target: str, args) -> dict:
    """The target's device tests (``TESTS``), as ``pytest -q`` runs them, with its summary."""
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-k", target,
           *TESTS[target]]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.tests_timeout,
                          cwd=REPO)
    lines = proc.stdout.strip().splitlines()
    return {"command": " ".join(cmd[2:]), "returncode": proc.returncode,
            "summary": lines[-1] if lines else "", "seconds": round(time.perf_counter() - t0, 1),
            **({"output": proc.stdout[-4000:] + proc.stderr[-2000:]} if proc.returncode else {})}


def targets(out: dict) -> dict:
    """Issue 37's figures off the tunes: C1-C12's geomean and worst ratio to cuDNN, matmul-1024's
    to cuBLAS, and the wrong answers of the correctness phase."""
    ratios = {r["workload"]: r.get("vs_vendor") for r in out.get("tune", [])}
    layers = [ratios.get(w) for w in RESNET18]
    have = [x for x in layers if x]
    summary: dict = {"wrong": sum(r["wrong"] for r in out.get("correctness", [])),
                     "layers_compared": len(have),
                     "resnet18_geomean": (float(np.exp(np.mean(np.log(have)))) if have else None),
                     "resnet18_worst": min(have) if have else None,
                     "matmul_1024": ratios.get("matmul-1024")}
    full = len(have) == len(RESNET18)
    summary["must"] = {
        "zero wrong answers": summary["wrong"] == 0,
        "C1-C12 geomean >= 1.0x cuDNN": full and summary["resnet18_geomean"] >= 1.0,
        "every layer >= 0.8x cuDNN": full and summary["resnet18_worst"] >= 0.8,
        "matmul-1024 >= 0.9x cuBLAS": (summary["matmul_1024"] or 0) >= 0.9}
    return summary


def table(out: dict) -> str:
    lines = [f"device: {out.get('install', {}).get('device')}", "",
             "| correctness | configs | correct | wrong | error codes | s |", "|---|---|---|---|---|---|"]
    for r in out.get("correctness", []):
        lines.append(f"| {r['set']} | {r['configs']} | {r['correct']} | {r['wrong']} | "
                     f"{r['codes']} | {r['seconds']} |")
    lines.append(f"\nGPU features used by the checked kernels: {out.get('features')}\n")
    lines += ["| tune | trials | failed | s/trial | reported | re-measured | vendor | ratio | codes |",
              "|---|---|---|---|---|---|---|---|---|"]

    def num(x, f=".1f"):
        return "-" if x is None else format(x, f)

    for r in out.get("tune", []):
        if r.get("returncode"):
            lines.append(f"| {r['workload']} | failed (exit {r['returncode']}) |")
            continue
        lines.append(f"| {r['workload']} | {r['trials']} | {r['failures']} | "
                     f"{num(r['s_per_trial'], '.3f')} | {num(r['best_gflops'])} | "
                     f"{num(r['remeasured_gflops'])} | {num(r['vendor_gflops'])} "
                     f"({r['vendor_library'] or r['vendor_skipped']}) | {num(r['vs_vendor'], '.2f')}"
                     f" | {r['codes']} |")
    t = out.get("tests")
    if t:
        lines.append(f"\ndevice tests ({t['command']}): {t['summary']} (exit {t['returncode']})")
    s = out.get("targets")
    if s:
        lines.append(f"\nC1-C12 vs the vendor: geomean {num(s['resnet18_geomean'], '.2f')}, worst "
                     f"{num(s['resnet18_worst'], '.2f')} ({s['layers_compared']} of 12 compared); "
                     f"matmul-1024 {num(s['matmul_1024'], '.2f')}; wrong answers {s['wrong']}")
        lines += [f"- {k}: {'met' if v else 'NOT met'}" for k, v in s["must"].items()]
    for phase, err in out.get("errors", {}).items():
        lines.append(f"\nphase {phase} FAILED: {err.splitlines()[-1] if err else ''}")
    return "\n".join(lines)


def main(argv: "list[str] | None" = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--target", default="cuda", choices=["cuda", "opencl"])
    ap.add_argument("--check", type=int, default=50, help="random conv2d-C6 configs checked")
    ap.add_argument("--held-out", type=int, default=20, help=f"random configs of {HELD_OUT}")
    ap.add_argument("--check-ops", type=int, default=10,
                    help=f"random configs of each of {', '.join(NEW_OPERATORS)}")
    ap.add_argument("--trials", type=int, default=64, help="trials of each tune")
    ap.add_argument("--workloads", nargs="*", default=list(DEFAULT_WORKLOADS))
    ap.add_argument("--skip-tests", action="store_true", help="leave out the device tests phase")
    ap.add_argument("--tests-timeout", type=float, default=300, help="seconds for the tests")
    ap.add_argument("--agent", default="xgb")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tune-timeout", type=float, default=900, help="seconds per tune")
    ap.add_argument("--out", default="gpu_check.json", help="the JSON file of results")
    ap.add_argument("--db", help="records database of the tunes (default: beside --out)")
    args = ap.parse_args(argv)

    from tensorgym.hardware.target import get_target

    runtime = get_target(args.target).runtime()
    try:
        runtime.check_available()
    except TargetUnavailableError as e:
        print(f"gpu_check: {e}", file=sys.stderr)
        return 2
    out_path = Path(args.out)
    db = Path(args.db or out_path.with_suffix(".db"))
    out: dict = {"args": vars(args), "errors": {}}

    def save() -> None:
        out_path.write_text(json.dumps(out, indent=1, default=str))

    ok = True
    for phase in ("install", "correctness", "tests", "tune"):
        if phase == "tests" and args.skip_tests:
            continue
        t0 = time.perf_counter()
        try:
            if phase == "install":
                out["install"] = install_info(args.target, runtime)
                print(json.dumps(out["install"], default=str), flush=True)
            elif phase == "correctness":
                ok &= correctness(args.target, args, out)
            elif phase == "tests":
                out["tests"] = device_tests(args.target, args)
                ok &= out["tests"]["returncode"] == 0
            else:
                out["tune"] = []
                for w in args.workloads:
                    out["tune"].append(tune(args.target, w, args, db))
                    ok &= out["tune"][-1]["returncode"] == 0
                    save()
                out["targets"] = targets(out)
        except Exception:  # noqa: BLE001 - the next phases still run; the error is reported
            out["errors"][phase] = traceback.format_exc()
            print(out["errors"][phase], file=sys.stderr, flush=True)
            ok = False
        print(f"[{phase}: {time.perf_counter() - t0:.0f} s]", flush=True)
        save()
    print(table(out))
    print(f"results: {out_path}")
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    sys.exit(main())
