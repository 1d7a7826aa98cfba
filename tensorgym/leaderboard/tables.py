"""Leaderboard tables from a (merged) results document: per task and aggregated by geometric
mean, as Markdown or CSV.

A task is (workload, target, device): GFLOP/s from different devices are never compared. The
"best known" config of a task is the fastest trial any agent found for it in the document.
"peak %" is the re-measured best as a share of the CPU's FMA peak, measured by the run
(``peak.PeakBook``, stored as the run's ``device["fma_peak_gflops"]``). A best above the peak
cannot be: it is flagged (``over_peak``, "> peak (!)"), never printed as a share over 100%.
``validated`` (a set of ``entry_digest``s, see ``validate.screen``) marks the entries whose best
was re-measured on this machine; the others are shown as claims.
"""
from __future__ import annotations

import csv
import io
import statistics
from collections import defaultdict
from dataclasses import dataclass, fields
from typing import Collection

from .metrics import geomean, normalized_auc, trials_to_reach
from .results import Entry, ResultsDoc, Run, entry_digest, one_track

Task = tuple[str, str, str]  # workload, target, device


def device_name(run: Run) -> str:
    return str(run.device.get("name", "unknown"))


@dataclass
class TaskRow:
    """One agent on one task, averaged over its seeds."""

    task: str
    device: str
    agent: str
    seeds: int
    validated: int  # how many of the seeds' entries were re-measured here and reproduced
    budget: int
    best_gflops: float  # mean over seeds of the re-measured best
    best_gflops_std: float
    frac_of_best: float  # best_gflops / the best any agent reported on the task
    vendor_gflops: float  # 0 where the vendor library was skipped
    speedup_vs_vendor: "float | None"
    share_of_peak: "float | None"  # best_gflops / the run's measured FMA peak (None: not measured)
    trials_to_90: "float | None"  # median over seeds; None if no seed got there
    auc: float  # normalized area under the best-so-far curve
    failures: float
    wall_s: float
    build_s: float
    measure_s: float
    search_s: float
    over_peak: bool = False  # the best exceeds the measured peak: share_of_peak left out


@dataclass
class AgentRow:
    rank: int
    agent: str
    tasks: int
    entries: int
    validated: int
    geomean_frac_of_best: float
    geomean_speedup_vs_vendor: "float | None"
    mean_auc: float
    wall_s: float


def _reported(e: Entry) -> float:
    if e.best is not None:
        return e.best.gflops
    return max(e.curve(), default=0.0)


def task_rows(doc: ResultsDoc, validated: Collection[str] = frozenset()) -> list[TaskRow]:
    one_track(doc)  # replay and live figures are never ranked together
    groups: dict[Task, dict[str, list[tuple[Run, Entry]]]] = defaultdict(lambda: defaultdict(list))
    for run, e in doc.entries():
        groups[(e.label or e.workload, e.target, device_name(run))][e.agent].append((run, e))
    rows = []
    for (workload, target, device), by_agent in groups.items():
        # curves are compared with the best trial of any search; reported (re-measured) bests
        # with the best reported figure, so re-measurement noise cannot mix the two
        best_known = max(max(e.curve(), default=0.0)
                         for items in by_agent.values() for _, e in items)
        best_reported = max(_reported(e) for items in by_agent.values() for _, e in items)
        for agent, items in by_agent.items():
            reported = [_reported(e) for _, e in items]
            mean_best = statistics.fmean(reported)
            vendors = [v.gflops for r, e in items
                       if (v := r.vendor_for(e.workload, e.target)) and v.gflops > 0]
            vendor = statistics.fmean(vendors) if vendors else 0.0
            peaks = [p for r, _ in items if (p := r.device.get("fma_peak_gflops"))]
            peak = statistics.fmean(peaks) if peaks else 0.0
            reach = [trials_to_reach(e.curve(), 0.9 * best_known) for _, e in items]
            reached = [r for r in reach if r is not None]
            rows.append(TaskRow(
                task=f"{workload}@{target}", device=device, agent=agent, seeds=len(items),
                validated=sum(entry_digest(r, e) in validated for r, e in items)
                if validated else 0,
                budget=max(e.budget for _, e in items), best_gflops=mean_best,
                best_gflops_std=statistics.pstdev(reported) if len(reported) > 1 else 0.0,
                frac_of_best=mean_best / best_reported if best_reported > 0 else 0.0,
                vendor_gflops=vendor, speedup_vs_vendor=mean_best / vendor if vendor else None,
                share_of_peak=mean_best / peak if peak and mean_best <= peak else None,
                over_peak=bool(peak) and mean_best > peak,
                trials_to_90=(statistics.median(reached)
                              if len(reached) * 2 > len(reach) else None),
                auc=statistics.fmean(normalized_auc(e.curve(), best_known, e.budget)
                                     for _, e in items),
                failures=statistics.fmean(e.failures for _, e in items),
                wall_s=statistics.fmean(e.wall_time for _, e in items),
                build_s=statistics.fmean(e.build_time for _, e in items),
                measure_s=statistics.fmean(e.measure_time for _, e in items),
                search_s=statistics.fmean(e.search_time for _, e in items)))
    rows.sort(key=lambda r: (r.task, r.device, -r.best_gflops))
    return rows


def agent_rows(rows: list[TaskRow]) -> list[AgentRow]:
    by_agent: dict[str, list[TaskRow]] = defaultdict(list)
    for r in rows:
        by_agent[r.agent].append(r)
    out = []
    for agent, rs in by_agent.items():
        speedups = [r.speedup_vs_vendor for r in rs if r.speedup_vs_vendor]
        out.append(AgentRow(0, agent, len(rs), sum(r.seeds for r in rs),
                            sum(r.validated for r in rs), geomean(r.frac_of_best for r in rs),
                            geomean(speedups) if speedups else None,
                            statistics.fmean(r.auc for r in rs),
                            sum(r.wall_s for r in rs)))
    out.sort(key=lambda a: (-a.geomean_frac_of_best, -a.mean_auc, a.agent))
    for i, a in enumerate(out):
        a.rank = i + 1
    return out


def _fmt(v: object, digits: int = 2) -> str:
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def _validated(n: int, of: int) -> str:
    return f"{n}/{of}" + ("" if n == of else " *")


OVER_PEAK = "> peak (!)"  # the peak % cell of a best above the measured FMA peak


def markdown(doc: ResultsDoc, validated: Collection[str] = frozenset(),
             rejected: "list[tuple[str, str]] | None" = None) -> str:
    """``rejected``: (entry, reason) pairs left out of the ranking, listed after it."""
    rows = task_rows(doc, validated)
    if not rows:
        return "\n".join(["(no results)"] + _rejected(rejected or [])) + "\n"
    lines = ["## Leaderboard (geometric mean over tasks)", "",
             "validated: entries re-measured on this machine by `tensorgym validate` and "
             "reproduced; * marks rows that hold unvalidated claims.", "",
             "| rank | agent | tasks | validated | geomean best/best-reported "
             "| geomean speedup vs vendor | mean AUC | wall s |",
             "|---|---|---|---|---|---|---|---|"]
    for a in agent_rows(rows):
        lines.append(f"| {a.rank} | {a.agent} | {a.tasks} | {_validated(a.validated, a.entries)} "
                     f"| {_fmt(a.geomean_frac_of_best, 3)} "
                     f"| {_fmt(a.geomean_speedup_vs_vendor)} | {_fmt(a.mean_auc, 3)} "
                     f"| {_fmt(a.wall_s, 1)} |")
    lines += ["", "## Per task (mean over seeds; best re-measured)", "",
              "| task | device | agent | seeds | validated | budget | best GFLOP/s | vs vendor "
              "| peak % | trials to 90% | AUC | fails | wall s | build s | measure s | search s |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        vendor = (f"{r.speedup_vs_vendor:.2f}x ({r.vendor_gflops:.2f})"
                  if r.speedup_vs_vendor else "-")
        reach = _fmt(r.trials_to_90, 0) if r.trials_to_90 is not None else f">{r.budget}"
        peak = (OVER_PEAK if r.over_peak else
                f"{100 * r.share_of_peak:.0f}%" if r.share_of_peak is not None else "-")
        lines.append(
            f"| {r.task} | {r.device} | {r.agent} | {r.seeds} "
            f"| {_validated(r.validated, r.seeds)} | {r.budget} "
            f"| {r.best_gflops:.2f} ± {r.best_gflops_std:.2f} | {vendor} "
            f"| {peak} | {reach} "
            f"| {r.auc:.3f} | {r.failures:.1f} | {r.wall_s:.1f} | {r.build_s:.1f} "
            f"| {r.measure_s:.1f} | {r.search_s:.2f} |")
    if any(r.over_peak for r in rows):
        lines += ["", f"{OVER_PEAK}: the re-measured best is above the FMA peak measured on this "
                  "device, even after measuring the peak again: a figure that cannot be (a timing "
                  "error, or a peak that cannot be reached in this moment); check it before use."]
    return "\n".join(lines + _rejected(rejected or [])) + "\n"



#: a "Not ranked" cell longer than this is cut (a file may hold a 5,000-digit workload key)
MAX_CELL = 160


def _cell(text: str) -> str:
    text = text.replace("|", "/").replace("\n", " ")
    if len(text) <= MAX_CELL:
        return text
    return f"{text[:MAX_CELL]}... ({len(text):,} characters)"


def _rejected(rejected: list[tuple[str, str]]) -> list[str]:
    if not rejected:
        return []
    return ["", "## Not ranked", "", "| entry | why |", "|---|---|"] + [
        f"| {_cell(name)} | {_cell(why)} |" for name, why in rejected]


def csv_text(doc: ResultsDoc, validated: Collection[str] = frozenset()) -> str:
    buf = io.StringIO()
    writer = csv.writer(buf)
    names = [f.name for f in fields(TaskRow)]
    writer.writerow(names)
    for r in task_rows(doc, validated):
        writer.writerow(["" if getattr(r, n) is None else getattr(r, n) for n in names])
    return buf.getvalue()
