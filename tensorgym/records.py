"""The records database: every measurement, in one SQLite file (WAL, so a killed process leaves
the records already committed intact, and readers never block the writer).

Nothing read back is trusted: GFLOP/s are recomputed from the stored times and the workload's
FLOPs, rows with an unknown error code or unusable times are skipped with a warning, and a
reference time must be finite and positive. Every SQLite error becomes a ``RecordsError`` that
names the file; a batch that cannot be written is kept in a side file (``restore`` reads it)."""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import math
import os
import sqlite3
import statistics
import time
import warnings
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Optional, Sequence

import platformdirs

from .errors import ErrorCode, InvalidConfigError, RecordsError, TensorGymError
from .measure.result import MeasureResult
from .task import Task
from .workloads import Workload, get_workload

SCHEMA_VERSION = 1

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS workloads (
    key TEXT PRIMARY KEY, op TEXT NOT NULL, params TEXT NOT NULL, name TEXT);
CREATE TABLE IF NOT EXISTS records (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    workload_key TEXT NOT NULL REFERENCES workloads(key),
    target TEXT NOT NULL,
    device TEXT NOT NULL,
    space_name TEXT NOT NULL,
    config_index INTEGER NOT NULL,
    config_json TEXT NOT NULL,
    costs TEXT NOT NULL,
    error INTEGER NOT NULL,
    error_msg TEXT NOT NULL DEFAULT '',
    gflops REAL NOT NULL,
    build_time REAL NOT NULL,
    run_time REAL NOT NULL,
    timestamp REAL NOT NULL,
    options TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS references_ (
    workload_key TEXT NOT NULL, target TEXT NOT NULL, device TEXT NOT NULL,
    config_json TEXT NOT NULL, seconds REAL NOT NULL, timestamp REAL NOT NULL,
    PRIMARY KEY (workload_key, target, device));
CREATE INDEX IF NOT EXISTS records_task ON records (workload_key, target, device);
CREATE INDEX IF NOT EXISTS records_config ON records (workload_key, target, device, config_json);
"""

_COLUMNS = ("workload_key, target, device, space_name, config_index, config_json, costs, error, "
            "error_msg, gflops, build_time, run_time, timestamp, options")
_INSERT = f"INSERT INTO records ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
# A database written before the options column reads it as '' (the column is added on the first
# write); ``options`` is compact JSON: how the record was measured (``add_many(options=)``) and
# the result's flags under "result".
COLUMNS = tuple(_COLUMNS.split(", "))  # a record's values, as ``Records.check`` takes them
_COLUMNS_V1 = _COLUMNS.replace(", options", ", '' AS options")
#: ``MeasureResult`` flags kept in a record's options where set (``drift``: where not None)
RESULT_FLAGS = ("early_stop", "unchecked", "confirmed", "drift")
#: ``MeasureResult.extra`` entries kept there too (JSON-serializable, about the result)
RESULT_EXTRA = ("compile_cache", "compile", "same_kernel_as", "screened_costs", "first_run",
                "calibration")
#: ``MeasureResult.source`` of results that are not measurements: they are never written
NOT_MEASURED = ("recorded", "surrogate")


def default_path() -> Path:
    return Path(platformdirs.user_cache_dir("tensorgym")) / "records.db"


@dataclass(frozen=True)
class Record:
    workload_key: str
    target: str
    device: str
    space_name: str
    config_index: int
    config_json: str
    costs: tuple[float, ...]
    error: ErrorCode
    error_msg: str
    gflops: float  # recomputed from costs and the workload's FLOPs, never read from the file
    build_time: float
    run_time: float
    timestamp: float
    options: str = ""  # JSON: how it was measured, and the result's flags ("" in old databases)

    @property
    def ok(self) -> bool:
        return self.error == ErrorCode.NO_ERROR

    @property
    def median(self) -> float:
        if not self.ok or not self.costs:
            return math.inf
        s = sorted(self.costs)
        n = len(s)
        return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])

    @property
    def cold_only(self) -> bool:
        """Whether the record's only sample may be the kernel's cold first run: stopped early
        on one run of a sample's length, by a tree before that run was timed again warm (its
        result keeps no ``first_run``). Such a time can read 30-100x too slow (a 60-us kernel's
        first run waited out a scheduler slice), so it is no measurement of the kernel: a
        world model and replay leave it out; ``tensorgym dataset remeasure`` times it again."""
        if not (self.ok and len(self.costs) == 1):
            return False
        opts = self._options()
        result = opts.get("result")
        if not isinstance(result, dict) or not result.get("early_stop") or "first_run" in result:
            return False
        measurer = opts.get("measurer")
        min_ms = measurer.get("min_repeat_ms", 5.0) if isinstance(measurer, dict) else 5.0
        return self.costs[0] >= float(min_ms or 0.0) / 1e3

    @property
    def calibration(self) -> Optional[float]:
        """The calibration kernel's seconds as this record's batch was timed (its result's
        ``calibration``; None for a record written without one, before 2026-12-06 13:50 UTC):
        the machine's speed at that moment. A 2-vCPU VM ran the same kernels about 1.4x faster
        in one hour than in the one before, so records of two moments compare as ``median /
        calibration``."""
        result = self._options().get("result")
        value = result.get("calibration") if isinstance(result, dict) else None
        return float(value) if isinstance(value, (int, float)) and value > 0 else None

    def _options(self) -> dict:
        """The record's options as a dict; {} where it has none or they do not parse."""
        try:
            opts = json.loads(self.options) if self.options else {}
        except ValueError:
            return {}
        return opts if isinstance(opts, dict) else {}


class Records:
    """``Records(path)`` opens (or creates) the database; ``path=None`` uses the user cache dir,
    ``":memory:"`` keeps it in memory. ``timeout``: seconds to wait for another writer's lock;
    a failed write is retried after each of ``retry_delays`` seconds. Picklable: the copy
    reconnects to the same file (an in-memory database is copied whole)."""

    def __init__(self, path: "str | os.PathLike | None" = None, timeout: float = 30.0,
                 retry_delays: Sequence[float] = (0.5, 2.0)) -> None:
        self.path = str(path) if path is not None else str(default_path())
        self.timeout = float(timeout)
        self.retry_delays = tuple(retry_delays)
        self._connect()

    def _connect(self, image: Optional[bytes] = None) -> None:
        self._flops: dict[str, Optional[int]] = {}
        with self._errors("open"):
            if self.path != ":memory:":
                Path(self.path).parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None,
                                       check_same_thread=False)
            if image is not None:
                self._db.deserialize(image)
            tables = {name for (name,) in self._db.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
            if tables and "meta" not in tables:  # another program's: not a byte of it changes
                self._db.close()
                raise RecordsError(f"records database {self.path}: not a tensorgym records "
                                   f"database (its tables: {', '.join(sorted(tables)[:8])}); "
                                   "give a new file or one tensorgym made", path=self.path)
            if self.path != ":memory:":
                self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            has_schema = "meta" in tables
            if not has_schema:  # an existing database opens without writing (read-only, locked)
                self._db.executescript(_SCHEMA)
                self._db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)",
                                 (str(SCHEMA_VERSION),))
            self._columns = _COLUMNS if _has_options(self._db) else _COLUMNS_V1

    @contextlib.contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        try:
            yield
        except (sqlite3.Error, OSError) as e:
            raise RecordsError(f"records database {self.path}: cannot {action}: {e}",
                               path=self.path) from e

    def __getstate__(self) -> dict[str, Any]:
        image = None
        if self.path == ":memory:":
            with self._errors("copy"):
                image = self._db.serialize()
        return {"path": self.path, "timeout": self.timeout, "retry_delays": self.retry_delays,
                "image": image}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path, self.timeout = state["path"], state["timeout"]
        self.retry_delays = state["retry_delays"]
        self._connect(state.get("image"))

    # ---------------------------------------------------------------- writing

    def add(self, task: Task, result: MeasureResult, *,
            workload: Optional[Workload] = None) -> None:
        self.add_many(task, [result], workload=workload)

    def add_many(self, task: Task, results: Iterable[MeasureResult],
                 options: Optional[dict] = None, *, workload: Optional[Workload] = None) -> None:
        """Write a batch of ``task`` in one transaction (all of it or none). If the write still
        fails after the retries, the batch goes to a side file and ``RecordsError`` says where.
        Results served from a database (``cached``) are skipped; one that is not a measurement
        (``source`` recorded or surrogate) is refused. ``options`` (JSON-serializable:
        how the batch was measured, e.g. ``Measurer.describe()``) is kept with each record.
        ``workload``: the task's ``Workload``, registered with its name (default:
        ``get_workload(task.workload)``, the registered one or a nameless one of that key)."""
        _check_workload(task, workload)
        results = [r for r in results if not r.cached]
        for r in results:
            if r.source in NOT_MEASURED:
                raise TensorGymError(f"records database {self.path}: config {r.config.index} "
                                     f"is a {r.source} answer, not a measurement; it "
                                     "is never written as one")
        rows = [(task.workload, task.target, task.device, r.config.space_name, r.config.index,
                 r.config.to_json(), json.dumps(list(r.costs)), int(r.error), r.error_msg,
                 r.gflops, r.build_time, r.run_time, r.timestamp or time.time(),
                 _options_json(options, r)) for r in results]
        if not rows:
            return
        if workload is None:
            workload = get_workload(task.workload)
        wl = (workload.key, workload.op, json.dumps(workload.params), workload.name)
        try:
            self._write(lambda db: self._insert(db, {wl: rows}))
        except sqlite3.Error as e:
            saved = self._save_unsaved(wl, rows)
            where = (f"the {len(rows)} results are saved in {saved} (Records.restore reads them "
                     "back)" if saved else f"the {len(rows)} results could not be saved anywhere")
            raise RecordsError(f"records database {self.path}: cannot write {len(rows)} "
                               f"results: {e}; {where}", path=self.path, saved_to=saved) from e

    def _insert(self, db: sqlite3.Connection, batches: dict[tuple, list[tuple]]) -> None:
        with db:
            db.execute("BEGIN IMMEDIATE")
            if self._columns is not _COLUMNS and not _has_options(db):  # an older database
                db.execute("ALTER TABLE records ADD COLUMN options TEXT NOT NULL DEFAULT ''")
            for wl, rows in batches.items():
                db.execute("INSERT OR IGNORE INTO workloads VALUES (?, ?, ?, ?)", wl)
                db.executemany(_INSERT, rows)
        self._columns = _COLUMNS

    def _write(self, fn: Any) -> None:
        for delay in (*self.retry_delays, None):
            try:
                return fn(self._db)
            except sqlite3.Error:
                if delay is None:
                    raise
                time.sleep(delay)

    def _save_unsaved(self, wl: tuple, rows: list[tuple]) -> Optional[str]:
        names = ("workload_key", "op", "params", "name")
        lines = "".join(json.dumps({"workload": dict(zip(names, wl)),
                                    "row": dict(zip(_COLUMNS.split(", "), row))}) + "\n"
                        for row in rows)
        for d, stem in self._side_places():
            name = f"{stem}.unsaved-{os.getpid()}.jsonl"
            try:
                d.mkdir(parents=True, exist_ok=True)
                with open(d / name, "a") as f:
                    f.write(lines)
                return str(d / name)
            except OSError:
                continue
        return None

    def restore(self, side_file: "str | os.PathLike") -> int:
        """Write the batches of a side file (``<db>.unsaved-<pid>.jsonl``) into this database;
        returns the number of records. Delete the file afterwards. A damaged line (a write
        cut short by a full disk, say) is left out, said in a warning, and kept aside in
        ``<side file>.damaged``: the good lines are restored all the same."""
        cols = _COLUMNS.split(", ")
        batches: dict[tuple, list[tuple]] = {}
        damaged: list[tuple[int, bytes, str]] = []  # (line number, line, why)
        with self._errors(f"read {side_file}"):
            data = Path(side_file).read_bytes()
        for n, line in enumerate(data.splitlines(), 1):
            if not line.strip():
                continue
            try:
                key, row = _side_line(json.loads(line.decode("utf-8")), cols)
            except (ValueError, RecursionError) as e:  # JSONDecodeError, UnicodeDecodeError too
                damaged.append((n, line, str(e)[:120]))
                continue
            batches.setdefault(key, []).append(row)
        if damaged:
            aside = f"{side_file}.damaged"
            with self._errors(f"keep the damaged lines of {side_file} aside"):
                with open(aside, "ab") as f:
                    f.write(b"".join(line + b"\n" for _, line, _ in damaged))
            n, _, why = damaged[0]
            warnings.warn(f"side file {side_file}: {len(damaged)} damaged line(s) left out "
                          f"(first at line {n}), kept in {aside}; the other lines are restored "
                          f"(line {n}: {why})", stacklevel=2)
        with self._errors(f"restore {side_file}"):
            self._write(lambda db: self._insert(db, batches))
        return sum(map(len, batches.values()))

    def _side_places(self) -> list[tuple[Path, str]]:
        """Where a batch that cannot be written goes: next to the database, else the user cache
        dir (there under a name that also hashes the database's full path)."""
        cache = Path(platformdirs.user_cache_dir("tensorgym"))
        if self.path == ":memory:":
            return [(cache, f"memory-{os.getpid()}")]
        full = str(Path(self.path).resolve())
        digest = hashlib.sha256(full.encode()).hexdigest()[:12]
        return [(Path(self.path).parent, Path(self.path).name),
                (cache, f"{Path(self.path).name}-{digest}")]

    def restore_unsaved(self) -> list[tuple[str, int]]:
        """Restore every side file an earlier process left for this database and delete it;
        returns (file, records) per file restored."""
        if self.path == ":memory:":
            return []
        done = []
        for d, stem in self._side_places():
            for side in sorted(d.glob(f"{stem}.unsaved-*.jsonl")):
                done.append((str(side), self.restore(side)))
                side.unlink()
        return done

    def set_reference(self, task: Task, config_json: str, seconds: float) -> None:
        def write(db: sqlite3.Connection) -> None:
            with db:
                db.execute("INSERT OR REPLACE INTO references_ VALUES (?, ?, ?, ?, ?, ?)",
                           (task.workload, task.target, task.device, config_json, seconds,
                            time.time()))

        with self._errors("write the reference time"):
            self._write(write)

    # ---------------------------------------------------------------- reading

    def query(self, workload_key: Optional[str] = None, target: Optional[str] = None,
              device: Optional[str] = None, ok_only: bool = False,
              limit: Optional[int] = None) -> list[Record]:
        where, args = [], []
        for col, val in (("workload_key", workload_key), ("target", target), ("device", device)):
            if val is not None:
                where.append(f"{col} = ?")
                args.append(val)
        if ok_only:
            where.append("error = 0")
        sql = f"SELECT {self._columns} FROM records"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY id"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return self._records(self._read(sql, args))

    def best(self, workload_key: str, target: Optional[str] = None,
             device: Optional[str] = None, k: int = 1) -> list[Record]:
        recs = self.query(workload_key, target, device, ok_only=True)
        return sorted(recs, key=lambda r: -r.gflops)[:k]

    def lookup(self, task: Task, config_json: str) -> Optional[Record]:
        """The latest usable record of this exact config of ``task``, if any (to serve a
        re-measurement); a cold-only one (``Record.cold_only``) is no measurement."""
        rows = self._read(f"SELECT {self._columns} FROM records WHERE workload_key = ? AND "
                          "target = ? AND device = ? AND config_json = ? ORDER BY id DESC",
                          (task.workload, task.target, task.device, config_json))
        recs = [r for r in self._records(rows) if not r.cold_only]
        return recs[0] if recs else None

    def results(self, task: Task, space: Any) -> list[MeasureResult]:
        """Every config of ``space`` measured for ``task``, once each (its latest usable
        record), as ``MeasureResult(cached=True)`` in the order they were first measured: what
        a new tuning session of this task can reuse. Cold-only records are no measurements."""
        out: dict[int, MeasureResult] = {}
        flops = self._workload_flops(task.workload)  # known: query keeps only such records
        for rec in self.query(task.workload, task.target, task.device):
            if rec.space_name != space.name or rec.cold_only:
                continue
            try:
                config = space.from_json(rec.config_json)
            except InvalidConfigError:
                continue  # the space changed since: this record no longer describes a config
            out[config.index] = MeasureResult(config, rec.costs, rec.error, rec.error_msg,
                                              flops, rec.build_time, rec.run_time,
                                              rec.timestamp, cached=True)
        return list(out.values())

    def reference(self, task: Task, config_json: str) -> Optional[float]:
        """Seconds of the reference schedule of ``task``, if measured before (and sane)."""
        rows = self._read("SELECT seconds FROM references_ WHERE workload_key = ? AND "
                          "target = ? AND device = ? AND config_json = ?",
                          (task.workload, task.target, task.device, config_json))
        if not rows:
            return None
        seconds = rows[0][0]
        if isinstance(seconds, (int, float)) and math.isfinite(seconds) and seconds > 0:
            return float(seconds)
        warnings.warn(f"records database {self.path}: ignoring the stored reference time "
                      f"{seconds!r} of {task.workload} on {task.device} (not a positive number of "
                      "seconds); it will be measured again", stacklevel=2)
        return None

    def check(self, rows: Iterable[tuple]) -> list[Record]:
        """Records of ``rows`` (values in the order of ``COLUMNS``, e.g. read from an export),
        checked as ``query`` checks the database's: unusable rows are skipped with a warning."""
        return self._records(list(rows))

    def import_records(self, records: Iterable[Record],
                       names: Optional[dict[str, str]] = None) -> int:
        """Write ``records`` (e.g. of a dataset export) as they are, in one transaction; their
        workloads are registered from their keys (``names``: key -> name). A record the
        database holds already (same task, config, samples and time) is not written twice.
        Returns how many were written."""
        batches: dict[tuple, list[tuple]] = {}
        held = set(self._read("SELECT workload_key, target, device, config_json, costs, "
                              "timestamp FROM records"))
        for r in records:
            if (r.workload_key, r.target, r.device, r.config_json, json.dumps(list(r.costs)),
                    r.timestamp) in held:
                continue
            w = get_workload(r.workload_key)
            wl = (w.key, w.op, json.dumps(w.params), (names or {}).get(w.key, w.name))
            batches.setdefault(wl, []).append(
                (r.workload_key, r.target, r.device, r.space_name, r.config_index, r.config_json,
                 json.dumps(list(r.costs)), int(r.error), r.error_msg, r.gflops, r.build_time,
                 r.run_time, r.timestamp, r.options))
        with self._errors("import records"):
            self._write(lambda db: self._insert(db, batches))
        return sum(map(len, batches.values()))

    def workload_names(self) -> dict[str, str]:
        """Workload key -> registered name, for the workloads stored with one."""
        return {k: n for k, n in self._read("SELECT key, name FROM workloads") if n}

    def workload_keys(self) -> list[str]:
        return [r[0] for r in self._read("SELECT key FROM workloads ORDER BY key")]

    def __len__(self) -> int:
        return self._read("SELECT COUNT(*) FROM records")[0][0]

    def close(self) -> None:
        self._db.close()

    def _read(self, sql: str, args: Sequence = ()) -> list[tuple]:
        with self._errors("read"):
            return self._db.execute(sql, args).fetchall()

    def _workload_flops(self, key: str) -> Optional[int]:
        if key not in self._flops:
            try:
                self._flops[key] = get_workload(key).flops
            except (TensorGymError, ValueError, TypeError):
                self._flops[key] = None
        return self._flops[key]

    def _records(self, rows: list[tuple]) -> list[Record]:
        out, skipped = [], Counter()
        for row in rows:
            rec = self._record(row)
            if isinstance(rec, str):
                skipped[rec] += 1
            else:
                out.append(rec)
        if skipped:
            why = "; ".join(f"{n} with {reason}" for reason, n in sorted(skipped.items()))
            warnings.warn(f"records database {self.path}: skipped {sum(skipped.values())} "
                          f"unusable records ({why})", stacklevel=3)
        return out

    def _record(self, row: tuple) -> "Record | str":
        """The checked record, or why the row is unusable."""
        (wk, target, device, space, index, cfg, costs, err, msg, _gflops, bt, rt, ts, opts) = row
        if not all(isinstance(x, str) for x in (wk, target, device, space, cfg)):
            return "a key that is not a string"
        try:
            error = ErrorCode(err)
        except (ValueError, TypeError):
            return f"unknown error code {repr(err)[:40]}"
        field = "costs"  # the field a malformed value is in, for the warning
        try:
            costs = tuple(float(c) for c in json.loads(costs))
            field = "config_index"
            if isinstance(index, float) and not index.is_integer() or not (
                    -2**63 <= int(index) < 2**63):  # SQLite's integers
                raise ValueError(index)
            field = "build_time, run_time or timestamp"
            rec = Record(wk, target, device, space, int(index), cfg, costs, error,
                         str(msg or ""), 0.0, float(bt), float(rt), float(ts),
                         opts if isinstance(opts, str) else "")
        except (ValueError, TypeError, OverflowError, RecursionError):
            return f"malformed values ({field})"
        if not all(math.isfinite(t) and t >= 0 for t in (rec.build_time, rec.run_time)):
            return "a non-finite or negative build or run time"
        flops = self._workload_flops(wk)
        if flops is None:
            return f"unknown workload {wk!r}"
        if error != ErrorCode.NO_ERROR:
            return rec
        if not costs or not all(math.isfinite(c) and c > 0 for c in costs):
            return "a success without positive finite times"
        gflops = flops / statistics.median(costs) / 1e9
        if not math.isfinite(gflops):
            return "a time too short for a finite GFLOP/s"
        return dataclasses.replace(rec, gflops=gflops)


#: the columns of a record that SQLite stores as integers, and as reals (the others: text)
_INT_COLUMNS = ("config_index", "error")
_REAL_COLUMNS = ("gflops", "build_time", "run_time", "timestamp")


def _side_line(e: Any, cols: list[str]) -> tuple[tuple, tuple]:
    """A side file line's workload (key, op, params, name) and record row, checked to be what
    ``_save_unsaved`` writes (values SQLite stores in the columns' NOT NULL types); a
    ``ValueError`` says what is wrong otherwise."""
    if not isinstance(e, dict) or not isinstance(e.get("workload"), dict) \
            or not isinstance(e.get("row"), dict):
        raise ValueError("not an object of a workload and a row")
    w, r = e["workload"], e["row"]
    key = tuple(w.get(c) for c in ("workload_key", "op", "params", "name"))
    if not all(isinstance(v, str) for v in key[:3]) or not isinstance(key[3], (str, type(None))):
        raise ValueError("the workload's key, op, params or name is not a string")
    for v in key:
        if v is not None:
            v.encode("utf-8")  # a lone surrogate ("\\ud800" in the JSON) is not SQLite text
    row = []
    for c in cols:
        v = r.get(c, "") if c == "options" else r.get(c)
        if c in _INT_COLUMNS:
            ok = type(v) is int and -2**63 <= v < 2**63
        elif c in _REAL_COLUMNS:
            ok = (type(v) is int and -2**63 <= v < 2**63
                  or type(v) is float and not math.isnan(v))  # NaN: SQLite's NULL
        else:
            ok = isinstance(v, str)
            if ok:
                v.encode("utf-8")  # UnicodeEncodeError (a ValueError): a lone surrogate
        if not ok:
            raise ValueError(f"row {c} is {repr(v)[:40]}" if c in r else f"row has no {c}")
        row.append(v)
    if row[0] != key[0]:
        raise ValueError(f"row of workload {row[0][:40]!r} under workload {key[0][:40]!r}")
    return key, tuple(row)


def _check_workload(task: Task, workload: Optional[Workload]) -> None:
    if workload is not None and workload.key != task.workload:
        raise TensorGymError(f"workload {workload.label} is not the workload of {task}")


def _has_options(db: sqlite3.Connection) -> bool:
    return any(row[1] == "options" for row in db.execute("PRAGMA table_info(records)"))


def _options_json(options: Optional[dict], result: MeasureResult) -> str:
    flags = {k: v for k in RESULT_FLAGS if (v := getattr(result, k)) is not False and v is not None}
    flags.update((k, result.extra[k]) for k in RESULT_EXTRA if k in result.extra)
    if not options and not flags:
        return ""
    obj = {**(options or {}), **({"result": flags} if flags else {})}
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
