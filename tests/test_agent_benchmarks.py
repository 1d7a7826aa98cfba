"""The component-study scripts' plumbing on a synthetic objective (the real runs are long)."""
import sys
from pathlib import Path

import numpy as np
import pytest

from tensorgym import registry
from tensorgym.search import SearchStrategy, tune
from tensorgym.space import ConfigSpace, other_knob

from .synthetic import SyntheticEnv

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
import bench_paper_common as common  # noqa: E402

SPACE = ConfigSpace("toy/cpu", tuple(other_knob(f"k{i}", list(range(6))) for i in range(5)))


def objective(c):
    return 1.0 + float(sum(c.choices))


@pytest.mark.parametrize("name", ["random", "ga"])
def test_black_box_baselines_respect_the_budget_without_repeats(name):
    method = registry.make(name, batch_size=8)
    env = SyntheticEnv(SPACE, objective)
    history = tune(env, method, 30, seed=0)
    assert len(history) == env.trials == 30
    assert len({r.config.index for r in history}) == 30


def test_ga_improves_on_its_first_generation():
    history = tune(SyntheticEnv(SPACE, objective), registry.make("ga", batch_size=16), 96, seed=0)
    first = max(r.gflops for r in history[:16])
    assert max(r.gflops for r in history) > first


def test_a_run_keeps_its_best_so_far_curve_padded_to_the_budget(monkeypatch):
    monkeypatch.setattr(common, "make_env",
                        lambda workload, target, budget, records=None: _closable(budget))

    class Three(SearchStrategy):  # proposes three configs of a 5-trial budget (its space ran out)
        batch_size = None

        def reset(self, space, seed):
            self.left = [SPACE.get(0), SPACE.get(SPACE.size - 1), SPACE.get(1)]

        def ask(self, n):
            out, self.left = self.left[:n], self.left[n:]
            return out

    run = common.run_method(Three, "toy", "cpu", 5, 0)
    assert run.curve.tolist() == [1.0, 26.0, 26.0, 26.0, 26.0]
    assert run.best == SPACE.get(SPACE.size - 1).to_json()


def test_a_study_script_writes_its_table_and_figure(tmp_path, monkeypatch, capsys):
    import bench_paper_fig6_diversity as fig6

    monkeypatch.setattr(common, "make_env",
                        lambda workload, target, budget, records=None: _closable(budget))
    monkeypatch.setattr(sys, "argv", ["fig6", "--trials", "12", "--seeds", "2", "--workloads",
                                      "toy", "--batch-size", "4", "--sa-steps", "5",
                                      "--out", str(tmp_path), "--remeasure-rounds", "0"])
    fig6.main()
    out = capsys.readouterr().out
    assert "lambda=4" in out and (tmp_path / "fig6_diversity.png").stat().st_size > 1000


def _closable(budget):
    env = SyntheticEnv(SPACE, objective, budget=budget)
    env.close = lambda: None
    return env


def test_identical_runs_are_reused_and_different_settings_are_not(tmp_path, monkeypatch):
    made = []

    def env(workload, target, budget, records=None):
        made.append(workload)
        return _closable(budget)

    monkeypatch.setattr(common, "make_env", env)
    cache = common.RunCache(str(tmp_path / "runs.json"))
    first = common.run_method(lambda: registry.make("xgb", batch_size=4, sa_steps=3), "toy", "cpu",
                              8, 0, cache=cache)
    again = common.run_method(lambda: registry.make("xgb", batch_size=4, sa_steps=3), "toy", "cpu",
                              8, 0, cache=common.RunCache(str(tmp_path / "runs.json")))
    assert len(made) == 1 and again.curve.tolist() == first.curve.tolist()
    assert again.best == first.best is not None
    common.run_method(lambda: registry.make("xgb", batch_size=4, sa_steps=3, alpha=0.5), "toy",
                      "cpu", 8, 0, cache=cache)
    common.run_method(lambda: registry.make("xgb", batch_size=4, sa_steps=3), "toy", "cpu", 8, 1,
                      cache=cache)
    assert len(made) == 3
