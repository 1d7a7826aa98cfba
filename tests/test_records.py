import subprocess
import sys

from tensorgym.errors import ErrorCode
from tensorgym.hardware.result import MeasureResult
from tensorgym.records import Records
from tensorgym.templates import space_for
from tensorgym.workloads import matmul

W = matmul(8, 8, 8)
SPACE = space_for(W, "cpu")


def _result(i, gflops_cost, error=ErrorCode.NO_ERROR):
    return MeasureResult(SPACE.get(i), (gflops_cost,) if error == 0 else (), error, "",
                         W.flops, 0.1, 0.2, 1000.0 + i)


def test_add_query_best_lookup(tmp_path):
    db = Records(tmp_path / "r.db")
    db.add_many(W, "cpu", "dev", [_result(1, 1e-3), _result(2, 5e-4),
                                   _result(3, 0, ErrorCode.WRONG_ANSWER)])
    assert len(db) == 3
    recs = db.query(W.key, "cpu", "dev")
    assert [r.config_index for r in recs] == [1, 2, 3]
    assert recs[2].error == ErrorCode.WRONG_ANSWER and not recs[2].ok
    best = db.best(W.key, "cpu", "dev")[0]
    assert best.config_index == 2 and abs(best.gflops - W.flops / 5e-4 / 1e9) < 1e-9
    assert SPACE.from_json(best.config_json) == SPACE.get(2)
    assert db.lookup(W.key, "cpu", "dev", SPACE.get(1).to_json()).costs == (1e-3,)
    assert db.lookup(W.key, "cpu", "other", SPACE.get(1).to_json()) is None
    assert db.workload_keys() == [W.key]
    db.set_reference(W.key, "cpu", "dev", "{}", 0.5)
    assert db.reference(W.key, "cpu", "dev", "{}") == 0.5
    db.close()
    assert len(Records(tmp_path / "r.db")) == 3  # persisted


def test_records_survive_a_killed_writer(tmp_path):
    path = tmp_path / "k.db"
    code = f"""
import os, signal
from tensorgym.records import Records
from tests.test_records import W, _result
db = Records({str(path)!r})
db.add_many(W, "cpu", "dev", [_result(i, 1e-3) for i in range(5)])
os.kill(os.getpid(), signal.SIGKILL)
"""
    proc = subprocess.run([sys.executable, "-c", code], cwd=str(__import__("pathlib").Path(
        __file__).parent.parent))
    assert proc.returncode != 0
    assert len(Records(path)) == 5
