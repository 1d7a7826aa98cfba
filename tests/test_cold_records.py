"""A record whose only sample may be a kernel's cold first run (``Record.cold_only``: stopped
early on that run by a tree before the warm re-run) is no measurement: world models and replay
leave its time out, and ``tensorgym dataset remeasure`` times its config again, resumably."""
import json
import subprocess
import sys
import warnings
from dataclasses import replace

import numpy as np
import pytest

from tensorgym.dataset.data import Dataset
from tensorgym.dataset.remeasure import cold_configs, remeasure
from tensorgym.dataset.replay import ReplayMeasurer
from tensorgym.errors import ErrorCode
from tensorgym.dataset.world.samples import task_samples
from tensorgym.measure import LocalMeasurer, MeasureOptions
from tensorgym.measure.result import MeasureResult
from tensorgym.records import Records
from tensorgym.task import Task
from tensorgym.templates import default_config, space_for
from tensorgym.workloads import matmul

W = matmul(64, 64, 64)


@pytest.fixture(scope="module")
def measurer():
    m = LocalMeasurer("cpu", MeasureOptions(repeat=3, max_repeat=3, min_repeat_ms=1,
                                            stop_first_run=False), num_threads=1)
    yield m
    m.close()


def _old_cold(config, seconds: float, flops: int) -> MeasureResult:
    """What a tree before the warm re-run wrote for a kernel stopped on its cold first run."""
    return MeasureResult(config, (seconds,), flops=flops, timestamp=1.0, early_stop=True)


def _db(tmp_path, measurer):
    """A database of one task: two configs timed in full and two cold-only ones (one of those
    with a later timed record too), as the old tree's measurer options said."""
    space = space_for(W, "cpu")
    configs = [default_config(W, "cpu"), *space.sample(np.random.default_rng(1), 3)]
    task = Task(W.key, "cpu", measurer.device)
    db = Records(tmp_path / "r.db")
    timed = measurer.measure(W, configs[:2])
    old_options = {"measurer": {"min_repeat_ms": 5.0}}
    db.add_many(task, timed, options=old_options)
    db.add_many(task, [_old_cold(configs[2], 0.02, W.flops), _old_cold(configs[3], 0.03, W.flops),
                       _old_cold(configs[0], 0.05, W.flops)], options=old_options)
    return db, task, configs


def test_cold_only_is_a_one_sample_early_stop_of_a_sample_length_without_a_first_run(
        tmp_path, measurer):
    db, task, configs = _db(tmp_path, measurer)
    recs = {(r.config_json, r.costs): r for r in db.query(W.key)}
    cold = [r for r in recs.values() if r.cold_only]
    assert sorted(r.costs[0] for r in cold) == [0.02, 0.03, 0.05]
    assert not any(r.cold_only for r in recs.values() if len(r.costs) > 1)
    short = replace(cold[0], costs=(0.001,))  # shorter than a sample: a sample's own time
    assert not short.cold_only
    flagged = json.loads(cold[0].options)
    flagged["result"]["first_run"] = 0.02  # written by today's worker: a warm run
    assert not replace(cold[0], options=json.dumps(flagged)).cold_only
    # the configs to time again: cold-only, and no timed record of the config
    todo = cold_configs(db, measurer.device, "cpu")
    assert sorted(c.index for c in todo[W.key]) == sorted(c.index for c in configs[2:])
    db.close()


def test_world_model_rows_and_replay_leave_cold_only_times_out(tmp_path, measurer):
    db, task, configs = _db(tmp_path, measurer)
    data = Dataset(db.query(), "cold")
    with pytest.warns(UserWarning, match="cold first run"):
        (s,) = task_samples(data)
    seconds = dict(zip(s.indices.tolist(), s.seconds))
    assert np.isfinite(seconds[configs[0].index]) and np.isfinite(seconds[configs[1].index])
    assert seconds[configs[0].index] < 0.05  # the timed record's median, not the cold run
    assert np.isnan(seconds[configs[2].index]) and np.isnan(seconds[configs[3].index])
    assert s.fail.max() == 0.0  # a cold-only record is still a success
    replay = ReplayMeasurer(data, "cpu", "error", device=measurer.device)
    with pytest.warns(UserWarning, match="cold first run"):
        t = replay.task(W)
    assert sorted(c.index for c in t.configs) == sorted(c.index for c in configs[:2])
    assert all(0.05 not in s.costs for ss in t.samples for s in ss)
    replay.close()
    db.close()


def test_remeasure_times_the_cold_configs_again_once(tmp_path, measurer):
    db, task, configs = _db(tmp_path, measurer)
    before = len(db)
    report = remeasure(db, "cpu", [W.key], measurer=measurer, progress=False)
    assert report.measured == 2 and report.failures == 0 and report.left == 0
    new = [r for r in db.query(W.key) if json.loads(r.options).get("collect", {}).get("strategy")
           == "remeasure"]
    assert len(db) == before + 2 and len(new) == 2
    assert all(r.ok and not r.cold_only and "first_run" in json.loads(r.options)["result"]
               for r in new)
    assert cold_configs(db, measurer.device, "cpu") == {}
    again = remeasure(db, "cpu", [W.key], measurer=measurer, progress=False)
    assert again.measured == 0 and len(db) == before + 2  # resumable: nothing twice
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (s,) = task_samples(Dataset(db.query(), "after"))
    assert np.isfinite(s.seconds).all()
    db.close()


def test_remeasure_cli_refuses_bad_input_clearly(tmp_path):
    out = subprocess.run([sys.executable, "-m", "tensorgym", "dataset", "remeasure", "--db",
                          str(tmp_path / "r.db"), "--time-budget", "soon"],
                         capture_output=True, text=True)
    assert out.returncode != 0 and "duration" in out.stderr


def test_remeasure_repeats_times_every_timed_config_until_it_has_n_records(tmp_path, measurer):
    db, task, configs = _db(tmp_path, measurer)
    space = space_for(W, "cpu")
    broken = MeasureResult(space.sample(np.random.default_rng(7), 1)[0], (), flops=W.flops,
                           error=ErrorCode.WRONG_ANSWER, error_msg="wrong", timestamp=2.0)
    db.add_many(task, [broken])  # a config whose every record failed: never measured again
    before = len(db)
    report = remeasure(db, "cpu", [W.key], measurer=measurer, progress=False, repeats=2)
    # pass 1: the two cold-only configs; pass 2: all four configs' second timed record
    assert report.measured == 2 + 4 and report.failures == 0 and len(db) == before + 6
    timed: dict[int, int] = {}
    for r in db.query(W.key):
        if r.ok and not r.cold_only:
            i = space.from_json(r.config_json).index
            timed[i] = timed.get(i, 0) + 1
    assert sorted(timed) == sorted(c.index for c in configs)
    assert min(timed.values()) >= 2
    assert broken.config.index not in timed
    again = remeasure(db, "cpu", [W.key], measurer=measurer, progress=False, repeats=2)
    assert again.measured == 0  # resumable
    with pytest.raises(Exception, match="repeats"):
        remeasure(db, "cpu", [W.key], measurer=measurer, progress=False, repeats=0)
    db.close()
