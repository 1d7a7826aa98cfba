"""The one tuning loop (tensorgym.search.tune) and the agent registry (tensorgym.registry)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from tensorgym import registry
from tensorgym.errors import TensorGymError
from tensorgym.meter import Meter
from tensorgym.registry import AgentOptionError, Option, UnknownAgentError
from tensorgym.search import ProgressBar, SearchStrategy, StopSearch, tune
from tensorgym.space import ConfigSpace, other_knob

from .synthetic import SyntheticEnv

SPACE = ConfigSpace("toy/cpu", tuple(other_knob(f"k{i}", list(range(5))) for i in range(4)))


def objective(config) -> float:
    return 1.0 + float(sum(config.choices))


class MeteredEnv(SyntheticEnv):
    """The synthetic env with a meter of its own, and a log of its measure() calls."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.meter = Meter()
        self.calls: list[list[int]] = []

    def measure(self, configs):
        self.calls.append([c.index for c in configs])
        return super().measure(configs)


class Recorder(SearchStrategy):
    """Asks for configs in a fixed order (``order``, as indices), logging everything."""

    def __init__(self, order=None, batch_size=8) -> None:
        self.order, self.batch_size = order, batch_size
        self.asks: list[int] = []
        self.told: list[list] = []

    def reset(self, space, seed):
        self.space, self.pos = space, 0
        self.seq = self.order if self.order is not None else \
            np.random.default_rng(seed).permutation(space.size).tolist()

    def ask(self, n):
        self.asks.append(n)
        out = [self.space.get(i) for i in self.seq[self.pos:self.pos + n]]
        self.pos += n
        return out

    def tell(self, results):
        self.told.append(list(results))


def test_budget_is_respected_exactly():
    env = MeteredEnv(SPACE, objective)
    strategy = Recorder(batch_size=8)
    history = tune(env, strategy, 37, seed=3)
    assert len(history) == 37 == env.trials and history == env.history
    assert [len(c) for c in env.calls] == [8, 8, 8, 8, 5]  # the last batch is cut to the budget
    assert strategy.asks == [8, 8, 8, 8, 5]
    with pytest.raises(ValueError, match="positive"):
        tune(env, Recorder(), 0)


def test_env_budget_caps_the_trials():
    env = MeteredEnv(SPACE, objective, budget=20)
    env.measure([SPACE.get(0), SPACE.get(1), SPACE.get(2)])
    history = tune(env, Recorder(order=list(range(3, SPACE.size))), 100)
    assert len(history) == 17 and env.trials == 20


def test_no_config_is_measured_twice():
    # repeats within a batch, across batches, and of configs measured before the tune
    order = [0, 0, 1, 2, 1, 3, 0, 4, 4, 5, 2, 6, 7, 8, 9, 9]
    env = MeteredEnv(SPACE, objective)
    env.measure([SPACE.get(5)])
    strategy = Recorder(order=order, batch_size=4)
    history = tune(env, strategy, 9, seed=0)
    measured = [i for call in env.calls for i in call]
    assert len(measured) == len(set(measured)) == 10
    assert [r.config.index for r in history] == [0, 1, 2, 3, 4, 6, 7, 8, 9]
    told = [r.config.index for batch in strategy.told for r in batch]
    assert told == [5, 0, 1, 2, 3, 4, 6, 7, 8, 9]  # the env's history first, no repeats


def test_a_strategy_that_only_repeats_itself_is_stopped_with_a_warning():
    env = MeteredEnv(SPACE, objective)
    strategy = Recorder(order=[7] * 1000, batch_size=2)
    with pytest.warns(UserWarning, match="only configs measured before 5 times in a row"):
        history = tune(env, strategy, 10, max_stale_asks=5)
    assert [r.config.index for r in history] == [7]
    assert len(strategy.asks) == 1 + 5


def test_the_loop_ends_when_the_space_or_the_strategy_runs_out():
    tiny = ConfigSpace("tiny/cpu", (other_knob("a", [1, 2, 3]), other_knob("b", [0, 1])))
    env = MeteredEnv(tiny, objective)
    assert sorted(r.config.index for r in tune(env, Recorder(), 100)) == list(range(6))
    env = MeteredEnv(SPACE, objective)
    assert len(tune(env, Recorder(order=[1, 2, 3]), 100)) == 3


def test_prior_is_told_first_and_never_measured():
    prior = MeteredEnv(SPACE, objective).measure([SPACE.get(i) for i in (0, 1, 2)])
    env = MeteredEnv(SPACE, objective)
    strategy = Recorder(order=list(range(10)), batch_size=4)
    history = tune(env, strategy, 5, prior=prior)
    assert strategy.told[0] == prior
    assert [r.config.index for r in history] == [3, 4, 5, 6, 7]
    assert env.trials == 5 and not {0, 1, 2} & {i for call in env.calls for i in call}


def test_prior_of_another_space_is_ignored():
    other = ConfigSpace("other/cpu", SPACE.knobs)
    prior = MeteredEnv(other, objective).measure([other.get(0)])
    strategy = Recorder(order=list(range(4)))
    history = tune(MeteredEnv(SPACE, objective), strategy, 4, prior=prior)
    assert [r.config.index for r in history] == [0, 1, 2, 3]
    assert all(r.config.space_name == SPACE.name for batch in strategy.told for r in batch)


def test_callbacks_are_called_once_per_batch_after_tell():
    env = MeteredEnv(SPACE, objective)
    strategy = Recorder(batch_size=6)
    seen = []

    def cb(s, batch):
        assert s is strategy and strategy.told[-1] == batch  # told before the callbacks
        seen.append(batch)

    history = tune(env, strategy, 20, callbacks=[cb])
    assert [len(b) for b in seen] == [6, 6, 6, 2] == [len(c) for c in env.calls]
    assert [r for b in seen for r in b] == history


def test_a_callback_raising_stop_search_ends_the_tune_after_its_batch():
    env = MeteredEnv(SPACE, objective)
    later = []

    def stop_after_two(_s, _batch):
        if env.trials >= 8:
            raise StopSearch

    history = tune(env, Recorder(batch_size=4), 40,
                   callbacks=[stop_after_two, lambda s, b: later.append(len(b))])
    assert len(history) == 8 == env.trials
    assert later == [4, 4]  # the other callbacks still saw the last batch


def test_the_loop_closes_a_strategy_when_the_tune_ends_however_it_ends():
    class Closing(Recorder):
        closed = 0

        def close(self):
            self.closed += 1

    done = Closing(batch_size=4)
    assert len(tune(MeteredEnv(SPACE, objective), done, 8)) == 8 and done.closed == 1

    def boom(_s, _batch):
        raise RuntimeError("a callback failed")

    failed = Closing(batch_size=4)
    with pytest.raises(RuntimeError, match="a callback failed"):
        tune(MeteredEnv(SPACE, objective), failed, 8, callbacks=[boom])
    assert failed.closed == 1 and len(failed.told) == 1


def test_search_time_is_metered_and_nested_timers_are_left_out():
    class ModelInAsk(Recorder):
        def ask(self, n):
            env.meter.add("model", 1000.0)  # as a model timer inside ask would
            return super().ask(n)

    env = MeteredEnv(SPACE, objective)
    tune(env, ModelInAsk(batch_size=5), 20)
    assert env.meter.model == 4000.0
    assert env.meter.search > 0
    assert env.meter.search < env.meter.model  # the model's share is not search time too


def test_batch_size_none_lets_ask_choose_and_more_than_asked_is_refused():
    class Threes(Recorder):
        def ask(self, n):
            self.offered.append(n)
            return super().ask(min(n, 3))

    strategy = Threes(batch_size=None)
    strategy.offered = []
    assert len(tune(MeteredEnv(SPACE, objective), strategy, 10)) == 10
    assert strategy.offered == [10, 7, 4, 1]

    class Greedy(Recorder):
        def ask(self, n):
            return super().ask(n + 1)

    with pytest.raises(TensorGymError, match=r"ask\(4\) returned 5 configs"):
        tune(MeteredEnv(SPACE, objective), Greedy(batch_size=4), 8)


def test_a_driver_gets_budget_callbacks_and_stop():
    class Driver:  # steps the env itself, like the RL agents
        batch_size = None

        def reset(self, space, seed):
            self.space = space

        def drive(self, env, n_trials, seed, report):
            for i in range(10 * n_trials):
                if not report(env.unwrapped.measure([self.space.get(i)])):
                    return

    env = MeteredEnv(SPACE, objective)
    seen = []
    assert len(tune(env, Driver(), 6, callbacks=[lambda s, b: seen.extend(b)])) == 6
    assert seen == env.history and env.trials == 6

    def stop(_s, _b):
        raise StopSearch

    assert len(tune(MeteredEnv(SPACE, objective), Driver(), 6, callbacks=[stop])) == 1


def test_an_object_with_only_its_own_tune_is_not_a_search_strategy():
    """The interface before the loop (only ``tune(env, n_trials, seed, callbacks)``) is gone:
    such an object, like any other without ask/tell or drive, is refused before it measures."""
    class Legacy:
        def tune(self, env, n_trials, seed=0, callbacks=()):
            return env.measure([SPACE.get(seed + i) for i in range(n_trials)])

    env = MeteredEnv(SPACE, objective)
    for not_one in (Legacy(), object()):
        with pytest.raises(TensorGymError, match=r"is not a search strategy: it needs reset\(.*"
                                                 r"ask\(n\) and tell\(results\), or drive\("):
            tune(env, not_one, 3)
    assert env.trials == 0
    assert not hasattr(SearchStrategy, "tune")  # strategies are run by the loop alone


def test_model_tuner_through_the_loop_learns_from_prior_and_never_measures_it():
    tuner = registry.make("xgb", batch_size=8, n_chains=16, sa_steps=20,
                          model_options={"n_rounds": 20})
    prior = SyntheticEnv(SPACE, objective).measure(SPACE.sample_unique(
        np.random.default_rng(0), 12))
    env = SyntheticEnv(SPACE, objective)
    history = tune(env, tuner, 16, seed=0, prior=prior)
    assert len(history) == 16 == env.trials
    assert not {r.config.index for r in prior} & {r.config.index for r in history}
    assert tuner.history[:12] == prior and tuner.model is not None


def test_progress_bar_counts_trials_and_keeps_the_best(capsys):
    bar = ProgressBar(5, "toy", best=3.0)
    results = SyntheticEnv(SPACE, objective).measure([SPACE.get(0), SPACE.get(SPACE.size - 1)])
    bar(None, results)
    assert bar.bar.n == 2 and bar.best == objective(SPACE.get(SPACE.size - 1))
    bar.close()


# ---------------------------------------------------------------- the registry

def test_registry_checks_options_before_building():
    built = []

    def factory(size: int = 2, rate: float = 0.5, mode: str = "a", extra=None):
        built.append((size, rate, mode, extra))
        if size > 100:
            raise ValueError("size must be\nat most 100")
        return Recorder()

    registry.register("test-checked", factory, (
        Option("size", int, 2, "a size"), Option("rate", float, 0.5),
        Option("mode", str, "a", choices=("a", "b")), Option("extra", dict, None)))
    try:
        registry.make("test-checked", size=3, rate=1, mode="b", extra={"x": 1})  # int as float
        assert built == [(3, 1, "b", {"x": 1})]
        for bad, message in [({"size": "3"}, "size must be int, got '3'"),
                             ({"size": True}, "size must be int"),
                             ({"size": None}, "size must be int"),
                             ({"mode": "c"}, "mode must be one of a, b"),
                             ({"nope": 1}, "unknown option 'nope' \\(options: size, rate")]:
            with pytest.raises(AgentOptionError, match=message):
                registry.make("test-checked", **bad)
        assert len(built) == 1  # none of them reached the factory
        with pytest.raises(AgentOptionError, match="'test-checked': size must be at most 100$"):
            registry.make("test-checked", size=101)  # the factory's own check, on one line
        with pytest.raises(TensorGymError, match="already registered"):
            registry.register("test-checked", factory)
    finally:
        registry.unregister("test-checked")
    with pytest.raises(UnknownAgentError, match="unknown agent 'test-checked'; choose from"):
        registry.make("test-checked")


def test_every_builtin_agent_builds_with_its_declared_defaults():
    for spec in registry.specs():
        agent = spec(**{o.name: o.default for o in spec.options})
        assert callable(agent.reset) and callable(agent.tell)
        assert callable(getattr(agent, "ask", None)) or callable(getattr(agent, "drive", None))
    assert {"random", "grid", "ga", "ppo", "maskable-ppo", "xgb", "treegru"} <= set(
        registry.AGENTS)
    assert "xgb" in registry.AGENTS and "nope" not in registry.AGENTS


def test_a_registered_strategy_runs_from_the_command_line(capsys, tmp_path):
    from tensorgym.cli import main

    class Strided(Recorder):
        name = "test-strided"

        def reset(self, space, seed):
            super().reset(space, seed)
            self.seq = list(range(seed, space.size, 7))

    registry.register("test-strided", lambda batch_size=2: Strided(batch_size=batch_size),
                      (Option("batch_size", int, 2, "configs per batch"),),
                      help="every 7th config")
    try:
        assert main(["list", "agents", "--options"]) == 0
        out = capsys.readouterr().out
        assert "test-strided" in out and "batch_size: int = 2  configs per batch" in out
        code = main(["tune", "matmul:16,16,16", "--agent", "test-strided", "--trials", "3",
                     "--seed", "1", "--threads", "1", "--db", str(tmp_path / "r.db"),
                     "--json"])
        out, err = capsys.readouterr()
        assert code == 0, err
        summary = json.loads(out)
        assert summary["trials"] == 3 and summary["best_gflops"] > 0
        assert summary["time"]["search"] > 0
        code = main(["tune", "matmul:16,16,16", "--agent", "test-strided", "--opt",
                     "batch_size=x"])
        err = capsys.readouterr().err
        assert code == 1 and len(err.strip().splitlines()) == 1
        assert "bad options for agent 'test-strided': batch_size must be int" in err
    finally:
        registry.unregister("test-strided")


def test_modules_named_in_the_environment_register_their_agents(tmp_path):
    import os
    import subprocess
    import sys

    (tmp_path / "my_strategies.py").write_text(
        "from tensorgym import registry\n"
        "registry.register('test-plugin', lambda: None, help='from my_strategies')\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path), registry.MODULES_ENV: "my_strategies"}
    argv = [sys.executable, "-m", "tensorgym.cli", "list", "agents"]
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "test-plugin" in out.stdout and "from my_strategies" in out.stdout
    env[registry.MODULES_ENV] = "no_such_module_here"
    out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 1 and "cannot import no_such_module_here" in out.stderr
