"""Don't time what has lost, inside a batch too: with ``early_stop`` = r, a kernel timed after a
faster one of the same batch stops once surely over r times that one's median (flagged, a real
sample, fewer samples), and a warm run far over the bound is the only sample; the cold
first run never is."""
import json
import os
from dataclasses import replace

import gymnasium as gym
import numpy as np
import pytest

import tensorgym  # noqa: F401  (registers the envs)
from tensorgym.errors import TensorGymError
from tensorgym.measure.build import Builder
from tensorgym.measure import LocalMeasurer, MeasureOptions, stop_bound
from tensorgym.measure.worker import COLD_MARGIN, KernelWorker, contends, one_run_lost
from tensorgym.templates import default_config, space_for
from tensorgym.workloads import matmul

W = matmul(128, 128, 128)
OPTIONS = MeasureOptions(repeat=3, max_repeat=3, min_repeat_ms=1)


@pytest.fixture(scope="module")
def measurer():
    m = LocalMeasurer("cpu", OPTIONS, num_threads=1)
    yield m
    m.close()


@pytest.fixture(scope="module")
def fast_slow(measurer):
    """(fast, slow) configs, each measured in full: the fastest and the slowest of the default
    and 8 random configs, verified at least 5x apart (so 2x bounds separate them with room)."""
    configs = [default_config(W, "cpu"), *space_for(W, "cpu").sample(np.random.default_rng(0), 8)]
    results = [r for r in measurer.measure(W, configs) if r.ok]
    fast = min(results, key=lambda r: r.median)
    slow = max(results, key=lambda r: r.median)
    assert slow.median > 5 * fast.median, [r.median for r in results]
    return fast, slow


def test_a_slow_kernel_after_a_fast_one_stops_early_with_a_real_time(measurer, fast_slow):
    fast, slow = fast_slow
    f, s = measurer.measure(W, [fast.config, slow.config], early_stop=2)
    assert f.ok and not f.early_stop and len(f.costs) == OPTIONS.repeat
    assert s.ok and s.early_stop and len(s.costs) < OPTIONS.repeat
    assert min(s.costs) > 2 * f.median  # a real sample, past the bound the fast one set
    assert s.gflops < f.gflops / 2


def test_without_early_stop_or_before_any_faster_kernel_nobody_stops(measurer, fast_slow):
    fast, slow = fast_slow
    for r in measurer.measure(W, [fast.config, slow.config], early_stop=0):
        assert r.ok and not r.early_stop and len(r.costs) == OPTIONS.repeat
    for r in measurer.measure(W, [slow.config, fast.config], early_stop=2):  # slow comes first
        assert r.ok and not r.early_stop and len(r.costs) == OPTIONS.repeat


def test_the_fixed_bound_still_applies_and_a_stopped_kernel_sets_no_bound(measurer, fast_slow):
    fast, slow = fast_slow
    # every kernel is over the fixed bound: all stop, none of them tightens it
    for r in measurer.measure(W, [fast.config, slow.config], stop_slower_than=1e-12,
                              early_stop=2):
        assert r.ok and r.early_stop and len(r.costs) == 1
    assert stop_bound(0.0, 0.0, 1.0) == 0.0
    assert stop_bound(5.0, 0.0, 1.0) == 5.0
    assert stop_bound(0.0, 3.0, float("inf")) == 0.0  # nothing timed in full yet
    assert stop_bound(0.0, 3.0, 1.0) == 3.0
    assert stop_bound(2.0, 3.0, 1.0) == 2.0 and stop_bound(5.0, 3.0, 1.0) == 3.0
    with pytest.raises(TensorGymError, match="early_stop"):
        measurer.measure(W, [fast.config], early_stop=0.5)


def test_duplicates_share_the_stopped_result(measurer, fast_slow):
    fast, slow = fast_slow
    f, s, again = measurer.measure(W, [fast.config, slow.config, slow.config], early_stop=2)
    assert s.early_stop and again.early_stop
    assert again.costs == s.costs and again.extra["same_kernel_as"] == slow.config.index


def test_a_retake_after_drift_starts_its_bound_afresh_and_stops_the_same(fast_slow):
    fast, slow = fast_slow
    # A tolerance below zero makes every phase count as drifting: the re-take runs for real.
    m = LocalMeasurer("cpu", MeasureOptions(repeat=3, max_repeat=3, min_repeat_ms=1,
                                       drift_tolerance=-1.0), num_threads=1)
    try:
        f, s = m.measure(W, [fast.config, slow.config], early_stop=2)
        assert len(m._drift.history) == 5  # timed twice, each end looked at twice
        assert f.ok and not f.early_stop and f.drift > 0
        assert s.ok and s.early_stop and s.drift > 0
    finally:
        m.close()


def test_a_warm_run_far_over_the_bound_is_the_only_sample(fast_slow, monkeypatch):
    _, slow = fast_slow
    b = Builder("cpu", {"num_threads": 1}).build(W, slow.config)
    # in pytest's own process: it must leave the process's OpenMP binding alone (its spawn,
    # not the worker, binds a worker process's threads: measure.worker.worker_env)
    monkeypatch.delenv("OMP_PROC_BIND", raising=False)
    worker = KernelWorker("cpu", {"num_threads": 1}, 0)
    assert "OMP_PROC_BIND" not in os.environ
    # one warm run (about a millisecond or more) is past a sample's length: it alone decides
    one = worker.run(W, b.program, b.binary,
                     MeasureOptions(min_repeat_ms=0.05, stop_slower_than=1e-9))
    assert one.ok and one.early_stop and one.costs and len(one.costs) == 1
    assert one.number == 1 and one.first > 0  # the cold first run is kept apart
    # a run shorter than a sample: one sample of many runs decides instead
    sampled = worker.run(W, b.program, b.binary,
                         MeasureOptions(min_repeat_ms=50, stop_slower_than=1e-9))
    assert sampled.ok and sampled.early_stop and len(sampled.costs) == 1 and sampled.number > 1
    opts = MeasureOptions(min_repeat_ms=1, stop_slower_than=0.01)
    assert one_run_lost(COLD_MARGIN * 0.01 * 1.01, opts)
    assert not one_run_lost(COLD_MARGIN * 0.01 * 0.99, opts)  # within the margin
    assert not one_run_lost(1.0, MeasureOptions(min_repeat_ms=1))  # no bound
    assert not one_run_lost(5e-4, MeasureOptions(min_repeat_ms=1, stop_slower_than=1e-6))


class _ColdFirstRun:
    """A runtime whose kernels' first run is ``cold`` seconds slower, as a parked thread pool or
    a core still busy with builds makes it."""

    def __init__(self, runtime, cold: float) -> None:
        self.runtime, self.cold = runtime, cold

    def load(self, binary, program):
        kernel = self.runtime.load(binary, program)
        warm_time, calls = kernel.time, []

        def time(bufs, number):
            calls.append(number)
            seconds = warm_time(bufs, number)
            return seconds + self.cold if len(calls) == 1 else seconds

        kernel.time = time
        return kernel


def test_a_cold_first_run_is_never_the_time_nor_stops_a_fast_kernel(fast_slow, monkeypatch):
    """14,083 records of a dataset held a 60-microsecond kernel's cold first run (6-15 ms, a
    scheduler slice) as their only sample: stopped on it, they read 30-100x too slow."""
    from tensorgym.measure.worker import Reference, run_job

    fast, _ = fast_slow
    b = Builder("cpu", {"num_threads": 1}).build(W, fast.config)
    monkeypatch.delenv("OMP_PROC_BIND", raising=False)
    worker = KernelWorker("cpu", {"num_threads": 1}, 0)
    cold = 0.02  # far past COLD_MARGIN x a bound of 4x the kernel, and past a sample's length
    opts = MeasureOptions(repeat=3, max_repeat=3, min_repeat_ms=1,
                          stop_slower_than=4 * fast.median, early_stop=4)
    r = run_job(_ColdFirstRun(worker.runtime, cold), Reference(0), W, b.program, b.binary, opts)
    assert r.ok and not r.early_stop and len(r.costs) == 3
    assert r.first >= cold and max(r.costs) < cold / 4  # warm samples only
    assert r.number > 1  # sized by a warm run, not by the cold one


def test_the_env_stops_within_its_first_batch_and_says_so(tmp_path, measurer, fast_slow):
    fast, slow = fast_slow
    env = gym.make("TensorSched-v0", workload=W, target="cpu", records=str(tmp_path / "r.db"),
                   measurer=measurer, budget=8, early_stop=2)
    u = env.unwrapped
    env.reset(seed=0)
    f, s = u.session.measure([fast.config, slow.config])  # no best yet: the fast one bounds the slow
    assert not f.early_stop and s.early_stop
    assert u.best.config == fast.config and s.gflops < u.best.gflops
    record = u.session.records.lookup(u.session.task, slow.config.to_json())
    assert record is not None and tuple(record.costs) == s.costs
    assert json.loads(record.options)["result"]["early_stop"]
    _, _, _, _, info = env.step(np.array(slow.config.choices))
    assert info["early_stop"] and info["gflops"] < info["best_gflops"]
    env.close()
    off = gym.make("TensorSched-v0", workload=W, target="cpu", records=False,
                   measurer=measurer, early_stop=0).unwrapped
    assert not any(r.early_stop for r in off.session.measure([fast.config, slow.config]))


def test_on_ray_a_stopped_kernel_is_past_the_bound_of_the_fastest(fast_slow):
    """Ray times chunks as their builds come back, in no fixed order: what holds is that every
    stopped kernel is surely over twice the fastest kernel of the batch timed in full."""
    ray = pytest.importorskip("ray", reason="ray is not installed: pip install 'tensorgym[ray]'")
    from tensorgym.measure.ray import RayMeasurer

    from .proc_tree import descendants, survivors

    fast, slow = fast_slow
    before = descendants(os.getpid())
    ray.init(num_cpus=2, object_store_memory=100 * 2**20, include_dashboard=False,
             log_to_driver=False)
    try:
        m = RayMeasurer("cpu", OPTIONS, num_threads=1)
        try:
            stopped = m.measure(W, [fast.config, slow.config, slow.config], early_stop=2)
            full = m.measure(W, [fast.config, slow.config], early_stop=0)
        finally:
            m.close()
    finally:
        seen = descendants(os.getpid()) - before
        ray.shutdown()
        assert survivors(seen, within=20) == []
    assert all(r.ok for r in stopped + full)
    fastest = min(r.median for r in stopped if not r.early_stop)
    assert all(min(r.costs) > 2 * fastest and len(r.costs) < OPTIONS.repeat
               for r in stopped if r.early_stop)
    assert not stopped[0].early_stop  # the fastest kernel is never stopped
    assert not any(r.early_stop for r in full)


def test_a_first_run_long_past_its_bound_is_stopped_by_a_new_worker(monkeypatch):
    """The first run of a 1024^3 matmul on one thread takes tens of milliseconds; stopped after
    5 ms it is a flagged, unchecked lower bound, the worker is replaced and measures on; from
    then on a spare worker, started with the next batch's builds, takes the place of the next."""
    import tensorgym.measure.local as measure
    from .proc_tree import descendants, survivors

    monkeypatch.setattr(measure, "first_run_limit", lambda opts, start: 0.005 if
                        opts.stop_slower_than else 0.0)
    big = matmul(1024, 1024, 1024)
    # no calibration: on a loaded machine a phase may count as drifting and be timed again,
    # stopping its kernel a second time (the spare is then used up); re-takes have tests of their own
    m = LocalMeasurer("cpu", replace(OPTIONS, calibrate=False), num_threads=1)
    try:
        (small,) = m.measure(W, [default_config(W, "cpu")])
        first_worker = m._worker.proc.pid
        (r,) = m.measure(big, [default_config(big, "cpu")], stop_slower_than=1e-6)
        assert r.ok and r.early_stop and r.unchecked and len(r.costs) == 1
        assert r.costs[0] >= 0.005
        assert first_worker not in descendants(os.getpid())  # killed, and reaped
        (small,) = m.measure(W, [default_config(W, "cpu")])  # a new worker times the next one
        assert small.ok and not small.unchecked and len(small.costs) == OPTIONS.repeat
        (again,) = m.measure(big, [default_config(big, "cpu")])  # no bound: never stopped
        assert again.ok and not again.early_stop and again.median > 0.005
        spare = m._spare.proc.pid
        (r,) = m.measure(big, [default_config(big, "cpu")], stop_slower_than=1e-6)
        assert r.unchecked and m._worker.proc.pid == spare and m._spare is None
        ours = {c.proc.pid for c in (m._worker, *m._builders.children) if c.proc}
    finally:
        m.close()
    assert survivors(ours, within=10) == []


def test_only_a_kernel_that_may_beat_the_best_gets_samples_past_repeat(fast_slow):
    """With ``early_stop``, samples past ``repeat`` (wanted here always: target_cv 0) go to a
    kernel whose fastest sample beats the best it must beat (the batch's fastest so far), not
    to a loser; without ``early_stop`` every kernel gets them."""
    fast, slow = fast_slow
    opts = MeasureOptions(repeat=3, max_repeat=6, target_cv=0.0, min_repeat_ms=1)
    m = LocalMeasurer("cpu", opts, num_threads=1)
    try:
        f, s = m.measure(W, [fast.config, slow.config], early_stop=1000)  # bound: no early stop
        assert not s.early_stop and min(s.costs) > f.median
        assert len(f.costs) == 6 and len(s.costs) == 3
        f, s = m.measure(W, [fast.config, slow.config], early_stop=0)
        assert len(f.costs) == len(s.costs) == 6
    finally:
        m.close()
    stop = MeasureOptions(stop_slower_than=3.0, early_stop=3.0)
    assert contends(0.9, stop) and contends(1.0, stop) and not contends(1.1, stop)
    assert contends(100.0, MeasureOptions(stop_slower_than=3.0))  # no early_stop: no gate
    assert contends(100.0, MeasureOptions(early_stop=3.0))  # nothing to beat yet
