"""A dataset: the checked records of a records database (the format of truth), or of its export
(Parquet or JSON lines, one row per record), with a content digest that is the same whatever the
file format."""
from __future__ import annotations

import hashlib
import json
import os
import warnings
from collections import Counter
from functools import cached_property
from pathlib import Path
from typing import Any, Iterable, Optional

from ..errors import TensorGymError
from ..records import COLUMNS, Record, Records
from ..task import Task

EXPORT_SUFFIXES = (".parquet", ".jsonl")

# Export columns: a record's (``records.COLUMNS``) plus derived ones for readers of the file alone.
# ``gflops`` is recomputed from ``costs`` when a file is loaded, never trusted.
DERIVED = ("workload_name", "error_name", "median")


class DatasetError(TensorGymError, ValueError):
    """A dataset that cannot be read, or that lacks what was asked of it."""


class Dataset:
    """``Dataset.load(path)`` reads a records database (``.db`` or any other name: SQLite) or an
    export (``.parquet``, ``.jsonl``). ``records`` keep the file's order; ``digest`` hashes their
    content, so a database and its export have the same digest. Picklable (by path, reloaded)."""

    def __init__(self, records: Iterable[Record], path: str = "",
                 names: Optional[dict[str, str]] = None) -> None:
        self.records: tuple[Record, ...] = tuple(records)
        self.path = path
        self.names = dict(names or {})  # workload key -> registered name, where known
        self._by_task: Optional[dict[Task, list[Record]]] = None

    # ---------------------------------------------------------------- reading

    @classmethod
    def load(cls, path: "str | os.PathLike") -> "Dataset":
        path = str(path)
        if not Path(path).is_file():
            raise DatasetError(f"no dataset at {path}: give a records database (tensorgym dataset "
                               "collect --db PATH) or an export (.parquet, .jsonl)")
        suffix = Path(path).suffix.lower()
        bad: list[tuple[str, str]] = []  # (line or row, why it is skipped)
        if suffix == ".parquet":
            numbered = list(enumerate(_read_parquet(path), 1))
        elif suffix == ".jsonl":
            numbered = _read_jsonl(path, bad)
        else:
            db = Records(path)
            try:
                recs = db.query()
                names = db.workload_names()
            finally:
                db.close()
            return cls(recs, path, names)
        rows = [r for _, r in numbered]
        unit = "line" if suffix == ".jsonl" else "row"
        recs: list[Record] = []
        checker = Records(":memory:")  # checks each row as a database's (finite times, ...)
        try:
            for n, r in numbered:
                v = _row_values(r, path)
                rec = checker._record(v) if not isinstance(v, str) else v
                if isinstance(rec, str):
                    bad.append((f"{unit} {n}", rec))
                else:
                    recs.append(rec)
        finally:
            checker.close()
        if bad:
            warnings.warn(f"dataset {path}: {_skipped(bad)}", stacklevel=2)
        names = {r["workload_key"]: r.get("workload_name") for r in rows
                 if isinstance(r, dict) and isinstance(r.get("workload_key"), str)
                 and isinstance(r.get("workload_name"), str) and r.get("workload_name")}
        return cls(recs, path, names)

    def __reduce__(self):
        if not self.path:
            return (Dataset, (self.records, "", self.names))
        return (Dataset.load, (self.path,))

    def __len__(self) -> int:
        return len(self.records)

    @property
    def by_task(self) -> dict[Task, list[Record]]:
        if self._by_task is None:
            out: dict[Task, list[Record]] = {}
            for r in self.records:
                out.setdefault(Task(r.workload_key, r.target, r.device), []).append(r)
            self._by_task = out
        return self._by_task

    def tasks(self) -> list[Task]:
        return list(self.by_task)

    def devices(self, target: Optional[str] = None) -> list[str]:
        return sorted({t.device for t in self.by_task if target is None or t.target == target})

    def task_records(self, task: Task) -> list[Record]:
        """The records of one task; a ``DatasetError`` says what the dataset has instead."""
        recs = self.by_task.get(task)
        if not recs:
            have = sorted({t.workload for t in self.by_task
                           if t.target == task.target and t.device == task.device})
            raise DatasetError(f"dataset {self.path or '(in memory)'} has no records of "
                               f"{task.workload} on {task.target} device {task.device!r}; it "
                               f"has {', '.join(have) or 'none'} there")
        return recs

    def name(self, workload_key: str) -> str:
        return self.names.get(workload_key) or workload_key

    @cached_property
    def digest(self) -> str:
        """SHA-256 of the records' content in order (not of the file: a database and its export
        have the same digest)."""
        h = hashlib.sha256()
        for r in self.records:
            h.update(json.dumps([r.workload_key, r.target, r.device, r.space_name,
                                 r.config_index, r.config_json, list(r.costs), int(r.error),
                                 r.error_msg, r.build_time, r.run_time, r.timestamp, r.options],
                                separators=(",", ":")).encode())
            h.update(b"\n")
        return h.hexdigest()

    # ---------------------------------------------------------------- writing

    def rows(self) -> list[dict[str, Any]]:
        """One dict per record: ``records.COLUMNS`` and ``DERIVED``; ``costs`` a list."""
        out = []
        for r in self.records:
            row = {c: getattr(r, c) for c in COLUMNS}
            row["costs"] = list(r.costs)
            row["error"] = int(r.error)
            row["workload_name"] = self.names.get(r.workload_key, "")
            row["error_name"] = r.error.name
            row["median"] = r.median if r.ok else None
            out.append(row)
        return out

    def export(self, path: "str | os.PathLike") -> int:
        """Write every record to ``path`` (``.parquet`` needs pyarrow: the ``dataset`` extra;
        ``.jsonl``); returns the number of records."""
        path = str(path)
        suffix = Path(path).suffix.lower()
        if suffix not in EXPORT_SUFFIXES:
            raise DatasetError(f"cannot export to {path}: use a .parquet or .jsonl file name")
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        rows = self.rows()
        if suffix == ".parquet":
            _write_parquet(rows, path)
        else:
            with open(path, "w") as f:
                for row in rows:
                    f.write(json.dumps(row, separators=(",", ":")) + "\n")
        return len(rows)

    def to_records(self, db: "str | os.PathLike | Records") -> int:
        """Write every record into a records database (``tensorgym dataset import``): the
        inverse of ``export``; returns the number written."""
        target = db if isinstance(db, Records) else Records(db)
        try:
            return target.import_records(self.records, self.names)
        finally:
            if target is not db:
                target.close()

    # ---------------------------------------------------------------- summary

    def summary(self) -> dict[str, Any]:
        """Per task: records, distinct configs, failure rate, best GFLOP/s and its config; and
        the strategies that collected them (from the records' options)."""
        tasks = []
        for task, recs in self.by_task.items():
            ok = [r for r in recs if r.ok]
            best = max(ok, key=lambda r: r.gflops) if ok else None
            tasks.append({
                "workload": self.name(task.workload), "workload_key": task.workload,
                "target": task.target, "device": task.device, "records": len(recs),
                "configs": len({r.config_json for r in recs}),
                "failure_rate": 1 - len(ok) / len(recs),
                "best_gflops": best.gflops if best else 0.0,
                "best_config": json.loads(best.config_json) if best else None,
                "strategies": dict(Counter(_strategy(r) for r in recs)),
                "errors": dict(Counter(r.error.name for r in recs if not r.ok)),
            })
        return {"path": self.path, "records": len(self.records), "digest": self.digest,
                "workloads": len({t.workload for t in self.by_task}),
                "devices": self.devices(), "tasks": tasks}


def _skipped(bad: list[tuple[str, str]], n: int = 3) -> str:
    """What a warning says of the rows skipped: the first ``n`` with where they are, and how
    many more for each reason."""
    said = "; ".join(f"{where}: {why}" for where, why in bad[:n])
    more = Counter(why for _, why in bad[n:])
    if more:
        said += "; and " + ", ".join(f"{k} more with {why}" for why, k in sorted(more.items()))
    return f"skipped {len(bad)} malformed rows ({said})"


def _strategy(r: Record) -> str:
    try:
        return json.loads(r.options).get("collect", {}).get("strategy", "") or "unknown"
    except (ValueError, AttributeError):
        return "unknown"


def _row_values(row: Any, path: str) -> "tuple | str":
    """A row's values in ``COLUMNS`` order, or why the row is malformed (a row of another
    file's columns altogether is an error of the file)."""
    if not isinstance(row, dict):
        return f"a {type(row).__name__}, not an object"
    missing = [c for c in COLUMNS if c not in row]
    if len(missing) == len(COLUMNS):
        raise DatasetError(f"{path}: a row has none of a dataset's columns; is this a "
                           "tensorgym dataset export?")
    if missing:
        return f"no column {missing[0]!r}"
    values = [row[c] for c in COLUMNS]
    for v in values:
        if isinstance(v, _Unreadable):
            return str(v)
    i = COLUMNS.index("costs")
    if not isinstance(values[i], (list, tuple)):
        return f"costs is a {type(values[i]).__name__}, not a list"
    try:
        values[i] = json.dumps(list(values[i]))
    except (TypeError, ValueError) as e:
        return f"costs: {e}"
    return tuple(values)


def _read_jsonl(path: str, bad: list[tuple[str, str]]) -> list[tuple[int, Any]]:
    """The rows of a JSON-lines file with their line numbers. A line that is not JSON (or not
    UTF-8, or nested past Python's limit) is left out and said in ``bad``; a file with no JSON
    line at all is an error of the file."""
    rows: list[tuple[int, Any]] = []
    with open(path, "rb") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append((n, json.loads(line.decode("utf-8"))))
                except (ValueError, RecursionError) as e:
                    bad.append((f"line {n}", f"not a JSON line: {str(e)[:120]}"))
    if bad and not rows:
        (where, why), = bad[:1]
        raise DatasetError(f"{path}:{where[5:]}: {why}; no line of the file is JSON: is it a "
                           "tensorgym dataset export?")
    return rows


def _pyarrow():
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise DatasetError("Parquet needs pyarrow: pip install 'tensorgym[dataset]', or use a "
                           ".jsonl file") from None
    return pa, pq


def _schema(pa):
    return pa.schema([
        ("workload_key", pa.string()), ("target", pa.string()), ("device", pa.string()),
        ("space_name", pa.string()), ("config_index", pa.int64()), ("config_json", pa.string()),
        ("costs", pa.list_(pa.float64())), ("error", pa.int32()), ("error_msg", pa.string()),
        ("gflops", pa.float64()), ("build_time", pa.float64()), ("run_time", pa.float64()),
        ("timestamp", pa.float64()), ("options", pa.string()), ("workload_name", pa.string()),
        ("error_name", pa.string()), ("median", pa.float64())])


def _write_parquet(rows: list[dict], path: str) -> None:
    pa, pq = _pyarrow()
    table = pa.Table.from_pylist(rows, schema=_schema(pa))
    pq.write_table(table, path, compression="zstd")


def _read_parquet(path: str) -> list[dict]:
    """The rows of a Parquet file, as dicts of the columns a dataset reads (the others are
    never converted). A file that is not Parquet (cut short, overwritten) is a ``DatasetError``;
    a value that has no Python value (a date past year 9999, say) is an ``_Unreadable`` of its
    row, which ``_row_values`` skips."""
    pa, pq = _pyarrow()
    try:
        table = pq.read_table(path)
    except (pa.ArrowException, OSError, ValueError, OverflowError) as e:
        raise DatasetError(f"{path}: cannot read Parquet: {str(e)[:300]}") from None
    wanted = set(COLUMNS) | {"workload_name"}
    cols: dict[str, list] = {}
    for i, name in enumerate(table.column_names):
        if name in wanted:
            cols[name] = _parquet_values(pa, table.column(i), name, path)
    if not cols:
        return [{} for _ in range(table.num_rows)]
    return [dict(zip(cols, values)) for values in zip(*cols.values())]


class _Unreadable(str):
    """A Parquet value with no Python value: its row is malformed."""


def _parquet_values(pa, column, name: str, path: str) -> list:
    errors = (pa.ArrowException, OSError, ValueError, OverflowError, TypeError)
    try:
        return column.to_pylist()
    except errors:
        pass
    out: list = []
    for chunk in column.chunks:
        for i in range(len(chunk)):
            try:
                out.append(chunk[i].as_py())
            except errors as e:
                out.append(_Unreadable(f"{name} ({chunk.type}) has no value: {str(e)[:80]}"))
    return out


__all__ = ["DERIVED", "Dataset", "DatasetError", "EXPORT_SUFFIXES", "Task"]
