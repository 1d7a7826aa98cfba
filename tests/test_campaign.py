"""Dataset campaigns (``dataset collect --suite S --time-budget D``): rounds over tasks, a budget
that stops them, resuming without duplicates, every record tagged with its part and the load."""
import json
from collections import Counter

import pytest

from tensorgym.dataset.campaign import Campaign, _part_of, parse_duration
from tensorgym.errors import TensorGymError
from tensorgym.measure import MeasureOptions
from tensorgym.measure.worker import first_run_limit
from tensorgym.records import Records

from .cli_run import cli

WORKLOADS = ["matmul:17,9,13", "matmul:8,24,16"]
FAST = MeasureOptions(repeat=3, max_repeat=3, min_repeat_ms=1.0, calibrate=False)


def campaign(path, **kwargs):
    kwargs.setdefault("options", FAST)
    return Campaign(kwargs.pop("workloads", WORKLOADS), str(path), chunk=kwargs.pop("chunk", 3),
                    threads=1, **kwargs)


def configs_by_task(path):
    rec = Records(str(path))
    try:
        rows = rec.query()
    finally:
        rec.close()
    return Counter((r.workload_key, r.device, r.config_json) for r in rows), rows


def test_rounds_resume_without_duplicates(tmp_path):
    db = tmp_path / "c.db"
    with campaign(db) as c:
        first = c.run(600, max_rounds=1, progress=False)
    assert first.rounds == 1 and not first.stopped_by_budget
    # round 0: the reference + 3 random configs, then 3 agent trials, for each task
    assert first.per_task == {w: 7 for w in WORKLOADS}
    assert first.measured == 14
    with campaign(db) as c:
        assert c._first_open_round() == 1
        second = c.run(600, max_rounds=1, progress=False)
    assert second.measured == 12 and second.per_task == {w: 13 for w in WORKLOADS}
    counts, rows = configs_by_task(db)
    assert max(counts.values()) == 1, "a config was measured twice on one device"
    parts = Counter((r.workload_key, _part_of(r.options)) for r in rows)
    assert all(parts[(w, "random")] == 7 and parts[(w, "agent")] == 6 for w in WORKLOADS)


def test_records_keep_part_load_and_early_stop(tmp_path):
    db = tmp_path / "c.db"
    with campaign(db, workloads=WORKLOADS[:1], early_stop=2.0) as c:
        c.run(600, max_rounds=1, progress=False)
    _, rows = configs_by_task(db)
    for r in rows:
        opts = json.loads(r.options)
        assert opts["collect"]["campaign"] is True and opts["collect"]["early_stop"] == 2.0
        assert len(opts["collect"]["load"]) == 3
        assert opts["measurer"]["stop_first_run"] is False  # every record is a checked run
        if r.ok and len(r.costs) < FAST.repeat:
            assert opts["result"]["early_stop"] is True


def test_time_budget_stops_and_the_next_run_goes_on(tmp_path):
    db = tmp_path / "c.db"
    with campaign(db, chunk=2) as c:
        spent = c.run(1e-6, progress=False)
    assert spent.stopped_by_budget and spent.measured == 0
    with campaign(db, chunk=2) as c:
        c.run(600, max_rounds=2, progress=False)
        assert c._first_open_round() == 2
    counts, _ = configs_by_task(db)
    assert max(counts.values()) == 1
    assert sum(counts.values()) == 2 * (1 + 2 * 2 + 2 * 2)


def test_bad_arguments_are_refused(tmp_path):
    with pytest.raises(TensorGymError, match="chunk"):
        Campaign(WORKLOADS, str(tmp_path / "a.db"), chunk=0)
    with pytest.raises(TensorGymError, match="parts"):
        Campaign(WORKLOADS, str(tmp_path / "a.db"), parts=("grid",))
    with pytest.raises(TensorGymError, match="early_stop"):
        Campaign(WORKLOADS, str(tmp_path / "a.db"), early_stop=0.5)
    with campaign(tmp_path / "a.db") as c, pytest.raises(TensorGymError, match="time budget"):
        c.run(0)


@pytest.mark.parametrize("text,seconds", [("2h", 7200), ("90m", 5400), ("1h30m", 5400),
                                          ("45s", 45), ("12.5", 12.5), (" 2H ", 7200)])
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["2x", "h", "10m5", "", "-1h"])
def test_parse_duration_refuses(text):
    with pytest.raises(TensorGymError, match="duration"):
        parse_duration(text)


def test_first_runs_are_not_stopped_when_asked():
    opts = MeasureOptions(stop_slower_than=0.01)
    assert first_run_limit(opts) > 0
    assert first_run_limit(MeasureOptions(stop_slower_than=0.01, stop_first_run=False)) == 0


def test_cli_suite_collection(tmp_path):
    db = str(tmp_path / "s.db")
    rc, out, _ = cli(["dataset", "collect", "--suite", "tiny-cpu", "--time-budget", "10m",
                      "--db", db, "--chunk", "2", "--rounds", "1", "--threads", "1",
                      "--no-progress"])
    assert rc == 0 and "tiny-cpu on cpu/" in out and "1 round" in out
    assert "5 records over 1 of 1 tasks" in out
    rc, out, _ = cli(["dataset", "collect", "--suite", "tiny-cpu", "--time-budget", "10m",
                      "--db", db, "--chunk", "2", "--rounds", "1", "--threads", "1", "--json"])
    report = json.loads(out)
    assert rc == 0 and report["measured"] == 4 and report["per_task"] == {"matmul:16,16,16": 9}


@pytest.mark.parametrize("argv,message", [
    (["--suite", "tiny-cpu", "--db", "x.db"], "--time-budget"),
    (["--suite", "tiny-cpu", "--time-budget", "1m", "--configs", "3", "--db", "x.db"],
     "--suite takes its tasks"),
    (["matmul:8,8,8", "--time-budget", "1m", "--configs", "3", "--db", "x.db"],
     "goes with --suite"),
    (["matmul:8,8,8", "--db", "x.db"], "--configs N"),
    (["--suite", "tiny-cpu", "--time-budget", "soon", "--db", "x.db"], "duration"),
    (["--suite", "tiny-cpu", "--target", "cuda", "--time-budget", "1m", "--db", "x.db"],
     "no task on cuda"),
    (["--suite", "no-such-suite", "--time-budget", "1m", "--db", "x.db"], "unknown suite"),
])
def test_cli_errors(tmp_path, monkeypatch, argv, message):
    monkeypatch.chdir(tmp_path)
    rc, out, err = cli(["dataset", "collect", *argv])
    assert rc != 0 and message in out + err


def test_configs_recorded_before_a_knob_was_added_are_not_measured_again(tmp_path):
    """A record written before a knob existed spells its config without it (the knob's first
    option): a resumed campaign counts it as done instead of measuring the same schedule again
    under today's longer spelling."""
    import sqlite3

    from tensorgym.templates import space_for
    from tensorgym.workloads import get_workload

    key = "conv2d:1,2,6,6,4,3,1,1"
    added = ["contiguous_writeback", "pad_vector"]
    assert all(space_for(get_workload(key), "cpu").knob(name).added for name in added)
    db = tmp_path / "c.db"
    with campaign(db, workloads=[key]) as c:
        c.run(600, max_rounds=1, progress=False)
    con = sqlite3.connect(db)
    def as_before(text: str) -> str:  # the JSON a tensorgym before these knobs wrote
        obj = json.loads(text)
        for name in added:
            del obj["knobs"][name]
        return json.dumps(obj, sort_keys=True)

    con.create_function("as_before", 1, as_before)
    at_first = " AND ".join(f"json_extract(config_json, '$.knobs.{name}') = 0"
                            for name in added)
    with con:  # as a tensorgym before these knobs wrote the configs that have their first option
        stripped = con.execute("UPDATE records SET config_json = as_before(config_json) "
                               f"WHERE {at_first}").rowcount
    con.close()
    assert stripped >= 1  # the reference schedule at least
    with campaign(db, workloads=[key]) as c:
        second = c.run(600, max_rounds=1, progress=False)
    assert second.measured == 6 and second.per_task == {key: 13}
    space = space_for(get_workload(key), "cpu")
    _, rows = configs_by_task(db)
    indices = Counter(space.from_json(r.config_json).index for r in rows)
    assert max(indices.values()) == 1, "a config was measured twice on one device"


def test_a_session_reuses_a_record_written_before_a_knob_was_added(tmp_path):
    """A tuning session with ``use_cache`` finds the record of a config written without the
    knobs added since (their first options), and the reference's time, instead of measuring
    them again."""
    import sqlite3

    from tensorgym.session import TuningSession
    from tensorgym.templates import default_config
    from tensorgym.workloads import get_workload

    key = "conv2d:1,2,6,6,4,3,1,1"
    db = tmp_path / "s.db"
    ref = default_config(get_workload(key), "cpu")
    with TuningSession(key, records=str(db), use_cache=True, num_threads=1,
                       measure_options=FAST) as s:
        first = s.measure([ref])[0]
        reference = s.reference_seconds
    assert first.ok and not first.cached
    def as_before(text: str) -> str:  # the JSON a tensorgym before these knobs wrote
        obj = json.loads(text)
        for name in ("contiguous_writeback", "pad_vector"):
            del obj["knobs"][name]
        return json.dumps(obj, sort_keys=True)

    con = sqlite3.connect(db)
    con.create_function("as_before", 1, as_before)
    with con:
        for table in ("records", "references_"):
            con.execute(f"UPDATE {table} SET config_json = as_before(config_json)")
    con.close()
    with TuningSession(key, records=str(db), use_cache=True, num_threads=1,
                       measure_options=FAST) as s:
        again = s.measure([ref])[0]
        assert again.cached and again.costs == first.costs
        assert s.reference_seconds == reference
    rows, _ = configs_by_task(db)
    assert sum(rows.values()) == 1, "the config was measured again"
