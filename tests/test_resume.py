"""Resume and nothing lost, with real measurements: a second ``tensorgym tune`` on the same
database reuses what it holds and measures no config twice, ``--resume`` counts it toward the
budget, a ``kill -9``-ed tune continues where it stopped, a batch that cannot be written is kept
in a side file, and a doctored reference time is measured again instead of breaking ``step``."""
from __future__ import annotations

import json
import math
import os
import signal
import sqlite3
import subprocess
import sys
import time

import gymnasium as gym
import numpy as np
import pytest

import tensorgym.envs  # noqa: F401  (registers the envs)
from tensorgym.cli import main
from tensorgym.errors import TensorGymError
from tensorgym.measure import LocalMeasurer, MeasureOptions
from tensorgym.records import Records
from tensorgym.task import Task
from tensorgym.templates import space_for

from .proc_tree import descendants, survivors
from tensorgym.workloads import matmul

TASK = ["matmul:16,16,16", "--threads", "1", "--json"]
FAST = {"xgb": ["--opt", "n_chains=16", "--opt", "sa_steps=20",
                "--opt", 'model_options={"n_rounds": 20}']}


def tune(capsys, db, *argv: str) -> dict:
    agent = argv[argv.index("--agent") + 1] if "--agent" in argv else "random"
    code = main(["tune", *TASK, "--db", str(db), *argv, *FAST.get(agent, [])])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def rows(db) -> tuple[int, int]:
    """(records, distinct configs) in the database."""
    con = sqlite3.connect(db)
    try:
        return con.execute("SELECT COUNT(*), COUNT(DISTINCT config_json) FROM records").fetchone()
    finally:
        con.close()


@pytest.mark.parametrize("agent", ["random", "grid", "ga", "xgb"])
def test_second_tune_reuses_and_measures_nothing_twice(capsys, tmp_path, agent):
    db = tmp_path / "r.db"
    first = tune(capsys, db, "--agent", agent, "--trials", "6")
    assert (first["trials"], first["reused"]) == (6, 0) and rows(db) == (6, 6)
    second = tune(capsys, db, "--agent", agent, "--trials", "6")  # same seed, same agent
    assert (second["trials"], second["reused"]) == (6, 6)
    assert rows(db) == (12, 12)
    # the earlier best still counts (best_gflops itself is a new timing at the end of a tune)
    assert second["best_gflops_found"] >= first["best_gflops_found"]


def test_reuse_is_reported(capsys, tmp_path):
    db = tmp_path / "r.db"
    tune(capsys, db, "--trials", "4")
    code = main(["tune", "matmul:16,16,16", "--threads", "1", "--db", str(db), "--trials", "3",
                 "--no-progress", "--seed", "1"])
    out, _ = capsys.readouterr()
    assert code == 0
    assert f"reusing 4 earlier measurements of this task from {db}" in out
    assert "3 trials (0 failed)" in out and "4 earlier measurements reused" in out


def test_resume_counts_earlier_measurements_toward_the_budget(capsys, tmp_path):
    db = tmp_path / "r.db"
    tune(capsys, db, "--trials", "6")
    resumed = tune(capsys, db, "--agent", "xgb", "--trials", "10", "--resume")
    assert (resumed["trials"], resumed["reused"]) == (4, 6) and rows(db) == (10, 10)
    done = tune(capsys, db, "--trials", "10", "--resume")  # nothing left to do
    assert (done["trials"], done["reused"]) == (0, 10) and rows(db) == (10, 10)
    assert done["best_gflops"] > 0 and done["best_reused"]


def test_fresh_ignores_earlier_measurements(capsys, tmp_path):
    db = tmp_path / "r.db"
    tune(capsys, db, "--trials", "3")
    again = tune(capsys, db, "--trials", "3", "--fresh")
    assert (again["trials"], again["reused"]) == (3, 0) and rows(db) == (6, 3)  # same seed
    code = main(["tune", *TASK, "--db", str(db), "--resume", "--fresh"])
    assert code == 2 and "not allowed with" in capsys.readouterr().err


def test_killed_tune_leaves_the_database_intact_and_resumes(capsys, tmp_path):
    db = tmp_path / "r.db"
    argv = ["tune", *TASK, "--db", str(db), "--trials", "40", "--opt", "batch_size=2"]
    proc = subprocess.Popen([sys.executable, "-m", "tensorgym.cli", *argv],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 300  # a guard against a hang, not a timing assertion
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                if db.exists() and rows(db)[0] >= 4:
                    break
            except sqlite3.OperationalError:  # the schema is not there yet
                pass
            time.sleep(0.02)
        kids = descendants(proc.pid)  # builders and the measurement worker
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        assert proc.returncode == -signal.SIGKILL, proc.stderr.read().decode()
    finally:
        proc.stderr.close()
    assert kids and not survivors(kids, within=5.0)  # they die with the tune
    con = sqlite3.connect(db)
    assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    con.close()
    measured, distinct = rows(db)
    assert 4 <= measured < 40 and distinct == measured
    resumed = tune(capsys, db, "--trials", "40", "--opt", "batch_size=2", "--resume")
    assert (resumed["reused"], resumed["trials"]) == (measured, 40 - measured)
    assert rows(db) == (40, 40)


# ---------------------------------------------------------------- the env and its database

@pytest.fixture(scope="module")
def measurer():
    m = LocalMeasurer("cpu", MeasureOptions(repeat=2, min_repeat_ms=1), num_threads=1)
    yield m
    m.close()


def make_env(measurer, records, **kwargs):
    return gym.make("TensorSched-v0", workload=matmul(16, 16, 16), target="cpu",
                    records=records, measurer=measurer, **kwargs)


def test_unwritable_database_keeps_measured_results(measurer, tmp_path):
    path = tmp_path / "r.db"
    env = make_env(measurer, Records(path, timeout=0.05, retry_delays=(0.0,)))
    u = env.unwrapped
    configs = u.space.sample_unique(np.random.default_rng(0), 4)
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")  # another process holds the write lock
    with pytest.raises(TensorGymError) as e:
        u.session.measure(configs)
    other.execute("ROLLBACK")
    other.close()
    side = tmp_path / f"r.db.unsaved-{os.getpid()}.jsonl"
    assert str(path) in str(e.value) and str(side) in str(e.value)
    db = Records(path)
    assert len(db) == 0 and db.restore(side) == 4
    kept = db.results(u.session.task, u.space)
    assert [r.config for r in kept] == configs
    assert all(r.ok and r.gflops > 0 for r in kept)  # the measured times, not placeholders
    env.close()


@pytest.mark.parametrize("stored", [0.0, -1.0])
def test_doctored_reference_time_is_measured_again(measurer, tmp_path, stored):
    path = tmp_path / "r.db"
    env = make_env(measurer, str(path))
    env.reset(seed=0)
    u = env.unwrapped
    assert u.session.reference_seconds > 0
    con = sqlite3.connect(path, isolation_level=None)
    con.execute("UPDATE references_ SET seconds = ?", (stored,))
    con.close()
    env2 = make_env(measurer, str(path))
    env2.reset(seed=0)
    with pytest.warns(UserWarning, match="reference time"):
        _, reward, *_ = env2.step(env2.action_space.sample())
    assert math.isfinite(reward) and env2.unwrapped.session.reference_seconds > 0
    ref = Records(path).reference(u.session.task, u.session.reference_config.to_json())
    assert ref is not None and ref > 0  # replaced by the new measurement
    env.close()
    env2.close()


def test_tune_writes_back_what_a_failed_write_set_aside(tmp_path, capsys):
    db = tmp_path / "r.db"
    tune(capsys, db, "--trials", "4")
    before = rows(db)
    held = sqlite3.connect(db, isolation_level=None)
    held.execute("BEGIN EXCLUSIVE")  # the next batch cannot be written
    records = Records(db, timeout=0.05, retry_delays=())
    m = LocalMeasurer("cpu", MeasureOptions(repeat=1, min_repeat_ms=1), num_threads=1)
    try:
        w = matmul(16, 16, 16)
        batch = m.measure(w, space_for(w, "cpu").sample(np.random.default_rng(9), 3))
        with pytest.raises(TensorGymError) as e:
            records.add_many(Task(w.key, "cpu", m.device), batch)
    finally:
        m.close()
        held.execute("ROLLBACK")
        held.close()
    assert os.path.exists(e.value.saved_to)
    code = main(["tune", *TASK[:-1], "--db", str(db), "--trials", "1"])
    out, err = capsys.readouterr()
    assert code == 0 and f"restored 3 measurements into {db}" in err
    assert not os.path.exists(e.value.saved_to)
    assert rows(db)[0] == before[0] + 3 + 1
