"""Hostile files (issue 38): a generated corpus and hypothesis fuzzing over what tensorgym reads
from files: JSON-lines datasets (``Dataset.load`` and a replay env over them), results files
(``leaderboard show``, ``validate``) and validation reports (``show --validation``).

The contract for every input: nothing escapes but a ``TensorGymError`` (from the CLI: exit 0 or 1
with one ``error:`` line, never "unexpected"); no reward, GFLOP/s or virtual time is NaN or
infinite; the rows and entries that are fine still load."""
from __future__ import annotations

import copy
import io
import json
import math
import os
import warnings
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any, Callable

import gymnasium as gym
import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import tensorgym  # noqa: E402,F401  (registers the envs)
from tensorgym.cli import main  # noqa: E402
from .cli_run import cli  # noqa: E402
from tensorgym.dataset import Dataset  # noqa: E402
from tensorgym.errors import TensorGymError  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ENV_ID = "TensorSched-matmul-1024-cpu"
WORKLOAD = "matmul:1024,1024,1024"
DEVICE = "cpu/znver4/AMD EPYC/2t"
FOREIGN = "cpu/nosuchcpu/Hostile Test CPU/2t"  # results of another device: validate skips them
# TENSORGYM_FUZZ_EXAMPLES=500 explores further (CI: 25 per test, reproducible)
FUZZ = settings(max_examples=int(os.environ.get("TENSORGYM_FUZZ_EXAMPLES", "25")), deadline=None,
                derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))


# ---------------------------------------------------------------- the real inputs mutated


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    """Rows of one task of the reference dataset (the env's), and a few of another task."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        all_rows = Dataset.load(REPO / "data" / "reference.parquet").rows()
    mine = [r for r in all_rows if r["workload_key"] == WORKLOAD and r["device"] == DEVICE]
    other = [r for r in all_rows if r["workload_key"] != WORKLOAD][:5]
    assert len(mine) >= 20 and any(r["error"] == 0 for r in mine)
    return mine[:40] + other


@pytest.fixture(scope="module")
def results_doc(tmp_path_factory) -> dict:
    """A real results document (``leaderboard run tiny-cpu``), its device made another one so
    that ``validate`` only checks it statically (nothing re-measured)."""
    d = tmp_path_factory.mktemp("results")
    out = d / "r.json"
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        rc = main(["leaderboard", "run", "tiny-cpu", "--agents", "random", "--trials", "2",
                   "--seeds", "0", "--remeasure", "0", "--no-vendor", "--out", str(out),
                   "--db", str(d / "r.db")])
    assert rc == 0
    doc = json.loads(out.read_text())
    doc["runs"][0]["device"]["name"] = FOREIGN
    return doc


@pytest.fixture(scope="module")
def report_doc(results_doc, tmp_path_factory) -> dict:
    d = tmp_path_factory.mktemp("report")
    (d / "r.json").write_text(json.dumps(results_doc))
    rc, _, err = cli(["validate", str(d / "r.json"), "--allow-skip", "--out", str(d / "v.json")])
    assert rc == 0, err
    return json.loads((d / "v.json").read_text())


# ---------------------------------------------------------------- checks


def assert_cli_ok(argv: list[str]) -> str:
    """``main(argv)`` exits 0 or 1, with at most one ``error:`` line and never "unexpected"."""
    rc, out, err = cli(argv)
    assert rc in (0, 1), (rc, err)
    assert "error: unexpected" not in err, err
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(errors) <= 1, err
    if rc == 1 and argv[0] == "leaderboard":
        assert len(errors) == 1, err
    for word in ("nan", "inf"):
        assert f" {word} " not in out.lower().replace("|", " "), out
    return out + err


def write_jsonl(path: Path, rows: list[Any], raw: bytes = b"") -> Path:
    with open(path, "wb") as f:
        for r in rows:
            f.write(json.dumps(r, separators=(",", ":")).encode() + b"\n")
        f.write(raw)
    return path


def finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def check_dataset(path: Path, good: list[dict], steps: int = 4) -> "Dataset | None":
    """Load ``path`` and replay it: only TensorGymError, only finite figures, and the rows of
    ``good`` (known fine) all loaded."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            ds = Dataset.load(path)
        except TensorGymError:
            return None
        keys = {(r.config_json, r.timestamp) for r in ds.records}
        missing = [r for r in good if (r["config_json"], r["timestamp"]) not in keys]
        assert not missing, f"{len(missing)} good rows lost, e.g. {missing[0]['config_index']}"
        for r in ds.records:
            assert finite(r.gflops) and finite(r.build_time) and finite(r.run_time)
        try:
            env = gym.make(ENV_ID, measure="replay", dataset=str(path), on_miss="surrogate",
                           records=False, dataset_device=DEVICE)
        except TensorGymError:
            return ds
        try:
            env.reset(seed=0)
            space = env.unwrapped.space
            configs = [r.config_json for r in ds.records
                       if r.workload_key == WORKLOAD and r.device == DEVICE][:steps]
            for cfg in configs:
                try:
                    action = np.array(space.from_json(cfg).choices)
                except TensorGymError:
                    action = env.action_space.sample()
                try:
                    _, reward, term, trunc, info = env.step(action)
                except TensorGymError:
                    break
                assert finite(reward), (reward, info)
                for k in ("gflops", "virtual_time", "runtime"):
                    if k in info and info[k] is not None:
                        assert not (isinstance(info[k], float) and math.isnan(info[k])), info
                assert finite(info.get("gflops", 0.0)), info
                assert finite(info.get("virtual_time", 0.0)), info
                if term or trunc:
                    break
        finally:
            env.close()
    return ds


def check_results(path: Path, tmp: Path) -> str:
    text = assert_cli_ok(["leaderboard", "show", str(path)])
    text += assert_cli_ok(["validate", str(path), "--allow-skip", "--out", str(tmp / "v.json")])
    return text


# ---------------------------------------------------------------- the corpus: datasets


def _knobs(row: dict, value: Any) -> dict:
    cfg = json.loads(row["config_json"])
    cfg["knobs"] = value
    return {**row, "config_json": json.dumps(cfg)}


def _first_ok(rows: list[dict]) -> int:
    return next(i for i, r in enumerate(rows) if r["error"] == 0 and r["workload_key"] == WORKLOAD)


ROW_MUTATIONS: dict[str, Callable[[dict], Any]] = {
    "not an object": lambda r: [r],
    "costs an int": lambda r: {**r, "costs": 3},
    "costs null": lambda r: {**r, "costs": None},
    "costs Infinity": lambda r: {**r, "costs": [math.inf]},
    "time 5e-324": lambda r: {**r, "costs": [5e-324]},
    "run_time NaN": lambda r: {**r, "run_time": math.nan},
    "build_time -1": lambda r: {**r, "build_time": -1.0},
    "index Infinity": lambda r: {**r, "config_index": math.inf},
    "index 400 digits": lambda r: {**r, "config_index": 10**400},
    "time 400 digits": lambda r: {**r, "build_time": 10**400},
    "key a list": lambda r: {**r, "workload_key": [r["workload_key"]]},
    "device a list": lambda r: {**r, "device": [r["device"]]},
    "knobs a list": lambda r: _knobs(r, [1, 2]),
    "knobs an int": lambda r: _knobs(r, 7),
    "config_json not JSON": lambda r: {**r, "config_json": "{"},
    "config_json deep": lambda r: {**r, "config_json": "[" * 100_000 + "]" * 100_000},
    "error 2**70": lambda r: {**r, "error": 2**70},
    "options a dict": lambda r: {**r, "options": {"a": 1}},
    "error_msg a list": lambda r: {**r, "error_msg": ["x"]},
}


@pytest.mark.parametrize("name", sorted(ROW_MUTATIONS))
def test_hostile_dataset_row(name, rows, tmp_path):
    i = _first_ok(rows)
    bad = ROW_MUTATIONS[name](copy.deepcopy(rows[i]))
    good = rows[:i] + rows[i + 1:]
    path = write_jsonl(tmp_path / "d.jsonl", rows[:i] + [bad] + rows[i + 1:])
    ds = check_dataset(path, good)
    assert ds is not None, f"{name}: one bad row made the whole dataset unreadable"


RAW_LINES = {
    "bad UTF-8": b'{"workload_key": "\xff\xfe"}\n',
    "deep nesting": b"[" * 100_000 + b"]" * 100_000 + b"\n",
    "not JSON": b"{not json\n",
    "400-digit number line": b'{"config_index": ' + b"9" * 400 + b"}\n",
    "NUL bytes": b"\x00\x00\x00\n",
}


@pytest.mark.parametrize("name", sorted(RAW_LINES))
def test_hostile_dataset_line(name, rows, tmp_path):
    """A damaged line in the middle of a dataset is reported (file and line) and skipped."""
    path = tmp_path / "d.jsonl"
    write_jsonl(path, rows[:3], RAW_LINES[name])
    with open(path, "ab") as f:
        for r in rows[3:]:
            f.write(json.dumps(r).encode() + b"\n")
    with pytest.warns(UserWarning, match=r"d\.jsonl: skipped 1 malformed rows \(line 4: "):
        Dataset.load(path)
    assert check_dataset(path, rows) is not None


def test_reference_1e300_times_a_config(rows, tmp_path):
    """A reference 1e300x slower than a config: rewards stay finite (no inf speed-up)."""
    ref = [dict(r) for r in rows]
    env = gym.make(ENV_ID, measure="replay", dataset=str(write_jsonl(tmp_path / "a.jsonl", ref)),
                   on_miss="surrogate", records=False, dataset_device=DEVICE)
    ref_json = env.unwrapped.session.reference_config.to_json()
    env.close()
    out = []
    for r in ref:
        r = dict(r)
        if r["workload_key"] == WORKLOAD and r["error"] == 0:
            if r["config_json"] == ref_json:
                r["costs"] = [1e300]
            else:
                r["costs"] = [1e-300 * c for c in r["costs"]]
        out.append(r)
    if not any(r["config_json"] == ref_json for r in out):
        out.append({**next(r for r in out if r["workload_key"] == WORKLOAD and r["error"] == 0),
                    "config_json": ref_json, "costs": [1e300], "timestamp": 1.0})
    check_dataset(write_jsonl(tmp_path / "b.jsonl", out), [], steps=6)


# ---------------------------------------------------------------- the corpus: results, reports


def _entry(doc: dict) -> dict:
    return doc["runs"][0]["entries"][0]


def _two_entries(doc: dict) -> dict:
    """The document with a second copy of its entry (another seed): the one left intact."""
    doc = copy.deepcopy(doc)
    e2 = copy.deepcopy(_entry(doc))
    e2["seed"] = 1
    doc["runs"][0]["entries"].append(e2)
    return doc


def _set_best_knobs(doc: dict, v: Any) -> None:
    if _entry(doc).get("best"):
        _entry(doc)["best"]["config"]["knobs"] = v


ENTRY_MUTATIONS: dict[str, Callable[[dict], None]] = {
    "best knobs a list": lambda d: _set_best_knobs(d, [1, 2]),
    "best knobs an int": lambda d: _set_best_knobs(d, 7),
    "trial knobs a list": lambda d: _entry(d)["trials"][0]["config"].__setitem__("knobs", [1]),
    "trial knobs an int": lambda d: _entry(d)["trials"][0]["config"].__setitem__("knobs", 7),
    "trial config a string": lambda d: _entry(d)["trials"][0].__setitem__("config", "x"),
    "workload 5000 digits": lambda d: _entry(d).__setitem__(
        "workload", "matmul:" + "9" * 5000 + ",16,16"),
    "workload a list": lambda d: _entry(d).__setitem__("workload", ["matmul:16,16,16"]),
    "flops 400 digits": lambda d: _entry(d).__setitem__("flops", 10**400),
    "seed 400 digits": lambda d: _entry(d).__setitem__("seed", 10**400),
    "budget -5": lambda d: _entry(d).__setitem__("budget", -5),
    "runtimes Infinity": lambda d: _entry(d)["trials"][0].__setitem__("runtimes", [math.inf]),
    "runtimes 5e-324": lambda d: _entry(d)["trials"][0].__setitem__("runtimes", [5e-324]),
    "compile_time 400 digits": lambda d: _entry(d)["trials"][0].__setitem__(
        "compile_time", 10**400),
    "gflops 1e308": lambda d: _entry(d)["trials"][0].__setitem__("gflops", 1e308),
    "best trial 2**70": lambda d: _entry(d)["best"] and _entry(d)["best"].__setitem__(
        "trial", 2**70),
    "error a list": lambda d: _entry(d)["trials"][0].__setitem__("error", ["NO_ERROR"]),
    "entry a list": lambda d: d["runs"][0]["entries"].__setitem__(0, [1]),
    "agent_options deep": lambda d: _entry(d).__setitem__(
        "agent_options", json.loads("[" * 500 + "]" * 500) and {"x": _deep(500)}),
    "label a dict": lambda d: _entry(d).__setitem__("label", {"a": 1}),
}


def _deep(n: int) -> Any:
    v: Any = 0
    for _ in range(n):
        v = [v]
    return v


@pytest.mark.parametrize("name", sorted(ENTRY_MUTATIONS))
def test_hostile_results_entry(name, results_doc, tmp_path):
    doc = _two_entries(results_doc)
    ENTRY_MUTATIONS[name](doc)
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    check_results(path, tmp_path)
    # the intact entry (seed 1) is still ranked by `show`
    rc, out, err = cli(["leaderboard", "show", str(path)])
    assert rc == 0, err
    assert "| random | 1 |" in out or "random" in out, out


RAW_RESULTS = {
    "bad UTF-8": b'{"schema": "tensorgym-results", "x": "\xff"}',
    "deep nesting": b'{"schema": "tensorgym-results", "runs": ' + b"[" * 100_000
                    + b"]" * 100_000 + b"}",
    "Infinity": b'{"schema": "tensorgym-results", "schema_version": "1.1", "runs": Infinity}',
    "not an object": b"[1, 2, 3]",
    "400-digit version": b'{"schema": "tensorgym-results", "schema_version": ' + b"9" * 400
                         + b', "runs": []}',
    "empty": b"",
}


@pytest.mark.parametrize("name", sorted(RAW_RESULTS))
def test_hostile_results_file(name, tmp_path):
    path = tmp_path / "r.json"
    path.write_bytes(RAW_RESULTS[name])
    check_results(path, tmp_path)


REPORT_MUTATIONS: dict[str, Callable[[dict], None]] = {
    "digest a list": lambda r: r["checks"][0].__setitem__("digest", ["x"]),
    "digest a dict": lambda r: r["checks"][0].__setitem__("digest", {"x": 1}),
    "status a list": lambda r: r["checks"][0].__setitem__("status", ["ok"]),
    "note a number": lambda r: r["checks"][0].__setitem__("note", 10**400),
    "check a list": lambda r: r["checks"].__setitem__(0, [1]),
    "checks a dict": lambda r: r.__setitem__("checks", {"a": 1}),
    "unknown field": lambda r: r["checks"][0].__setitem__("hostile", 1),
    "claimed Infinity": lambda r: r["checks"][0].__setitem__("claimed_gflops", math.inf),
    "claimed 400 digits": lambda r: r["checks"][0].__setitem__("claimed_gflops", 10**400),
}


@pytest.mark.parametrize("name", sorted(REPORT_MUTATIONS))
def test_hostile_report(name, results_doc, report_doc, tmp_path):
    rep = copy.deepcopy(report_doc)
    REPORT_MUTATIONS[name](rep)
    (tmp_path / "r.json").write_text(json.dumps(results_doc))
    (tmp_path / "v.json").write_text(json.dumps(rep))
    assert_cli_ok(["leaderboard", "show", str(tmp_path / "r.json"), "--validation",
                   str(tmp_path / "v.json")])


@pytest.mark.parametrize("raw", [b'{"schema": "tensorgym-validation", "checks": [\xff]}',
                                 b"[" * 100_000, b"Infinity"])
def test_hostile_report_file(raw, results_doc, tmp_path):
    (tmp_path / "r.json").write_text(json.dumps(results_doc))
    (tmp_path / "v.json").write_bytes(raw)
    assert_cli_ok(["leaderboard", "show", str(tmp_path / "r.json"), "--validation",
                   str(tmp_path / "v.json")])


# ---------------------------------------------------------------- fuzzing

SCALARS = (st.none() | st.booleans() | st.integers() | st.integers(-10**400, 10**400)
           | st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([1e300, 5e-324, -0.0])
           | st.text(max_size=20))
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)
ROW_FIELDS = ["workload_key", "target", "device", "space_name", "config_index", "config_json",
              "costs", "error", "error_msg", "gflops", "build_time", "run_time", "timestamp",
              "options", "knobs"]


@FUZZ
@given(field=st.sampled_from(ROW_FIELDS), value=JSON, which=st.integers(0, 7))
def test_fuzz_dataset_row(field, value, which, rows, tmp_path_factory):
    path = tmp_path_factory.mktemp("fz") / "d.jsonl"
    i = which % len(rows)
    bad = copy.deepcopy(rows[i])
    if field == "knobs":
        bad = _knobs(bad, value)
    else:
        bad[field] = value
    check_dataset(write_jsonl(path, rows[:i] + [bad] + rows[i + 1:]), rows[:i] + rows[i + 1:],
                  steps=3)


def _paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for k, v in enumerate(obj[:2]):
            out += _paths(v, prefix + (k,))
    return out


def _set(obj: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    obj[path[0]] = _set(obj[path[0]], path[1:], value)
    return obj


@FUZZ
@given(data=st.data(), value=JSON)
def test_fuzz_results_entry(data, value, results_doc, tmp_path_factory):
    doc = _two_entries(results_doc)
    where = data.draw(st.sampled_from(_paths(_entry(doc))))
    _set(_entry(doc), where, value)
    tmp = tmp_path_factory.mktemp("fz")
    (tmp / "r.json").write_text(json.dumps(doc))
    check_results(tmp / "r.json", tmp)


@FUZZ
@given(data=st.data(), value=JSON)
def test_fuzz_report(data, value, results_doc, report_doc, tmp_path_factory):
    rep = copy.deepcopy(report_doc)
    where = data.draw(st.sampled_from(_paths(rep)))
    rep = _set(rep, where, value)
    tmp = tmp_path_factory.mktemp("fz")
    (tmp / "r.json").write_text(json.dumps(results_doc))
    (tmp / "v.json").write_text(json.dumps(rep))
    assert_cli_ok(["leaderboard", "show", str(tmp / "r.json"), "--validation",
                   str(tmp / "v.json")])


# ---------------------------------------------------------------- Parquet datasets

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
from tensorgym.dataset.data import DERIVED, _schema  # noqa: E402


def write_parquet(path: Path, rows: list[dict], columns: "dict[str, Any] | None" = None) -> Path:
    """``rows`` as the export writes them (its schema), but for ``columns``: name -> a pyarrow
    array that replaces that column (or None: the column left out)."""
    schema = _schema(pa)
    arrays, names = [], []
    for f in schema:
        if columns and f.name in columns:
            continue
        arrays.append(pa.array([r.get(f.name) for r in rows], type=f.type))
        names.append(f.name)
    for name, arr in (columns or {}).items():
        if arr is not None:
            arrays.append(arr)
            names.append(name)
    pq.write_table(pa.Table.from_arrays(arrays, names=names), path)
    return path


def _column(rows: list[dict], name: str) -> list:
    return [r.get(name) for r in rows]


# values of a column's own Parquet type that no record may have (one row's value replaced)
HOSTILE_OF_TYPE = {
    "double": [None, math.nan, math.inf, -math.inf, -1.0, 5e-324, 1e308, -0.0],
    "int64": [None, -2**63, 2**63 - 1, -1, 0],
    "int32": [None, -2**31, 2**31 - 1, -1, 99],
    "string": [None, "", "\x00", "{", "[" * 5000, "\u202e\ud7ff", "9" * 400],
    "list<item: double>": [None, [], [None], [math.nan], [math.inf], [-1.0], [5e-324],
                           [0.0], [1e308] * 3],
}


def _retyped(values: list, kind: str) -> Any:
    """The column's values as another Parquet type: what another program's file may hold."""
    if kind == "string":
        return pa.array([None if v is None else str(v) for v in values], pa.string())
    if kind == "binary":
        return pa.array([None if v is None else str(v).encode() + b"\xff" for v in values],
                        pa.binary())
    if kind == "float64":
        return pa.array([float(len(str(v))) if not isinstance(v, (int, float)) else float(v)
                         for v in values], pa.float64())
    if kind == "uint64":
        return pa.array([2**64 - 1 - i for i in range(len(values))], pa.uint64())
    if kind == "bool":
        return pa.array([bool(i % 2) for i in range(len(values))], pa.bool_())
    if kind == "null":
        return pa.nulls(len(values))
    if kind == "list<string>":
        return pa.array([[str(v)] for v in values], pa.list_(pa.string()))
    if kind == "list<list<int>>":
        return pa.array([[[i, -i]] for i in range(len(values))], pa.list_(pa.list_(pa.int64())))
    if kind == "struct":
        return pa.array([{"a": i, "b": str(v)[:10]} for i, v in enumerate(values)],
                        pa.struct([("a", pa.int64()), ("b", pa.string())]))
    if kind == "map":
        return pa.array([[("k", float(i))] for i in range(len(values))],
                        pa.map_(pa.string(), pa.float64()))
    if kind == "timestamp":
        return pa.array(list(range(len(values))), pa.timestamp("s"))
    if kind == "date":
        return pa.array([2**31 - 1 - i for i in range(len(values))], pa.date32())
    if kind == "decimal":
        import decimal
        return pa.array([decimal.Decimal(i) / 7 for i in range(len(values))],
                        pa.decimal128(38, 30))
    if kind == "dictionary":
        return pa.array([str(v)[:20] for v in values]).dictionary_encode()
    raise AssertionError(kind)


RETYPES = ["string", "binary", "float64", "uint64", "bool", "null", "list<string>",
           "list<list<int>>", "struct", "map", "timestamp", "date", "decimal", "dictionary"]
PARQUET_COLUMNS = [f.name for f in _schema(pa)]


@pytest.mark.parametrize("kind", RETYPES)
@pytest.mark.parametrize("column", ["costs", "config_index", "error", "build_time",
                                    "workload_key", "config_json"])
def test_parquet_column_of_another_type(column, kind, rows, tmp_path):
    """A column of another type altogether: the dataset loads (its rows skipped, said in a
    warning) or is refused with a DatasetError; nothing else, no non-finite figure."""
    path = write_parquet(tmp_path / "d.parquet", rows,
                         {column: _retyped(_column(rows, column), kind)})
    check_dataset(path, [], steps=2)


@pytest.mark.parametrize("column", PARQUET_COLUMNS)
def test_parquet_hostile_value_of_the_column_type(column, rows, tmp_path):
    """Every hostile value of the column's own type in one row each: the other rows load."""
    i = _first_ok(rows)
    values = HOSTILE_OF_TYPE[str(_schema(pa).field(column).type)]
    bad = [{**rows[i], column: v} for v in values]
    good = rows[:i] + rows[i + 1:]
    check_dataset(write_parquet(tmp_path / "d.parquet", good + bad), good, steps=3)


@pytest.mark.parametrize("column", [c for c in PARQUET_COLUMNS] + ["all but one"])
def test_parquet_missing_column(column, rows, tmp_path):
    if column == "all but one":
        cols = {c: None for c in PARQUET_COLUMNS if c != "workload_key"}
    else:
        cols = {column: None}
    path = write_parquet(tmp_path / "d.parquet", rows, cols)
    ds = check_dataset(path, rows if column in DERIVED else [], steps=2)
    if column in DERIVED:
        assert ds is not None and len(ds) == len(rows)


def test_parquet_extra_columns_are_ignored(rows, tmp_path):
    n = len(rows)
    path = write_parquet(tmp_path / "d.parquet", rows, {
        "extra_struct": _retyped(list(range(n)), "struct"), "extra_null": pa.nulls(n),
        "extra_deep": pa.array([[[[1]]]] * n, pa.list_(pa.list_(pa.list_(pa.int64()))))})
    ds = check_dataset(path, rows)
    assert ds is not None and len(ds) == len(rows)


def _parquet_bytes(rows: list[dict], tmp_path: Path) -> bytes:
    return write_parquet(tmp_path / "good.parquet", rows).read_bytes()


RAW_PARQUET: dict[str, Callable[[bytes], bytes]] = {
    "empty": lambda b: b"",
    "magic only": lambda b: b"PAR1",
    "magic twice": lambda b: b"PAR1PAR1",
    "cut in half": lambda b: b[:len(b) // 2],
    "footer cut": lambda b: b[:-9],
    "last byte cut": lambda b: b[:-1],
    "footer length huge": lambda b: b[:-8] + (2**31 - 1).to_bytes(4, "little") + b"PAR1",
    "footer zeroed": lambda b: b[:-200] + bytes(192) + b[-8:],
    "pages zeroed": lambda b: b[:4] + bytes(len(b) // 2) + b[4 + len(b) // 2:],
    "random bytes": lambda b: bytes(np.random.default_rng(0).integers(0, 256, 4096,
                                                                      dtype=np.uint8)),
    "JSON lines": lambda b: b'{"workload_key": "x"}\n',
    "UTF-8 junk": lambda b: "\u202e\ud7ff".encode() * 100,
}


@pytest.mark.parametrize("name", sorted(RAW_PARQUET))
def test_hostile_parquet_file(name, rows, tmp_path):
    """A damaged .parquet file is refused with a DatasetError that names it (or, where the
    damage misses the data, loads): never a pyarrow or OS error."""
    path = tmp_path / "d.parquet"
    path.write_bytes(RAW_PARQUET[name](_parquet_bytes(rows, tmp_path)))
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            Dataset.load(path)
    except TensorGymError as e:
        assert str(path) in str(e), e
    check_dataset(path, [], steps=2)


def test_parquet_of_zero_rows(rows, tmp_path):
    path = write_parquet(tmp_path / "d.parquet", [])
    ds = check_dataset(path, [])
    assert ds is None or len(ds) == 0


@FUZZ
@given(data=st.data(), which=st.integers(0, 7))
def test_fuzz_parquet_row(data, which, rows, tmp_path_factory):
    """One row's value of a column hostile (of the column's type), or a column of another type,
    or a byte of the file flipped."""
    tmp = tmp_path_factory.mktemp("fz")
    column = data.draw(st.sampled_from(PARQUET_COLUMNS))
    how = data.draw(st.sampled_from(["value", "retype", "flip"]))
    i = which % len(rows)
    if how == "value":
        typ = str(_schema(pa).field(column).type)
        strat = {"double": st.none() | st.floats(), "int64": st.none() | st.integers(-2**63, 2**63 - 1),
                 "int32": st.none() | st.integers(-2**31, 2**31 - 1),
                 "string": st.none() | st.text(max_size=30),
                 "list<item: double>": st.none() | st.lists(st.none() | st.floats(), max_size=4)}
        bad = {**rows[i], column: data.draw(strat[typ])}
        good = rows[:i] + rows[i + 1:]
        check_dataset(write_parquet(tmp / "d.parquet", rows[:i] + [bad] + rows[i + 1:]), good,
                      steps=3)
    elif how == "retype":
        kind = data.draw(st.sampled_from(RETYPES))
        path = write_parquet(tmp / "d.parquet", rows,
                             {column: _retyped(_column(rows, column), kind)})
        check_dataset(path, rows if column in DERIVED else [], steps=2)
    else:
        raw = bytearray(_parquet_bytes(rows, tmp))
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] ^= data.draw(st.integers(1, 255))
        (tmp / "d.parquet").write_bytes(bytes(raw))
        check_dataset(tmp / "d.parquet", [], steps=2)


def test_parquet_value_without_a_python_value_names_its_row(rows, tmp_path):
    """A date32 past year 9999 has no Python value (pyarrow raised OverflowError): the rows are
    skipped, and the warning names the file, the row and the column."""
    path = write_parquet(tmp_path / "d.parquet", rows, {"costs": _retyped(rows, "date")})
    with pytest.warns(UserWarning, match=r"d\.parquet: skipped \d+ malformed rows \(row 1: "
                                         r"costs \(date32\[day\]\) has no value"):
        assert len(Dataset.load(path)) == 0


# ---------------------------------------------------------------- side files of the records

from tensorgym.errors import RecordsError  # noqa: E402
from tensorgym.measure.result import MeasureResult  # noqa: E402
from tensorgym.records import Records  # noqa: E402
from tensorgym.task import Task  # noqa: E402
from tensorgym.templates import space_for  # noqa: E402
from tensorgym.workloads import matmul  # noqa: E402

SIDE_W = matmul(8, 8, 8)
SIDE_SPACE = space_for(SIDE_W, "cpu")
SIDE_T = Task(SIDE_W.key, "cpu", "dev")


def _side_result(i: int) -> MeasureResult:
    return MeasureResult(SIDE_SPACE.get(i), (1e-4 * (i + 1),), 0, "", SIDE_W.flops, 0.1, 0.2,
                         1000.0 + i)


@pytest.fixture(scope="module")
def side_lines(tmp_path_factory) -> list[bytes]:
    """The lines of a real side file: a batch of 6 written while another process held the
    database's write lock."""
    import sqlite3
    path = tmp_path_factory.mktemp("side") / "r.db"
    db = Records(path, timeout=0.02, retry_delays=())
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN EXCLUSIVE")
    with pytest.raises(RecordsError) as e:
        db.add_many(SIDE_T, [_side_result(i) for i in range(10, 16)])
    other.execute("ROLLBACK")
    other.close()
    db.close()
    lines = Path(e.value.saved_to).read_bytes().splitlines()
    assert len(lines) == 6
    return lines


def check_side_file(tmp: Path, lines: list[bytes], hostile: "set[int]") -> None:
    """``lines`` as a side file of a new database: restoring it (as ``tune --db`` does first)
    raises nothing, restores every line not in ``hostile``, keeps the lines it leaves out in
    ``<side>.damaged`` (hostile ones only), and the database takes a write afterwards."""
    path = tmp / "r.db"
    side = tmp / "r.db.unsaved-1.jsonl"
    side_data = b"\n".join(lines) + b"\n"
    side.write_bytes(side_data)
    good = {json.loads(ln)["row"]["config_index"] for i, ln in enumerate(lines)
            if i not in hostile}
    db = Records(path)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        done = db.restore_unsaved()
        recs = db.query(SIDE_W.key)
    assert [s for s, _ in done] == [str(side)] and not side.exists()
    assert good <= {r.config_index for r in recs}
    for r in recs:
        assert finite(r.gflops) and finite(r.build_time) and finite(r.run_time)
    aside = Path(f"{side}.damaged")
    kept = aside.read_bytes().splitlines() if aside.exists() else []
    # (a line of the file ends at a "\r" too, as bytes.splitlines has it)
    assert done[0][1] + len(kept) == sum(1 for ln in side_data.splitlines() if ln.strip())
    allowed = {p for i in hostile if i < len(lines) for p in lines[i].splitlines()}
    assert all(ln in allowed for ln in kept), (kept, allowed)
    if kept:
        msg = [str(w.message) for w in said if "damaged line" in str(w.message)]
        assert len(msg) == 1 and str(side) in msg[0] and str(aside) in msg[0], msg
    db.add_many(SIDE_T, [_side_result(1)])  # usable: the next write goes in
    assert 1 in {r.config_index for r in db.query(SIDE_W.key)}
    db.close()


def _side_obj(line: bytes) -> dict:
    return json.loads(line)


SIDE_MUTATIONS: dict[str, Callable[[dict], Any]] = {
    "not an object": lambda e: [e],
    "row a list": lambda e: {**e, "row": list(e["row"].values())},
    "workload a string": lambda e: {**e, "workload": "matmul"},
    "params a list": lambda e: _set(e, ("workload", "params"), [8, 8, 8]),
    "name a number": lambda e: _set(e, ("workload", "name"), 3),
    "key null": lambda e: _set(e, ("row", "target"), None),
    "index 2**70": lambda e: _set(e, ("row", "config_index"), 2**70),
    "index 400 digits": lambda e: _set(e, ("row", "config_index"), 10**400),
    "index a list": lambda e: _set(e, ("row", "config_index"), [1]),
    "error a float": lambda e: _set(e, ("row", "error"), 0.5),
    "build_time NaN": lambda e: _set(e, ("row", "build_time"), math.nan),
    "timestamp 400 digits": lambda e: _set(e, ("row", "timestamp"), 10**400),
    "costs a list": lambda e: _set(e, ("row", "costs"), [1e-4]),
    "options a dict": lambda e: _set(e, ("row", "options"), {"a": 1}),
    "lone surrogate": lambda e: _set(e, ("row", "device"), "\ud800"),
    "another workload's row": lambda e: _set(e, ("row", "workload_key"), "matmul:9,9,9"),
    "no row": lambda e: {"workload": e["workload"]},
    "deep": lambda e: _set(e, ("row", "options"), _deep(5000)),
}


@pytest.mark.parametrize("name", sorted(SIDE_MUTATIONS))
def test_hostile_side_file_line(name, side_lines, tmp_path):
    bad = SIDE_MUTATIONS[name](_side_obj(side_lines[2]))
    try:
        raw = json.dumps(bad).encode()
    except RecursionError:
        raw = b'{"workload": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    check_side_file(tmp_path, side_lines[:2] + [raw] + side_lines[3:], {2})


RAW_SIDE_LINES = {
    "cut short": lambda ln: ln[:-40],
    "bad UTF-8": lambda ln: ln[:30] + b"\xff\xfe" + ln[30:],
    "NUL bytes": lambda ln: b"\x00" * 50,
    "deep nesting": lambda ln: b"[" * 100_000 + b"]" * 100_000,
    "400-digit number": lambda ln: b"9" * 400,
    "Infinity": lambda ln: b"Infinity",
    "a JSON string": lambda ln: b'"x"',
}


@pytest.mark.parametrize("name", sorted(RAW_SIDE_LINES))
def test_hostile_side_file_raw_line(name, side_lines, tmp_path):
    lines = list(side_lines)
    lines[4] = RAW_SIDE_LINES[name](lines[4])
    check_side_file(tmp_path, lines, {4})


def test_side_file_of_random_bytes(tmp_path):
    """A side file that is not one at all: every line kept aside, none restored, no error."""
    raw = bytes(np.random.default_rng(1).integers(0, 256, 3000, dtype=np.uint8))
    check_side_file(tmp_path, raw.split(b"\n"), set(range(10_000)))


@FUZZ
@given(data=st.data(), value=JSON, which=st.integers(0, 5))
def test_fuzz_side_file_line(data, value, which, side_lines, tmp_path_factory):
    """One line of a side file: a field (anywhere in it) given any JSON value, or random bytes
    (spliced in or the whole line)."""
    lines = list(side_lines)
    how = data.draw(st.sampled_from(["field", "splice", "bytes"]))
    if how == "field":
        e = _side_obj(lines[which])
        where = data.draw(st.sampled_from(_paths(e)))
        lines[which] = json.dumps(_set(e, where, value)).encode()
    elif how == "splice":
        at = data.draw(st.integers(0, len(lines[which])))
        lines[which] = lines[which][:at] + data.draw(st.binary(max_size=20)) + lines[which][at:]
    else:
        lines[which] = data.draw(st.binary(max_size=200))
    lines = [ln for part in lines for ln in part.split(b"\n")]  # bytes may hold a newline
    hostile = set(range(len(lines))) if how != "field" else {which}
    tmp = tmp_path_factory.mktemp("side")
    check_side_file(tmp, lines, hostile)


# ---------------------------------------------------------------- the leaderboard's --ray journal

from tensorgym.leaderboard.run import read_journal  # noqa: E402


def check_journal(tmp: Path, lines: list[bytes], good: list[dict]) -> None:
    """``OUT.partial.jsonl`` of ``lines`` read back as a ``--ray`` rerun does: nothing raised,
    the entries of ``good`` resumed, damaged lines said (file and line) in one message."""
    path = tmp / "r.json.partial.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    said: list[str] = []
    done = read_journal(path, said.append)
    for e in good:
        assert (e["agent"], e["workload"], e["target"], e["seed"], e["budget"]) in done
    assert len(said) <= 1 and all(str(path) in s for s in said), said


@pytest.fixture(scope="module")
def journal_entries(results_doc) -> list[dict]:
    e = _entry(results_doc)
    return [{**copy.deepcopy(e), "seed": s} for s in range(4)]


@pytest.mark.parametrize("name", sorted(RAW_SIDE_LINES))
def test_hostile_journal_line(name, journal_entries, tmp_path):
    lines = [json.dumps(e).encode() for e in journal_entries]
    lines[1] = RAW_SIDE_LINES[name](lines[1])
    check_journal(tmp_path, lines, journal_entries[:1] + journal_entries[2:])


@FUZZ
@given(data=st.data(), value=JSON, which=st.integers(0, 3))
def test_fuzz_journal_line(data, value, which, journal_entries, tmp_path_factory):
    entries = copy.deepcopy(journal_entries)
    where = data.draw(st.sampled_from(_paths(entries[which])))
    entries[which] = _set(entries[which], where, value)
    lines = [json.dumps(e).encode() for e in entries]
    if data.draw(st.booleans()):
        lines[which] = data.draw(st.binary(max_size=100)).replace(b"\n", b"")
    check_journal(tmp_path_factory.mktemp("j"), lines,
                  journal_entries[:which] + journal_entries[which + 1:])


def test_tune_db_restores_a_hostile_side_file_and_tunes(side_lines, tmp_path):
    """``tune --db`` over a database whose side file has every hostile line above: it
    restores the good lines (said on stderr), keeps the rest aside, and tunes all the same."""
    hostile = [json.dumps(m(_side_obj(side_lines[0])), default=str).encode()
               for name, m in sorted(SIDE_MUTATIONS.items()) if name != "deep"]
    hostile += [m(side_lines[0]) for m in RAW_SIDE_LINES.values()]
    side = tmp_path / "r.db.unsaved-1.jsonl"
    side.write_bytes(b"\n".join(side_lines + hostile) + b"\n")
    rc, out, err = cli(["tune", "matmul:8,8,8", "--trials", "1", "--db", str(tmp_path / "r.db"),
                        "--no-progress", "--json"])
    assert rc == 0, err
    assert f"restored {len(side_lines)} measurements into {tmp_path / 'r.db'} from {side}" in err
    assert not side.exists() and len(Path(f"{side}.damaged").read_bytes().splitlines()) \
        == len(hostile)
    db = Records(tmp_path / "r.db")
    assert len(db.query(SIDE_W.key, device="dev")) == len(side_lines)
    assert len(db) == len(side_lines) + json.loads(out)["trials"]  # and the tune's 1 trial
    db.close()
