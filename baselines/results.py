"""The leaderboard's results document: versioned JSON, one file per run, merged across runs.

Modelled on Kernel Tuner's T4 results schema: every trial keeps its configuration, compile time,
all timed runtimes and its validity/error, next to the device fingerprint and software versions
of the machine that measured it. A document holds a list of runs; ``merge`` joins documents from
several runs and machines (runs are deduplicated by ``run_id``).

    {"schema": "tensorgym-results", "schema_version": "1.0",
     "runs": [{"run_id", "created", "device": {...}, "software": {...}, "suite": {...},
               "vendor": [VendorResult...], "entries": [Entry...]}]}
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

from tensorgym.errors import ErrorCode, TensorGymError
from tensorgym.hardware.result import MeasureResult

SCHEMA = "tensorgym-results"
SCHEMA_VERSION = "1.0"

# T4's "invalidity" vocabulary, extended with tensorgym's error codes
_INVALIDITY = {
    ErrorCode.NO_ERROR: "correct", ErrorCode.INSTANTIATION_ERROR: "constraints",
    ErrorCode.COMPILE_HOST: "compile", ErrorCode.COMPILE_DEVICE: "compile",
    ErrorCode.RUNTIME_DEVICE: "runtime", ErrorCode.WRONG_ANSWER: "correctness",
    ErrorCode.BUILD_TIMEOUT: "compile", ErrorCode.RUN_TIMEOUT: "runtime",
    ErrorCode.UNKNOWN_ERROR: "runtime",
}


class ResultsError(TensorGymError):
    """A results file that cannot be read as a tensorgym results document."""


@dataclass
class Trial:
    """One measurement, as T4 records it."""

    config: dict[str, Any]  # the knob values (Config.to_json's object)
    runtimes: list[float]  # seconds per kernel run, one per timed sample
    compile_time: float
    run_time: float  # wall seconds spent measuring
    error: str  # ErrorCode name
    invalidity: str  # correct | compile | runtime | correctness | constraints
    error_msg: str = ""
    gflops: float = 0.0
    timestamp: float = 0.0
    cached: bool = False

    @classmethod
    def from_result(cls, r: MeasureResult) -> "Trial":
        code = ErrorCode(r.error)
        return cls(json.loads(r.config.to_json()), [float(c) for c in r.costs],
                   float(r.build_time), float(r.run_time), code.name, _INVALIDITY[code],
                   r.error_msg[:500], float(r.gflops), float(r.timestamp), bool(r.cached))

    @property
    def ok(self) -> bool:
        return self.error == ErrorCode.NO_ERROR.name and bool(self.runtimes)


@dataclass
class Best:
    """The run's best config and its re-measurement (several timed samples) before reporting."""

    config: dict[str, Any]
    trial: int  # index into the entry's trials
    gflops_search: float  # as measured during the search
    gflops: float  # re-measured: the figure reported
    runtimes: list[float] = field(default_factory=list)


@dataclass
class Entry:
    """One agent on one task with one seed."""

    agent: str
    workload: str  # workload key
    target: str
    seed: int
    budget: int
    flops: int
    wall_time: float
    build_time: float
    measure_time: float
    search_time: float  # the agent's own time outside measurement (see Agent.search_time)
    trials: list[Trial]
    best: "Best | None" = None
    agent_options: dict[str, Any] = field(default_factory=dict)
    label: str = ""  # the workload's registered name, if any

    @property
    def task(self) -> tuple[str, str]:
        return (self.workload, self.target)

    def curve(self) -> list[float]:
        """Best GFLOP/s so far after each trial."""
        out, best = [], 0.0
        for t in self.trials:
            best = max(best, t.gflops if t.ok else 0.0)
            out.append(best)
        return out

    @property
    def failures(self) -> int:
        return sum(not t.ok for t in self.trials)


@dataclass
class VendorResult:
    """The vendor library on the same task, measured in the same run."""

    workload: str
    target: str
    library: str  # e.g. "torch 2.13 (oneDNN/MKL)", "cuDNN via torch"
    gflops: float = 0.0
    runtimes: list[float] = field(default_factory=list)
    skipped: str = ""  # why it was not measured, if it was not


@dataclass
class Run:
    run_id: str
    created: str
    device: dict[str, Any]
    software: dict[str, Any]
    suite: dict[str, Any]
    seeds: list[int]
    entries: list[Entry] = field(default_factory=list)
    vendor: list[VendorResult] = field(default_factory=list)

    def vendor_for(self, workload: str, target: str) -> "VendorResult | None":
        for v in self.vendor:
            if v.workload == workload and v.target == target:
                return v
        return None


@dataclass
class ResultsDoc:
    runs: list[Run] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"schema": SCHEMA, "schema_version": SCHEMA_VERSION,
                "runs": [_clean(asdict(r)) for r in self.runs]}

    def save(self, path: "str | Path") -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=1))
        return path

    @classmethod
    def from_json(cls, obj: Any) -> "ResultsDoc":
        if not isinstance(obj, dict) or obj.get("schema") != SCHEMA:
            raise ResultsError(f"not a {SCHEMA} document")
        major = str(obj.get("schema_version", "")).split(".")[0]
        if major != SCHEMA_VERSION.split(".")[0]:
            raise ResultsError(f"schema version {obj.get('schema_version')!r} is not supported "
                               f"(this tensorgym reads {SCHEMA_VERSION})")
        try:
            return cls([_run_from_json(r) for r in obj["runs"]])
        except (KeyError, TypeError, ValueError) as e:
            raise ResultsError(f"malformed results document: {type(e).__name__}: {e}") from None

    @classmethod
    def load(cls, path: "str | Path") -> "ResultsDoc":
        try:
            obj = json.loads(Path(path).read_text())
        except OSError as e:
            raise ResultsError(f"cannot read {path}: {e.strerror or e}") from None
        except ValueError as e:
            raise ResultsError(f"{path} is not JSON: {e}") from None
        try:
            return cls.from_json(obj)
        except ResultsError as e:
            raise ResultsError(f"{path}: {e}") from None

    def entries(self) -> Iterable[tuple[Run, Entry]]:
        for run in self.runs:
            for e in run.entries:
                yield run, e


def merge(docs: Iterable[ResultsDoc]) -> ResultsDoc:
    """All runs of ``docs`` in one document; a run seen twice (same ``run_id``) is kept once."""
    seen: set[str] = set()
    out = ResultsDoc()
    for d in docs:
        for r in d.runs:
            if r.run_id not in seen:
                seen.add(r.run_id)
                out.runs.append(r)
    return out


def _clean(obj: Any) -> Any:
    """JSON has no infinities or NaN: store them as null."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def _entry_from_json(e: dict) -> Entry:
    e = dict(e)
    e["trials"] = [Trial(**t) for t in e["trials"]]
    e["best"] = Best(**e["best"]) if e.get("best") else None
    return Entry(**e)


def _run_from_json(r: dict) -> Run:
    r = dict(r)
    r["entries"] = [_entry_from_json(e) for e in r.get("entries", [])]
    r["vendor"] = [VendorResult(**v) for v in r.get("vendor", [])]
    return Run(**r)
