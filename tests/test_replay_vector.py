"""The native replay vector env: step for step the single replay env (seeded alike), misses
answered by the surrogate in one batch, next-step autoreset, the batched config encoding equal
to ``encode_config``, and its errors."""
import gymnasium as gym
import numpy as np
import pytest

import tensorgym  # noqa: F401  (registers the envs)
from tensorgym.dataset import Dataset
from tensorgym.envs.replay_vector import SOURCE_NAMES, ReplayVectorEnv
from tensorgym.errors import InvalidConfigError, TensorGymError
from tensorgym.features.config_encoding import ChoiceEncoder, encode_config
from tensorgym.templates import space_for
from tensorgym.workloads import get_workload

WORKLOAD = "matmul:16,16,16"  # conftest.TINY_WORKLOAD, of the shared tiny dataset


@pytest.fixture(scope="module")
def data(tiny_dataset):
    return Dataset.load(tiny_dataset)


def singles(data, n, budget, reward="log_speedup"):
    return [gym.make("TensorSched-v0", workload=WORKLOAD, measure="replay", dataset=data,
                     on_miss="surrogate", budget=budget, records=False, obs_mode="config",
                     confirm_best=False, reward=reward) for _ in range(n)]


@pytest.mark.parametrize("reward", ["log_speedup", "best_improvement"])
def test_agrees_with_the_single_env_step_for_step(data, reward):
    n, budget = 3, 5
    vec = ReplayVectorEnv(WORKLOAD, data, num_envs=n, budget=budget, reward=reward)
    envs = singles(data, n, budget, reward)
    obs, _ = vec.reset(seed=11)
    assert np.array_equal(obs, np.stack([e.reset(seed=11 + i)[0] for i, e in enumerate(envs)]))
    recorded = [np.array(c.choices) for c in vec.task.configs]
    rng = np.random.default_rng(0)
    resets = 0
    for step in range(3 * budget):
        acts = np.stack([recorded[rng.integers(len(recorded))] if rng.random() < 0.6
                         else vec.single_action_space.sample() for _ in range(n)])
        o, r, term, trunc, info = vec.step(acts)
        assert not trunc.any()
        for i, env in enumerate(envs):
            if info["reset"][i]:
                resets += 1
                assert np.array_equal(env.reset()[0], o[i]) and r[i] == 0 and not term[i]
                continue
            so, sr, st, _, si = env.step(acts[i])
            assert np.array_equal(so, o[i]), (step, i)
            assert sr == pytest.approx(r[i], abs=1e-12), (step, i)
            assert st == term[i]
            assert si["source"] == SOURCE_NAMES[info["source"][i]]
            assert si["gflops"] == pytest.approx(info["gflops"][i], rel=1e-12)
            assert si["best_gflops"] == pytest.approx(info["best_gflops"][i], rel=1e-12)
    assert resets > 0 and vec.sources.sum() > 0
    for env in envs:
        env.close()
    vec.close()


def test_random_actions_are_answered_in_one_batch(data):
    vec = ReplayVectorEnv(WORKLOAD, data, num_envs=16, budget=100)
    vec.reset(seed=0)
    vec.action_space.seed(0)
    obs, r, *_, info = vec.step(vec.action_space.sample())
    assert obs.shape == (16, vec.single_observation_space.shape[0])
    assert vec.observation_space.contains(obs) and np.isfinite(r).all()
    assert set(info["source"].tolist()) <= {0, 1}


def test_choice_encoder_equals_encode_config():
    for key in ("conv2d:1,16,28,28,32,3,2,1+bias+relu", "dense:4,64,48+bias",
                "batch_matmul:2,16,32,8", WORKLOAD):
        w = get_workload(key)
        for target in ("cpu", "cuda"):
            space = space_for(w, target)
            configs = space.sample(np.random.default_rng(1), 64)
            rows = ChoiceEncoder(space).encode(np.array([c.choices for c in configs]))
            assert np.array_equal(rows, np.stack([encode_config(space, c) for c in configs]))


def test_errors(data):
    with pytest.raises(TensorGymError, match="num_envs"):
        ReplayVectorEnv(WORKLOAD, data, num_envs=0)
    with pytest.raises(TensorGymError, match="on_miss"):
        ReplayVectorEnv(WORKLOAD, data, on_miss="nearest")
    vec = ReplayVectorEnv(WORKLOAD, data, num_envs=2, on_miss="error")
    vec.reset(seed=0)
    dims = np.array(vec.space.dims)
    with pytest.raises(InvalidConfigError, match="shape"):
        vec.step(np.zeros((3, len(dims)), np.int64))
    with pytest.raises(InvalidConfigError, match="out of range"):
        vec.step(np.tile(dims, (2, 1)))
    missing = next(c for c in vec.space.sample(np.random.default_rng(5), 500)
                   if c.index not in vec.task.index_of)
    with pytest.raises(TensorGymError, match="not in dataset"):
        vec.step(np.stack([missing.choices] * 2))


def test_a_task_the_dataset_lacks_is_answered_by_the_world_model(data):
    unseen = "matmul:24,40,8"
    vec = ReplayVectorEnv(unseen, data, num_envs=4, budget=3)
    env = gym.make("TensorSched-v0", workload=unseen, measure="replay", dataset=data,
                   on_miss="surrogate", budget=3, records=False, obs_mode="config",
                   confirm_best=False)
    assert len(vec.task.configs) == 0
    vec.reset(seed=0)
    env.reset(seed=0)
    acts = np.stack([vec.single_action_space.sample() for _ in range(4)])
    _, r, _, _, info = vec.step(acts)
    assert (info["source"] == 1).all()
    assert r[0] == pytest.approx(env.step(acts[0])[1], abs=1e-12)
    with pytest.raises(TensorGymError, match="world="):
        gym.make("TensorSched-v0", workload=unseen, world="somewhere", records=False)


@pytest.mark.parametrize("moves", ["step", "factor"])
def test_edit_mode_agrees_with_the_single_env(data, moves):
    from tensorgym.envs.replay_vector_edit import ReplayVectorEditEnv

    n, budget = 3, 4
    vec = ReplayVectorEditEnv(WORKLOAD, data, num_envs=n, budget=budget, edit_moves=moves,
                              max_invalid_actions=3)
    envs = [gym.make("TensorSched-v0", workload=WORKLOAD, measure="replay", dataset=data,
                     on_miss="surrogate", budget=budget, records=False, obs_mode="config",
                     confirm_best=False, action_mode="edit", edit_moves=moves,
                     max_invalid_actions=3) for _ in range(n)]
    obs, _ = vec.reset(seed=5)
    assert np.array_equal(obs, np.stack([e.reset(seed=5 + i)[0] for i, e in enumerate(envs)]))
    rng = np.random.default_rng(1)
    ends = 0
    for step in range(4 * budget):
        masks = vec.action_masks()
        for i, e in enumerate(envs):
            if not vec._done[i] and vec._invalid[i] < 3:
                assert np.array_equal(masks[i], e.unwrapped.action_masks())
        # mostly valid moves, some masked ones
        acts = np.array([rng.choice(np.flatnonzero(m)) if rng.random() < 0.8
                         else rng.integers(len(m)) for m in masks])
        o, r, term, trunc, info = vec.step(acts)
        for i, e in enumerate(envs):
            if info["reset"][i]:
                ends += 1
                assert np.array_equal(e.reset()[0], o[i]) and r[i] == 0
                continue
            so, sr, st, str_, si = e.step(int(acts[i]))
            assert np.array_equal(so, o[i]), (step, i)
            assert sr == pytest.approx(r[i], abs=1e-12), (step, i)
            assert (st, str_) == (term[i], trunc[i])
            if si.get("error") != "INVALID_ACTION":
                assert si["source"] == SOURCE_NAMES[info["source"][i]]
    assert ends > 0
    vec.close()
    for e in envs:
        e.close()
