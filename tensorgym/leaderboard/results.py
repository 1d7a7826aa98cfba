"""The leaderboard's results document: versioned JSON, one file per run, merged across runs.

Modelled on Kernel Tuner's T4 results schema: every trial keeps its configuration, compile time,
all timed runtimes and its validity/error, next to the device fingerprint and software versions
of the machine that measured it. A document holds a list of runs; ``merge`` joins documents from
several runs and machines (runs are deduplicated by ``run_id``).

A run is on one **track**: ``live`` (every trial measured on the device) or ``replay`` (trials
answered from a dataset, ``tensorgym.dataset``: each trial's ``source`` says ``recorded`` or
``surrogate``; the run's ``dataset`` holds the dataset's path, digest, device and ``on_miss``;
each entry's best is re-measured live before it is reported). The tables never rank entries of
two tracks together (``one_track``); ``split_tracks`` separates a merged document.

Reading checks every field's type (ints are accepted for floats; null stands for a non-finite
float). ``load(path, malformed=[...])`` keeps reading past a malformed run or entry and lists it
there instead of failing the whole document (validation reports each one).

    {"schema": "tensorgym-results", "schema_version": "1.0",
     "runs": [{"run_id", "created", "device": {...}, "software": {...}, "suite": {...},
               "vendor": [VendorResult...], "entries": [Entry...]}]}
"""
from __future__ import annotations

import dataclasses
import datetime
import hashlib
import json
import math
import types
import typing
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable

from tensorgym.errors import ErrorCode, TensorGymError
from tensorgym.measure.result import MeasureResult

from .metrics import best_so_far

SCHEMA = "tensorgym-results"
SCHEMA_VERSION = "1.1"  # 1.1: Run.track, Run.dataset, Trial.source
TRACKS = ("live", "replay", "generalization")

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
    # measured | recorded (a dataset's or the records database's measurement) | surrogate
    # (replay's answer for a config the dataset lacks: not a measurement); "" before 1.1
    source: str = ""

    @classmethod
    def from_result(cls, r: MeasureResult) -> "Trial":
        code = ErrorCode(r.error)
        source = "recorded" if r.cached and r.source == "measured" else r.source
        return cls(json.loads(r.config.to_json()), [float(c) for c in r.costs],
                   float(r.build_time), float(r.run_time), code.name, _INVALIDITY[code],
                   r.error_msg[:500], float(r.gflops), float(r.timestamp), bool(r.cached),
                   source)

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
class PrefixBest:
    """The generalization track: the best of a run's first ``k`` trials, re-measured."""

    k: int
    best: Best


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
    search_time: float  # featurize + model + search time, from the env's meter
    trials: list[Trial]
    best: "Best | None" = None
    agent_options: dict[str, Any] = field(default_factory=dict)
    label: str = ""  # the workload's registered name, if any
    at_k: list[PrefixBest] = field(default_factory=list)  # generalization track: bests at k

    @property
    def task(self) -> tuple[str, str]:
        return (self.workload, self.target)

    def curve(self) -> list[float]:
        """Best GFLOP/s so far after each trial (a failed one counts 0)."""
        return best_so_far(t.gflops if t.ok else 0.0 for t in self.trials).tolist()

    @property
    def failures(self) -> int:
        return sum(not t.ok for t in self.trials)

    def sources(self) -> dict[str, int]:
        """How many trials each source answered (``recorded``, ``surrogate``, ``measured``)."""
        out: dict[str, int] = {}
        for t in self.trials:
            out[t.source or "measured"] = out.get(t.source or "measured", 0) + 1
        return out


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
    track: str = "live"  # live | replay | generalization
    dataset: dict[str, Any] = field(default_factory=dict)  # replay: path, digest, device, on_miss

    def vendor_for(self, workload: str, target: str) -> "VendorResult | None":
        for v in self.vendor:
            if v.workload == workload and v.target == target:
                return v
        return None


#: the largest results file or validation report read (a 10^6-trial file is ~450 MB and took
#: 5 GB of memory to read whole): split a bigger one by run
MAX_FILE_BYTES = 256 * 2**20


def read_bounded(path: "str | Path", limit: int = MAX_FILE_BYTES) -> str:
    """The text of ``path``, refused with a ``ResultsError`` past ``limit`` bytes."""
    size = Path(path).stat().st_size
    if size > limit:
        def amount(n: int) -> str:
            return f"{n / 2**20:.0f} MiB" if n >= 2**20 else f"{n:,} bytes"

        raise ResultsError(f"{path} is {amount(size)}, over the {amount(limit)} a results file "
                           "or report may be: split it by run (one file each)")
    return Path(path).read_text(encoding="utf-8", errors="strict")


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
    def from_json(cls, obj: Any, malformed: "list[Malformed] | None" = None) -> "ResultsDoc":
        """Raises ResultsError on the first malformed run or entry, or, given a ``malformed``
        list, appends each one there and reads on."""
        if not isinstance(obj, dict) or obj.get("schema") != SCHEMA:
            raise ResultsError(f"not a {SCHEMA} document")
        major = str(obj.get("schema_version", "")).split(".")[0]
        if major != SCHEMA_VERSION.split(".")[0]:
            raise ResultsError(f"schema version {obj.get('schema_version')!r} is not supported "
                               f"(this tensorgym reads {SCHEMA_VERSION})")
        if not isinstance(obj.get("runs"), list):
            raise ResultsError("malformed results document: 'runs' is not a list")
        runs = []
        for i, r in enumerate(obj["runs"]):
            try:
                runs.append(_run_from_json(r, f"runs[{i}]", malformed))
            except ResultsError as e:
                if malformed is None:
                    raise ResultsError(f"malformed results document: {e}") from None
                malformed.append(Malformed.of(f"runs[{i}]", r, None, str(e)))
        return cls(runs)

    @classmethod
    def load(cls, path: "str | Path",
             malformed: "list[Malformed] | None" = None) -> "ResultsDoc":
        try:
            obj = json.loads(read_bounded(path))
        except OSError as e:
            raise ResultsError(f"cannot read {path}: {e.strerror or e}") from None
        except (ValueError, RecursionError) as e:
            raise ResultsError(f"{path} is not JSON: {e}"[:500]) from None
        try:
            return cls.from_json(obj, malformed)
        except ResultsError as e:
            raise ResultsError(f"{path}: {e}") from None

    def entries(self) -> Iterable[tuple[Run, Entry]]:
        for run in self.runs:
            for e in run.entries:
                yield run, e


@dataclass
class Malformed:
    """A run or entry that could not be read (wrong types, missing fields): kept out of the
    document, reported by validation."""

    where: str  # e.g. "runs[0].entries[3]"
    run_id: str
    agent: str
    seed: str
    message: str

    @classmethod
    def of(cls, where: str, run: Any, entry: Any, message: str) -> "Malformed":
        def get(obj: Any, key: str) -> str:
            return str(obj.get(key, "?")) if isinstance(obj, dict) else "?"

        return cls(where, get(run, "run_id"), get(entry, "agent"), get(entry, "seed"), message)


def utc_now() -> str:
    """Now, as a run's or a report's ``created``: UTC, ISO 8601, to the second."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def entry_digest(run: Run, entry: Entry) -> str:
    """A fingerprint of an entry and the device it claims: a validation verdict applies to
    exactly this content (edit one number and the verdict no longer matches)."""
    text = json.dumps(_clean({"run_id": run.run_id, "device": run.device,
                              "entry": asdict(entry)}), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def split_tracks(doc: ResultsDoc) -> dict[str, ResultsDoc]:
    """``doc``'s runs by track (live first), each a document to rank on its own."""
    out: dict[str, ResultsDoc] = {}
    for track in TRACKS:
        runs = [r for r in doc.runs if r.track == track]
        if runs:
            out[track] = ResultsDoc(runs)
    return out


def one_track(doc: ResultsDoc) -> str:
    """The track of every run of ``doc`` ("live" when empty); raises ResultsError when ``doc``
    holds several: replay figures are never ranked beside live ones."""
    tracks = {r.track for r in doc.runs}
    if len(tracks) > 1:
        raise ResultsError(f"the document mixes tracks ({', '.join(sorted(tracks))}): rank each "
                           "on its own (results.split_tracks)")
    return tracks.pop() if tracks else "live"


def track_heading(doc: ResultsDoc) -> str:
    """A Markdown heading naming ``doc``'s track ("" for live runs alone): a replay track's
    datasets and how many trials were recorded or surrogate answers."""
    track = one_track(doc)
    if track == "live":
        return ""
    if track == "generalization":
        from .generalization import generalization_markdown  # noqa: PLC0415

        suites = sorted({str(r.suite.get("name", "?")) for r in doc.runs})
        return (f"# Generalization track: {', '.join(suites)}, live\n\n"
                + generalization_markdown(doc))
    counts: dict[str, int] = {}
    for _, e in doc.entries():
        for k, n in e.sources().items():
            counts[k] = counts.get(k, 0) + n
    sets = sorted({f"{r.dataset.get('path', '?')} (digest {str(r.dataset['digest'])[:12]}, "
                   f"on_miss {r.dataset.get('on_miss', '?')})" for r in doc.runs})
    return (f"# Replay track: {'; '.join(sets)}\n\nTrials answered from the dataset: "
            + ", ".join(f"{n} {k}" for k, n in sorted(counts.items()))
            + ". Surrogate answers are not measurements; each best was re-measured live and "
            "only that figure is reported.\n\n")


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


def _typed(value: Any, tp: Any, where: str) -> Any:
    """``value`` checked against the annotation ``tp`` (dataclasses built recursively)."""
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, where)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):  # X | None
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _typed(value, inner, where)
    if origin is list and isinstance(value, list):
        return [_typed(v, args[0], f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict and isinstance(value, dict):
        return dict(value)
    if tp is float and value is None:
        return math.nan  # _clean wrote a non-finite float as null
    if tp is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:  # an integer of 400 digits
            raise ResultsError(f"{where}: an integer of {value.bit_length()} bits, too large "
                               "for a float") from None
    if tp in (int, str, bool) and isinstance(value, tp) and not (
            tp is int and isinstance(value, bool)):
        return value
    want = getattr(tp, "__name__", str(tp))
    raise ResultsError(f"{where}: expected {want}, got {type(value).__name__} {value!r:.40}")


def _build(cls: Any, obj: Any, where: str, skip: tuple[str, ...] = ()) -> Any:
    if not isinstance(obj, dict):
        raise ResultsError(f"{where}: expected an object, got {type(obj).__name__}")
    hints = typing.get_type_hints(cls)
    fs = [f for f in dataclasses.fields(cls) if f.name not in skip]
    unknown = sorted(set(obj) - {f.name for f in dataclasses.fields(cls)})
    if unknown:
        raise ResultsError(f"{where}: unknown field(s) {', '.join(unknown)}")
    kwargs = {}
    for f in fs:
        if f.name in obj:
            kwargs[f.name] = _typed(obj[f.name], hints[f.name], f"{where}.{f.name}")
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ResultsError(f"{where}: missing field {f.name!r}")
    return cls(**kwargs)


#: the deepest nesting of a run's or an entry's values read (their dicts and lists): deeper
#: ones are malformed (a results file never nests past a few levels; Python's own limit is 1000)
MAX_DEPTH = 32


def _too_deep(obj: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether ``obj`` nests dicts and lists deeper than ``limit`` (iterative: no recursion)."""
    stack = [(obj, 0)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (dict, list)):
            if d >= limit:
                return True
            stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return False


def _run_from_json(r: Any, where: str, malformed: "list[Malformed] | None") -> Run:
    if isinstance(r, dict) and _too_deep({k: v for k, v in r.items() if k != "entries"}):
        raise ResultsError(f"{where}: nested deeper than {MAX_DEPTH} levels")
    run = _build(Run, r, where, skip=("entries",))
    if run.track not in TRACKS:
        raise ResultsError(f"{where}.track: {run.track!r} is not one of {', '.join(TRACKS)}")
    if run.track == "replay" and not run.dataset.get("digest"):
        raise ResultsError(f"{where}.dataset: a replay run names its dataset's digest")
    entries = r.get("entries", [])
    if not isinstance(entries, list):
        raise ResultsError(f"{where}.entries: expected a list")
    for i, e in enumerate(entries):
        try:
            if _too_deep(e):
                raise ResultsError(f"{where}.entries[{i}]: nested deeper than {MAX_DEPTH} levels")
            run.entries.append(_build(Entry, e, f"{where}.entries[{i}]"))
        except ResultsError as ex:
            if malformed is None:
                raise
            malformed.append(Malformed.of(f"{where}.entries[{i}]", r, e, str(ex)))
    return run
