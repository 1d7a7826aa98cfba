import dataclasses
import math
import subprocess
import sys

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import tensorgym
from tensorgym.envs import env_ids
from tensorgym.errors import InvalidConfigError, TargetUnavailableError, TensorGymError
from tensorgym.measure import LocalMeasurer, MeasureOptions
from tensorgym.workloads import WORKLOADS, conv2d, matmul

TINY = matmul(16, 16, 16)
OPTS = MeasureOptions(repeat=2, min_repeat_ms=1)


@pytest.fixture(scope="module")
def measurer():
    m = LocalMeasurer("cpu", OPTS)
    yield m
    m.close()


def make(measurer, **kw):
    kw.setdefault("records", False)
    return gym.make("TensorSched-v0", workload=TINY, target="cpu", measurer=measurer, **kw)


def test_every_registered_id_constructs_without_measuring():
    ids = env_ids()
    assert "TensorSched-conv2d-C6-cpu" in ids and "TensorSched-matmul-1024-cuda" in ids
    assert len(ids) == len(WORKLOADS) * 4 and "TensorSched-dense-bert-ffn-cpu" in ids
    for env_id in ids:
        env = gym.make(env_id, records=False)
        u = env.unwrapped
        assert u.space.size > 1 and env.action_space.shape == (len(u.space.knobs),)
        obs, _ = env.reset(seed=0)
        assert env.observation_space.contains(obs)
        env.close()


@pytest.mark.parametrize("action_mode", ["config", "knob"])
def test_gymnasium_and_sb3_checkers(measurer, action_mode):
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    env = make(measurer, action_mode=action_mode, budget=1000)
    assert env.spec.nondeterministic
    check_env(env.unwrapped, skip_render_check=True)
    sb3_check_env(env.unwrapped, warn=False)


def test_config_mode_episode(measurer):
    env = make(measurer, budget=3, reward="log_speedup")
    obs, info = env.reset(seed=3)
    total = 0
    for t in range(3):
        obs, r, term, trunc, info = env.step(env.action_space.sample())
        assert env.observation_space.contains(obs)
        assert info["trials"] == t + 1 and term == (t == 2) and not trunc
        if info["error"] == "NO_ERROR":
            assert math.isclose(r, math.log(env.unwrapped.session.reference_seconds / info["runtime"]))
        total += 1
    with pytest.raises(TensorGymError, match="budget"):
        env.step(env.action_space.sample())
    assert env.unwrapped.best is not None and info["best_gflops"] == env.unwrapped.best.gflops


def test_best_improvement_return_is_log_speedup_of_best(measurer):
    env = make(measurer, budget=4, reward="best_improvement")
    env.reset(seed=1)
    ret = sum(env.step(env.action_space.sample())[1] for _ in range(4))
    u = env.unwrapped
    assert math.isclose(ret, max(0.0, math.log(u.best.gflops / u.session.reference_gflops)), rel_tol=1e-9)


def test_knob_mode_masks_and_invalid_actions(measurer):
    env = make(measurer, action_mode="knob", budget=2)
    env.reset(seed=0)
    u = env.unwrapped
    mask = u.action_masks()
    assert mask.sum() == u.space.knobs[0].size
    obs, r, term, _, info = env.step(u.space.knobs[0].size)  # out of range: penalised, nothing set
    assert r == u.failure_reward and info["error"] == "INVALID_ACTION" and not term
    for k in u.space.knobs[:-1]:
        obs, r, term, _, info = env.step(0)
        assert r == 0.0 and info["trials"] == 0
    obs, r, term, _, info = env.step(0)
    assert info["trials"] == 1 and "gflops" in info


def test_reset_seed_makes_sampling_reproducible(measurer):
    env = make(measurer)
    env.reset(seed=42)
    a = [env.action_space.sample() for _ in range(3)]
    u = env.unwrapped
    s1 = u.space.sample(u.np_random, 5)
    env.reset(seed=42)
    s2 = u.space.sample(u.np_random, 5)
    assert s1 == s2 and len(a) == 3


def test_batched_featurize_and_measure(measurer, tmp_path):
    env = make(measurer, records=tmp_path / "db.sqlite", use_cache=True)
    u = env.unwrapped
    configs = u.space.sample(np.random.default_rng(0), 4)
    X = u.featurize(configs)
    assert X.shape == (4, env.observation_space.shape[0]) and np.isfinite(X).all()
    first = u.session.measure(configs)
    again = u.session.measure(configs[:2])
    assert u.trials == 6 and all(r.cached for r in again) and not any(r.cached for r in first)
    assert len(u.session.records) == 4
    with pytest.raises(InvalidConfigError):
        u.session.measure([tensorgym.templates.space_for(matmul(8, 8, 8), "cpu").get(0).__class__(
            "conv2d/cpu", (0,), {}, 0)])


def test_measure_refuses_a_config_of_another_conv2d_space(measurer):
    """Every conv2d space is named "conv2d/cpu"; a config must come from this env's own space
    (its workload and template), even where its choices are in range here."""
    here, there = conv2d(1, 4, 9, 9, 8, 3, 1, 1), conv2d(1, 4, 9, 9, 8, 3, 2, 1)
    u = gym.make("TensorSched-v0", workload=here, target="cpu", measurer=measurer,
                 records=False).unwrapped
    other = tensorgym.templates.space_for(there, "cpu")
    assert other.name == u.space.name and other.key != u.space.key
    fits = next(c for c in other.sample(np.random.default_rng(0), 200)
                if all(ch < n for ch, n in zip(c.choices, u.space.dims)))
    assert u.space.from_choices(fits.choices).values != fits.values  # same choices, other tiles
    for config in (fits, other.get(0)):
        with pytest.raises(InvalidConfigError, match="not of conv2d:1,4,9,9,8,3,1,1/cpu"):
            u.session.measure([u.space.get(0), config])
    assert u.trials == 0 and u.history == []
    forged = dataclasses.replace(u.space.get(1), values=u.space.get(2).values)
    with pytest.raises(InvalidConfigError, match="values or index"):
        u.session.measure([forged])
    with pytest.raises(InvalidConfigError, match="expected a Config"):
        u.session.measure([u.space.get(0).choices])


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(TensorGymError, match="unknown reward"):
        gym.make("TensorSched-v0", workload=TINY, reward="speed", records=False)
    with pytest.raises(TensorGymError, match="unknown target"):
        gym.make("TensorSched-v0", workload=TINY, target="tpu", records=False)
    with pytest.raises(KeyError, match="unknown workload"):
        gym.make("TensorSched-v0", workload="conv2d-C42", records=False)


def test_make_with_module_prefix_imports_tensorgym():
    code = ("import gymnasium as gym; e = gym.make('tensorgym:TensorSched-conv2d-C6-cpu', "
            "records=False); print(e.unwrapped.space.size)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert int(out.stdout) >= 10**6


def test_cuda_env_constructs_and_fails_clearly_without_a_device():
    try:
        from tensorgym.hardware.runtime import get_runtime

        get_runtime("cuda").check_available()
        pytest.skip("a CUDA device is present")
    except TargetUnavailableError:
        pass
    env = gym.make("TensorSched-conv2d-C6-cuda", records=False)
    env.reset(seed=0)
    with pytest.raises(TargetUnavailableError, match="CUDA"):
        env.step(env.action_space.sample())


@pytest.mark.parametrize("action_mode", ["config", "knob"])
def test_ast_observation_mode(measurer, action_mode):
    from tensorgym.envs.tensor_sched import AST_MAX_NODES

    env = make(measurer, obs_mode="ast", action_mode=action_mode, budget=1000)
    obs, _ = env.reset(seed=0)
    assert env.observation_space.contains(obs)
    n = int(obs["mask"].sum())
    assert 0 < n < AST_MAX_NODES and obs["parent"][0] == -1
    assert (obs["parent"][1:n] < np.arange(1, n)).all()  # pre-order: parents come first
    check_env(env.unwrapped, skip_render_check=True)


def test_reconfirm_times_the_top_configs_again_without_trials_or_records(measurer, tmp_path,
                                                                        monkeypatch):
    env = make(measurer, records=tmp_path / "db.sqlite")
    u = env.unwrapped
    results = u.session.measure(u.space.sample_unique(np.random.default_rng(1), 5))
    trials, n_records, timed = u.trials, len(u.session.records), u.meter.run
    timings, confirm = [], u.session.measurer.confirm
    monkeypatch.setattr(u.session.measurer, "confirm", lambda w, r: timings.append(r) or confirm(w, r))
    # duplicates count once; one set of rounds (re-takes and slow sets: the tests below)
    best = u.session.reconfirm(results + results[:2], top=2, rounds=3, max_sets=1, slow_retakes=0)
    assert best.ok and best.extra["reconfirmed"] and best.confirmed and u.best is best
    # the two timed again, then the faster of those 3 times more: the figure is their samples
    assert len(timings) == 5 and {r.config.index for r in timings[2:]} == {best.config.index}
    assert best.extra["rounds"] == 3
    assert len(best.costs) == 3 * u.session.measurer.options.confirm_repeat
    assert best.costs != timings[2].costs
    top2 = {r.config.index for r in sorted(results, key=lambda r: -r.gflops)[:2]}
    assert best.config.index in top2 and best.costs != next(
        r.costs for r in results if r.config.index == best.config.index)  # new samples
    assert u.trials == trials and len(u.session.records) == n_records and u.meter.run > timed
    assert u.session.reconfirm([]) is None
    env.close()


@pytest.mark.parametrize("slowdowns, sets, reported", [
    ((1.02,), 1, 1.02),  # agrees with its figure from the tune: one set
    ((2.0, 1.01), 2, 1.01),  # a slow moment: taken again, and the second set agrees
    ((1.5, 1.52), 2, 1.52),  # the machine slowed down for good: two sets agree, reported slow
    ((1.5, 2.0, 2.5), 3, 2.0),  # never settles: at most max_sets sets, the median reported
    ((1.3, 1.1, 2.0), 3, 1.3),  # the last set caught a slow moment: not the one reported
])
def test_reconfirm_takes_a_set_of_rounds_again_where_it_disagrees(measurer, monkeypatch,
                                                                 slowdowns, sets, reported):
    env = make(measurer)
    u = env.unwrapped
    results = u.session.measure(u.space.sample_unique(np.random.default_rng(1), 3))
    top = max((r for r in results if r.ok), key=lambda r: r.gflops)
    calls = []
    k = u.session.measurer.options.confirm_repeat

    def confirm(w, r):  # the top config's time from the tune, slowed per set of 2 rounds
        calls.append(r)
        slow = slowdowns[min((len(calls) - 2) // 2, len(slowdowns) - 1)] if len(calls) > 1 \
            else 1.0
        return dataclasses.replace(r, costs=(top.median * slow,) * k,
                                   confirmed=True)

    monkeypatch.setattr(u.session.measurer, "confirm", confirm)
    best = u.session.reconfirm([top], top=1, rounds=2, tolerance=0.05, max_sets=3)
    assert len(calls) == 1 + 2 * sets
    assert best.config.index == top.config.index and best.extra["reconfirmed"]
    assert best.extra.get("sets", 1) == sets and best.extra["rounds"] == 2
    assert best.gflops == pytest.approx(top.gflops / reported)
    if sets > 1:  # every set's figure
        assert best.extra["set_gflops"] == pytest.approx(
            [top.gflops / s for s in slowdowns[:sets]])
    else:
        assert "set_gflops" not in best.extra
    assert len(best.costs) == 2 * k  # the reported set's samples only
    env.close()


@pytest.mark.parametrize("calibration, set_slowdowns, retakes, sets, reported", [
    ((None,), (1.0,), 0, 1, 1.0),  # no calibration to judge by: the set stands
    ((1.1,), (1.02,), 0, 1, 1.02),  # within ``slow``: kept
    ((1.6, 1.0), (1.8, 1.01), 1, 1, 1.01),  # a slow moment: set aside, taken again after a wait
    # slow for good: the third set is kept after two re-takes, and the next one agrees with it
    ((1.6,), (1.8,), 2, 2, 1.8),
])
def test_reconfirm_sets_aside_a_set_timed_while_the_machine_ran_slow(
        measurer, monkeypatch, calibration, set_slowdowns, retakes, sets, reported):
    from tensorgym import session as session_module

    env = make(measurer)
    u = env.unwrapped
    results = u.session.measure(u.space.sample_unique(np.random.default_rng(1), 3))
    top = max((r for r in results if r.ok), key=lambda r: r.gflops)
    k, calls, waits = u.session.measurer.options.confirm_repeat, [], []

    def confirm(w, r):  # the first confirmation, then one set of 2 rounds per slowdown
        n = len(calls)
        calls.append(r)
        slow = set_slowdowns[min((n - 1) // 2, len(set_slowdowns) - 1)] if n else 1.0
        return dataclasses.replace(r, costs=(top.median * slow,) * k,
                                   confirmed=True)

    def slowdown(mark):  # the calibration's slowdown during the set just taken
        taken = (len(calls) - 1) // 2
        return calibration[min(taken - 1, len(calibration) - 1)]

    monkeypatch.setattr(u.session.measurer, "confirm", confirm)
    monkeypatch.setattr(u.session.measurer, "slowdown", slowdown)
    monkeypatch.setattr(session_module.time, "sleep", waits.append)
    best = u.session.reconfirm([top], top=1, rounds=2, max_sets=3, slow=0.25, slow_retakes=2,
                       slow_wait=2.0)
    assert waits == [2.0] * retakes and best.extra.get("slow_retakes", 0) == retakes
    assert len(calls) == 1 + 2 * (retakes + sets)
    assert best.gflops == pytest.approx(top.gflops / reported)
    assert best.extra.get("sets", 1) == sets  # a set set aside is not one of the sets
    env.close()


def test_measurer_slowdown_compares_calibrations_since_a_mark_with_those_before():
    m = LocalMeasurer("cpu", MeasureOptions())
    try:
        assert m.slowdown(m.calibrations()) is None
        for seconds in (1.0, 1.1, 0.9, 1.0, 1.3):
            m._drift.phase_end(seconds)
        mark = m.calibrations()
        assert m.slowdown(mark) is None  # nothing since
        m._drift.phase_end(1.5)
        m._drift.phase_end(1.7)
        # over the lower quartile of those before (0.95), not their median
        assert m.slowdown(mark) == pytest.approx(1.6 / 0.95)
    finally:
        m.close()


def test_a_live_steps_observation_comes_from_the_program_its_builder_lowered(monkeypatch):
    """The observation of a config just measured is the row of the program the builder process
    lowered: nothing is lowered again in the env's process, and the row is the featurizer's."""
    import numpy as np

    import tensorgym.features as features
    from tensorgym.features import Featurizer
    from tensorgym.measure import MeasureOptions

    env = gym.make("TensorSched-v0", workload="matmul:32,32,32", target="cpu", records=False,
                   measure_options=MeasureOptions(repeat=1, min_repeat_ms=1), budget=4)
    env.reset(seed=0)
    config = env.unwrapped.space.sample(np.random.default_rng(3), 1)[0]
    lowered = []
    real = features.lower
    monkeypatch.setattr(features, "lower", lambda *a: lowered.append(a) or real(*a))
    obs = env.step(np.array(config.choices))[0]
    assert lowered == []  # the builder's program served the observation
    monkeypatch.setattr(features, "lower", real)
    with Featurizer() as f:
        expected = f.featurize(env.unwrapped.workload, [config], "relation", fast=False)[0]
    np.testing.assert_array_equal(obs, expected)
    env.close()
