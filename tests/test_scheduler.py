"""The task scheduler of ``tune-model``: it spends exactly its budget, resumes after a kill
without measuring a config twice, round-robin is even, the gradient rule is Ansor's formula, and
bad input is refused."""
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest

from tensorgym.errors import TensorGymError
from tensorgym.measure import MeasureOptions
from tensorgym.nn.scheduler import ALPHA, BETA, TaskScheduler, TaskState, model_tasks_of
from tensorgym.records import Records
from tensorgym.session import make_measurer
from tensorgym.workloads import get_workload

from .cli_run import cli
from .proc_tree import descendants, survivors

TASKS = [("matmul:16,16,16", 2), ("matmul:8,24,16", 1), ("dense:4,32,16+bias", 3)]
FAST = MeasureOptions(repeat=3, max_repeat=3, min_repeat_ms=1.0, calibrate=False)


@pytest.fixture(scope="module")
def measurer():
    m = make_measurer("cpu", options=FAST, num_threads=1)
    yield m
    m.close()


def ours(db, model="tiny"):
    rec = Records(str(db))
    try:
        rows = rec.query()
    finally:
        rec.close()
    mine = [r for r in rows if json.loads(r.options or "{}").get("tune_model", {}).get("model")
            == model]
    return mine, Counter((r.workload_key, r.config_json) for r in rows)


@pytest.mark.parametrize("scheduler", ["gradient", "round-robin"])
def test_spends_exactly_its_budget_and_resumes(tmp_path, measurer, scheduler):
    db = tmp_path / "t.db"
    with TaskScheduler("tiny", TASKS, str(db), 14, scheduler=scheduler, batch=4,
                       measurer=measurer) as s:
        first = s.run(progress=False)
    assert first.trials == first.trials_now == 14
    assert sum(t["trials"] for t in first.tasks) == 14
    assert all(t["trials"] > 0 for t in first.tasks)  # the warm-up reached every task
    assert math.isfinite(first.latency) and first.latency == pytest.approx(
        sum(t["weight"] * t["best_ms"] / 1e3 for t in first.tasks))
    with TaskScheduler("tiny", TASKS, str(db), 22, scheduler=scheduler, batch=4,
                       measurer=measurer) as s:
        second = s.run(progress=False)
    assert second.trials == 22 and second.trials_now == 8
    mine, counts = ours(db)
    assert len(mine) == 22 and max(counts.values()) == 1
    with TaskScheduler("tiny", TASKS, str(db), 22, batch=4, measurer=measurer) as s:
        assert s.run(progress=False).trials_now == 0  # spent: nothing more


def test_the_batches_share_one_annealing_helper_that_ends_with_the_scheduler(tmp_path):
    before = descendants(os.getpid())
    with TaskScheduler("tiny", TASKS, str(tmp_path / "h.db"), 24, batch=4,
                       measurer=make_measurer("cpu", options=FAST, num_threads=1)) as s:
        s.run(progress=False)
        carry = s._agent_options["carry"]
        helper = carry["walker"]
        assert helper.child.alive and not helper.failed  # kept between the batches
        assert len([k for k in carry if k != "walker"]) == len(TASKS)  # a slot per task
        s.measurer.close()
    assert not helper.child.alive and not carry
    assert not survivors(descendants(os.getpid()) - before)


def test_round_robin_is_even(tmp_path, measurer):
    with TaskScheduler("tiny", TASKS, str(tmp_path / "r.db"), 24, scheduler="round-robin",
                       batch=4, measurer=measurer) as s:
        report = s.run(progress=False)
    assert [t["trials"] for t in report.tasks] == [8, 8, 8]


def test_the_gradient_rule(tmp_path):
    s = object.__new__(TaskScheduler)  # the rule only reads the tasks' states
    a = TaskState(get_workload("matmul:64,64,64"), 3, trials=20, best=2e-5,
                  curve=[(10, 4e-5), (20, 2e-5)])
    b = TaskState(get_workload("matmul:32,32,32"), 1, trials=10, best=1e-5, curve=[(10, 1e-5)])
    s.tasks = [a, b]
    backward = (2e-5 - 4e-5) / 10
    speed = max(a.workload.flops / a.best, b.workload.flops / b.best)
    forward = min(-2e-5 / 20, BETA * a.workload.flops / speed - 2e-5)
    assert s.gain(a) == pytest.approx(-3 * (ALPHA * backward + (1 - ALPHA) * forward))
    forward_b = min(-1e-5 / 10, BETA * b.workload.flops / speed - 1e-5)
    assert s.gain(b) == pytest.approx(-(1 - ALPHA) * forward_b)  # one batch: no look back


SCRIPT = """
import sys
from tensorgym.measure import MeasureOptions
from tensorgym.nn.scheduler import TaskScheduler
from tensorgym.session import make_measurer
m = make_measurer("cpu", options=MeasureOptions(repeat=3, max_repeat=3, min_repeat_ms=1.0,
                  calibrate=False), num_threads=1)
TaskScheduler("tiny", {tasks!r}, sys.argv[1], 400, batch=2, measurer=m).run(progress=False)
"""


def test_resumes_after_a_kill(tmp_path, measurer):
    db = tmp_path / "k.db"
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT.format(tasks=TASKS), str(db)],
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if db.exists() and len(ours(db)[0]) >= 6:
                break
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    killed_at = len(ours(db)[0])
    assert killed_at >= 6
    with TaskScheduler("tiny", TASKS, str(db), killed_at + 6, batch=4,
                       measurer=measurer) as s:
        report = s.run(progress=False)
    mine, counts = ours(db)
    assert report.trials == len(mine) == killed_at + 6 and max(counts.values()) == 1


def test_bad_input(tmp_path):
    with pytest.raises(TensorGymError, match="scheduler"):
        TaskScheduler("tiny", TASKS, str(tmp_path / "a.db"), 8, scheduler="greedy")
    with pytest.raises(TensorGymError, match="budget"):
        TaskScheduler("tiny", TASKS, str(tmp_path / "a.db"), 0)
    with pytest.raises(TensorGymError, match="no tunable task"):
        TaskScheduler("tiny", [], str(tmp_path / "a.db"), 8)
    with pytest.raises(TensorGymError, match="unknown model"):
        model_tasks_of("alexnet")
    rc, out, err = cli(["tune-model", "alexnet", "--trials", "8", "--db",
                        str(tmp_path / "a.db")])
    assert rc != 0 and "unknown model" in out + err


def test_model_tasks_come_from_the_corpus():
    tasks = dict(model_tasks_of("resnet18"))
    assert tasks["conv2d:1,64,56,56,64,3,1,1+bias+relu"] == 2
    assert tasks["dense:1,512,1000+bias"] == 1
    assert sum(tasks.values()) == 21  # 20 convolutions and the classifier
