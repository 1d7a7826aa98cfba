"""The measurement path: isolation from crashing/hanging kernels, wrong answers, the protocol."""
import warnings

import numpy as np
import pytest

from tensorgym import loopast as A
from tensorgym.errors import ErrorCode, LoweringBugWarning
from tensorgym.measure import local as measure_module
from tensorgym.measure.build import Builder
from tensorgym.measure import LocalMeasurer, MeasureOptions
from tensorgym.templates import default_config, space_for
from tensorgym.workloads import matmul

W = matmul(8, 8, 8)


def _program(body_fn):
    a, b, c = (A.Buffer(n, (8, 8)) for n in "ABC")
    return A.Program("injected", (a, b, c), (), body_fn(a, b, c))


def segfault(a, b, c):
    return A.Store(c, (A.IntImm(1 << 40), A.IntImm(0)), A.FloatImm(1.0))


def hang(a, b, c):
    i = A.LoopVar("i")
    row = A.BinOp("%", i, A.IntImm(8))
    return A.For(i, 10**15, "serial",
                 A.Store(c, (row, A.IntImm(0)),
                         A.BinOp("+", A.Load(c, (row, A.IntImm(0))), A.Load(a, (row, A.IntImm(1))))))


def zeros(a, b, c):
    i, j = A.LoopVar("i"), A.LoopVar("j")
    return A.For(i, 8, "serial", A.For(j, 8, "serial", A.Store(c, (i, j), A.FloatImm(0.0))))


@pytest.fixture(scope="module")
def measurer():
    m = LocalMeasurer("cpu", MeasureOptions(timeout=3.0, repeat=2, min_repeat_ms=1))
    yield m
    m.close()


def test_crash_hang_and_wrong_answer_do_not_take_down_the_caller(measurer):
    cfg = default_config(W, "cpu")
    ok = measurer.measure(W, [cfg])[0]
    assert ok.ok and ok.gflops > 0 and 2 <= len(ok.costs) <= 10  # more while they spread

    crash = measurer.run_program(W, _program(segfault), cfg)
    assert crash.error == ErrorCode.RUNTIME_DEVICE and "died" in crash.error_msg
    assert measurer.measure(W, [cfg])[0].ok  # a fresh worker took over

    hung = measurer.run_program(W, _program(hang), cfg)
    assert hung.error == ErrorCode.RUN_TIMEOUT
    assert measurer.measure(W, [cfg])[0].ok

    wrong = measurer.run_program(W, _program(zeros), cfg)
    assert wrong.error == ErrorCode.WRONG_ANSWER and wrong.gflops == 0 and not wrong.ok
    assert wrong.median == float("inf")


def test_parallel_builds_measure_a_batch(measurer):
    space = space_for(W, "cpu")
    configs = space.sample(np.random.default_rng(0), 6)
    results = measurer.measure(W, configs)
    assert [r.config for r in results] == configs
    assert all(r.ok for r in results), [r.error_msg for r in results if not r.ok]
    assert all(r.build_time > 0 and r.run_time > 0 for r in results)
    assert all(r.flops == W.flops for r in results)


def test_device_fingerprint(measurer):
    assert measurer.device.startswith("cpu/")


def test_a_build_timeout_kills_the_stuck_builder_and_the_measurer_recovers():
    w = matmul(64, 64, 64)
    configs = space_for(w, "cpu").sample(np.random.default_rng(3), 3)
    m = LocalMeasurer("cpu", MeasureOptions(repeat=2, min_repeat_ms=1, n_parallel=2,
                                       build_timeout=1e-4))
    try:
        results = m.measure(w, configs)
        assert [r.error for r in results] == [ErrorCode.BUILD_TIMEOUT] * 3
        m.options = MeasureOptions(repeat=2, min_repeat_ms=1, n_parallel=2, build_timeout=120.0)
        again = m.measure(w, configs)
        assert all(r.ok for r in again), [r.error_msg for r in again]
    finally:
        m.close()  # returns at once: no builder is left compiling


# ---------------------------------------------------------------- lowering bugs


def _broken_lowering(workload, config):
    raise RuntimeError("injected lowering bug")


class _BuggyBuilder(Builder):
    """A builder whose CPU lowering raises (patched where it runs: in the builder process)."""

    def build(self, workload, config):
        import tensorgym.lower as L

        original, L.lower_cpu = L.lower_cpu, _broken_lowering
        try:
            return super().build(workload, config)
        finally:
            L.lower_cpu = original


def test_a_lowering_bug_is_not_an_invalid_config(monkeypatch):
    builder = Builder("cpu", {}, compile_cache=False)
    invalid = builder.build(W, space_for(matmul(8, 8, 16), "cpu").get(0))  # another workload's
    assert invalid.error == ErrorCode.INSTANTIATION_ERROR and not invalid.lowering_bug
    monkeypatch.setattr("tensorgym.lower.lower_cpu", _broken_lowering)
    bug = builder.build(W, default_config(W, "cpu"))
    assert bug.error == ErrorCode.UNKNOWN_ERROR and bug.lowering_bug and bug.program is None
    assert bug.error_msg.startswith("lowering bug: Traceback")
    assert "RuntimeError: injected lowering bug" in bug.error_msg


def test_a_lowering_bug_in_a_builder_process_is_loud(monkeypatch, request):
    assert "error::tensorgym.errors.LoweringBugWarning" in request.config.getini("filterwarnings")
    monkeypatch.setattr(measure_module, "Builder", _BuggyBuilder)
    m = LocalMeasurer("cpu", MeasureOptions(repeat=2, min_repeat_ms=1, n_parallel=1))
    try:
        with pytest.warns(LoweringBugWarning, match="injected lowering bug"):
            r = m.measure(W, [default_config(W, "cpu")])[0]
        assert r.error == ErrorCode.UNKNOWN_ERROR and not r.ok
        assert r.error_msg.startswith("lowering bug:") and "injected lowering bug" in r.error_msg
        with warnings.catch_warnings():  # what the test suite's filter makes of it
            warnings.simplefilter("error", LoweringBugWarning)
            with pytest.raises(LoweringBugWarning):
                m.measure(W, [default_config(W, "cpu")])
    finally:
        m.close()
