"""The learned edit agent: named move slots, the multi-task replay walks (deterministic, masks,
rewards), the numpy policy file and its errors, a tiny training run, and ``ppo-pretrained``
tuning through ``tensorgym.search.tune`` on replay. Runs on the bundled corpus dataset with a
world model fitted on the test's few tasks (no measurement)."""
import json
import math
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

from tensorgym import registry
from tensorgym.dataset import Dataset
from tensorgym.dataset.world.model import WorldModel
from tensorgym.dataset.world.samples import task_samples
from tensorgym.envs.edit import EditMoves
from tensorgym.envs.named_moves import MOVE_SLOTS, N_SLOTS, OBS_LENGTH, NamedMoves
from tensorgym.envs.replay_multitask import FAILURE_PENALTY, ReplayMultiTaskEditEnv, WalkConfig
from tensorgym.errors import TensorGymError
from tensorgym.search import tune

DATA = Path(__file__).resolve().parents[1] / "data" / "corpus-cpu-emeraldrapids.parquet"
TASKS = ["dense:1,512,18+bias", "conv2d:1,184,14,14,184,3,1,1,184+bias",
         "batch_matmul:12,197,64,197"]  # corpus train tasks


@pytest.fixture(scope="module")
def data():
    return Dataset.load(DATA)


@pytest.fixture(scope="module")
def world(data):
    return WorldModel.fit([s for s in task_samples(data) if s.task.workload in TASKS], seed=0)


def walks(data, world, num_envs=4, budget=5, tasks=TASKS):
    return ReplayMultiTaskEditEnv(tasks, data, WalkConfig(num_envs=num_envs, budget=budget),
                                  world=world)


def random_policy(tmp_path, seed=0):
    from tensorgym.agents.edit_policy import save_policy

    rng = np.random.default_rng(seed)
    weights = [(rng.normal(0, 0.1, (16, OBS_LENGTH)), np.zeros(16)),
               (rng.normal(0, 0.1, (N_SLOTS, 16)), np.zeros(N_SLOTS))]
    path = tmp_path / "p.npz"
    save_policy(weights, "tanh", path, {"config": {"budget": 5}})
    return path


def test_named_slots_cover_every_move_of_the_tasks():
    assert N_SLOTS == len({s.key() for s in MOVE_SLOTS})
    for key in TASKS:
        named = NamedMoves(key)
        edit = EditMoves(named.space, "factor")
        assert sorted(named.slot_move[named.slot_move >= 0]) == list(range(len(edit)))
        rng = np.random.default_rng(0)
        for c in named.space.sample(rng, 5):
            masks = named.masks(np.array(c.choices))
            mapped = named.slot_move >= 0
            assert not masks[~mapped].any()
            assert np.array_equal(masks[mapped], edit.masks(c.choices)[named.slot_move[mapped]])


def run(env, steps, seed):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(steps):
        masks = env.action_masks()
        acts = np.array([rng.choice(np.flatnonzero(m)) for m in masks])
        obs, r, term, _, info = env.step(acts)
        out.append((obs, r, term, info["task"], info["runtime"]))
    return out


def test_walks_are_deterministic_given_a_seed(data, world):
    a, b = walks(data, world), walks(data, world)
    oa, _ = a.reset(seed=3)
    ob, _ = b.reset(seed=3)
    assert oa.shape == (4, OBS_LENGTH) and np.array_equal(oa, ob)
    for x, y in zip(run(a, 12, 1), run(b, 12, 1)):
        for u, v in zip(x, y):
            assert np.array_equal(u, v)
    c = walks(data, world)
    c.reset(seed=4)
    assert not all(np.array_equal(x[0], y[0]) for x, y in zip(run(a, 6, 1), run(c, 6, 1)))


def test_masks_allow_only_unmeasured_valid_moves_and_returns_add_up(data, world):
    env = walks(data, world, num_envs=3, budget=6)
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    returns, penalties, ended = np.zeros(3), np.zeros(3), 0
    for _ in range(20):
        masks = env.action_masks()
        for e in range(3):
            moves = env.tasks[env._task[e]].moves
            assert not (masks[e] & ~moves.masks(env._current[e])).any()
            for slot in np.flatnonzero(masks[e]):
                knob, dest = moves.dest(env._current[e], np.array([slot]))
                to = env._current[e].copy()
                to[knob[0]] = dest[0]
                assert int(moves.indices(to)[0]) not in env._measured[e]
        acts = np.array([rng.choice(np.flatnonzero(m)) for m in masks])
        _, r, term, _, info = env.step(acts)
        assert (r >= FAILURE_PENALTY).all()
        returns += r
        penalties += r == FAILURE_PENALTY  # gains are >= 0: only a penalty is negative
        for e in np.flatnonzero(term):
            # a return is the final log gain less the penalties (float32 observations)
            assert returns[e] == pytest.approx(info["final_obs"][e, -1]
                                               + penalties[e] * FAILURE_PENALTY, abs=1e-5)
            assert info["episode_return"][e] == pytest.approx(returns[e], abs=1e-9)
            returns[e], penalties[e], ended = 0.0, 0.0, ended + 1
    assert ended >= 3
    # a masked move measures nothing and costs the penalty
    masks = env.action_masks()
    bad = int(np.flatnonzero(~masks[0])[0])
    acts = np.array([bad] + [int(np.flatnonzero(m)[0]) for m in masks[1:]])
    _, r, _, _, info = env.step(acts)
    assert r[0] == FAILURE_PENALTY and info["invalid"][0] and info["source"][0] == -1


def test_walk_config_errors(data, world):
    with pytest.raises(TensorGymError, match="num_envs"):
        walks(data, world, num_envs=0)
    with pytest.raises(TensorGymError, match="failure_penalty"):
        ReplayMultiTaskEditEnv(TASKS, data, WalkConfig(failure_penalty=1.0), world=world)
    with pytest.raises(TensorGymError, match="at least one workload"):
        ReplayMultiTaskEditEnv([], data, world=world)
    env = walks(data, world)
    env.reset(seed=0)
    with pytest.raises(TensorGymError, match="integer array"):
        env.step(np.zeros(3, np.int64))


def test_the_reward_is_the_gain_of_the_best_so_far(data, world):
    env = walks(data, world, num_envs=1, budget=4, tasks=TASKS[:1])
    task = env.tasks[0]
    task.reference_seconds = 1.0
    answers = iter([0.5, 0.8, math.inf, 0.25])
    task.replay_env._answer = lambda choices, ask, rngs=None: (
        np.array([next(answers)]), np.zeros(1, np.int8))
    env.reset(seed=0)
    start = env._current[0].copy()
    rewards, moved = [], []
    for _ in range(4):
        before = env._current[0].copy()
        _, r, term, _, info = env.step(np.array([int(np.flatnonzero(env.action_masks()[0])[0])]))
        rewards.append(r[0])
        moved.append(not np.array_equal(before, env._current[0]))
    assert rewards == pytest.approx([math.log(2), 0.0, FAILURE_PENALTY, math.log(2)])
    assert term[0] and info["final_obs"][0, -1] == pytest.approx(math.log(4))
    assert moved[:3] == [True, False, False]  # the walk moves only to a faster schedule
    assert np.array_equal(env._current[0], start)  # the last move ended it: reset to the start


def test_policy_file_round_trip_and_errors(tmp_path):
    from tensorgym.agents.edit_policy import load_policy

    path = random_policy(tmp_path)
    p = load_policy(path)
    obs = np.random.default_rng(0).random((3, OBS_LENGTH), np.float32)
    assert np.array_equal(p.logits(obs), load_policy(path).logits(obs))
    mask = np.zeros(N_SLOTS, bool)
    mask[[3, 7]] = True
    probs = p.probabilities(obs[0], mask)
    assert probs.sum() == pytest.approx(1.0) and (probs[~mask] == 0).all()
    with pytest.raises(TensorGymError, match="no edit policy"):
        load_policy(tmp_path / "none.npz")
    (tmp_path / "bad.npz").write_bytes(b"not a zip")
    with pytest.raises(TensorGymError, match="damaged"):
        load_policy(tmp_path / "bad.npz")
    with np.load(path) as z:
        arrays = dict(z)
    header = json.loads(bytes(arrays["header"]).decode())
    header["obs_length"] += 1
    arrays["header"] = np.frombuffer(json.dumps(header).encode(), np.uint8)
    np.savez(tmp_path / "old.npz", **arrays)
    with pytest.raises(TensorGymError, match="train it again"):
        load_policy(tmp_path / "old.npz")
    with pytest.raises(TensorGymError, match="no edit policy"):
        registry.make("ppo-pretrained", policy=str(tmp_path / "none.npz"))


@pytest.mark.slow
def test_a_tiny_training_run_saves_a_loadable_actor(tmp_path):
    from tensorgym.agents.edit_policy import TrainConfig, load_policy, train

    out = tmp_path / "w.npz"
    cfg = TrainConfig(steps=128, num_envs=4, budget=4, n_steps=16, batch_size=32, n_epochs=1,
                      net_arch=[8], tasks=TASKS[:2])
    about = train(DATA, out, cfg, progress=False)
    assert about["tasks"] == 2 and about["steps"] >= 128 and about["split"] == "train"
    policy = load_policy(out)
    assert policy.header["about"]["digest"] == Dataset.load(DATA).digest
    assert out.with_suffix(".png").is_file()
    with pytest.raises(TensorGymError, match="not train tasks"):
        train(DATA, tmp_path / "x.npz", TrainConfig(steps=8, tasks=["matmul:16,16,16"]))


def test_the_command_line_says_what_went_wrong(tmp_path, capsys):
    from tensorgym.agents.edit_policy import main

    assert main(["train", "--dataset", str(tmp_path / "none.parquet"), "--out",
                 str(tmp_path / "x.npz")]) == 2
    assert main(["evaluate", "--dataset", str(DATA), "--policy",
                 str(tmp_path / "none.npz")]) == 2
    assert "no edit policy" in capsys.readouterr().out


def replay_env(data, world, key):
    return gym.make("TensorSched-v0", workload=key, measure="replay", dataset=data,
                    on_miss="surrogate", world=world, records=False, budget=12)


def test_the_agent_tunes_through_search_tune_deterministically(data, world, tmp_path):
    path = random_policy(tmp_path)
    runs = []
    for _ in range(2):
        env = replay_env(data, world, TASKS[1])
        agent = registry.make("ppo-pretrained", policy=str(path), batch_size=3)
        try:
            results = tune(env, agent, 12, seed=5)
        finally:
            env.close()
        runs.append([r.config.index for r in results])
        assert results[0].config.index == agent.reference.index
        # the template's seeds first, as the reference tuner's warm start measures them
        starts = [c.index for c in agent.start]
        assert 1 < len(starts) <= 8 and runs[-1][:len(starts)] == starts
        assert agent.moves_made == 12 - len(starts)
        assert len(set(runs[-1])) == len(results) == 12
        assert agent.best.median == min(r.median for r in results if r.ok)
    assert runs[0] == runs[1]


def test_the_agent_falls_back_when_the_policy_has_no_move(data, world, tmp_path, monkeypatch):
    from tensorgym.agents.edit_agent import EditPolicyAgent

    agent = EditPolicyAgent(policy=str(random_policy(tmp_path)), batch_size=4, seeds=1)
    # no named move anywhere: every proposal after the reference is a fallback
    monkeypatch.setattr(NamedMoves, "masks", lambda self, c: np.zeros(N_SLOTS, bool))
    env = replay_env(data, world, TASKS[0])
    try:
        results = tune(env, agent, 6, seed=0)
    finally:
        env.close()
    assert len({r.config.index for r in results}) == 6
    assert agent.fallbacks["neighbour"] + agent.fallbacks["random"] == 5


def test_the_agent_refuses_no_seed(tmp_path):
    with pytest.raises(TensorGymError, match="seeds"):
        registry.make("ppo-pretrained", policy=str(random_policy(tmp_path)), seeds=0)


def test_replay_evaluations(data, world, tmp_path):
    from tensorgym.agents.edit_eval import evaluate_agents, evaluate_walks
    from tensorgym.agents.edit_policy import load_policy

    policy = load_policy(random_policy(tmp_path))
    g = evaluate_walks(policy, data, TASKS, episodes=1, budget=3, world=world)
    assert g >= 0 and g == evaluate_walks(policy, data, TASKS, episodes=1, budget=3, world=world)
    gains = evaluate_agents({"ppo-pretrained": lambda: registry.make(
        "ppo-pretrained", policy=str(tmp_path / "p.npz")), "random": lambda: registry.make(
        "random")}, data, TASKS[:2], trials=4, world=world)
    assert set(gains) == {"ppo-pretrained", "random"}
    assert gains["ppo-pretrained"] >= 0  # the reference is its first trial


def test_the_shipped_policy_loads():
    from tensorgym.agents.edit_policy import default_policy_path, load_policy

    about = load_policy(default_policy_path("cpu")).header["about"]
    assert about["split"] == "train" and about["tasks"] == 200
    assert default_policy_path("cpu").stat().st_size < 1_000_000
