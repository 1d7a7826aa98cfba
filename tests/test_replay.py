"""Replay: recorded samples come back exactly, misses are answered as on_miss says and never
pass for measurements, virtual time adds up, seeds reproduce episodes, and the env passes
Gymnasium's and stable-baselines3's checkers in replay mode."""
import pickle
from collections import Counter
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest

import tensorgym  # noqa: F401  (registers the envs)
from tensorgym import registry
from tensorgym.dataset import Dataset, ReplayMeasurer, ReplayMissError
from tensorgym.search import VirtualTimeBudget
from tensorgym.errors import ErrorCode, TensorGymError
from tensorgym.measure import MeasureOptions
from tensorgym.records import Records
from tensorgym.search import tune
from tensorgym.workloads import get_workload

from .conftest import TINY_MEASURE, collect_dataset

WORKLOAD = "matmul:17,9,13"
FAST = MeasureOptions(**TINY_MEASURE)


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    return collect_dataset(tmp_path_factory.mktemp("replay"), WORKLOAD, 8)


def make(db, **kwargs):
    kwargs = {"workload": WORKLOAD, "measure": "replay", "dataset": db, "records": False,
              "budget": 50, "num_threads": 1, **kwargs}
    return gym.make("TensorSched-v0", **kwargs)


def recorded(db):
    """config index -> its records, and the replay's task."""
    replay = ReplayMeasurer(db)
    task = replay.task(get_workload(WORKLOAD))
    return task, {c.index: ss for c, ss in zip(task.configs, task.samples)}


def test_a_recorded_config_returns_its_recorded_samples(db):
    task, samples = recorded(db)
    w = get_workload(WORKLOAD)
    exact = ReplayMeasurer(db, resample=False)
    drawn = ReplayMeasurer(db, seed=1)
    results = drawn.measure(w, task.configs * 5)
    for c, r in zip(task.configs * 5, results):
        (s,) = samples[c.index]
        assert r.source == "recorded" and r.cached
        assert (r.error, r.build_time, r.run_time) == (s.error, s.build_time, s.run_time)
        assert set(r.costs) <= set(s.costs) and len(r.costs) == len(s.costs)
    for c, r in zip(task.configs, exact.measure(w, task.configs)):
        assert r.costs == samples[c.index][0].costs
    resampled = [r.costs for r in results if len(set(samples[r.config.index][0].costs)) > 1]
    assert len(set(resampled)) > 1  # draws differ: the noise of a re-measurement


def test_on_miss_error_raises_before_anything_changes(db):
    env = make(db)
    env.reset(seed=0)
    u = env.unwrapped
    task, _ = recorded(db)
    miss = next(c for c in (u.space.get(i) for i in range(u.space.size))
                if c.index not in task.index_of)
    with pytest.raises(ReplayMissError, match="on_miss='nearest', 'surrogate' or 'measure'"):
        env.step(np.array(miss.choices))
    with pytest.raises(TensorGymError):
        u.session.measure([task.configs[0], miss])
    assert u.trials == 0 and u.history == [] and u.session.virtual_time == 0


def first_misses(db, n):
    u = make(db).unwrapped
    task, _ = recorded(db)
    rng = np.random.default_rng(0)
    return [c for c in u.space.sample(rng, 4 * n) if c.index not in task.index_of][:n]


def test_on_miss_nearest_answers_with_the_nearest_record_marked_surrogate(db):
    env = make(db, on_miss="nearest")
    u = env.unwrapped
    task, samples = recorded(db)
    for c in first_misses(db, 5):
        (r,) = u.session.measure([c])
        assert r.source == "surrogate" and r.extra["surrogate"] == "nearest"
        near = r.extra["nearest"]
        assert near in samples and set(r.costs) <= set(samples[near][0].costs)
        differ = sum(a != b for a, b in zip(c.choices, u.space.get(near).choices))
        closest = min(sum(a != b for a, b in zip(c.choices, x.choices)) for x in task.configs)
        assert differ == closest


def test_on_miss_surrogate_is_fitted_once_cached_and_never_recorded(db, tmp_path):
    records = Records(tmp_path / "mine.db")
    env = make(db, on_miss="surrogate", records=records)
    env.reset(seed=0)
    misses = first_misses(db, 3)
    infos = [env.step(np.array(c.choices))[-1] for c in misses]
    assert {i["source"] for i in infos} == {"surrogate"}
    assert all(i["gflops"] > 0 and i["cached"] for i in infos)
    assert len(records) == 0  # a surrogate answer is not a measurement
    assert {i["error"] for i in infos} == {"NO_ERROR"}
    cached = list(Path(db + ".cache").glob("*world*/manifest.json"))
    assert len(cached) == 1  # the world model, fitted on the dataset
    stamp = cached[0].stat().st_mtime_ns
    again = make(db, on_miss="surrogate").unwrapped
    results = again.session.measure(misses)
    assert [r.gflops for r in results] == [i["gflops"] for i in infos]
    assert {r.extra["surrogate"] for r in results} == {"world"}
    assert cached[0].stat().st_mtime_ns == stamp  # loaded, not fitted again


def test_on_miss_surrogate_answers_a_task_the_dataset_lacks(db):
    env = make(db, on_miss="surrogate", workload="matmul:40,24,56")
    obs, _ = env.reset(seed=0)
    _, reward, *_, info = env.step(env.action_space.sample())
    assert info["source"] == "surrogate" and np.isfinite(reward)
    assert env.unwrapped.session.reference_seconds > 0  # the reference: estimated too
    with pytest.raises(TensorGymError, match="no records of matmul:40,24,56"):
        make(db, on_miss="nearest", workload="matmul:40,24,56").reset(seed=0)


def test_on_miss_measure_measures_here_and_records_it(db, tmp_path):
    records = Records(tmp_path / "live.db")
    env = make(db, on_miss="measure", records=records, measure_options=FAST)
    u = env.unwrapped
    (miss,) = first_misses(db, 1)
    task, _ = recorded(db)
    results = u.session.measure([task.configs[0], miss])
    assert [r.source for r in results] == ["recorded", "measured"]
    assert not results[1].cached and results[1].ok
    (rec,) = records.query()
    assert rec.config_json == miss.to_json() and rec.device == u.session.device
    env.close()


def test_on_miss_measure_refuses_to_mix_devices(db):
    env = make(db, on_miss="measure", num_threads=2, measure_options=FAST)
    with pytest.raises(TensorGymError, match="would mix devices"):
        env.unwrapped.session.measure(first_misses(db, 1))
    env.close()


def test_virtual_time_adds_up_and_budget_seconds_ends_the_episode(db):
    task, samples = recorded(db)
    env = make(db)
    env.reset(seed=0)
    total = 0.0
    for c in task.configs[:4]:
        *_, info = env.step(np.array(c.choices))
        total += info["build_time"] + info["run_time"]
        assert info["virtual_time"] == pytest.approx(total)
        assert info["source"] == "recorded"
    confirmed = [c for c in task.configs[:4] if samples[c.index][0].ok]
    assert total >= sum(samples[c.index][0].build_time + samples[c.index][0].run_time
                        for c in confirmed)  # confirmations add their run time
    env.reset(seed=0)
    assert env.unwrapped.session.virtual_time == 0.0
    first = samples[task.configs[0].index][0]
    env = make(db, budget_seconds=(first.build_time + first.run_time) / 2)
    env.reset(seed=0)
    *_, terminated, truncated, info = env.step(np.array(task.configs[0].choices))
    assert terminated and not truncated
    with pytest.raises(TensorGymError, match="time budget"):
        env.step(np.array(task.configs[1].choices))
    with pytest.raises(TensorGymError, match="budget_seconds"):
        make(db, budget_seconds=0)


def test_seeds_reproduce_episodes(db):
    task, _ = recorded(db)
    actions = [np.array(c.choices) for c in task.configs] * 3

    def episode(env, seed):
        env.reset(seed=seed)
        return [(r, i["runtime"], i["source"]) for _, r, _, _, i in
                (env.step(a) for a in actions)]

    env = make(db)
    first = episode(env, 3)
    assert episode(env, 3) == first
    assert episode(make(db), 3) == first
    assert episode(env, 4) != first
    copy = pickle.loads(pickle.dumps(env))
    assert episode(copy, 3) == first
    env.reset(seed=5)
    env.step(actions[0])
    copy = pickle.loads(pickle.dumps(env))  # mid-episode: the copy draws on from there
    rest = [[(r, i["runtime"]) for _, r, _, _, i in (e.step(a) for a in actions[1:])]
            for e in (env, copy)]
    assert rest[0] == rest[1]


def test_export_replays_like_the_database(db, tmp_path):
    out = tmp_path / "small.parquet"
    Dataset.load(db).export(out)
    task, _ = recorded(db)
    w = get_workload(WORKLOAD)
    a = ReplayMeasurer(db, seed=5).measure(w, task.configs)
    b = ReplayMeasurer(str(out), seed=5).measure(w, task.configs)
    assert [r.costs for r in a] == [r.costs for r in b]


def test_observations_are_the_live_features(db):
    task, _ = recorded(db)
    for mode in ("relation", "context", "config"):
        env = make(db, obs_mode=mode)
        env.reset(seed=0)
        u = env.unwrapped
        for c in task.configs[:3]:
            obs = env.step(np.array(c.choices))[0]
            np.testing.assert_array_equal(obs, u.session.featurizer.featurize(u.workload, [c], mode)[0])
        np.testing.assert_array_equal(u.featurize(task.configs),
                                      u.session.featurizer.featurize(u.workload, task.configs, mode))


def test_gymnasium_and_sb3_checkers_pass_in_replay_mode(db):
    from gymnasium.utils.env_checker import check_env
    from stable_baselines3.common.env_checker import check_env as sb3_check_env

    for mode in ("config", "knob"):
        env = make(db, on_miss="nearest", action_mode=mode)
        check_env(env.unwrapped, skip_render_check=True)
        sb3_check_env(env.unwrapped, warn=True)


def test_agents_and_baselines_run_on_replay_unchanged(db):
    env = make(db, on_miss="nearest", budget=24)
    env.reset(seed=0)
    for name in ("random", "ga", "xgb"):
        env.reset(seed=0)
        results = tune(env, registry.make(name), 8, seed=0)
        assert len(results) == 8 and all(r.cached for r in results)
        assert Counter(r.source for r in results).keys() <= {"recorded", "surrogate"}
    env = make(db, on_miss="nearest", budget=100)
    env.reset(seed=0)
    stop = VirtualTimeBudget(env, 1e-9)
    results = tune(env, registry.make("random"), 64, seed=0, callbacks=[stop])
    assert len(results) == 8  # the time budget ended the tune after its first batch


def test_replay_errors_say_what_to_do(db, tmp_path):
    with pytest.raises(TensorGymError, match="needs dataset=PATH"):
        gym.make("TensorSched-v0", workload=WORKLOAD, measure="replay")
    with pytest.raises(TensorGymError, match="unknown on_miss"):
        make(db, on_miss="guess")
    with pytest.raises(TensorGymError, match="no records of matmul:32,48,16"):
        make(db, workload="matmul:32,48,16")
    with pytest.raises(TensorGymError, match="no records of cpu device 'elsewhere'"):
        ReplayMeasurer(db, device="elsewhere")


def test_the_reference_is_the_median_of_its_records(db):
    env = make(db)
    u = env.unwrapped
    task, samples = recorded(db)
    (s,) = samples[u.session.reference_config.index]
    assert u.session.reference_seconds == pytest.approx(float(np.median(s.costs)))
    assert s.error == ErrorCode.NO_ERROR
