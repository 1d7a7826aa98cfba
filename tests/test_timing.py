"""Timing that is cheap and true: samples adapt to their spread, a kernel that has lost stops
early (flagged, never faked), a new best is confirmed with samples of its own, drift is caught."""
import gymnasium as gym
import numpy as np
import pytest

import tensorgym  # noqa: F401  (registers the envs)
from tensorgym.measure import LocalMeasurer, MeasureOptions
from tensorgym.templates import space_for
from tensorgym.workloads import matmul

W = matmul(48, 32, 40)
CONFIGS = space_for(W, "cpu").sample(np.random.default_rng(4), 4)


@pytest.fixture(scope="module")
def measurer():
    m = LocalMeasurer("cpu", MeasureOptions(repeat=2, max_repeat=6, min_repeat_ms=1))
    yield m
    m.close()


def test_samples_stay_between_repeat_and_max_repeat(measurer):
    for r in measurer.measure(W, CONFIGS):
        assert r.ok and 2 <= len(r.costs) <= 6
        assert r.cv >= 0 and (len(r.costs) == 6 or r.cv <= 0.05)
        start, end = r.extra["timed"]
        assert start <= end


def test_a_kernel_surely_slower_than_the_bound_stops_early_with_a_real_time(measurer):
    r = measurer.measure(W, CONFIGS[:1], stop_slower_than=1e-12)[0]
    assert r.ok and r.early_stop and len(r.costs) == 1 and r.median > 1e-12
    fine = measurer.measure(W, CONFIGS[:1], stop_slower_than=10.0)[0]
    assert fine.ok and not fine.early_stop and len(fine.costs) >= 2


def test_confirm_times_again_with_more_samples(measurer):
    first = measurer.measure(W, CONFIGS[:1])[0]
    again = measurer.confirm(W, first)
    assert again.ok and again.confirmed and again.extra["screened_costs"] == first.costs
    assert len(again.costs) == measurer.options.confirm_repeat
    assert again.config == first.config and again.build_time == first.build_time


def test_a_phase_timed_while_the_speed_moved_is_taken_again_and_flagged():
    # A tolerance below zero makes every phase count as drifting: the path runs for real.
    m = LocalMeasurer("cpu", MeasureOptions(repeat=2, max_repeat=2, min_repeat_ms=1,
                                       drift_tolerance=-1.0))
    try:
        results = m.measure(W, CONFIGS[:2])
        assert all(r.ok and r.drift > 0 for r in results)
        # before, after and a second look; then the re-take's end and a second look (the
        # re-take starts from the first phase's last calibration)
        assert len(m._drift.history) == 5
        n = len(m._drift.history)
        m.confirm(W, results[0])  # right after the phase: its end calibration is used again
        assert len(m._drift.history) == n + 4  # its phase and re-take: ends and second looks
    finally:
        m.close()
    quiet = LocalMeasurer("cpu", MeasureOptions(repeat=2, min_repeat_ms=1, calibrate=False))
    try:
        assert all(r.drift is None for r in quiet.measure(W, CONFIGS[:2]))
        assert quiet._drift.history == []
    finally:
        quiet.close()


def test_a_change_of_speed_that_a_second_look_does_not_see_is_not_taken_again():
    m = LocalMeasurer("cpu", MeasureOptions(repeat=2, max_repeat=2, min_repeat_ms=1))
    looks = iter([1e-4, 1.5e-4, 1.04e-4])  # start, a blip at the end, the second look
    m._calibration_time = lambda: next(looks)
    try:
        results = m.measure(W, CONFIGS[:2])
        assert all(r.ok and r.drift is None for r in results)
        assert m._drift.history == [1e-4, 1.5e-4, 1.04e-4]  # no re-take: nothing more timed
    finally:
        m.close()
    m = LocalMeasurer("cpu", MeasureOptions(repeat=2, max_repeat=2, min_repeat_ms=1))
    # a change that a second look sees too; then the re-take's (from 1.45e-4) the same way
    looks = iter([1e-4, 1.5e-4, 1.45e-4, 2.0e-4, 2.1e-4])
    m._calibration_time = lambda: next(looks)
    try:
        results = m.measure(W, CONFIGS[:2])
        assert all(r.ok and r.drift == pytest.approx(2.1 / 1.45) for r in results)
        assert len(m._drift.history) == 5
    finally:
        m.close()


def test_the_envs_best_is_always_confirmed(tmp_path, measurer):
    env = gym.make("TensorSched-v0", workload=W, target="cpu", records=str(tmp_path / "r.db"),
                   measurer=measurer, budget=9)
    u = env.unwrapped
    env.reset(seed=0)
    results = u.session.measure(space_for(W, "cpu").sample(np.random.default_rng(7), 8))
    assert u.best is not None and u.best.confirmed
    assert u.best.gflops == max(r.gflops for r in results)
    record = u.session.records.lookup(u.session.task, u.best.config.to_json())
    assert tuple(record.costs) == u.best.costs  # the database holds the confirmed samples
    _, _, _, _, info = env.step(env.action_space.sample())
    assert {"confirmed", "early_stop", "drift", "cv"} <= set(info)
    assert info["best_gflops"] == u.best.gflops


def test_early_stop_and_confirmation_can_be_switched_off(tmp_path, measurer):
    env = gym.make("TensorSched-v0", workload=W, target="cpu", records=False, measurer=measurer,
                   confirm_best=False, early_stop=0)
    u = env.unwrapped
    results = u.session.measure(CONFIGS)
    assert not any(r.confirmed or r.early_stop for r in results)
    with pytest.raises(tensorgym.TensorGymError, match="early_stop"):
        gym.make("TensorSched-v0", workload=W, target="cpu", records=False, early_stop=0.5)


def test_each_result_carries_the_machines_speed_and_its_record_keeps_it(tmp_path):
    """``calibration``: the calibration kernel's seconds during the timing phase (the geometric
    mean of its timings at the phase's start and end), so that records of two moments of a
    machine whose speed moves can be compared; a record keeps it in its options."""
    from tensorgym.records import Records
    from tensorgym.task import Task

    m = LocalMeasurer("cpu", MeasureOptions(repeat=2, max_repeat=2, min_repeat_ms=1))
    looks = iter([1e-4, 1.04e-4])  # the phase's start and end: no re-take
    m._calibration_time = lambda: next(looks)
    try:
        results = m.measure(W, CONFIGS[:2])
        device = m.device
    finally:
        m.close()
    assert all(r.ok and r.extra["calibration"] == pytest.approx((1e-4 * 1.04e-4) ** 0.5)
               for r in results)
    db = Records(tmp_path / "r.db")
    db.add_many(Task(W.key, "cpu", device), results)
    recs = db.query(W.key)
    assert len(recs) == 2
    assert all(r.calibration == pytest.approx((1e-4 * 1.04e-4) ** 0.5) for r in recs)
    db.close()
    quiet = LocalMeasurer("cpu", MeasureOptions(repeat=2, min_repeat_ms=1, calibrate=False))
    try:
        assert all("calibration" not in r.extra for r in quiet.measure(W, CONFIGS[:1]))
    finally:
        quiet.close()
