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
from tensorgym.dataset import Dataset  # noqa: E402
from tensorgym.errors import TensorGymError  # noqa: E402
from tensorgym.space import Config  # noqa: E402

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


def cli(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rc = main(argv)
    return rc, out.getvalue(), err.getvalue()


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
    text = check_results(path, tmp_path)
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
