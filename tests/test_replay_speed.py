"""Replay at this machine's speed (tensorgym.dataset.speed): ``speed`` divides every answer's
seconds (recorded, world-model, the reference) and nothing else; ``live_speed`` reads the factor
by timing a task's fastest recorded configs here; the replay track reads it per task, keeps it in
the results, and its search figures scale by it exactly."""
import dataclasses
import statistics

import pytest

from tensorgym.cli import main
from tensorgym.dataset import Dataset
from tensorgym.dataset.replay import ReplayMeasurer
from tensorgym.dataset.speed import live_speed
from tensorgym.errors import TensorGymError
from tensorgym.leaderboard.harness import runtime_options
from tensorgym.leaderboard.run import RunOptions, run_suite
from tensorgym.leaderboard.suites import get_suite
from tensorgym.measure import LocalMeasurer
from tensorgym.templates import default_config
from tensorgym.workloads import get_workload

from .conftest import TINY_WORKLOAD

WORKLOAD = get_workload(TINY_WORKLOAD)


def slowed(db: str, tmp_path, factor: float) -> Dataset:
    """The dataset as if recorded on a machine ``factor`` times slower (an export, so it has a
    path for the replay's cache)."""
    data = Dataset.load(db)
    records = [dataclasses.replace(r, costs=tuple(c * factor for c in r.costs))
               for r in data.records]
    path = tmp_path / "slowed.jsonl"
    Dataset(records, str(path), data.names).export(str(path))
    return Dataset.load(path)


def recorded_config(replay):
    task = replay.task(WORKLOAD)
    p = next(i for i, ss in enumerate(task.samples) if any(s.ok for s in ss))
    return task.configs[p]


def test_speed_divides_recorded_surrogate_and_reference_seconds(tiny_dataset):
    plain = ReplayMeasurer(tiny_dataset, on_miss="surrogate", seed=5)
    fast = ReplayMeasurer(tiny_dataset, on_miss="surrogate", seed=5, speed=2.5)
    c = recorded_config(plain)
    miss = next(plain.task(WORKLOAD).space.get(i) for i in range(10**6)
                if i not in plain.task(WORKLOAD).index_of
                and plain.valid(plain.task(WORKLOAD), plain.task(WORKLOAD).space.get(i)))
    a, b = plain.measure(WORKLOAD, [c, miss]), fast.measure(WORKLOAD, [c, miss])
    for x, y in zip(a, b):
        assert x.source == y.source and x.error == y.error
        assert y.costs == pytest.approx(tuple(t / 2.5 for t in x.costs))
        assert y.build_time == x.build_time and y.run_time == x.run_time  # virtual time kept
    ref = default_config(WORKLOAD, "cpu")
    assert fast.reference_seconds(WORKLOAD, ref) == pytest.approx(
        plain.reference_seconds(WORKLOAD, ref) / 2.5)
    assert fast.describe()["speed"] == 2.5


@pytest.mark.parametrize("bad", [0, -1.0, float("inf"), float("nan"), True, "fast"])
def test_a_bad_speed_is_refused(tiny_dataset, bad):
    with pytest.raises(TensorGymError, match="speed must be a positive number"):
        ReplayMeasurer(tiny_dataset, speed=bad)


def test_live_speed_reads_how_much_slower_the_records_were(tiny_dataset, tmp_path):
    replay = ReplayMeasurer(slowed(tiny_dataset, tmp_path, 4.0), on_miss="surrogate")
    m = LocalMeasurer("cpu", **runtime_options("cpu", 1))
    try:
        reading = live_speed(replay, WORKLOAD, m, configs=3, rounds=3)
    finally:
        m.close()
    assert len(reading.ratios) == 3 and reading.rounds == 3
    assert reading.speed == pytest.approx(statistics.median(reading.ratios))
    # recorded 4x slower than this machine ran a few minutes ago: a reading near 4 (a tiny
    # kernel's timing moves by tens of percent, not by 2x)
    assert 2.0 < reading.speed < 8.0


def test_live_speed_refuses_another_device_and_bad_counts(tiny_dataset):
    replay = ReplayMeasurer(tiny_dataset)

    class Elsewhere:
        device = "another-cpu"

    with pytest.raises(TensorGymError, match="on the dataset's device"):
        live_speed(replay, WORKLOAD, Elsewhere())
    with pytest.raises(TensorGymError, match="configs >= 1"):
        live_speed(replay, WORKLOAD, Elsewhere(), configs=0)


def test_replay_track_reads_the_speed_per_task_and_scales_search_figures(tiny_dataset):
    suite = get_suite("tiny-cpu")
    options = RunOptions(trials=6, seeds=[0], remeasure=1, vendor=False, threads=1,
                         replay=tiny_dataset)
    plain = run_suite(suite, ["random"], options).runs[0]
    doubled = run_suite(suite, ["random"], dataclasses.replace(options, replay_speed=2.0)).runs[0]
    read = run_suite(suite, ["random"], dataclasses.replace(options, replay_speed="live")).runs[0]
    key = WORKLOAD.key
    assert plain.dataset["speed"][key] == {"speed": 1.0, "read": False}
    assert doubled.dataset["speed"][key] == {"speed": 2.0, "read": False}
    assert read.dataset["speed"][key]["read"] and read.dataset["speed"][key]["speed"] > 0
    a, b = plain.entries[0], doubled.entries[0]
    assert [t.config for t in a.trials] == [t.config for t in b.trials]  # the same search
    assert [t.gflops * 2 for t in a.trials] == pytest.approx([t.gflops for t in b.trials])
    with pytest.raises(TensorGymError, match="replay_speed is 'live' or a positive number"):
        run_suite(suite, ["random"], dataclasses.replace(options, replay_speed=-1.0))


def test_cli_replay_speed_needs_replay_and_a_good_value(capsys, tmp_path):
    out = str(tmp_path / "r.json")
    assert main(["leaderboard", "run", "tiny-cpu", "--agents", "random", "--out", out,
                 "--replay-speed", "2"]) != 0
    assert "--replay-speed scales a replay's answers" in capsys.readouterr().err
    assert main(["leaderboard", "run", "tiny-cpu", "--agents", "random", "--out", out,
                 "--replay", "x.db", "--replay-speed", "fast"]) != 0
    assert "expected 'live' or a positive number, got 'fast'" in capsys.readouterr().err
