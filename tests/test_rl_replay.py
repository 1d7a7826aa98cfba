"""RL on replay (issue 14, item 5): stable-baselines3's checker passes on replay envs, a policy
trains on recorded measurements and reproduces for a seed, and ``rl_split --replay`` trains on
replay and evaluates live."""
import json

import pytest

from tensorgym.leaderboard import rl_split
from tensorgym import make_env
from tensorgym.baselines.rl import FixedKnobSpaces, train_on_replay
from tensorgym.dataset import Dataset
from tensorgym.errors import TensorGymError

from .conftest import TINY_WORKLOAD as WORKLOAD

pytest.importorskip("sb3_contrib")


@pytest.fixture(scope="module")
def db(tiny_dataset):
    return tiny_dataset


@pytest.mark.parametrize("action_mode", ["config", "knob"])
def test_sb3_checker_passes_on_replay(db, action_mode):
    from stable_baselines3.common.env_checker import check_env

    env = make_env(WORKLOAD, "cpu", budget=8, measure="replay", dataset=db, on_miss="surrogate",
                   records=False, action_mode=action_mode)
    try:
        check_env(FixedKnobSpaces(env, 128, 16) if action_mode == "knob" else env)
    finally:
        env.close()


def test_train_on_replay_learns_from_recorded_answers_and_reproduces(db, tmp_path):
    runs = [train_on_replay("maskable-ppo", [WORKLOAD], "cpu", db, 256, 0,
                            str(tmp_path / f"p{i}.zip"), episode_trials=4, n_steps=64,
                            batch_size=64) for i in range(2)]
    a, b = runs
    assert a.steps >= 256 and a.trials == sum(a.sources.values()) > 0
    assert set(a.sources) <= {"recorded", "surrogate"}
    assert a.digest == Dataset.load(db).digest and a.episodes >= a.trials // 4
    assert (a.sources, a.reward_first, a.reward_last) == (b.sources, b.reward_first,
                                                          b.reward_last)
    assert (tmp_path / "p0.zip").exists()


def test_train_on_replay_refuses_a_non_rl_agent_and_a_missing_task(db, tmp_path):
    with pytest.raises(TensorGymError, match="stable-baselines3"):
        train_on_replay("random", [WORKLOAD], "cpu", db, 8, 0, str(tmp_path / "p.zip"))
    with pytest.raises(TensorGymError, match="no records of matmul:8,8,8"):
        train_on_replay("maskable-ppo", ["matmul:8,8,8"], "cpu", db, 8, 0,
                        str(tmp_path / "p.zip"), on_miss="nearest")
    # the world model answers a task the dataset lacks (issue 33): training goes on
    train_on_replay("maskable-ppo", ["matmul:8,8,8"], "cpu", db, 8, 0, str(tmp_path / "q.zip"))
    assert (tmp_path / "q.zip").exists()


def test_rl_split_trains_on_replay_and_evaluates_live(db, tmp_path, capsys):
    out = tmp_path / "rl.json"
    assert rl_split.main(["--replay", db, "--train", WORKLOAD, "--train-steps", "64",
                          "--episode-trials", "4", "--eval", "matmul:8,8,8", "--eval-trials",
                          "2", "--threads", "1", "--remeasure", "1",
                          "--out", str(out)]) == 0
    (run,) = json.loads(out.read_text())["runs"]
    assert run["track"] == "live"  # every evaluation trial was measured here
    training = run["suite"]["training"]["replay"]
    assert training["digest"] == Dataset.load(db).digest and training["steps"] >= 64
    assert [e["agent"] for e in run["entries"]] == ["maskable-ppo:pretrained",
                                                    "maskable-ppo:scratch", "random"]
    assert all(t["source"] == "measured" for e in run["entries"] for t in e["trials"])
    assert "trained maskable-ppo on replay" in capsys.readouterr().out
    assert rl_split.main(["--replay", db, "--train", WORKLOAD, "--eval", WORKLOAD,
                          "--out", str(out)]) == 2  # train and eval overlap
