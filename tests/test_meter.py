"""Honest accounting: the meter's categories never overlap, a tune's parts add up to no more
than its wall time, and every category an agent spends time in shows up (issue 12, item 6)."""
from __future__ import annotations

import itertools
import json
import re

import numpy as np
import pytest

import tensorgym.meter as meter_module
from tensorgym.cli import main
from tensorgym.meter import CATEGORIES, Meter
from tensorgym.search import tune

TASK = ["tune", "matmul:16,16,16", "--threads", "1", "--fresh"]
FAST_XGB = ["--opt", "n_chains=16", "--opt", "sa_steps=20", "--opt", "batch_size=8",
            "--opt", 'model_options={"n_rounds": 20}']


def parts_within(time: dict, wall: float) -> bool:
    """The five categories and ``other`` add up to the wall time, none of them negative."""
    parts = sum(time[c] for c in CATEGORIES)
    return (all(time[c] >= 0 for c in (*CATEGORIES, "other"))
            and parts <= wall * 1.01 + 0.01
            and time["other"] == pytest.approx(max(0.0, wall - parts), abs=0.01))


@pytest.fixture
def clock(monkeypatch):
    """A fake perf_counter that advances one second per call."""
    ticks = itertools.count()
    monkeypatch.setattr(meter_module, "perf_counter", lambda: float(next(ticks)))


def test_nested_timers_are_charged_to_their_own_category_only(clock):
    m = Meter()
    with m.time("search"):          # t=0
        with m.time("featurize"):   # t=1
            pass                    # t=2: featurize 1
        with m.time("model"):       # t=3
            with m.time("featurize"):  # t=4
                pass                # t=5: featurize 1
        m.add("build", 0.5)         # t=6: model 6 - 3 - 1 = 2
    # t=7: search 7 - 1 (featurize) - 3 (the model block, featurize included) - 0.5 (build)
    assert (m.featurize, m.model, m.build, m.search) == (2.0, 2.0, 0.5, 2.5)
    assert m.report(8.0)["other"] == 1.0


def test_since_and_report():
    m = Meter(build=1.0, run=2.0, search=0.5, build_cpu=3.0)
    start = m.copy()
    m.add("model", 0.25)
    m.add("build", 1.0)
    spent = m.since(start)
    assert (spent.build, spent.run, spent.model, spent.search, spent.build_cpu) == \
        (1.0, 0.0, 0.25, 0.0, 0.0)
    report = spent.report(2.0)
    assert report == {"wall": 2.0, "build": 1.0, "run": 0.0, "featurize": 0.0, "model": 0.25,
                      "search": 0.0, "other": 0.75, "build_cpu": 0.0}
    assert spent.line(2.0).startswith("time: build 1.00s (50%), run 0.00s (0%)")
    with pytest.raises(ValueError, match="unknown time category"):
        m.add("lunch", 1.0)


def test_measurement_time_comes_from_the_measurers_clocks():
    from tensorgym.measure import LocalMeasurer, MeasureOptions
    from tensorgym.templates import space_for
    from tensorgym.workloads import matmul

    w = matmul(16, 16, 16)
    m = LocalMeasurer("cpu", MeasureOptions(repeat=2, min_repeat_ms=1))
    try:
        results = m.measure(w, space_for(w, "cpu").sample(np.random.default_rng(0), 3))
    finally:
        m.close()
    assert m.seconds["build"] > 0 and m.seconds["run"] > 0
    meter = Meter()
    meter.add_measurement(m.seconds["build"], m.seconds["run"], results)
    assert (meter.build, meter.run) == (m.seconds["build"], m.seconds["run"])
    assert meter.build_cpu == sum(r.build_time for r in results)


def tune_json(capsys, tmp_path, agent: str, trials: int, *extra: str) -> dict:
    code = main([*TASK, "--agent", agent, "--trials", str(trials), "--json",
                 "--db", str(tmp_path / "r.db"), *extra])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def test_xgb_tune_reports_every_category(capsys, tmp_path):
    summary = tune_json(capsys, tmp_path, "xgb", 16, *FAST_XGB)  # a random batch, then SA
    time = summary["time"]
    assert set(time) == {"wall", *CATEGORIES, "other", "build_cpu"}
    assert time["wall"] == summary["wall_time"]
    assert parts_within(time, time["wall"])
    assert all(time[c] > 0 for c in CATEGORIES), time
    assert time["build_cpu"] > 0


def test_random_tune_reports_only_what_it_spends(capsys, tmp_path):
    time = tune_json(capsys, tmp_path, "random", 8)["time"]
    assert parts_within(time, time["wall"])
    assert time["build"] > 0 and time["run"] > 0 and time["search"] > 0
    assert time["featurize"] == time["model"] == 0  # random search has no model, no features


def test_human_summary_has_the_split_and_the_bar_shows_trials_per_second(capsys, tmp_path):
    code = main([*TASK, "--agent", "random", "--trials", "2", "--db", str(tmp_path / "r.db")])
    out, err = capsys.readouterr()
    assert code == 0, err
    line = next(x for x in out.splitlines() if x.startswith("time: "))
    for c in (*CATEGORIES, "other"):
        assert re.search(rf"\b{c} \d+\.\d\ds \(\d+%\)", line), line
    assert re.search(r"of \d+\.\d\ds wall", line)
    assert re.search(r"\d trials/s, best=\d+\.\d\d GFLOP/s", err), err


def test_leaderboard_reads_the_env_meter(tmp_path):
    from tensorgym.leaderboard.run import RunOptions, run_entry

    entry = run_entry("random", "matmul:16,16,16", "cpu", 0, 4,
                      RunOptions(remeasure=0, records=str(tmp_path / "r.db"),
                                 session_options={"num_threads": 1}))
    assert entry.build_time > 0 and entry.measure_time > 0 and entry.search_time > 0
    assert entry.build_time + entry.measure_time + entry.search_time <= \
        entry.wall_time * 1.01 + 0.01


def test_rl_policy_updates_count_as_model(tmp_path):
    from tensorgym import registry
    from tensorgym import make_env

    agent = registry.make("ppo")
    env = make_env("matmul:16,16,16", "cpu", budget=16, records=str(tmp_path / "r.db"),
                   num_threads=1, **agent.env_kwargs)
    trained = []
    try:
        m = env.unwrapped.meter
        start = m.copy()
        model_before_learning = []

        def spy(_agent, batch):  # the first trial: the policy is built, not yet updated
            if not model_before_learning:
                model_before_learning.append(m.model)
            trained.append(len(batch))

        assert len(tune(env, agent, 16, seed=0, callbacks=[spy])) == 16
        spent = m.since(start)
    finally:
        env.close()
    # 16 trials at 8 steps a rollout: one update ran between the two rollouts
    assert spent.model > model_before_learning[0] - start.model > 0
    assert spent.run > 0 and spent.build > 0 and spent.search > 0 and spent.featurize > 0
    assert "train" not in vars(agent.model)  # the metered train() was taken off again
