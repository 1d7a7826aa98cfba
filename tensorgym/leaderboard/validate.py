"""Check a results document before anyone ranks it.

Every entry first gets the static checks (``problems``): the workload is known and its FLOPs are
the entry's, every trial's config is in the space and its GFLOP/s re-derive from its own runtimes
(FLOPs / median), and the best is the fastest valid trial, with a reported figure that re-derives
from the best's re-measured runtimes. Then its best config is re-measured on this machine (with
this machine's thread count, or ``threads``) and the median of the new samples is compared with
the claimed median: the larger of the reported and the search-time figure must be reached within
``tolerance``. Contention on a shared machine only slows a kernel down, so a claim that fails is
re-measured up to ``attempts`` times, the attempts spread over a few seconds (``retry_wait``): a
slow phase of these machines often lasts longer than one attempt. A doctored claim fails every
attempt.

A replay-track entry (``Run.track``) claims only its best's live re-measurement: its search
figures are answers from a dataset (recorded samples, or a surrogate's guess), never checked as
claims; its best config is re-measured on this machine like any other.

Statuses: ``ok``; ``NOT REPRODUCED``, ``invalid`` (malformed or inconsistent), ``error`` (the
config fails here): rejected; ``skipped`` (another device, or a target this machine lacks):
not checked. ``save_report`` writes the verdicts keyed by ``entry_digest``; ``screen`` applies
them (and the static checks) to a document for ``leaderboard show``.
"""
from __future__ import annotations

import json
import math
import statistics
import time
import warnings
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Callable, Iterable

from tensorgym.errors import ErrorCode, TensorGymError
from tensorgym.hardware.device import Device
from tensorgym.templates import space_for
from tensorgym.workloads import Workload, get_workload

from .harness import device_info, gflops_of, remeasure, runtime_options
from .results import (Entry, Malformed, ResultsDoc, ResultsError, Run, entry_digest,
                      read_bounded, utc_now)
from .tables import device_name

REPORT_SCHEMA = "tensorgym-validation"
REJECTED = ("NOT REPRODUCED", "invalid", "error")


@dataclass
class Check:
    run_id: str
    task: str
    device: str
    agent: str
    seed: "int | str"
    claimed_gflops: float
    measured_gflops: float
    status: str  # ok | NOT REPRODUCED | invalid | error | skipped
    note: str = ""
    digest: str = ""  # entry_digest of the entry checked ("" for a malformed one)

    @property
    def ratio(self) -> float:
        return self.measured_gflops / self.claimed_gflops if self.claimed_gflops else 0.0


def _close(a: float, b: float, rel: float = 1e-6) -> bool:
    return math.isfinite(a) and math.isfinite(b) and abs(a - b) <= rel * max(abs(a), abs(b))


def _positive(xs: list[float]) -> bool:
    return all(math.isfinite(x) and x > 0 for x in xs)


def problems(e: Entry) -> list[str]:
    """What makes ``e`` inconsistent with itself or with the workload (empty: nothing)."""
    try:
        w = get_workload(e.workload)
        space = space_for(w, e.target)
    except TensorGymError as ex:
        return [str(ex)]
    out = []
    if e.workload != w.key or e.label not in ("", w.name):  # tables group tasks by these
        out.append(f"workload {e.workload!r} labelled {e.label!r}: {w.key} is "
                   f"{w.name or 'unnamed'}")
    if e.flops != w.flops:
        out.append(f"flops {e.flops}, but {w.key} has {w.flops}")
    if len(e.trials) > e.budget:
        out.append(f"{len(e.trials)} trials for a budget of {e.budget}")
    for i, t in enumerate(e.trials):
        try:
            space.from_json(t.config)
        except TensorGymError as ex:
            out.append(f"trial {i}: config not in {space.name}: {ex}")
            continue
        if t.error not in ErrorCode.__members__:
            out.append(f"trial {i}: unknown error code {t.error!r}")
        elif not _positive(t.runtimes):
            out.append(f"trial {i}: runtimes must be finite and > 0")
        elif not _close(t.gflops, derived := gflops_of(w, t.runtimes) if t.ok else 0.0):
            out.append(f"trial {i}: {t.gflops:.4g} GFLOP/s, its runtimes give "
                       f"{_figure(derived)}")
    return out + _best_problems(e, w)


def _best_problems(e: Entry, w: Workload) -> list[str]:
    ok = [i for i, t in enumerate(e.trials) if t.ok]
    b = e.best
    if b is None:
        return [f"no best, but {len(ok)} valid trials"] if ok else []
    if not 0 <= b.trial < len(e.trials) or not e.trials[b.trial].ok:
        return [f"best.trial {b.trial} is not a valid trial"]
    t, out = e.trials[b.trial], []
    if b.config != t.config:
        out.append(f"best.config is not trial {b.trial}'s config")
    if not _close(b.gflops_search, t.gflops):
        out.append(f"best.gflops_search {b.gflops_search:.4g}, trial {b.trial} has "
                   f"{t.gflops:.4g}")
    top = max(e.trials[i].gflops for i in ok)
    if not _close(t.gflops, top):
        out.append(f"best trial {b.trial} ({t.gflops:.4g} GFLOP/s) is not the fastest "
                   f"({top:.4g})")
    if not _positive(b.runtimes):
        out.append("best.runtimes must be finite and > 0")
    elif b.gflops != 0:  # 0: the harness could not re-measure it (claims nothing)
        derived = gflops_of(w, b.runtimes) if b.runtimes else b.gflops_search
        if not _close(b.gflops, derived):
            out.append(f"best.gflops {b.gflops:.4g}, its runtimes give {_figure(derived)}")
    return out


def _figure(gflops: float) -> str:
    """A GFLOP/s figure for a message: runtimes too short (5e-324 s) give no finite one."""
    return f"{gflops:.4g}" if math.isfinite(gflops) else "no finite GFLOP/s (too short)"


def _summary(ps: list[str], n: int = 3) -> str:
    return "; ".join(ps[:n]) + (f"; and {len(ps) - n} more" if len(ps) > n else "")


def _foreign_note(theirs: str, here: str) -> str:
    note = f"measured on {theirs}, this is {here}"
    try:
        a, b = Device.parse(theirs), Device.parse(here)
    except TensorGymError:
        return note
    if a.kind == b.kind == "cpu" and replace(a, threads=b.threads) == b:
        note += f" (rerun with --threads {a.threads} to check it)"
    return note


def validate(doc: ResultsDoc, tolerance: float = 0.25, repeats: int = 3, threads: int = 0,
             attempts: int = 2, any_device: bool = False,
             malformed: Iterable[Malformed] = (),
             progress: "Callable[[str], None] | None" = None) -> list[Check]:
    """One Check per entry of ``doc`` and per ``malformed`` one. ``threads``: the CPU thread
    count to measure with (0: all of this machine's cores); the document's is never used.
    ``any_device`` re-measures entries of other devices too, for reference only (they stay
    skipped: GFLOP/s are only comparable on the same device)."""
    checks = [Check(m.run_id, m.where, "?", m.agent, m.seed, 0.0, 0.0, "invalid", m.message)
              for m in malformed]
    here: dict[str, Any] = {}  # target -> this machine's device name, or why it has none
    measurers: dict[str, Any] = {}  # target -> a Measurer, started when first needed
    try:
        for run, e in doc.entries():
            c = Check(run.run_id, f"{e.label or e.workload}@{e.target}", device_name(run),
                      e.agent, e.seed, 0.0, 0.0, "ok", digest=entry_digest(run, e))
            checks.append(c)
            try:
                _check(c, run, e, tolerance, repeats, threads, attempts, any_device, here,
                       measurers)
            except Exception as ex:  # noqa: BLE001  (one entry never ends the validation)
                c.status, c.note = "error", f"{type(ex).__name__}: {ex}"
            if progress:
                progress(f"{c.task} {c.agent} seed {c.seed}: claimed {c.claimed_gflops:.2f}, "
                         f"measured {c.measured_gflops:.2f} GFLOP/s: {c.status}")
    finally:
        for m in measurers.values():
            m.close()
    return checks


def _check(c: Check, run: Run, e: Entry, tolerance: float, repeats: int, threads: int,
           attempts: int, any_device: bool, here: dict[str, Any], measurers: dict) -> None:
    # what the tables would show: the reported best, or the best trial; a replay entry's
    # search figures are recorded or surrogate answers, so it claims only its live figure
    claims = [e.best.gflops] if run.track == "replay" and e.best else \
        [e.best.gflops, e.best.gflops_search] if e.best else e.curve()[-1:]
    c.claimed_gflops = max(claims, default=0.0)
    if ps := problems(e):
        c.status, c.note = "invalid", _summary(ps)
        return
    if e.best is None:
        c.note = "no valid trial: nothing claimed"
        return
    if run.track == "replay" and not e.best.gflops:
        c.note = "replay entry whose best was never re-measured live: nothing claimed"
        return
    if e.target not in here:
        try:
            here[e.target] = device_info(e.target, threads)["name"]
        except TensorGymError as ex:  # target absent here: say why, go on
            here[e.target] = ex
    if isinstance(here[e.target], Exception):
        c.status, c.note = "skipped", f"target unavailable here: {here[e.target]}"
        return
    foreign = c.device != here[e.target]
    if foreign:
        c.status, c.note = "skipped", _foreign_note(c.device, here[e.target])
        if not any_device:
            return
        c.note += "; re-measured here for reference only"
    from tensorgym.measure import LocalMeasurer

    if e.target not in measurers:
        measurers[e.target] = LocalMeasurer(e.target, **runtime_options(e.target, threads))
    w = get_workload(e.workload)
    for attempt in range(attempts):
        if attempt:
            time.sleep(retry_wait(attempt))
        costs, err = remeasure(w, e.target, e.best.config, repeats, measurers[e.target])
        if err:
            c.status, c.note = "error", err
            return
        c.measured_gflops = max(c.measured_gflops, w.flops / statistics.median(costs) / 1e9)
        if c.measured_gflops >= (1 - tolerance) * c.claimed_gflops:
            break
    if not foreign:
        c.status = "ok" if c.measured_gflops >= (1 - tolerance) * c.claimed_gflops \
            else "NOT REPRODUCED"


def retry_wait(attempt: int) -> float:
    """Seconds to wait before re-measuring attempt ``attempt`` (1, 2, ...): 0.25, 0.5, 1, 2, 2...
    On these VMs a slowdown of a small kernel by up to 2x lasts from tens of milliseconds to a
    second or so; back-to-back attempts could all fall into one."""
    return min(2.0, 0.25 * 2 ** (attempt - 1))


def passed(checks: list[Check], allow_skip: bool = False) -> bool:
    """True when every entry was checked and reproduced (skipped ones allowed if asked)."""
    return all(c.status == "ok" or (allow_skip and c.status == "skipped") for c in checks)


def report(checks: list[Check]) -> str:
    lines = ["| task | device | agent | seed | claimed GFLOP/s | re-measured GFLOP/s (median) "
             "| ratio | status |", "|---|---|---|---|---|---|---|---|"]
    for c in checks:
        status = c.status + (f" ({c.note})" if c.note else "")
        lines.append(f"| {c.task} | {c.device} | {c.agent} | {c.seed} | {c.claimed_gflops:.2f} "
                     f"| {c.measured_gflops:.2f} | {c.ratio:.2f} | {status} |")
    return "\n".join(lines) + "\n"


def save_report(checks: list[Check], path: "str | Path", **settings: Any) -> Path:
    """The verdicts as JSON, for ``leaderboard show --validation``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"schema": REPORT_SCHEMA, "schema_version": "1.0",
                                "created": utc_now(), "settings": settings,
                                "checks": [asdict(c) for c in checks]}, indent=1))
    return path


def load_verdicts(paths: Iterable["str | Path"],
                  left_out: "list[tuple[str, str]] | None" = None) -> dict[str, Check]:
    """digest -> verdict from validation reports; a rejection in any report wins over ok. A
    report that is not one is a ``ResultsError``; a malformed check in one (a field of the
    wrong type, unknown or missing) is left out: appended to ``left_out`` as (report and
    check, why) where given (``leaderboard show`` lists them under "Not ranked"), else with a
    warning naming the report, the check and the field."""
    out: dict[str, Check] = {}
    for p in paths:
        try:
            obj = json.loads(read_bounded(p))
            if not isinstance(obj, dict) or obj.get("schema") != REPORT_SCHEMA:
                raise ValueError(f"not a {REPORT_SCHEMA} report")
            if not isinstance(obj.get("checks"), list):
                raise ValueError("'checks' is not a list")
        except OSError as e:
            raise ResultsError(f"cannot read {p}: {e.strerror or e}") from None
        except (ValueError, RecursionError) as e:
            raise ResultsError(f"{p}: malformed validation report: {e}"[:500]) from None
        checks, bad = [], []
        for i, c in enumerate(obj["checks"]):
            try:
                checks.append(_check_of(c, f"checks[{i}]"))
            except ResultsError as e:
                bad.append(str(e))
                if left_out is not None:
                    left_out.append((f"validation report {p}, checks[{i}]",
                                     f"malformed check: {e}"))
        if bad and left_out is None:
            warnings.warn(f"validation report {p}: left out {len(bad)} malformed check(s) "
                          f"({'; '.join(bad[:3])}{'; ...' if len(bad) > 3 else ''})",
                          stacklevel=2)
        for c in checks:
            if c.digest and (c.digest not in out or c.status in REJECTED):
                out[c.digest] = c
    return out


def _check_of(obj: Any, where: str) -> Check:
    """A report's check, every field of its type (ints accepted for floats, ``seed`` an int or
    a string), or a ``ResultsError`` naming the field."""
    if not isinstance(obj, dict):
        raise ResultsError(f"{where}: expected an object, got {type(obj).__name__}")
    names = [f.name for f in fields(Check)]
    if unknown := sorted(set(obj) - set(names)):
        raise ResultsError(f"{where}: unknown field(s) {', '.join(map(str, unknown))[:80]}")
    kinds = {"seed": (int, str), "claimed_gflops": (int, float),
             "measured_gflops": (int, float)}
    kwargs = {}
    for f in fields(Check):
        if f.name not in obj:
            if f.default is MISSING:
                raise ResultsError(f"{where}: missing field {f.name!r}")
            continue
        v = obj[f.name]
        if not isinstance(v, kinds.get(f.name, str)) or isinstance(v, bool):
            raise ResultsError(f"{where}.{f.name}: expected "
                               f"{'a number' if f.name in kinds else 'a string'}, got "
                               f"{type(v).__name__}")
        try:
            kwargs[f.name] = float(v) if f.name.endswith("_gflops") else v
        except OverflowError:  # a 400-digit integer
            raise ResultsError(f"{where}.{f.name}: a number too large") from None
    return Check(**kwargs)


@dataclass
class Board:
    """What ``leaderboard show`` ranks: ``doc`` without rejected entries, the digests of the
    entries validated here, and each rejected entry with the reason."""

    doc: ResultsDoc
    validated: set[str] = field(default_factory=set)
    rejected: list[tuple[str, str]] = field(default_factory=list)


def screen(doc: ResultsDoc, verdicts: "dict[str, Check] | None" = None,
           malformed: Iterable[Malformed] = (), validated_only: bool = False) -> Board:
    verdicts = verdicts or {}
    board = Board(ResultsDoc())
    board.rejected = [(f"{m.where} of run {m.run_id}", m.message) for m in malformed]
    for run in doc.runs:
        kept = []
        for e in run.entries:
            name = (f"{e.label or e.workload}@{e.target} {e.agent} seed {e.seed} "
                    f"({device_name(run)})")
            digest = entry_digest(run, e)
            v = verdicts.get(digest)
            if ps := problems(e):
                board.rejected.append((name, "invalid: " + _summary(ps)))
            elif v is not None and v.status in REJECTED:
                board.rejected.append((name, f"validation: {v.status}"
                                       + (f" ({v.note})" if v.note else "")))
            elif validated_only and not (v and v.status == "ok"):
                board.rejected.append((name, "not validated"))
            else:
                kept.append(e)
                if v is not None and v.status == "ok":
                    board.validated.add(digest)
        if kept:
            board.doc.runs.append(Run(run.run_id, run.created, run.device, run.software,
                                      run.suite, run.seeds, kept, run.vendor, run.track,
                                      run.dataset))
    return board


def load_all(paths: Iterable["str | Path"]) -> tuple[ResultsDoc, list[Malformed]]:
    """The merged documents, and their malformed runs and entries (each named with its file)."""
    from .results import merge

    docs, malformed = [], []
    for p in paths:
        bad: list[Malformed] = []
        docs.append(ResultsDoc.load(p, bad))
        malformed += [Malformed(f"{p}: {m.where}", m.run_id, m.agent, m.seed, m.message)
                      for m in bad]
    return merge(docs), malformed
