"""``TensorSchedNetwork-v0``: Gymnasium's and stable-baselines3's checkers, an episode spends
exactly its budget, its return is the share of the latency taken away, masked actions cost a
penalty and truncate, and the scheduler's rules drive it."""
import math

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import tensorgym  # noqa: F401  (registers the envs)
from tensorgym.dataset import collect
from tensorgym.errors import TensorGymError
from tensorgym.measure import MeasureOptions
from tensorgym.nn.network_env import MAX_TASKS, GradientPolicy, RoundRobinPolicy

TASKS = [("matmul:16,16,16", 2), ("matmul:16,16,16+bias", 1)]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    path = tmp_path_factory.mktemp("network") / "d.db"
    collect([w for w, _ in TASKS], n_configs=12, db=str(path), threads=1, progress=False,
            options=MeasureOptions(repeat=3, max_repeat=3, min_repeat_ms=1.0, calibrate=False))
    return str(path)


def make(dataset, **kwargs):
    kwargs = {"tasks": TASKS, "budget": 20, "batch": 4, "measure": "replay", "dataset": dataset,
              "agent": "random", **kwargs}
    return gym.make("TensorSchedNetwork-v0", **kwargs)


def test_checkers(dataset):
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    env = make(dataset)
    check_env(env.unwrapped, skip_render_check=True)
    sb3_check_env(make(dataset).unwrapped, warn=False)
    env.close()


@pytest.mark.parametrize("policy", [RoundRobinPolicy(), GradientPolicy()])
def test_an_episode_spends_its_budget(dataset, policy):
    env = make(dataset)
    obs, info = env.reset(seed=1)
    assert obs.shape == (MAX_TASKS, 6) and info["trials"] == 8  # the warm-up: a batch each
    assert (obs[:2, 5] == 1).all() and (obs[2:] == 0).all()
    ret, done = 0.0, False
    while not done:
        obs, r, term, trunc, info = env.step(policy(env))
        assert r >= 0
        ret += r
        done = term or trunc
    assert term and info["trials"] == 20
    s = env.unwrapped.scheduler
    assert sum(t.trials for t in s.tasks) == 20
    assert ret == pytest.approx((info["initial_latency"] - info["latency"])
                                / info["initial_latency"])
    assert math.isclose(info["latency"], sum(t.weight * t.best for t in s.tasks))
    with pytest.raises(TensorGymError, match="budget"):
        env.step(0)
    env.close()


def test_masked_actions(dataset):
    env = make(dataset, max_invalid_actions=2)
    env.reset(seed=0)
    assert env.unwrapped.action_masks().tolist()[:3] == [True, True, False]
    _, r, term, trunc, info = env.step(5)
    assert r == -1.0 and not term and not trunc and "masked" in info["error"]
    assert info["trials"] == 8  # nothing spent
    *_, trunc, _ = env.step(MAX_TASKS - 1)
    assert trunc
    env.close()


def test_bad_input(dataset):
    with pytest.raises(TensorGymError, match="reset"):
        make(dataset).unwrapped.step(0)
    with pytest.raises(TensorGymError, match="tasks"):
        make(dataset, tasks=[("matmul:16,16,16", 1)] * (MAX_TASKS + 1))
    with pytest.raises(TensorGymError, match="unknown model"):
        gym.make("TensorSchedNetwork-v0", model="alexnet")


def test_model_tasks_from_the_corpus():
    env = gym.make("TensorSchedNetwork-v0", model="resnet18")
    assert len(env.unwrapped.task_list) == 16
    assert np.isclose(sum(n for _, n in env.unwrapped.task_list), 21)
    env.close()
