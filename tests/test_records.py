import json
import os
import pickle
import sqlite3
import subprocess
import sys
import warnings

import pytest

from tensorgym.errors import ErrorCode, RecordsError, TensorGymError
from tensorgym.measure.result import MeasureResult
from tensorgym.records import Records
from tensorgym.task import Task
from tensorgym.templates import space_for
from tensorgym.workloads import matmul

W = matmul(8, 8, 8)
SPACE = space_for(W, "cpu")
T = Task(W.key, "cpu", "dev")


def _result(i, gflops_cost, error=ErrorCode.NO_ERROR):
    return MeasureResult(SPACE.get(i), (gflops_cost,) if error == 0 else (), error, "",
                         W.flops, 0.1, 0.2, 1000.0 + i)


def test_add_query_best_lookup(tmp_path):
    db = Records(tmp_path / "r.db")
    db.add_many(T, [_result(1, 1e-3), _result(2, 5e-4),
                                   _result(3, 0, ErrorCode.WRONG_ANSWER)])
    assert len(db) == 3
    recs = db.query(W.key, "cpu", "dev")
    assert [r.config_index for r in recs] == [1, 2, 3]
    assert recs[2].error == ErrorCode.WRONG_ANSWER and not recs[2].ok
    best = db.best(W.key, "cpu", "dev")[0]
    assert best.config_index == 2 and abs(best.gflops - W.flops / 5e-4 / 1e9) < 1e-9
    assert SPACE.from_json(best.config_json) == SPACE.get(2)
    assert db.lookup(T, SPACE.get(1).to_json()).costs == (1e-3,)
    assert db.lookup(Task(W.key, "cpu", "other"), SPACE.get(1).to_json()) is None
    assert db.workload_keys() == [W.key]
    db.set_reference(T, "{}", 0.5)
    assert db.reference(T, "{}") == 0.5
    db.close()
    assert len(Records(tmp_path / "r.db")) == 3  # persisted


def test_a_task_is_what_records_are_keyed_by(tmp_path):
    db = Records(tmp_path / "r.db")
    named = matmul(8, 8, 8, name="my-matmul")  # the key of W, with a name
    db.add(T, _result(1, 1e-3), workload=named)
    db.add(T, _result(2, 1e-3))  # the workload its key names (already registered: kept)
    assert db.workload_names() == {W.key: "my-matmul"}
    (row,) = db._read("SELECT DISTINCT workload_key, target, device FROM records")
    assert row == (W.key, "cpu", "dev")  # the columns as they always were
    with pytest.raises(TensorGymError, match="is not the workload of Task"):
        db.add_many(T, [_result(3, 1e-3)], workload=matmul(4, 4, 4))
    assert len(db) == 2
    with pytest.raises(TensorGymError, match="three strings.*workload=Workload"):
        Task(W, "cpu", "dev")  # a Workload where its key belongs
    assert Task(W.key, "cpu", "cpu/znver4/AMD EPYC/2t").device_info.threads == 2


def test_records_survive_a_killed_writer(tmp_path):
    path = tmp_path / "k.db"
    code = f"""
import os, signal
from tensorgym.records import Records
from tensorgym.task import Task
from tests.test_records import T, _result
db = Records({str(path)!r})
db.add_many(T, [_result(i, 1e-3) for i in range(5)])
os.kill(os.getpid(), signal.SIGKILL)
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=str(__import__("pathlib").Path(
        __file__).parent.parent))
    assert proc.returncode != 0
    assert len(Records(path)) == 5


# ---------------------------------------------------------------- nothing measured is lost


def _batch(n=8, start=10):
    return [_result(start + i, 1e-4 * (i + 1)) for i in range(n)]


def _unsaved_rows(side_file):
    return [json.loads(line) for line in open(side_file)]


def test_locked_database_keeps_the_batch_in_a_side_file(tmp_path):
    path = tmp_path / "r.db"
    db = Records(path, timeout=0.05, retry_delays=(0.0, 0.0))
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")  # another process holds the write lock
    batch = _batch()
    with pytest.raises(RecordsError) as e:
        db.add_many(T, batch)
    side = tmp_path / f"r.db.unsaved-{os.getpid()}.jsonl"
    assert str(path) in str(e.value) and str(side) in str(e.value) and "locked" in str(e.value)
    assert e.value.saved_to == str(side) and e.value.path == str(path)
    rows = _unsaved_rows(side)
    assert [r["row"]["config_index"] for r in rows] == [r.config.index for r in batch]
    assert [r["row"]["costs"] for r in rows] == [json.dumps(list(r.costs)) for r in batch]
    other.execute("ROLLBACK")
    other.close()
    assert len(db) == 0
    assert db.restore(side) == 8  # the lock is gone: the side file goes in
    assert [r.config_index for r in db.query(W.key)] == [r.config.index for r in batch]
    assert db.best(W.key)[0].config_index == batch[0].config.index


def test_full_database_keeps_the_batch_in_a_side_file(tmp_path):
    path = tmp_path / "full.db"
    db = Records(path, retry_delays=(0.0,))
    db.add_many(T, _batch(2))
    pages = db._db.execute("PRAGMA page_count").fetchone()[0]
    db._db.execute(f"PRAGMA max_page_count = {pages}")  # the disk is full
    big = [_result(100 + i, 1e-3) for i in range(400)]
    with pytest.raises(RecordsError, match="full") as e:
        db.add_many(T, big)
    assert str(path) in str(e.value) and e.value.saved_to in str(e.value)
    assert len(db) == 2  # all of the batch or none of it
    assert len(_unsaved_rows(e.value.saved_to)) == 400


def test_side_file_falls_back_to_the_user_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    db = Records(":memory:", retry_delays=())
    pages = db._db.execute("PRAGMA page_count").fetchone()[0]
    db._db.execute(f"PRAGMA max_page_count = {pages}")
    with pytest.raises(RecordsError) as e:
        db.add_many(T, [_result(100 + i, 1e-3) for i in range(400)])
    assert e.value.saved_to.startswith(str(tmp_path / "cache" / "tensorgym"))
    assert e.value.saved_to in str(e.value) and len(_unsaved_rows(e.value.saved_to)) == 400


def test_corrupt_database_names_its_path(tmp_path):
    path = tmp_path / "corrupt.db"
    path.write_bytes(b"this is not an SQLite database\n" * 200)
    with pytest.raises(RecordsError, match="not a database") as e:
        Records(path)
    assert str(path) in str(e.value) and isinstance(e.value, TensorGymError)


def test_damaged_pages_name_the_path(tmp_path):
    path = tmp_path / "damaged.db"
    db = Records(path)
    db.add_many(T, [_result(i, 1e-3) for i in range(2000)])
    db.close()  # checkpoints the WAL into the file
    data = bytearray(path.read_bytes())
    data[8192:] = b"\xff" * (len(data) - 8192)  # every page after the second
    path.write_bytes(bytes(data))
    with pytest.raises(RecordsError) as e:
        Records(path).query(W.key)
    assert str(path) in str(e.value)


def test_unopenable_path_names_it(tmp_path):
    (tmp_path / "file").write_text("")
    with pytest.raises(RecordsError) as e:
        Records(tmp_path / "file" / "r.db")  # a parent that is a file
    assert str(tmp_path / "file" / "r.db") in str(e.value)


# ---------------------------------------------------------------- values read back are checked

def _doctor(path, sql, *args):
    con = sqlite3.connect(path, isolation_level=None)
    con.execute(sql, args)
    con.close()


def test_stored_gflops_are_recomputed_not_trusted(tmp_path):
    path = tmp_path / "r.db"
    db = Records(path)
    slow, fast = _result(1, 1e-2), _result(2, 1e-4)
    db.add_many(T, [slow, fast])
    _doctor(path, "UPDATE records SET gflops = 1e6 WHERE config_index = 1")
    best = db.best(W.key, "cpu", "dev")[0]
    assert best.config_index == 2 and best.gflops == pytest.approx(fast.gflops)
    assert db.lookup(T, slow.config.to_json()).gflops == pytest.approx(
        slow.gflops)


def test_doctored_gflops_do_not_poison_transfer(tmp_path):
    from tensorgym.agents.transfer import load_source_data

    path = tmp_path / "r.db"
    db = Records(path)
    db.add_many(T, [_result(i, 1e-4 * (i + 1)) for i in range(6)])
    _doctor(path, "UPDATE records SET gflops = 1e6 WHERE config_index = 5")  # the slowest
    data = load_source_data(db, [W], "cpu", device="dev")
    assert data.y.max() == 1.0 and data.y.min() == pytest.approx(1 / 6)  # index 5 stays last


@pytest.mark.parametrize("stored", [0.0, -1.0, float("inf"), "abc"])
def test_bad_reference_times_are_ignored(tmp_path, stored):
    path = tmp_path / "r.db"
    db = Records(path)
    db.set_reference(T, "{}", 0.5)
    _doctor(path, "UPDATE references_ SET seconds = ?", stored)
    with pytest.warns(UserWarning, match="reference time"):
        assert db.reference(T, "{}") is None
    db.set_reference(T, "{}", 0.25)  # measured again: replaced
    assert db.reference(T, "{}") == 0.25


@pytest.mark.parametrize("column, value, reason", [
    ("error", 99, "unknown error code 99"),
    ("costs", "[]", "a success without positive finite times"),
    ("costs", "[-1.0]", "a success without positive finite times"),
    ("costs", "not json", "malformed values"),
    ("workload_key", "nosuchop:1,2", "unknown workload"),
])
def test_unusable_rows_are_skipped_with_a_warning(tmp_path, column, value, reason):
    path = tmp_path / "r.db"
    db = Records(path)
    db.add_many(T, [_result(1, 1e-3), _result(2, 2e-3)])
    _doctor(path, f"UPDATE records SET {column} = ? WHERE config_index = 1", value)
    with pytest.warns(UserWarning, match=reason):
        recs = db.query()
    assert [r.config_index for r in recs] == [2]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert db.best(W.key)[0].config_index == 2


def test_results_of_a_task_once_per_config(tmp_path):
    db = Records(tmp_path / "r.db")
    db.add_many(T, [_result(1, 1e-3), _result(2, 2e-3),
                                   _result(3, 0, ErrorCode.RUNTIME_DEVICE)])
    db.add_many(T, [_result(1, 4e-3)])  # measured again later
    db.add_many(Task(W.key, "cpu", "other-device"), [_result(7, 1e-3)])
    db.add_many(Task(matmul(4, 4, 4).key, "cpu", "dev"), [_result(8, 1e-3)])
    res = db.results(T, SPACE)
    assert [r.config.index for r in res] == [1, 2, 3]
    assert res[0].costs == (4e-3,) and all(r.cached for r in res) and not res[2].ok
    assert res[1].gflops == pytest.approx(W.flops / 2e-3 / 1e9)
    assert db.results(Task(W.key, "cpu", "nowhere"), SPACE) == []


# ---------------------------------------------------------------- pickling

def test_pickle_reconnects_to_the_same_file(tmp_path):
    db = Records(tmp_path / "r.db", timeout=3.0)
    db.add_many(T, _batch(3))
    copy = pickle.loads(pickle.dumps(db))
    assert copy.path == db.path and copy.timeout == 3.0 and len(copy) == 3
    copy.add_many(T, _batch(2, start=50))
    assert len(db) == 5  # one database, two connections


def test_pickle_copies_an_in_memory_database():
    db = Records(":memory:")
    db.add_many(T, _batch(3))
    copy = pickle.loads(pickle.dumps(db))
    assert [r.config_index for r in copy.query()] == [r.config_index for r in db.query()]
    copy.add_many(T, _batch(1, start=90))
    assert (len(copy), len(db)) == (4, 3)


def test_another_programs_database_is_refused_and_left_as_it_was(tmp_path, capsys):
    """A SQLite file without tensorgym's schema is refused by every command, not a byte of it
    changed (no tables added, no WAL switched on)."""
    import hashlib
    import sqlite3

    from tensorgym.cli import main

    path = tmp_path / "other_app.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
    db.execute("INSERT INTO users VALUES (1, 'ada')")
    db.commit()
    db.close()
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    with pytest.raises(RecordsError, match="not a tensorgym records database"):
        Records(path)
    for argv in (["dataset", "info", str(path)],
                 ["tune", "matmul:8,8,8", "--trials", "1", "--db", str(path), "--no-progress"]):
        assert main(argv) == 1
        assert "not a tensorgym records database (its tables: users)" in capsys.readouterr().err
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other_app.sqlite"]  # no -wal, -shm


def test_a_truncated_side_file_restores_its_good_lines_and_keeps_the_rest_aside(tmp_path):
    """A side file cut short (a disk-full write) used to make every later tune fail with an
    unexpected JSONDecodeError: its good lines go in, the damaged one is kept aside, said once."""
    path = tmp_path / "r.db"
    db = Records(path, timeout=0.05, retry_delays=(0.0, 0.0))
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    with pytest.raises(RecordsError) as e:
        db.add_many(T, _batch())
    other.execute("ROLLBACK")
    other.close()
    side = e.value.saved_to
    text = open(side).read()
    open(side, "w").write(text[:-40])  # the last line cut short
    with pytest.warns(UserWarning, match=r"1 damaged line\(s\) left out \(first at line 8\)"):
        done = db.restore_unsaved()
    assert done == [(side, 7)] and len(db) == 7 and not os.path.exists(side)
    assert open(f"{side}.damaged").read() == text[:-40].splitlines()[-1] + "\n"
    assert db.restore_unsaved() == []  # the database stays usable: nothing left to restore
