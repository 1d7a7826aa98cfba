"""The side-by-side harness (tensorgym.leaderboard.compare): interleaving, medians and ratios on
scripted timings, then real runs on a small matmul with and without PyTorch."""
from __future__ import annotations

import importlib.util
import json
import statistics

import pytest

from tensorgym.leaderboard import compare, harness
from tensorgym.leaderboard.compare import VENDOR, Comparison, remeasure
from tensorgym.leaderboard.run import remeasure_bests
from tensorgym.leaderboard.metrics import best_so_far
from tensorgym.leaderboard.results import Best, Entry
from tensorgym.errors import ErrorCode
from tensorgym.measure import MeasureOptions
from tensorgym.measure.result import MeasureResult
from tensorgym.templates import default_config, space_for
from tensorgym.workloads import get_workload

W = get_workload("matmul:32,32,32")
SPACE = space_for(W, "cpu")
HAS_TORCH = importlib.util.find_spec("torch") is not None


class ScriptedMeasurer:
    """Answers each config (by index) with the next costs of its script, logging every call."""

    def __init__(self, script: dict, log: list) -> None:
        self.script, self.log = {k: list(v) for k, v in script.items()}, log
        self.options, self.runtime_kwargs, self.device = MeasureOptions(), {}, "cpu/test/1t"
        self.seen_options = []

    def calibrations(self) -> int:  # no calibration kernel: never judged slow
        return 0

    def slowdown(self, since: int) -> None:
        return None

    def measure(self, workload, configs, stop_slower_than=0.0):
        (c,) = configs
        self.log.append(c.index)
        self.seen_options.append(self.options)
        costs = self.script[c.index].pop(0)
        if costs is None:
            return [MeasureResult(c, (), ErrorCode.RUNTIME_DEVICE, "boom", flops=workload.flops)]
        drift = None
        if isinstance(costs, tuple):  # (costs, the drift the measurer flagged)
            costs, drift = costs
        return [MeasureResult(c, tuple(costs), flops=workload.flops, drift=drift)]


class ScriptedVendor:
    def __init__(self, log: list, costs: list) -> None:
        self.library, self.skipped, self.log, self.costs = "fake blas", "", log, list(costs)

    def sample(self, n: int, max_n: int = 0, target_cv: float = 0.0) -> list[float]:
        o = compare.remeasure_options()  # the configs' sampling rule
        assert (n, max_n, target_cv) == (o.repeat, o.max_repeat, o.target_cv)
        self.log.append(VENDOR)
        return self.costs.pop(0)


@pytest.fixture
def scripted(monkeypatch):
    """(measurer, vendor costs) -> the call log; configs A and B are space indices 0 and 1."""
    log: list = []

    def make(script: dict, vendor_costs: "list | None"):
        m = ScriptedMeasurer(script, log)
        if vendor_costs is not None:
            monkeypatch.setattr(compare, "VendorTimer",
                                lambda *a, **k: ScriptedVendor(log, vendor_costs))
        return m, log
    return make


A, B = SPACE.get(0), SPACE.get(1)


def test_rounds_rotate_and_the_order_is_recorded(scripted):
    m, log = scripted({0: [[1.0]] * 3, 1: [[2.0]] * 3}, [[4.0]] * 3)
    c = remeasure(W, "cpu", {"a": A, "b": json.loads(B.to_json())}, rounds=3, measurer=m)
    assert c.order == [["a", "b", VENDOR], ["b", VENDOR, "a"], [VENDOR, "a", "b"]]
    names = {0: "a", 1: "b", VENDOR: VENDOR}
    assert [names[x] for x in log] == [n for r in c.order for n in r]  # what really ran
    assert c.names == ["a", "b"] and c.vendor_library == "fake blas"


@pytest.mark.parametrize("slowdowns, kept_from, slow_rounds", [
    ([None] * 3, 0, []),  # nothing to judge by: every round is kept
    ([1.1, 1.0, 1.15], 0, []),  # within 20%
    ([1.5, 1.0, 1.0, 1.0], 1, [1.5]),  # a slow round is set aside whole, vendor included
    ([1.5, 1.6, 1.7, 1.0, 1.0], 2, [1.5, 1.6]),  # at most two re-takes: then kept
])
def test_a_round_timed_while_the_machine_ran_slow_is_taken_again(scripted, monkeypatch,
                                                                 slowdowns, kept_from,
                                                                 slow_rounds):
    m, log = scripted({0: [[float(i)] for i in range(6)]}, [[10.0 + i] for i in range(6)])
    marks, waits = [], []
    m.calibrations = lambda: len(marks)
    m.slowdown = lambda mark: marks.append(mark) or slowdowns[len(marks) - 1]
    monkeypatch.setattr(compare.time, "sleep", waits.append)
    c = compare.remeasure(W, "cpu", {"a": A}, rounds=3, measurer=m, slow=0.2, slow_retakes=2,
                          slow_wait=2.0)
    assert c.slow_rounds == slow_rounds and waits == [2.0] * len(slow_rounds)
    # rounds set aside leave no sample on either side
    assert c.samples["a"] == [[float(i)] for i in range(kept_from, kept_from + 3)]
    assert c.samples[VENDOR] == [[10.0 + i] for i in range(kept_from, kept_from + 3)]
    assert len(c.order) == 3


def test_medians_ratios_and_spread_come_from_the_samples(scripted):
    m, _ = scripted({0: [[1.0, 3.0], [2.0], ([9.0, 8.0], 1.5)], 1: [[4.0]] * 3},
                    [[8.0, 8.0], [6.0], [10.0]])
    c = remeasure(W, "cpu", {"a": A, "b": B}, rounds=3, measurer=m)
    assert c.samples["a"] == [[1.0, 3.0], [2.0], [9.0, 8.0]]
    assert c.median("a") == 3.0 and c.median(VENDOR) == 8.0 and c.median("b") == 4.0
    assert c.round_medians("a") == [2.0, 2.0, 8.5] and c.drift == {"a": [1.5]}
    assert c.gflops("a") == pytest.approx(W.flops / 3.0 / 1e9)
    assert c.speedup("a") == pytest.approx(8.0 / 3.0)
    assert c.speedup("a", over="b") == pytest.approx(4.0 / 3.0)
    costs = [1.0, 3.0, 2.0, 9.0, 8.0]
    assert c.spread("a") == pytest.approx(statistics.stdev(costs) / statistics.mean(costs))
    v = c.vendor_result()
    assert v.library == "fake blas" and v.runtimes == [8.0, 8.0, 6.0, 10.0]
    assert v.gflops == pytest.approx(W.flops / 8.0 / 1e9)


def test_a_shared_measurer_uses_remeasure_options_and_gets_its_own_back(scripted):
    m, _ = scripted({0: [[1.0]] * 3}, None)
    own = MeasureOptions(timeout=7.0, repeat=1, max_repeat=1, min_repeat_ms=1.0)
    m.options = own
    remeasure(W, "cpu", [A], rounds=2, measurer=m, vendor=False)
    assert m.options is own
    assert m.seen_options == [compare.remeasure_options(own)] * 2
    assert m.seen_options[0].timeout == 7.0 and m.seen_options[0].repeat == 5
    m.seen_options.clear()
    remeasure(W, "cpu", [A], rounds=1, measurer=m, vendor=False, options=own)
    assert m.seen_options == [own] and m.options is own


def test_a_config_that_fails_is_dropped_from_later_rounds(scripted):
    m, log = scripted({0: [[1.0], None], 1: [[2.0], [2.0], [2.0]]}, None)
    c = remeasure(W, "cpu", {"a": A, "b": B}, rounds=3, measurer=m, vendor=False)
    assert c.order == [["a", "b"], ["b", "a"], ["b"]]
    assert c.errors == {"a": "RUNTIME_DEVICE: boom"} and c.costs("a") == [1.0]
    assert c.speedup("b", over="a") == pytest.approx(0.5)  # its samples before it failed
    assert c.median(VENDOR) == float("inf") and c.speedup("b") is None
    costs, err = harness.remeasure(W, "cpu", A.to_json(), 3,
                                   ScriptedMeasurer({0: [[1.0], [3.0], None]}, []))
    assert costs == [1.0, 3.0] and err == "RUNTIME_DEVICE: boom"


def test_no_samples_no_figures_and_vendor_is_a_reserved_name():
    c = Comparison(W.key, "cpu", W.flops, [])
    assert c.gflops("x") == 0.0 and c.speedup("x") is None
    with pytest.raises(ValueError, match="vendor"):
        remeasure(W, "cpu", {VENDOR: A}, rounds=1)


def test_leaderboard_bests_are_remeasured_together(scripted):
    m, _ = scripted({0: [[2.0], [2.0]], 1: [[1.0], None]}, [[4.0], [4.0]])
    entries = []
    for i, config in enumerate((A, B)):
        e = Entry(f"agent{i}", W.key, "cpu", 0, 4, W.flops, 1.0, 0.1, 0.1, 0.1, [])
        e.best = Best(json.loads(config.to_json()), 0, 9.9, 9.9)
        entries.append(e)
    vendor = remeasure_bests(entries, 2, m, vendor=True)
    assert entries[0].best.runtimes == [2.0, 2.0] and entries[0].best.gflops_search == 9.9
    assert entries[0].best.gflops == pytest.approx(W.flops / 2.0 / 1e9)
    assert entries[1].best.gflops == 0.0 and entries[1].best.runtimes == [1.0]
    assert vendor.runtimes == [4.0, 4.0] and vendor.library == "fake blas"


def test_best_so_far():
    ok = [MeasureResult(SPACE.get(i), (c,), flops=W.flops) for i, c in enumerate((2e-5, 1e-5))]
    bad = MeasureResult(SPACE.get(5), (), ErrorCode.RUN_TIMEOUT, flops=W.flops)
    curve = best_so_far([ok[0], bad, ok[1]], 5)
    assert curve.tolist() == pytest.approx([ok[0].gflops] * 2 + [ok[1].gflops] * 3)
    assert best_so_far([1.0, 26.0, 3.0]).tolist() == [1.0, 26.0, 26.0]
    assert best_so_far([], 2).tolist() == [0.0, 0.0]


# ---------------------------------------------------------------- real measurements

def test_real_run_without_vendor():
    c = remeasure("matmul:32,32,32", "cpu", {"ref": default_config(W, "cpu"), "b": B},
                  rounds=2, vendor=False, threads=1)
    assert c.order == [["ref", "b"], ["b", "ref"]] and not c.errors
    assert all(len(r) >= 5 for n in ("ref", "b") for r in c.samples[n])  # remeasure_options
    assert c.gflops("ref") == pytest.approx(W.flops / statistics.median(c.costs("ref")) / 1e9)
    assert c.speedup("b", over="ref") > 0 and c.speedup("b") is None and not c.vendor_library


@pytest.mark.skipif(not HAS_TORCH, reason="PyTorch is not installed: no vendor library to time")
def test_real_run_with_vendor_keeps_torch_threads():
    import torch

    before = torch.get_num_threads()
    c = remeasure(W, "cpu", [default_config(W, "cpu")], rounds=2, threads=1)
    assert torch.get_num_threads() == before
    assert c.order == [["0", VENDOR], [VENDOR, "0"]] and not c.vendor_skipped
    assert "1 threads" in c.vendor_library and all(5 <= len(r) <= 15 for r in c.samples[VENDOR])
    assert c.gflops(VENDOR) > 0 and c.speedup("0") == pytest.approx(
        c.median(VENDOR) / c.median("0"))


@pytest.mark.skipif(not HAS_TORCH, reason="PyTorch is not installed")
def test_vendor_timer_skips_what_it_cannot_time():
    from tensorgym.leaderboard.vendor import VendorTimer

    assert "OpenCL" in VendorTimer(W, "opencl").skipped and VendorTimer(W, "opencl").sample(3) == []
    t = VendorTimer(W, "cpu", threads=1, min_seconds=0.01)
    assert not t.skipped and t.number >= 1 and len(t.sample(3)) == 3


def test_tune_reports_the_side_by_side_speedups(scripted):
    from types import SimpleNamespace

    from tensorgym.cli import _speedups

    ref = default_config(W, "cpu")
    m, log = scripted({B.index: [[1.0], ([1.0], 0.5), [1.0]], ref.index: [[4.0]] * 3},
                      [[2.0]] * 3)
    session = SimpleNamespace(workload=W, target="cpu", measurer=m, reference_config=ref)
    best = MeasureResult(B, (0.5,), flops=W.flops)
    out = _speedups(session, None, best, SimpleNamespace(threads=0))
    lines, figures = out["lines"], out["figures"]
    assert lines[0].startswith(f"re-measured best: {W.flops / 1e9:.2f} GFLOP/s")
    assert "reference) schedule: 4.00x" in lines[1] and "fake blas: 2.00x" in lines[2]
    assert "x0.5..x0.5" in lines[3] and len(log) == 9
    assert figures["best_gflops"] == pytest.approx(W.flops / 1e9)  # what the lines say
    assert figures["speedup_reference"] == pytest.approx(4.0)
    assert figures["speedup_vendor"] == pytest.approx(2.0)
    assert figures["vendor_gflops"] == pytest.approx(W.flops / 2e9)
    assert figures["vendor_library"] == "fake blas" and figures["drift"] == [0.5]
