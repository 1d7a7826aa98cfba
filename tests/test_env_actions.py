"""Random and malformed actions in both action modes: only ``TensorGymError`` subclasses leave
``step``, each mode follows the policy its docstring states, and every episode ends within a
bounded number of steps."""
import math

import gymnasium as gym
import numpy as np
import pytest

from tensorgym.errors import InvalidConfigError, StepError, TensorGymError
from tensorgym.measure import LocalMeasurer, MeasureOptions
from tensorgym.records import Records
from tensorgym.workloads import matmul

TINY = matmul(8, 8, 8)
FAST = MeasureOptions(repeat=1, min_repeat_ms=0.1)
N_ACTIONS = 1000


@pytest.fixture(scope="module")
def measurer():
    m = LocalMeasurer("cpu", FAST)
    yield m
    m.close()


def make(measurer, **kwargs):
    # a shared database serves repeated configs from the cache: few real measurements
    kwargs.setdefault("records", Records(":memory:"))
    return gym.make("TensorSched-v0", workload=TINY, target="cpu", measurer=measurer,
                    use_cache=True, **kwargs)


def malformed_config_action(rng, dims):
    n = len(dims)
    ok = [int(rng.integers(d)) for d in dims]
    i = int(rng.integers(n))
    out_of_range = list(ok)
    out_of_range[i] = [dims[i], -1, 2**63 - 1, 2**70][int(rng.integers(4))]
    floats = [float(c) for c in ok]
    candidates = [
        None, "", "abc", "1", b"\x00", {}, {"tile": 1}, 0, 7, 0.7, 1.0, math.nan, math.inf,
        -math.inf, True, np.bool_(False), 1j, np.int64(3), np.array(2), np.float32(1),
        [], [[0]], [ok], ok[:-1], ok + [0], out_of_range, floats, [True] * n,
        [str(c) for c in ok], [None] * n, ok[:-1] + [0.5], ok[:-1] + [np.float64(1)],
        ok[:-1] + [np.bool_(True)], ok[:-1] + [[0]], tuple(floats),
        np.array(ok).reshape(n, 1), np.array(ok).reshape(1, n), np.array([], np.int64),
        np.array(floats), np.array(ok, bool), np.array(ok, complex), np.array(ok, object),
        np.array([str(c) for c in ok]), np.array(out_of_range[:i] + [-1] + ok[i + 1:]),
        np.array(ok + [0]), np.array(ok)[:, None, None], np.full(n, np.nan),
        np.array(out_of_range[:i] + [dims[i]] + out_of_range[i + 1:], np.uint8),
    ]
    return candidates[int(rng.integers(len(candidates)))]


def malformed_knob_action(rng, size):
    candidates = [
        None, "", "abc", "1", b"1", {}, [], [0], [[0]], (0,), 0.0, 0.7, 1.0, math.nan,
        math.inf, -math.inf, True, False, np.bool_(True), 1j, np.float32(0), np.float64(1),
        np.array([0]), np.array([0, 0, 0]), np.array([[0]]), np.array(0.0), np.array(True),
        np.array(0, object), np.array("0"), size, size + int(rng.integers(100)), -1,
        np.int64(-1), np.uint64(2**64 - 1), 2**70, np.int8(size),
    ]
    return candidates[int(rng.integers(len(candidates)))]


def valid_config_action(rng, config):
    form = int(rng.integers(5))
    c = config.choices
    return [np.array(c), np.array(c, np.int32), np.array(c, np.uint8), list(c),
            tuple(np.int64(x) for x in c)][form]


def valid_knob_action(rng, option):
    return [option, np.int64(option), np.int32(option), np.uint16(option),
            np.array(option)][int(rng.integers(5))]


def test_config_mode_fuzz_raises_invalid_config_error_only(measurer):
    env = make(measurer, budget=3)
    u = env.unwrapped
    rng = np.random.default_rng(0)
    pool = u.space.sample(np.random.default_rng(1), 6)
    env.reset(seed=0)
    steps = episodes = raised = 0
    for _ in range(N_ACTIONS):
        valid = rng.random() < 0.5
        action = (valid_config_action(rng, pool[int(rng.integers(len(pool)))]) if valid
                  else malformed_config_action(rng, u.space.dims))
        trials = u.trials
        try:
            obs, reward, terminated, truncated, info = env.step(action)
        except InvalidConfigError:
            assert not valid, f"valid action {action!r} raised"
            assert u.trials == trials  # nothing measured or counted
            raised += 1
            continue
        except Exception as e:  # noqa: BLE001
            pytest.fail(f"{type(e).__name__} (not InvalidConfigError) from {action!r}: {e}")
        assert valid, f"malformed action {action!r} was accepted"
        assert env.observation_space.contains(obs) and math.isfinite(reward)
        assert not truncated and u.trials == trials + 1
        steps += 1
        assert steps <= u.budget
        if terminated:
            assert steps == u.budget
            episodes += 1
            steps = 0
            env.reset()
    assert raised > 400 and episodes > 100
    assert sum(not r.cached for r in u.history) <= len(pool)


def test_knob_mode_fuzz_gives_failure_reward_and_ends_every_episode(measurer):
    env = make(measurer, action_mode="knob", budget=2)
    u = env.unwrapped
    n = len(u.space.knobs)
    bound = u.budget * n + u.max_invalid_actions
    rng = np.random.default_rng(0)
    pool = u.space.sample(np.random.default_rng(1), 6)
    env.reset(seed=0)
    steps, target, endings = 0, None, {"terminated": 0, "truncated": 0}
    for _ in range(N_ACTIONS):
        k = len(u._partial)
        if k == 0:
            target = pool[int(rng.integers(len(pool)))]
        valid = rng.random() < 0.5
        action = (valid_knob_action(rng, target.choices[k]) if valid
                  else malformed_knob_action(rng, u.space.knobs[k].size))
        try:
            obs, reward, terminated, truncated, info = env.step(action)
        except Exception as e:  # noqa: BLE001
            pytest.fail(f"{type(e).__name__} from knob action {action!r}: {e}")
        assert env.observation_space.contains(obs) and math.isfinite(reward)
        if valid:
            assert "INVALID_ACTION" != info.get("error")
            assert len(u._partial) == (k + 1) % n
        else:
            assert info["error"] == "INVALID_ACTION" and reward == u.failure_reward
            assert len(u._partial) == k and info["error_msg"]
        steps += 1
        assert steps <= bound, "an episode ran past its bound"
        if terminated or truncated:
            assert not (terminated and truncated)
            assert truncated == (u.invalid_actions == u.max_invalid_actions)
            endings["terminated" if terminated else "truncated"] += 1
            steps = 0
            env.reset()
    assert endings["terminated"] > 5 and endings["truncated"] > 5, endings


def test_knob_mode_invalid_actions_truncate_at_the_cap(measurer):
    env = make(measurer, action_mode="knob", budget=1)
    u = env.unwrapped
    env.reset(seed=0)
    for i in range(1, N_ACTIONS + 1):
        _, reward, terminated, truncated, info = env.step(10**6)
        assert reward == u.failure_reward and not terminated
        if truncated:
            break
    assert i == u.max_invalid_actions == len(u.space.knobs) and info["invalid_actions"] == i
    with pytest.raises(TensorGymError, match="truncated"):
        env.step(0)
    env.reset()
    assert u.invalid_actions == 0 and not env.step(0)[3]

    env = make(measurer, action_mode="knob", max_invalid_actions=3)
    env.reset(seed=0)
    assert [env.step(None)[3] for _ in range(3)] == [False, False, True]
    for bad in (0, 2.5, True, "3"):
        with pytest.raises(TensorGymError, match="max_invalid_actions"):
            make(measurer, action_mode="knob", max_invalid_actions=bad)
    with pytest.raises(TensorGymError, match="budget"):
        make(measurer, budget=2.0)


def test_failures_outside_the_action_raise_step_error(measurer, monkeypatch):
    env = make(measurer, records=False)
    env.reset(seed=0)

    def broken(*args, **kwargs):
        raise OSError("the worker pipe broke")

    monkeypatch.setattr(measurer, "measure", broken)
    with pytest.raises(StepError, match="OSError: the worker pipe broke") as info:
        env.step(env.action_space.sample())
    assert isinstance(info.value.__cause__, OSError)


@pytest.mark.parametrize("stored", [0.0, -1.0, math.inf, math.nan])
def test_a_damaged_stored_reference_time_is_measured_again(measurer, monkeypatch, stored):
    env = make(measurer)
    u = env.unwrapped
    monkeypatch.setattr(u.session.records, "reference", lambda *args: stored)
    env.reset(seed=0)
    _, reward, *_ = env.step(u.space.check_choices(u.session.reference_config.choices))
    assert math.isfinite(reward) and math.isfinite(u.session.reference_seconds) and u.session.reference_seconds > 0
