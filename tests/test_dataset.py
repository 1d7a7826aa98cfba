"""Datasets: collection (resumable, every record with its options), export round-trips, the
summary, the CLI, and records databases written before the options column."""
import json
import sqlite3
from pathlib import Path
import subprocess
import sys
from dataclasses import replace

import pytest

from tensorgym.cli import main
from tensorgym.dataset import Dataset, DatasetError, collect
from tensorgym.errors import TensorGymError
from tensorgym.measure import MeasureOptions
from tensorgym.records import Records
from tensorgym.task import Task
from tensorgym.templates import default_config, space_for
from tensorgym.workloads import get_workload

WORKLOAD = "matmul:17,9,13"
FAST = MeasureOptions(repeat=3, max_repeat=3, min_repeat_ms=1.0, calibrate=False)


def small_dataset(path, n=6, **kwargs):
    return collect([WORKLOAD], n_configs=n, db=str(path), threads=1, progress=False,
                   options=FAST, **kwargs)


@pytest.fixture(scope="module")
def db(tmp_path_factory):
    path = tmp_path_factory.mktemp("dataset") / "small.db"
    small_dataset(path)
    return path


def test_collect_measures_the_reference_and_n_configs_with_their_options(db):
    data = Dataset.load(db)
    assert len(data) == 7  # the reference schedule, then 6 distinct random configs
    assert len({r.config_json for r in data.records}) == 7
    (task,) = data.tasks()
    assert task.workload == get_workload(WORKLOAD).key and task.device.endswith("/1t")
    opts = json.loads(data.records[0].options)
    assert opts["collect"] == {"strategy": "random", "seed": 0}
    assert opts["measurer"]["stop_slower_than"] == 0.0  # early stop off for datasets
    assert opts["runtime"] == {"num_threads": 1}
    assert all(r.costs or not r.ok for r in data.records)
    assert not any(json.loads(r.options).get("result", {}).get("early_stop")
                   for r in data.records)


def test_collect_resumes_and_extends_the_same_stream(db, tmp_path):
    copy = tmp_path / "copy.db"
    Dataset.load(db).to_records(copy)
    (again,) = small_dataset(copy, n=6)
    assert (again.measured, again.skipped) == (0, 7)
    (more,) = small_dataset(copy, n=8)
    assert (more.measured, more.skipped) == (2, 7)
    fresh = tmp_path / "fresh.db"
    small_dataset(fresh, n=8)
    configs = lambda p: {r.config_json for r in Dataset.load(p).records}  # noqa: E731
    assert configs(copy) == configs(fresh)  # the same seed gives the same configs


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_export_round_trips(db, tmp_path, suffix):
    data = Dataset.load(db)
    out = tmp_path / f"small{suffix}"
    assert data.export(out) == len(data)
    back = Dataset.load(out)
    assert back.digest == data.digest
    assert back.records == data.records
    assert back.names == data.names
    imported = tmp_path / "imported.db"
    assert back.to_records(imported) == len(data)
    assert Dataset.load(imported).digest == data.digest


def test_summary(db):
    s = Dataset.load(db).summary()
    (t,) = s["tasks"]
    recs = Records(db).query()
    ok = [r for r in recs if r.ok]
    assert (s["records"], t["configs"], t["records"]) == (7, 7, 7)
    assert t["failure_rate"] == pytest.approx(1 - len(ok) / len(recs))
    assert t["best_gflops"] == pytest.approx(max(r.gflops for r in ok))
    assert t["strategies"] == {"random": 7}


def test_cli_info_export_import(db, tmp_path, capsys):
    assert main(["dataset", "info", str(db)]) == 0
    text = capsys.readouterr().out
    assert "7 records, 1 workloads" in text and "random 7" in text
    out = tmp_path / "x.jsonl"
    assert main(["dataset", "export", "--db", str(db), "--out", str(out)]) == 0
    assert len(out.read_text().splitlines()) == 7
    assert main(["dataset", "info", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert summary["digest"] == Dataset.load(db).digest
    assert main(["dataset", "export", "--db", str(db), "--out", str(tmp_path / "x.csv")]) == 1
    assert "use a .parquet or .jsonl" in capsys.readouterr().err
    assert main(["dataset", "info", str(tmp_path / "missing.db")]) == 1
    assert "no dataset at" in capsys.readouterr().err


def test_cli_collect_resumes(db, tmp_path, capsys):
    copy = tmp_path / "c.db"
    Dataset.load(db).to_records(copy)
    assert main(["dataset", "collect", WORKLOAD, "--configs", "6", "--db", str(copy),
                 "--threads", "1", "--json"]) == 0
    report = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert (report["measured"], report["skipped"]) == (0, 7)
    assert main(["dataset", "collect", WORKLOAD, "--configs", "0", "--db", str(copy)]) == 2


def test_agent_strategy_records_what_the_tune_visits(tmp_path):
    path = tmp_path / "agent.db"
    (report,) = small_dataset(path, n=4, strategy="agent")
    assert report.strategy == "agent:xgb"
    assert report.measured + report.skipped == 5  # the reference and 4 trials (which may
    # include the reference in so small a space: then served from the database)
    data = Dataset.load(path)
    assert {json.loads(r.options)["collect"]["strategy"] for r in data.records} == {"agent:xgb"}
    reference = default_config(get_workload(WORKLOAD), "cpu").to_json()
    assert data.records[0].config_json == reference
    (again,) = small_dataset(path, n=4, strategy="agent")  # retraces its steps from the records
    assert again.measured == 0 and again.skipped == 4


def test_collect_rejects_bad_input(tmp_path):
    with pytest.raises(TensorGymError, match="unknown strategy"):
        small_dataset(tmp_path / "x.db", strategy="grid")
    with pytest.raises(TensorGymError, match="positive integer"):
        small_dataset(tmp_path / "x.db", n=0)
    with pytest.raises(DatasetError, match="no dataset at"):
        Dataset.load(tmp_path / "none.parquet")


def test_a_database_without_the_options_column_reads_and_migrates(db, tmp_path):
    old = tmp_path / "old.db"
    con = sqlite3.connect(old)
    con.executescript("""
        CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT);
        CREATE TABLE workloads (key TEXT PRIMARY KEY, op TEXT NOT NULL, params TEXT NOT NULL,
                                name TEXT);
        CREATE TABLE records (id INTEGER PRIMARY KEY AUTOINCREMENT, workload_key TEXT NOT NULL,
            target TEXT NOT NULL, device TEXT NOT NULL, space_name TEXT NOT NULL,
            config_index INTEGER NOT NULL, config_json TEXT NOT NULL, costs TEXT NOT NULL,
            error INTEGER NOT NULL, error_msg TEXT NOT NULL DEFAULT '', gflops REAL NOT NULL,
            build_time REAL NOT NULL, run_time REAL NOT NULL, timestamp REAL NOT NULL);
        CREATE TABLE references_ (workload_key TEXT NOT NULL, target TEXT NOT NULL,
            device TEXT NOT NULL, config_json TEXT NOT NULL, seconds REAL NOT NULL,
            timestamp REAL NOT NULL, PRIMARY KEY (workload_key, target, device));
        INSERT INTO meta VALUES ('schema_version', '1');""")
    r = Dataset.load(db).records[0]
    con.execute("INSERT INTO records (workload_key, target, device, space_name, config_index, "
                "config_json, costs, error, error_msg, gflops, build_time, run_time, timestamp) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (r.workload_key, r.target, r.device, r.space_name, r.config_index,
                 r.config_json, json.dumps(list(r.costs)), int(r.error), r.error_msg, r.gflops,
                 r.build_time, r.run_time, r.timestamp))
    con.commit()
    con.close()
    recs = Records(old)
    (read,) = recs.query()
    assert read == replace(r, options="")
    assert recs.import_records([r]) == 0  # held already (the same measurement): not twice
    later = replace(r, timestamp=r.timestamp + 1)
    assert recs.import_records([later]) == 1  # the first write adds the column
    assert [x.options for x in recs.query()] == ["", r.options]


def test_records_refuse_answers_that_are_not_measurements(db):
    from tensorgym.dataset import ReplayMeasurer

    w = get_workload(WORKLOAD)
    replay = ReplayMeasurer(db)
    (answer,) = replay.measure(w, [replay.task(w).configs[0]])
    records = Records(":memory:")
    records.add_many(Task(w.key, "cpu", replay.device), [answer])  # served, not measured: skipped
    assert len(records) == 0
    with pytest.raises(TensorGymError, match="not a measurement"):
        records.add_many(Task(w.key, "cpu", replay.device), [replace(answer, cached=False)])


def test_importing_tensorgym_imports_neither_pyarrow_nor_xgboost():
    code = ("import sys, tensorgym, tensorgym.dataset, tensorgym.cli; "
            "tensorgym.cli.build_parser(); "
            "print([m for m in ('pyarrow', 'xgboost') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


BUNDLED = Path(__file__).resolve().parent.parent / "data" / "reference.parquet"
RESNET18 = [f"conv2d-C{i}" for i in range(1, 13)] + ["matmul-1024"]


@pytest.mark.skipif(not BUNDLED.exists(), reason="data/reference.parquet is not collected yet "
                    "(scripts/collect_reference_dataset.sh)")
def test_the_bundled_dataset_loads_and_covers_what_its_readme_says():
    from tensorgym.workloads import WORKLOADS

    assert BUNDLED.stat().st_size <= 25 * 2**20
    data = Dataset.load(BUNDLED)
    tasks = {t.workload: t for t in data.tasks() if t.target == "cpu"}
    readme = (BUNDLED.parent / "README.md").read_text()
    assert data.digest in readme
    for name in RESNET18:
        w = WORKLOADS[name]
        assert w.key in tasks, f"{name} missing"
        recs = data.task_records(tasks[w.key])
        strategies = {json.loads(r.options)["collect"]["strategy"] for r in recs}
        assert strategies == {"random", "agent:xgb"}, (name, strategies)
        space = space_for(w, "cpu")  # records made before a knob was added lack it
        assert default_config(w, "cpu").index in {space.from_json(r.config_json).index
                                                  for r in recs}


def test_hostile_rows_are_skipped_with_a_warning_and_the_good_rows_still_load(tmp_path):
    """Rows that are not objects, costs that are not lists, times that are NaN, inf, negative or
    too short for a finite GFLOP/s, an index of Infinity, a 400-digit number, list-valued keys:
    each row is skipped and said so; the good rows load, and no figure is non-finite."""
    import math
    import warnings as w

    good = [r for r in Dataset.load("data/reference.parquet").rows()
            if r["workload_key"] == "matmul:1024,1024,1024"][:20]
    ok = dict(next(r for r in good if r["error"] == 0))
    hostile = [
        ["a", "list"], 7, None,
        {**ok, "costs": 5}, {**ok, "costs": None}, {**ok, "costs": [5e-324]},
        {**ok, "costs": [float("nan")]}, {**ok, "build_time": float("nan")},
        {**ok, "run_time": float("inf")}, {**ok, "run_time": -1.0},
        {**ok, "config_index": float("inf")}, {**ok, "config_index": 10**400},
        {**ok, "workload_key": ["matmul:1024,1024,1024"]}, {**ok, "error": [0]},
    ]
    path = tmp_path / "hostile.jsonl"
    lines = [json.dumps(r, allow_nan=True) for r in good + hostile]
    path.write_text("\n".join(lines) + "\n")
    with w.catch_warnings(record=True) as caught:
        w.simplefilter("always")
        data = Dataset.load(path)
    assert len(data) == len(good)
    said = " ".join(str(c.message) for c in caught)
    assert "skipped 14 malformed rows" in said and "not an object" in said
    assert "non-finite or negative build or run time" in said and "finite GFLOP/s" in said
    assert all(math.isfinite(r.gflops) and math.isfinite(r.build_time) for r in data.records)
    # a damaged line (bad UTF-8) is skipped, naming the file and line; the others load
    (tmp_path / "bad.jsonl").write_bytes(lines[0].encode() + b"\n\xff\xfe\n")
    with pytest.warns(UserWarning, match=r"bad\.jsonl: skipped 1 malformed rows \(line 2: "
                      "not a JSON line"):
        assert len(Dataset.load(tmp_path / "bad.jsonl")) == 1
    (tmp_path / "bad.jsonl").write_bytes(b"\xff\xfe\n")  # no JSON line at all: an error
    with pytest.raises(DatasetError, match="bad.jsonl:1: not a JSON line"):
        Dataset.load(tmp_path / "bad.jsonl")
    (tmp_path / "deep.jsonl").write_text("[" * 100000 + "]" * 100000 + "\n")
    with pytest.raises(DatasetError, match="deep.jsonl:1: not a JSON line"):
        Dataset.load(tmp_path / "deep.jsonl")
    (tmp_path / "other.jsonl").write_text('{"name": "x"}\n')
    with pytest.raises(DatasetError, match="none of a dataset's columns"):
        Dataset.load(tmp_path / "other.jsonl")


def test_import_writes_each_record_once(db, tmp_path, capsys):
    """`dataset import A --db A` doubled every record; an import now skips what is held."""
    copy = tmp_path / "copy.db"
    out = tmp_path / "x.jsonl"
    assert main(["dataset", "export", "--db", str(db), "--out", str(out)]) == 0
    assert main(["dataset", "import", str(out), "--db", str(copy)]) == 0
    assert "7 records of" in capsys.readouterr().out
    for source in (out, copy):
        assert main(["dataset", "import", str(source), "--db", str(copy)]) == 0
        assert "0 records of" in capsys.readouterr().out
    assert len(Dataset.load(copy)) == 7 and Dataset.load(copy).digest == Dataset.load(db).digest
