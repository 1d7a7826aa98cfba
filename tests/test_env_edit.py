"""``action_mode="edit"`` (issue 34, item 2): one-knob neighbour moves from a start schedule,
rewarded by the log speedup over the episode's previous schedule, observing features and the
workload descriptor; and the descriptor itself (``tensorgym.features.descriptor``)."""
import dataclasses
import math
from collections import deque

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from tensorgym.envs.edit import EditMoves
from tensorgym.errors import ErrorCode, TensorGymError
from tensorgym.features import feature_length
from tensorgym.features.descriptor import (DESCRIPTOR_LENGTH, KINDS, MAX_SIZES, SIZE_NAMES,
                                           descriptor_names, operator_kind, workload_descriptor)
from tensorgym.measure import MeasureOptions
from tensorgym.records import Records
from tensorgym.templates import space_for
from tensorgym.workloads import EPILOGUE_OPS, get_workload

from .conftest import TINY_MEASURE, TINY_WORKLOAD

DESCRIBED = ["conv2d:1,64,56,56,64,3,1,1+bias+relu", "conv2d:1,32,28,28,32,3,1,1,32",
             "conv2d:1,32,28,28,64,3,1,1,4", "conv2d:1,8,8,8,16,3,1,1,8", "dense:128,768,3072+bias+gelu",
             "batch_matmul:12,128,64,128+add", "matmul:16,16,16+relu6"]


# ---------------------------------------------------------------- the descriptor

def test_descriptor_names_and_length_agree():
    names = descriptor_names()
    assert len(names) == DESCRIPTOR_LENGTH == len(set(names))
    assert MAX_SIZES == 9 and names[len(KINDS)] == "log2_size0"


@pytest.mark.parametrize("key", DESCRIBED)
def test_descriptor_is_finite_non_negative_float32_and_pure(key):
    w = get_workload(key)
    d = workload_descriptor(w, "cpu")
    assert d.dtype == np.float32 and d.shape == (DESCRIPTOR_LENGTH,)
    assert np.isfinite(d).all() and (d >= 0).all()
    assert np.array_equal(d, workload_descriptor(get_workload(key), "llvm"))  # alias, no state


@pytest.mark.parametrize("key, kind", [
    ("conv2d:1,64,56,56,64,3,1,1", "conv2d"), ("conv2d:1,32,28,28,32,3,1,1,32", "depthwise_conv2d"),
    ("conv2d:1,32,28,28,64,3,1,1,4", "grouped_conv2d"),
    ("conv2d:1,8,8,8,16,3,1,1,8", "grouped_conv2d"),  # groups == IC but OC = 2 IC: not depthwise
    ("dense:128,768,3072", "dense"), ("batch_matmul:12,128,64,128", "batch_matmul"),
    ("matmul:16,16,16", "matmul")])
def test_descriptor_operator_one_hot(key, kind):
    w = get_workload(key)
    d = workload_descriptor(w, "cpu")
    assert operator_kind(w) == kind
    assert d[: len(KINDS)].tolist() == [float(k == kind) for k in KINDS]


@pytest.mark.parametrize("key, sizes", [
    ("conv2d:1,64,56,56,64,3,2,1", (1, 64, 56, 56, 64, 3, 2, 1, 1)),  # GROUPS defaults to 1
    ("conv2d:1,32,28,28,32,3,1,1,32", (1, 32, 28, 28, 32, 3, 1, 1, 32)),
    ("dense:128,768,3072", (128, 768, 3072)), ("batch_matmul:12,128,64,32", (12, 128, 64, 32)),
    ("matmul:16,24,8", (16, 24, 8))])
def test_descriptor_sizes_in_key_order_padded(key, sizes):
    w = get_workload(key)
    assert len(SIZE_NAMES[w.op]) == len(sizes)
    got = workload_descriptor(w, "cpu")[len(KINDS): len(KINDS) + MAX_SIZES]
    want = [math.log2(1 + s) for s in sizes] + [0.0] * (MAX_SIZES - len(sizes))
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_descriptor_cost_epilogue_and_target_columns():
    names = descriptor_names()
    w = get_workload("dense:128,768,3072+bias+gelu")
    d = dict(zip(names, workload_descriptor(w, "cuda").tolist()))
    assert math.isclose(d["log2_flops"], math.log2(1 + w.flops), rel_tol=1e-6)
    assert math.isclose(d["log2_bytes"], math.log2(1 + w.nbytes), rel_tol=1e-6)
    assert math.isclose(d["log2_intensity"], math.log2(1 + w.flops / w.nbytes), rel_tol=1e-6)
    assert [d[f"epilogue_{e}"] for e in EPILOGUE_OPS] == [1.0, 0.0, 0.0, 1.0, 0.0]
    assert (d["target_cpu"], d["target_opencl"], d["target_cuda"]) == (0.0, 0.0, 1.0)
    # workloads that differ only in what one column says differ only in that column
    a = workload_descriptor(get_workload("matmul:16,16,16"), "cpu")
    b = workload_descriptor(get_workload("matmul:16,16,16+relu"), "cpu")
    diff = [names[i] for i in np.flatnonzero(a != b)]
    assert "epilogue_relu" in diff and not any(n.startswith(("op_", "log2_size", "target_"))
                                               for n in diff)


def test_descriptor_refuses_bad_arguments():
    with pytest.raises(TensorGymError, match="unknown target"):
        workload_descriptor(get_workload("matmul:16,16,16"), "tpu")
    with pytest.raises(TypeError, match="Workload"):
        workload_descriptor("matmul:16,16,16", "cpu")


# ---------------------------------------------------------------- the moves

def test_step_moves_are_previous_and_next_option_and_masked_at_the_ends():
    space = space_for(get_workload("matmul:16,16,16"), "cpu")
    moves = EditMoves(space, "step")
    assert len(moves) == 2 * len(space.knobs)
    first = tuple(0 for _ in space.knobs)
    last = tuple(d - 1 for d in space.dims)
    assert moves.masks(first).tolist() == [False, True] * len(space.knobs)
    assert moves.masks(last).tolist() == [True, False] * len(space.knobs)
    for a in range(len(moves)):
        k, up = divmod(a, 2)
        start = first if up else last
        to = moves.apply(start, a)
        assert to[:k] + to[k + 1:] == start[:k] + start[k + 1:]
        assert to[k] == start[k] + (1 if up else -1)
        assert moves.apply(last if up else first, a) is None


def _reachable(dest_rows, n):
    seen, todo = {0}, deque([0])
    while todo:
        c = todo.popleft()
        for row in dest_rows:
            if row[c] >= 0 and row[c] not in seen:
                seen.add(row[c])
                todo.append(row[c])
    return len(seen) == n


@pytest.mark.parametrize("workload, target", [("matmul:16,16,16", "cpu"),
                                              ("conv2d:1,64,56,56,64,3,1,1", "cuda"),
                                              ("conv2d:1,6,7,7,4,1,1,0", "cpu")])
def test_factor_moves_move_one_prime_between_adjacent_levels_and_reach_every_tiling(workload,
                                                                                    target):
    space = space_for(get_workload(workload), target)
    moves = EditMoves(space, "factor")
    by_knob = {}
    for m in moves.moves:
        by_knob.setdefault(m.knob, []).append(m)
    for k, knob in enumerate(space.knobs):
        ms = by_knob[k]
        if knob.kind != "split":
            assert [m.direction for m in ms] == ["down", "up"]
            continue
        levels = len(knob.options[0])
        assert len(ms) == 2 * (levels - 1)
        for m in ms:
            i, j = m.levels
            assert j == i + 1
            for c, to in enumerate(m.dest):
                if to < 0:
                    continue
                a, b = knob.options[c], knob.options[to]
                src, dst = (i, j) if m.direction == "inward" else (j, i)
                p = a[src] // b[src]
                assert a[src] == p * b[src] and b[dst] == p * a[dst] and p > 1
                assert all(x == y for n, (x, y) in enumerate(zip(a, b)) if n not in (i, j))
        assert _reachable([m.dest for m in ms], knob.size), knob.name


def test_unknown_moves_are_refused():
    with pytest.raises(TensorGymError, match="edit_moves"):
        EditMoves(space_for(get_workload("matmul:16,16,16"), "cpu"), "swap")


# ---------------------------------------------------------------- the env: options

def test_bad_edit_options_are_refused_clearly():
    kw = dict(workload=TINY_WORKLOAD, records=False)
    with pytest.raises(TensorGymError, match="unknown start 'best'"):
        gym.make("TensorSched-v0", action_mode="edit", start="best", **kw)
    with pytest.raises(TensorGymError, match="unknown edit_moves"):
        gym.make("TensorSched-v0", action_mode="edit", edit_moves="swap", **kw)
    with pytest.raises(TensorGymError, match="obs_mode 'relation', 'context' or 'config'"):
        gym.make("TensorSched-v0", action_mode="edit", obs_mode="ast", **kw)
    for mode in ("config", "knob"):
        with pytest.raises(TensorGymError, match="options of action_mode='edit'"):
            gym.make("TensorSched-v0", action_mode=mode, start="seed", **kw)
    env = gym.make("TensorSched-v0", action_mode="edit", **kw)
    with pytest.raises(TensorGymError, match="unknown start"):
        env.reset(seed=0, options={"start": "nowhere"})


def test_registered_ids_take_edit_mode():
    env = gym.make("TensorSched-conv2d-C6-cpu", action_mode="edit", obs_mode="config",
                   edit_moves="factor", records=False)
    obs, info = env.reset(seed=0)
    assert env.observation_space.contains(obs) and info["start"] == "reference"
    assert obs.shape == (feature_length("config") + DESCRIPTOR_LENGTH,)
    u = env.unwrapped
    np.testing.assert_array_equal(obs[-DESCRIPTOR_LENGTH:], workload_descriptor(u.workload, "cpu"))
    assert env.action_space.n == len(u.moves) and u.action_masks().shape == (env.action_space.n,)


# ---------------------------------------------------------------- the env on replay

@pytest.fixture
def replay(tiny_dataset):
    envs = []

    def make(**kw):
        kw.setdefault("budget", 8)
        env = gym.make("TensorSched-v0", workload=TINY_WORKLOAD, measure="replay",
                       dataset=tiny_dataset, on_miss="surrogate", records=False,
                       action_mode="edit", **kw)
        envs.append(env)
        return env

    yield make
    for env in envs:
        env.close()


@pytest.mark.parametrize("obs_mode, moves", [("relation", "step"), ("config", "step"),
                                             ("relation", "factor")])
def test_checkers_pass_on_replay(replay, obs_mode, moves):
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    env = replay(obs_mode=obs_mode, budget=1000, edit_moves=moves, start="random")
    check_env(env.unwrapped, skip_render_check=True)
    sb3_check_env(env.unwrapped, warn=False)


def _valid_action(env, rng):
    return int(rng.choice(np.flatnonzero(env.unwrapped.action_masks())))


def test_replay_episode_rewards_are_log_speedups_over_the_previous_schedule(replay):
    env = replay(budget=6)
    u = env.unwrapped
    obs, info = env.reset(seed=0)
    assert info["config"] == u.session.reference_config.to_json()
    rng = np.random.default_rng(0)
    previous, current, ret = u.session.reference_seconds, u.session.reference_config, 0.0
    for t in range(6):
        a = _valid_action(env, rng)
        move = u.moves[a]
        obs, r, term, trunc, info = env.step(a)
        assert env.observation_space.contains(obs) and not trunc and term == (t == 5)
        assert info["trials"] == t + 1 and info["edit"] == {"knob": move.name,
                                                            "direction": move.direction}
        assert info["previous_runtime"] == previous
        new = u.space.from_json(info["config"])
        assert sum(x != y for x, y in zip(new.choices, current.choices)) == 1
        assert info["error"] == "NO_ERROR"  # the surrogate answers every miss
        assert math.isclose(r, math.log(previous) - math.log(info["runtime"]), abs_tol=1e-12)
        previous, current = info["runtime"], new
        ret += r
    # the rewards telescope: the return is the last schedule's log speedup over the reference
    assert math.isclose(ret, math.log(u.session.reference_seconds / previous), rel_tol=1e-9)
    with pytest.raises(TensorGymError, match="budget"):
        env.step(_valid_action(env, rng))


def test_a_failed_schedule_costs_failure_reward_and_keeps_the_current_one(replay, monkeypatch):
    env = replay(budget=4, failure_reward=-3.0)
    u = env.unwrapped
    obs0, _ = env.reset(seed=0)
    measure = u.session.measure_valid

    def failing(configs):
        results = measure(configs)
        return [dataclasses.replace(r, costs=(), error=ErrorCode.RUNTIME_DEVICE) for r in results]

    monkeypatch.setattr(u.session, "measure_valid", failing)
    obs, r, term, trunc, info = env.step(_valid_action(env, np.random.default_rng(0)))
    assert r == -3.0 and info["error"] == "RUNTIME_DEVICE" and info["trials"] == 1
    assert u._last_config == u.session.reference_config and np.array_equal(obs, obs0)
    monkeypatch.undo()
    _, r, _, _, info = env.step(_valid_action(env, np.random.default_rng(1)))
    assert info["previous_runtime"] == u.session.reference_seconds  # still the reference's time


def test_invalid_actions_cost_failure_reward_measure_nothing_and_truncate(replay):
    env = replay(budget=4, max_invalid_actions=3)
    u = env.unwrapped
    obs0, _ = env.reset(seed=0)
    masked = int(np.flatnonzero(~u.action_masks())[0])  # the reference sits at some knob's end
    for n, action in enumerate([masked, 1.0, env.action_space.n], 1):
        obs, r, term, trunc, info = env.step(action)
        assert r == u.failure_reward and info["error"] == "INVALID_ACTION" and info["edit"] is None
        assert info["trials"] == 0 and u.invalid_actions == n and not term
        assert trunc == (n == 3) and np.array_equal(obs, obs0)
    with pytest.raises(TensorGymError, match="truncated"):
        env.step(_valid_action(env, np.random.default_rng(0)))


@pytest.mark.parametrize("start", ["seed", "random"])
def test_starts_are_drawn_with_the_env_rng(replay, start):
    env = replay(start=start)
    u = env.unwrapped

    def starts(seed):
        obs, info = env.reset(seed=seed)
        return [info["config"]] + [env.reset()[1]["config"] for _ in range(5)]

    a, b = starts(3), starts(3)
    assert a == b
    configs = [u.space.from_json(c) for c in a]
    if start == "seed":
        pool = {c.index for c in u.seed_schedules()}
        assert {c.index for c in configs} <= pool
        assert u.session.reference_config.index not in pool or len(pool) == 1
    else:
        assert len({c.index for c in configs}) > 1
    # the observation is the start's, and reset's options choose another start
    obs, info = env.reset(seed=0, options={"start": "reference"})
    assert info["start"] == "reference" and u._last_config == u.session.reference_config


def test_an_edit_env_pickles_mid_episode(replay):
    import pickle

    env = replay(budget=4, start="random")
    env.reset(seed=5)
    env.step(_valid_action(env, np.random.default_rng(0)))
    u = env.unwrapped
    copy = pickle.loads(pickle.dumps(u))
    try:
        assert copy._last_config == u._last_config and copy.trials == 1
        assert copy._previous_seconds == u._previous_seconds
        a = _valid_action(env, np.random.default_rng(1))
        assert np.array_equal(copy.action_masks(), u.action_masks())
        assert copy.step(a)[4]["edit"] == u.step(a)[4]["edit"]
    finally:
        copy.close()


def test_maskable_ppo_runs_on_replay_and_never_takes_a_masked_action(replay):
    sb3_contrib = pytest.importorskip("sb3_contrib")

    class Checked(gym.Wrapper):
        """Asserts each action the agent takes is one the masks allowed."""

        def action_masks(self):
            return self.env.unwrapped.action_masks()

        def step(self, action):
            assert self.env.unwrapped.action_masks()[int(action)], action
            out = self.env.step(action)
            assert out[4].get("error") != "INVALID_ACTION"
            return out

    env = Checked(replay(budget=8))
    model = sb3_contrib.MaskablePPO("MlpPolicy", env, n_steps=32, batch_size=32, n_epochs=1,
                                    seed=0, device="cpu")
    model.learn(total_timesteps=64)
    assert model.num_timesteps >= 64 and env.unwrapped.invalid_actions == 0


# ---------------------------------------------------------------- the env live

def test_checkers_pass_live_on_a_tiny_workload():
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    env = gym.make("TensorSched-v0", workload=TINY_WORKLOAD, target="cpu", action_mode="edit",
                   budget=1000, records=Records(":memory:"), use_cache=True, num_threads=1,
                   measure_options=MeasureOptions(**TINY_MEASURE))
    try:
        check_env(env.unwrapped, skip_render_check=True)
        sb3_check_env(env.unwrapped, warn=False)
        _, info = env.reset(seed=0)
        _, r, _, _, info = env.step(_valid_action(env, np.random.default_rng(0)))
        assert info["error"] == "NO_ERROR" and info["edit"]["knob"] in {
            k.name for k in env.unwrapped.space.knobs}
        assert math.isclose(r, math.log(info["previous_runtime"]) - math.log(info["runtime"]))
    finally:
        env.close()
