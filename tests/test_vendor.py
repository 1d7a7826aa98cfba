"""The vendor timer's warm allocator, the FMA peak probe and the tables' "peak %" column."""
from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
import textwrap

import pytest

from tensorgym.leaderboard import tables
from tensorgym.leaderboard.peak import ACCUMULATORS, _kernel, fma_peak
from tensorgym.leaderboard.results import ResultsDoc
from tensorgym.hardware.host import host_vector_lanes

try:
    import torch  # noqa: F401

    HAS_TORCH = True
except ImportError:
    HAS_TORCH = False

try:
    import ctypes

    ctypes.CDLL(None).gnu_get_libc_version
    GLIBC = True
except AttributeError:
    GLIBC = False

# A fresh process: oneDNN's C1 with its allocator cold (no warm-up), then through VendorTimer,
# then after the NumPy reference has run (which warms glibc's threshold by itself).
PROBE = textwrap.dedent("""
    import json, math, resource, torch
    from tensorgym.leaderboard.vendor import VendorTimer
    from tensorgym.workloads import get_workload

    def faults():
        return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

    w = get_workload("conv2d-C1")
    x, wt = (torch.from_numpy(a) for a in w.random_inputs(0))
    torch.set_num_threads(1)
    with torch.no_grad():
        for _ in range(3):
            torch.nn.functional.conv2d(x, wt, stride=2, padding=3)
        f0 = faults()
        for _ in range(4):
            torch.nn.functional.conv2d(x, wt, stride=2, padding=3)
        cold = (faults() - f0) / 4
    timer = VendorTimer(w, "cpu", threads=1, min_seconds=0.001)
    f0 = faults()
    fresh = timer.sample(25)
    warm = (faults() - f0) / (25 * timer.number)
    w.reference(w.random_inputs(0))
    after = timer.sample(25)
    print(json.dumps({"cold": cold, "warm": warm, "fresh": fresh, "after": after,
                      "allocator": timer.allocator,
                      "pages": 4 * math.prod(w.output.shape) / 4096}))
""")


@pytest.mark.skipif(not (HAS_TORCH and GLIBC), reason="needs PyTorch and glibc")
def test_vendor_timer_reaches_the_warm_allocator_in_a_fresh_process():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         timeout=300, check=True)
    r = json.loads(out.stdout.strip().splitlines()[-1])
    assert r["allocator"].startswith("glibc") and "31 MiB" in r["allocator"]
    # cold, every call maps its output afresh and faults on each page of it
    assert r["cold"] > r["pages"]
    # warmed, the blocks are reused from the heap: no page faults per call
    assert r["warm"] < 0.02 * r["pages"]
    # and the fresh timing is the steady state: the NumPy reference changes nothing (the
    # unwarmed timer measured about 3x slower before it than after). The fastest samples are
    # compared: the page faults slowed every run, while other processes on these shared cores
    # slow some samples, never all of them.
    assert 0.7 <= min(r["fresh"]) / min(r["after"]) <= 1.4, r


def test_fma_loop_computes_its_chains():
    """n steps of acc = acc * x + y from acc = y, on every accumulator, summed: lane 0."""
    for lanes, acc in ACCUMULATORS.items():
        fn = _kernel(lanes, acc)
        a = 1.0
        for _ in range(3):
            a = a * 0.5 + 1.0
        assert fn(3, 0.5, 1.0) == pytest.approx(acc * a)


def test_fma_peak_reports_the_host_vector_width():
    p = fma_peak(threads=1, seconds=0.02, repeats=2)
    assert p.lanes == host_vector_lanes() and p.accumulators == ACCUMULATORS[p.lanes]
    assert p.threads == 1 and len(p.samples) == 2 and p.gflops == max(p.samples) > 0
    with pytest.raises(ValueError):
        fma_peak(threads=1, repeats=0)


def test_tables_show_the_share_of_the_fma_peak():
    from tests.test_leaderboard import synthetic_run

    run = synthetic_run(agents=("random",), seeds=(0,))
    plain = tables.task_rows(ResultsDoc([run]))[0]
    assert plain.share_of_peak is None
    run.device["fma_peak_gflops"] = 4 * plain.best_gflops
    row = tables.task_rows(ResultsDoc([run]))[0]
    assert row.share_of_peak == pytest.approx(0.25)
    md = tables.markdown(ResultsDoc([run]))
    assert "| peak % |" in md and "| 25% |" in md
    first = next(csv.DictReader(io.StringIO(tables.csv_text(ResultsDoc([run])))))
    assert float(first["share_of_peak"]) == pytest.approx(0.25)


@pytest.mark.skipif(not HAS_TORCH, reason="needs PyTorch")
@pytest.mark.parametrize("key", [
    "conv2d:1,16,28,28,32,3,1,1", "matmul:16,16,16+bias+relu", "conv2d:1,32,28,28,32,3,2,1,32+bias+relu6",
    "conv2d:1,16,14,14,32,3,1,1,4+bias+add+relu", "dense:3,64,32+bias+gelu", "dense:5,16,8+add",
    "batch_matmul:2,16,8,16", "batch_matmul:2,8,8,8+bias+relu"])
def test_vendor_timer_runs_every_operator_and_epilogue(key):
    """PyTorch's eager op and epilogue calls: the timer checks its warm-up answer against the
    workload's reference and skips with "wrong answer" otherwise."""
    from tensorgym.leaderboard.vendor import VendorTimer
    from tensorgym.workloads import get_workload

    timer = VendorTimer(get_workload(key), "cpu", threads=1)
    assert timer.skipped == "" and len(timer.sample(2)) == 2


def test_the_fma_peak_takes_spaced_samples():
    p = fma_peak(threads=1, seconds=0.01, repeats=3, spacing=0.01)
    assert len(p.samples) == 3 and p.gflops == max(p.samples) > 0
    with pytest.raises(ValueError):
        fma_peak(threads=1, spacing=-1)


def test_the_peak_book_keeps_its_best_and_measures_again_when_beaten(tmp_path, monkeypatch):
    from tensorgym.leaderboard import peak as peak_mod

    path = tmp_path / "peak.json"
    real = peak_mod.PeakBook(path, seconds=0.01, repeats=2, spacing=0.0)
    first = real.measure(1)  # a real measurement, written to the book
    assert first > 0 and real.best(1) == first and real.best(2) is None
    readings = iter([10 * first, first / 2, 20 * first])
    calls = []

    def fake(threads, **kw):
        calls.append(threads)
        g = next(readings)
        return peak_mod.Peak(g, threads, host_vector_lanes(), 1, "cpu", (g,))

    monkeypatch.setattr(peak_mod, "fma_peak", fake)
    book = peak_mod.PeakBook(path)
    assert book.measure(1) == pytest.approx(10 * first, rel=1e-3)
    assert book.measure(1) == pytest.approx(10 * first, rel=1e-3)  # a low reading is not kept
    assert book.check(1, 5 * first) == (book.best(1), False) and len(calls) == 2
    peak, over = book.check(1, 30 * first)  # above the book: measured again, still above
    assert len(calls) == 3 and peak == pytest.approx(20 * first, rel=1e-3) and over
    path.write_text("{not json")  # a damaged book reads as empty, and is rewritten
    assert book.best(1) is None


def test_a_best_above_the_peak_is_flagged_not_printed_as_a_share():
    from tests.test_leaderboard import synthetic_run

    run = synthetic_run(agents=("random",), seeds=(0,))
    best = tables.task_rows(ResultsDoc([run]))[0].best_gflops
    run.device["fma_peak_gflops"] = best / 2
    row = tables.task_rows(ResultsDoc([run]))[0]
    assert row.over_peak and row.share_of_peak is None
    md = tables.markdown(ResultsDoc([run]))
    assert f"| {tables.OVER_PEAK} |" in md and "200%" not in md and "cannot be" in md
    first = next(csv.DictReader(io.StringIO(tables.csv_text(ResultsDoc([run])))))
    assert first["share_of_peak"] in ("", "None") and first["over_peak"] == "True"


def test_a_run_measures_the_peak_again_when_a_best_exceeds_it(monkeypatch):
    from tensorgym.leaderboard import run as run_mod
    from tests.test_leaderboard import synthetic_run

    run = synthetic_run(agents=("random",), seeds=(0,))
    entries = run.entries
    best = max(e.best.gflops for e in entries if e.best)
    run.device["fma_peak_gflops"] = best / 2
    asked, said = [], []
    monkeypatch.setattr(run_mod, "device_peak_gflops",
                        lambda target, threads, gflops=0.0: asked.append(gflops) or 2 * best)
    run_mod.recheck_peak(run, "cpu", 2, entries, said.append)
    assert asked == [best] and run.device["fma_peak_gflops"] == 2 * best
    assert "measured again" in said[0] and "flagged" not in said[0]
    run_mod.recheck_peak(run, "cpu", 2, entries, said.append)  # below it now: nothing asked
    assert asked == [best]
