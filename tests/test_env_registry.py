"""Every registered ``TensorSched-*`` id, generated from Gymnasium's registry (as MiniGrid does).

Measuring a real ResNet layer takes seconds, so the fixed ids run Gymnasium's ``check_env`` in
``knob`` mode, where its few steps never complete a program and nothing is measured; stepping
with real measurements runs through ``TensorSched-v0`` with a tiny workload on every target.
"""
import pickle

import gymnasium as gym
import numpy as np
import pytest

from tensorgym.workloads import WORKLOADS
from gymnasium.envs.registration import EnvSpec
from gymnasium.utils.env_checker import check_env, data_equivalence

import tensorgym  # noqa: F401  (registers the ids)
from tensorgym.envs import env_ids
from tensorgym.errors import TargetUnavailableError
from tensorgym.measure import LocalMeasurer, MeasureOptions, Measurer
from tensorgym.hardware.runtime import get_runtime
from tensorgym.records import Records
from tensorgym.templates import TARGETS
from tensorgym.workloads import batch_matmul, conv2d, dense, matmul

ALL_IDS = sorted(i for i in gym.registry if i.startswith("TensorSched-"))
FIXED_IDS = [i for i in ALL_IDS if i != "TensorSched-v0"]
FAST = MeasureOptions(repeat=1, min_repeat_ms=0.1)
TINY = {"matmul": matmul(8, 8, 8), "conv2d": conv2d(1, 4, 6, 6, 4, 3, 1, 1),
        "depthwise": conv2d(1, 8, 6, 6, 8, 3, 1, 1, groups=8, epilogue=("bias", "relu6")),
        "dense": dense(5, 16, 8, epilogue=("bias", "gelu")),
        "batch_matmul": batch_matmul(2, 8, 4, 8, epilogue=("add",))}
V0_KWARGS = {"workload": "matmul:8,8,8", "target": "cpu"}  # JSON-able, for the spec round trip


def make(env_id: str, **kwargs):
    kwargs.setdefault("records", False)
    if env_id == "TensorSched-v0":
        kwargs = {**V0_KWARGS, **kwargs}
    return gym.make(env_id, **kwargs)


def require(target: str) -> None:
    try:
        get_runtime(target).check_available()
    except TargetUnavailableError as e:
        pytest.skip(f"{target} is not available here: {e}")


def test_the_registry_holds_every_workload_and_target():
    assert set(FIXED_IDS) == set(env_ids()) and len(FIXED_IDS) == len(WORKLOADS) * 4
    assert "TensorSched-v0" in ALL_IDS


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_check_env_without_measuring(env_id):
    env = make(env_id, action_mode="knob")
    u = env.unwrapped
    assert len(u.space.knobs) > 2  # check_env takes <= 2 steps per episode: no program completes
    check_env(u)
    assert u.trials == 0 and u.session._measurer is None
    env.close()


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_same_seed_same_observations(env_id):
    a, b = make(env_id, action_mode="knob"), make(env_id, action_mode="knob")
    n = len(a.unwrapped.space.knobs)
    obs_a, _ = a.reset(seed=11)
    obs_b, _ = b.reset(seed=11)
    assert data_equivalence(obs_a, obs_b, exact=True)
    a.action_space.seed(11)
    b.action_space.seed(11)
    for _ in range(n - 1):  # one short of a program: nothing is measured
        step_a = a.step(a.action_space.sample())
        step_b = b.step(b.action_space.sample())
        assert data_equivalence(step_a, step_b, exact=True)
    assert a.unwrapped.trials == 0
    # config mode observes the same reference schedule
    assert data_equivalence(make(env_id).reset(seed=11), make(env_id).reset(seed=11), exact=True)


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_pickle_round_trip(env_id):
    env = make(env_id, action_mode="knob")
    env.reset(seed=5)
    for a in (0, 0, 10**6):  # two knobs set, one invalid action counted
        env.step(a)
    copy = pickle.loads(pickle.dumps(env))
    u, v = env.unwrapped, copy.unwrapped
    assert v.workload == u.workload and v.space == u.space and v.target == u.target
    assert v._partial == u._partial == [0, 0] and v.invalid_actions == u.invalid_actions == 1
    assert v.np_random.bit_generator.state == u.np_random.bit_generator.state
    assert v.spec == u.spec and v.session._measurer is None
    assert data_equivalence(env.step(1), copy.step(1), exact=True)
    assert data_equivalence(env.reset(seed=2), copy.reset(seed=2), exact=True)
    assert pickle.loads(pickle.dumps(u)).space == u.space
    env.close()
    copy.close()


@pytest.mark.parametrize("env_id", ALL_IDS)
def test_spec_round_trip(env_id):
    env = make(env_id, budget=7, reward="best_improvement")
    again = gym.make(env.spec)
    from_json = gym.make(EnvSpec.from_json(env.spec.to_json()))
    for other in (again, from_json):
        assert other.spec.id == env_id and other.spec.kwargs == env.spec.kwargs
        assert other.unwrapped.budget == 7 and other.unwrapped.reward_kind == "best_improvement"
        assert other.action_space == env.action_space
        assert other.observation_space == env.observation_space
        assert data_equivalence(other.reset(seed=0), env.reset(seed=0), exact=True)
    assert pickle.loads(pickle.dumps(env.spec)) == env.spec


@pytest.fixture(scope="module")
def measurers():
    made: dict[str, Measurer] = {}

    def get(target: str) -> Measurer:
        if target not in made:
            made[target] = LocalMeasurer(target, FAST)
        return made[target]

    yield get
    for m in made.values():
        m.close()


# PoCL compiles a kernel in seconds: one op on opencl, both on the CPU.
STEP_CASES = [(t, op) for t in TARGETS for op in TINY if t == "cpu" or op == "matmul"]


@pytest.mark.parametrize("target,op", STEP_CASES)
def test_check_env_with_measurements(measurers, target, op):
    require(target)
    env = gym.make("TensorSched-v0", workload=TINY[op], target=target, records=False,
                   measurer=measurers(target), budget=1)
    check_env(env.unwrapped)
    env.reset(seed=0)
    obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
    assert env.observation_space.contains(obs) and terminated and not truncated
    assert info["trials"] == 1 and np.isfinite(reward)


def test_same_seed_same_observations_while_measuring(measurers):
    # the second env is served the first one's measurements, so its rewards match too
    records = Records(":memory:")
    envs = [gym.make("TensorSched-v0", workload=TINY["matmul"], records=records,
                     use_cache=True, measurer=measurers("cpu"), budget=3) for _ in range(2)]
    runs = []
    for env in envs:
        steps = [env.reset(seed=4)]
        env.action_space.seed(4)
        for _ in range(3):
            obs, reward, terminated, truncated, info = env.step(env.action_space.sample())
            steps.append((obs, reward, terminated, truncated, info["config"]))
        runs.append(steps)
    assert data_equivalence(runs[0][0][0], runs[1][0][0], exact=True)
    for s0, s1 in zip(runs[0][1:], runs[1][1:]):
        assert data_equivalence(s0, s1, exact=True)
    assert runs[0][-1][2] and envs[1].unwrapped.history[0].cached


def test_pickled_env_keeps_its_records(tmp_path, measurers):
    try:
        pickle.dumps(Records(tmp_path / "probe.sqlite"))
    except TypeError as e:
        pytest.skip(f"Records does not pickle yet: {e}")
    env = gym.make("TensorSched-v0", workload=TINY["matmul"], records=tmp_path / "db.sqlite",
                   use_cache=True, measurer=measurers("cpu"), budget=4)
    env.reset(seed=0)
    env.step(env.action_space.sample())
    copy = pickle.loads(pickle.dumps(env))
    assert copy.unwrapped.session.records.path == env.unwrapped.session.records.path
    assert copy.unwrapped.trials == 1 and copy.unwrapped.best == env.unwrapped.best
    # the copy starts its own measurer and finds the measurement in the database
    copy.unwrapped.history.clear()
    again = copy.unwrapped.session.measure([env.unwrapped.history[0].config])[0]
    assert again.cached and again.costs == env.unwrapped.history[0].costs
    assert copy.unwrapped.session.measurer is not measurers("cpu")
    copy.close()  # closes only the copy's own measurer
    assert env.step(env.action_space.sample())[4]["trials"] == 2


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_vector_envs(mode):
    venv = gym.make_vec("TensorSched-v0", num_envs=2, vectorization_mode=mode,
                        workload=TINY["matmul"], target="cpu", records=False,
                        measure_options=FAST, budget=2)
    obs, _ = venv.reset(seed=0)
    assert obs.shape == (2,) + venv.single_observation_space.shape
    done_at = []
    for t in range(3):
        obs, reward, terminated, truncated, info = venv.step(venv.action_space.sample())
        assert venv.observation_space.contains(obs) and not truncated.any()
        if terminated.all():
            done_at.append(t)
        assert np.isfinite(reward).all()
    assert done_at == [1]  # budget 2; then the next step auto-resets
    venv.close()


def test_a_fixed_id_refuses_another_workload_or_target():
    from tensorgym.errors import TensorGymError
    from tensorgym.workloads import matmul

    with pytest.raises(TensorGymError, match="TensorSched-v0"):
        gym.make("TensorSched-conv2d-C6-cpu", workload=matmul(8, 8, 8))
    with pytest.raises(TensorGymError, match="fixed to target"):
        gym.make("TensorSched-conv2d-C6-cpu", target="opencl")
    assert gym.make("TensorSched-conv2d-C6-cpu", workload="conv2d-C6").unwrapped.workload.label \
        == "conv2d-C6"
