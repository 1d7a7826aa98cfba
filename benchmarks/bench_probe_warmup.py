"""Does a fast kernel read its steady speed right after idle, PyTorch or a build-like load, with
and without 20 ms of running untimed first? In this process, as ``bench_speed_states.py``.

    python benchmarks/bench_probe_warmup.py matmul-1024 best.json --tries 80

Each try: a disturbance (50 ms idle; PyTorch then 50 ms idle; both cores busy 0.5 s, as a build;
nothing), then the 256^3 micro-kernel seed timed cold and after the warm-up, the drift monitor's
calibration kernel, one sample of the tuned config (``tune --json``'s best) and the micro-kernel
again, steady. Prints each reading over the steady one per disturbance, and how each follows the
tuned config. On a Zen 3 VM, two runs of 80 tries: cold 1.05x after idle and 1.08-1.13x after
the load, warmed 0.98-1.01x; where the config's sample ran over 1.3x its median, the warmed
kernel read 1.36-1.41x in one run and 0.99-1.39x in the other, the calibration kernel 1.05-1.19x.
(Used as a speed probe against a per-device log, its readings spread by 12-28% back to back, and
setting aside slow end-of-tune sets by it did not bring reported bests closer to their
re-measurements in ``bench_trial_cost.py``: it was not kept.)"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import time

os.environ.setdefault("OMP_PROC_BIND", "true")  # as the measuring worker runs kernels

import numpy as np  # noqa: E402
from tensorgym.leaderboard.harness import runtime_options  # noqa: E402
from tensorgym.leaderboard.vendor import VendorTimer  # noqa: E402
from tensorgym.hardware.runtime import get_runtime  # noqa: E402
from tensorgym.measure.worker import Reference  # noqa: E402
from tensorgym.measure.drift import calibration_config, calibration_workload  # noqa: E402
from tensorgym.lower import lower  # noqa: E402
from tensorgym.templates import space_for  # noqa: E402
from tensorgym.templates.seeds import seed_configs  # noqa: E402
from tensorgym.workloads import get_workload, matmul  # noqa: E402

KINDS = ["sleep", "torch", "build", "none"]  # what comes before each try, in turn


def kernel_of(runtime, ref, w, config):
    """A loaded kernel of ``config`` and its buffers, warmed by one run."""
    p = lower(w, config)
    k = runtime.load(runtime.compile(runtime.render(p), p), p)
    bufs = k.alloc(ref.inputs_for(w, p))
    k.time(bufs, 1)
    return k, bufs


def busy(seconds: float) -> None:
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("workload")
    p.add_argument("config", help="a JSON file: tune --json's summary (its best_config)")
    p.add_argument("--tries", type=int, default=80)
    args = p.parse_args()
    runtime = get_runtime("cpu", **runtime_options("cpu", 2))
    ref = Reference(0)
    pw = matmul(256, 256, 256, name="probe")
    fast, fb = kernel_of(runtime, ref, pw, seed_configs(pw, "cpu", max_seeds=2)[-1])
    ow = calibration_workload()
    old, ob = kernel_of(runtime, ref, ow, calibration_config(ow, "cpu"))
    tw = get_workload(args.workload)
    with open(args.config) as f:
        doc = json.load(f)
    tconf = space_for(tw, "cpu").from_json(json.dumps(doc["best_config"]))
    tuned, tb = kernel_of(runtime, ref, tw, tconf)
    vendor = VendorTimer(tw, "cpu", threads=2, min_seconds=0.01)
    nf = max(1, int(0.002 / min(fast.time(fb, 1) for _ in range(5))))  # 2 ms samples
    no = max(1, int(0.002 / min(old.time(ob, 1) for _ in range(5))))
    nt = max(1, int(0.02 / min(tuned.time(tb, 1) for _ in range(3))))  # one 20 ms sample

    def reading(k, b, n, warm_s=0.0):  # the median of 3 samples, after warm_s untimed
        if warm_s:
            end = time.perf_counter() + warm_s
            while time.perf_counter() < end:
                k.time(b, n)
        return statistics.median(k.time(b, n) for _ in range(3))

    pool = mp.get_context("fork").Pool(2)
    rows = []
    for i in range(args.tries):
        kind = KINDS[i % len(KINDS)]
        if kind == "sleep":
            time.sleep(0.05)
        elif kind == "torch":
            vendor.sample(1)
            time.sleep(0.05)
        elif kind == "build":
            pool.map(busy, [0.5, 0.5])
        cold = reading(fast, fb, nf)
        warm = reading(fast, fb, nf, 0.02)
        oldr = reading(old, ob, no)
        t = tuned.time(tb, nt)
        steady = reading(fast, fb, nf)
        rows.append((kind, cold, warm, oldr, t, steady))
    pool.close()
    report(rows)


def report(rows: list[tuple]) -> None:
    print("before | cold/steady | warm/steady | tries   (medians)")
    for kind in KINDS:
        r = [x for x in rows if x[0] == kind]
        print(f"{kind:6} | {statistics.median(x[1]/x[5] for x in r):.3f} | "
              f"{statistics.median(x[2]/x[5] for x in r):.3f} | {len(r)}")
    a = np.array([x[1:] for x in rows])
    for j, name in enumerate(["cold", "warm", "old", "tuned", "steady"]):
        print(f"{name:6} time range {a[:, j].min()*1e3:.3f}-{a[:, j].max()*1e3:.3f} ms, "
              f"corr with tuned {np.corrcoef(a[:, j], a[:, 3])[0, 1]:.2f}")
    rel = a / np.median(a, axis=0)
    slow = rel[:, 3] > 1.3  # tries whose config sample ran 30% over its median
    if slow.any():
        print(f"{slow.sum()} tries with the config 1.3x over its median "
              f"({rel[slow, 3].min():.2f}-{rel[slow, 3].max():.2f}x): warmed kernel "
              f"{rel[slow, 1].min():.2f}-{rel[slow, 1].max():.2f}x, calibration kernel "
              f"{rel[slow, 2].min():.2f}-{rel[slow, 2].max():.2f}x its median")


if __name__ == "__main__":
    main()
