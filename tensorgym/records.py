"""The records database: every measurement, in one SQLite file (WAL, so a killed process leaves
the records already committed intact, and readers never block the writer)."""
from __future__ import annotations

import json
import math
import os
import sqlite3
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Optional

import platformdirs

from .errors import ErrorCode
from .hardware.result import MeasureResult
from .workloads import Workload

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
    timestamp REAL NOT NULL);
CREATE TABLE IF NOT EXISTS references_ (
    workload_key TEXT NOT NULL, target TEXT NOT NULL, device TEXT NOT NULL,
    config_json TEXT NOT NULL, seconds REAL NOT NULL, timestamp REAL NOT NULL,
    PRIMARY KEY (workload_key, target, device));
CREATE INDEX IF NOT EXISTS records_task ON records (workload_key, target, device);
CREATE INDEX IF NOT EXISTS records_config ON records (workload_key, target, device, config_json);
"""


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
    gflops: float
    build_time: float
    run_time: float
    timestamp: float

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


class Records:
    """``Records(path)`` opens (or creates) the database; ``path=None`` uses the user cache dir,
    ``":memory:"`` keeps it in memory."""

    def __init__(self, path: "str | os.PathLike | None" = None) -> None:
        self.path = str(path) if path is not None else str(default_path())
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(self.path, timeout=30, isolation_level=None,
                                   check_same_thread=False)
        if self.path != ":memory:":
            self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self._db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)",
                         (str(SCHEMA_VERSION),))

    def add(self, workload: Workload, target: str, device: str,
            result: MeasureResult) -> None:
        self.add_many(workload, target, device, [result])

    def add_many(self, workload: Workload, target: str, device: str,
                 results: Iterable[MeasureResult]) -> None:
        rows = [(workload.key, target, device, r.config.space_name, r.config.index,
                 r.config.to_json(), json.dumps(list(r.costs)), int(r.error), r.error_msg,
                 r.gflops, r.build_time, r.run_time, r.timestamp or time.time())
                for r in results if not r.cached]
        if not rows:
            return
        with self._db:  # one transaction: all of the batch or none of it
            self._db.execute("BEGIN")
            self._db.execute("INSERT OR IGNORE INTO workloads VALUES (?, ?, ?, ?)",
                             (workload.key, workload.op, json.dumps(workload.params),
                              workload.name))
            self._db.executemany(
                "INSERT INTO records (workload_key, target, device, space_name, config_index, "
                "config_json, costs, error, error_msg, gflops, build_time, run_time, timestamp) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)

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
        sql = ("SELECT workload_key, target, device, space_name, config_index, config_json, "
               "costs, error, error_msg, gflops, build_time, run_time, timestamp FROM records")
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += " ORDER BY id"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        return [self._record(row) for row in self._db.execute(sql, args)]

    def best(self, workload_key: str, target: Optional[str] = None,
             device: Optional[str] = None, k: int = 1) -> list[Record]:
        recs = self.query(workload_key, target, device, ok_only=True)
        return sorted(recs, key=lambda r: -r.gflops)[:k]

    def lookup(self, workload_key: str, target: str, device: str,
               config_json: str) -> Optional[Record]:
        """The latest record of this exact config, if any (to serve a re-measurement)."""
        row = self._db.execute(
            "SELECT workload_key, target, device, space_name, config_index, config_json, "
            "costs, error, error_msg, gflops, build_time, run_time, timestamp FROM records "
            "WHERE workload_key = ? AND target = ? AND device = ? AND config_json = ? "
            "ORDER BY id DESC LIMIT 1", (workload_key, target, device, config_json)).fetchone()
        return self._record(row) if row else None

    def reference(self, workload_key: str, target: str, device: str,
                  config_json: str) -> Optional[float]:
        """Seconds of the reference schedule on this device, if measured before."""
        row = self._db.execute(
            "SELECT seconds FROM references_ WHERE workload_key = ? AND target = ? AND "
            "device = ? AND config_json = ?", (workload_key, target, device, config_json)).fetchone()
        return row[0] if row else None

    def set_reference(self, workload_key: str, target: str, device: str, config_json: str,
                      seconds: float) -> None:
        with self._db:
            self._db.execute("INSERT OR REPLACE INTO references_ VALUES (?, ?, ?, ?, ?, ?)",
                             (workload_key, target, device, config_json, seconds, time.time()))

    def workload_keys(self) -> list[str]:
        return [r[0] for r in self._db.execute("SELECT key FROM workloads ORDER BY key")]

    def __len__(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM records").fetchone()[0]

    def close(self) -> None:
        self._db.close()

    @staticmethod
    def _record(row) -> Record:
        (wk, target, device, space, index, cfg, costs, err, msg, gflops, bt, rt, ts) = row
        return Record(wk, target, device, space, index, cfg, tuple(json.loads(costs)),
                      ErrorCode(err), msg, gflops, bt, rt, ts)
