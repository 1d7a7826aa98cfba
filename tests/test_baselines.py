"""The search baselines: budgets, no repeats, reproducibility, and the registry."""
from __future__ import annotations

import math

import numpy as np
import pytest

from tensorgym.errors import ErrorCode, TensorGymError
from tensorgym.measure.result import MeasureResult
from tensorgym.meter import Meter
from tensorgym.search import tune
from tensorgym.space import ConfigSpace, other_knob
from tensorgym.templates import space_for
from tensorgym.workloads import get_workload
from tensorgym import registry
from tensorgym.baselines.grid import weyl_stride

SEARCH_AGENTS = ["random", "grid", "ga"]


class SyntheticEnv:
    """A stand-in for the env's measure(): a smooth synthetic runtime over the knob choices
    (unit tests of search logic only; the real env is exercised in the end-to-end tests)."""

    trials_left = None

    def __init__(self, space: ConfigSpace, fail_every: int = 0, flops: int = 10**6) -> None:
        self.space = space
        self.meter = Meter()
        self.history: list[MeasureResult] = []
        self.batches: list[int] = []
        self.fail_every = fail_every
        self.flops = flops

    @property
    def unwrapped(self) -> "SyntheticEnv":
        return self

    def measure(self, configs):
        self.batches.append(len(configs))
        out = []
        for c in configs:
            target = np.array(self.space.dims) // 3
            cost = 1e-3 * (1 + float(np.abs(np.array(c.choices) - target).sum()))
            if self.fail_every and c.index % self.fail_every == 0:
                r = MeasureResult(c, (), ErrorCode.RUNTIME_DEVICE, "synthetic crash", self.flops)
            else:
                r = MeasureResult(c, (cost,), flops=self.flops, build_time=0.001, run_time=0.002)
            out.append(r)
        self.history += out
        return out


@pytest.fixture
def matmul_space() -> ConfigSpace:
    return space_for(get_workload("matmul:16,16,16"), "cpu")


@pytest.mark.parametrize("name", SEARCH_AGENTS)
def test_respects_budget_and_never_repeats(name, matmul_space):
    env = SyntheticEnv(matmul_space)
    seen_batches = []
    results = tune(env, registry.make(name), 37, seed=3,
                                   callbacks=[lambda agent, batch: seen_batches.append(batch)])
    assert len(results) == 37 == len(env.history)
    assert results == env.history  # every trial went through env.measure
    assert len({r.config.index for r in results}) == 37
    assert max(env.batches) <= 8 and sum(env.batches) == 37
    assert [r for b in seen_batches for r in b] == results


@pytest.mark.parametrize("name", SEARCH_AGENTS)
def test_same_seed_same_trials_other_seed_differs(name, matmul_space):
    def run(seed):
        return [r.config.index for r in tune(SyntheticEnv(matmul_space), registry.make(name), 24,
                                                             seed=seed)]
    assert run(5) == run(5)
    assert run(5) != run(6)


@pytest.mark.parametrize("name", SEARCH_AGENTS)
def test_small_space_is_exhausted_then_stops(name):
    space = ConfigSpace("tiny/cpu", (other_knob("a", [1, 2, 3]), other_knob("b", [0, 1, 2, 3, 4])))
    env = SyntheticEnv(space)
    results = tune(env, registry.make(name), 100, seed=0)
    assert sorted(r.config.index for r in results) == list(range(15))


@pytest.mark.parametrize("name", SEARCH_AGENTS)
def test_failed_trials_are_kept(name, matmul_space):
    results = tune(SyntheticEnv(matmul_space, fail_every=3), registry.make(name), 30, seed=1)
    assert len(results) == 30
    assert any(not r.ok for r in results) and any(r.ok for r in results)


def test_ga_beats_random_on_a_smooth_landscape(matmul_space):
    # the synthetic runtime is separable over knobs, which crossover exploits
    def best(name, seed):
        return max(r.gflops for r in tune(SyntheticEnv(matmul_space), registry.make(name), 200,
                                                          seed=seed))
    ga = np.mean([best("ga", s) for s in range(3)])
    rnd = np.mean([best("random", s) for s in range(3)])
    assert ga > rnd


def test_ga_keeps_elites_and_breeds_generations(matmul_space):
    agent = registry.make("ga", pop_size=16, elite_num=2)
    tune(SyntheticEnv(matmul_space), agent, 64, seed=0)
    assert agent.generation == 4  # 16, then 14 children a generation (2 elites kept)


def test_ga_population_follows_the_budget(matmul_space):
    agent = registry.make("ga")
    tune(SyntheticEnv(matmul_space), agent, 32, seed=0)
    assert agent.generation == 5  # population 8: 8, then 5 children a generation
    with pytest.raises(ValueError, match="pop_size"):
        registry.make("ga", pop_size=3, elite_num=3)


def test_weyl_stride_visits_every_index():
    for size in (1, 2, 3, 10, 97, 360):
        s = weyl_stride(size)
        assert math.gcd(s, size) == 1
        assert sorted((k * s) % size for k in range(size)) == list(range(size))


def test_grid_prefix_spreads_over_leading_knob(matmul_space):
    results = tune(SyntheticEnv(matmul_space), registry.make("grid", randomize_start=False), 16)
    assert results[0].config.index == 0
    assert len({r.config.choices[0] for r in results}) >= 8  # not stuck varying the last knob


def test_reference_agents_resolve_lazily():
    agent = registry.make("xgb")
    assert type(agent).__module__.startswith("tensorgym.agents")
    assert callable(agent.ask) and callable(agent.tell)  # a search strategy
    assert "xgb-rank" in registry.names()  # tensorgym.agents' other names are reachable


def test_registry_names_and_errors():
    assert {"random", "grid", "ga", "ppo", "maskable-ppo", "xgb", "treegru"} <= set(registry.AGENTS)
    with pytest.raises(TensorGymError, match="unknown agent 'nope'"):
        registry.make("nope")
    with pytest.raises(TensorGymError, match="bad options"):
        registry.make("random", no_such_option=1)
    with pytest.raises(ValueError, match="positive"):
        tune(SyntheticEnv(space_for(get_workload("matmul:16,16,16"), "cpu")), registry.make("random"),
             0)


# ---------------------------------------------------------------- on the real env

@pytest.fixture(scope="module")
def measurer():
    """One measurer (builder pool + worker) shared by the envs of these tests."""
    from tensorgym.measure import LocalMeasurer, MeasureOptions

    m = LocalMeasurer("cpu", MeasureOptions(min_repeat_ms=1, repeat=2))
    yield m
    m.close()


def real_env(tmp_path, trials: int, measurer, **kwargs):
    from tensorgym import make_env

    return make_env("matmul:16,16,16", "cpu", budget=trials, measurer=measurer,
                    records=str(tmp_path / "records.db"), **kwargs)


@pytest.mark.parametrize("name", SEARCH_AGENTS)
def test_real_env_budget_and_reproducibility(name, tmp_path, measurer):
    runs = []
    for i in range(2):
        env = real_env(tmp_path / str(i), 8, measurer)
        try:
            agent = registry.make(name)
            results = tune(env, agent, 8, seed=11)
            assert len(results) == 8 == env.unwrapped.trials
            assert env.unwrapped.meter.search > 0  # ask and tell are metered
            assert [r.config for r in results] == [r.config for r in env.unwrapped.history]
            assert all(r.ok for r in results)  # matmul 16^3 builds in every config
            assert env.unwrapped.best.gflops == max(r.gflops for r in results) > 0
        finally:
            env.close()
        runs.append([r.config.index for r in results])
    assert runs[0] == runs[1]


@pytest.mark.parametrize("name", ["ppo", "maskable-ppo"])
def test_rl_agents_on_real_env(name, tmp_path, measurer):
    # ppo: an update every 4 trials; maskable-ppo: the automatic rollout (6 trials x 8 knobs / 4)
    agent = registry.make(name, n_steps=4 if name == "ppo" else None, batch_size=4, n_epochs=1)
    env = real_env(tmp_path, 6, measurer, **agent.env_kwargs)
    try:
        seen = []
        results = tune(env, agent, 6, seed=0, callbacks=[lambda a, b: seen.extend(b)])
        assert len(results) == 6 == env.unwrapped.trials
        assert seen == results
        assert any(r.ok for r in results)
        assert agent.model._n_updates > 0  # the policy learned within the budget
    finally:
        env.close()


def test_rl_rejects_wrong_action_mode(tmp_path, measurer):
    env = real_env(tmp_path, 4, measurer, action_mode="knob")
    try:
        with pytest.raises(TensorGymError, match="action_mode='config'"):
            tune(env, registry.make("ppo"), 4)
    finally:
        env.close()


def test_maskable_ppo_train_then_evaluate_on_held_out_workload(tmp_path, measurer):
    from tensorgym import make_env
    from tensorgym.leaderboard.rl_split import train_policy

    policy = str(tmp_path / "policy.zip")
    opts = dict(n_steps=16, batch_size=16, n_epochs=1)
    histories = train_policy("maskable-ppo", ["matmul:16,16,16"], "cpu", 4, 0, policy,
                             env_options={"measurer": measurer, "records": False}, **opts)
    assert [len(h) for h in histories] == [4]
    agent = registry.make("maskable-ppo", policy_path=policy, learn=False)
    env = make_env("matmul:8,8,24", "cpu", budget=4, measurer=measurer, records=False,
                   **agent.env_kwargs)  # held out: other knob sizes, same padded spaces
    try:
        results = tune(env, agent, 4, seed=1)
        assert len(results) == 4 == env.unwrapped.trials
        assert all(r.config.space_name == "matmul/cpu" for r in results)
    finally:
        env.close()
