"""``tensorgym dataset remeasure``: time again, on their device, the configs whose records hold
only a cold first run.

Before the measurement worker timed a warm run ahead of stopping a kernel
(``measure.worker.COLD_MARGIN``), a kernel whose checked first run lasted a sample's length and
passed twice the early-stop bound was stopped on that cold run alone; its record's only sample
is that run (``Record.cold_only``). On a 2-vCPU Emerald Rapids VM, 60-microsecond kernels read
6-15 ms that way. World models and replay leave such records out; this command measures their
configs again with the campaign's early stop (``early_stop`` x the task's best) and writes new
records (``collect.strategy`` ``"remeasure"``). The old records stay as they were.

Resumable: a config that has a record which is not cold-only (of any spelling an earlier tree
wrote) is done. Only records of this machine's device are measured; the others are counted.

``repeats=N`` (``--repeats N``) goes on to time every config that has a time (or a cold-only
record) until it has N timed records, in passes: every config's second record, then every
config's third, so that each pass sees the machine's drift alike. A config's time is the median
of its records' (``world.samples``), so a truth measured N times ranks with less of one
moment's noise. Configs whose every record failed are not measured again.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Optional, Sequence

from tqdm import tqdm

from ..errors import InvalidConfigError, TensorGymError
from ..measure import MeasureOptions, Measurer
from ..records import Records
from ..space import Config
from ..task import Task
from ..templates import canonical_target, space_for
from ..workloads import get_workload
from .collection import batch_options, make_measurer, task_bound

STRATEGY = "remeasure"


@dataclass
class RemeasureReport:
    """What a re-measurement did: records ``measured`` now (``failures`` among them), wall
    ``seconds``, measurements still ``left`` on this device (the budget ran out; with
    ``repeats``, one per config and pass), and cold-only configs of ``other_devices`` (not
    measurable here)."""

    device: str
    measured: int = 0
    failures: int = 0
    seconds: float = 0.0
    left: int = 0
    other_devices: int = 0
    per_task: dict[str, int] = field(default_factory=dict)

    @property
    def records_per_second(self) -> float:
        return self.measured / self.seconds if self.seconds > 0 else 0.0


def cold_configs(records: Records, device: str, target: str = "cpu",
                 workloads: Optional[Sequence[str]] = None) -> dict[str, list[Config]]:
    """Per workload key of ``device``'s records (of ``workloads`` only, if given): the configs of
    today's space that have a cold-only record and no other successful record."""
    return configs_to_time(records, device, target, workloads, repeats=1)


def configs_to_time(records: Records, device: str, target: str = "cpu",
                    workloads: Optional[Sequence[str]] = None,
                    repeats: int = 1) -> dict[str, list[Config]]:
    """Per workload key of ``device``'s records (of ``workloads`` only, if given): the configs of
    today's space with fewer than ``repeats`` timed records (successful, not cold-only) that
    have a cold-only record or at least one timed record."""
    keys = workloads if workloads is not None else records.workload_keys()
    out: dict[str, list[Config]] = {}
    for key in keys:
        recs = records.query(key, target, device)
        if not recs or (repeats <= 1 and not any(r.cold_only for r in recs)):
            continue
        try:
            space = space_for(get_workload(key), target)
        except TensorGymError:
            continue  # no workload or template of today's tree
        seen: dict[int, Config] = {}
        cold: set[int] = set()
        timed: dict[int, int] = {}
        for r in recs:
            if r.space_name != space.name:
                continue
            try:
                config = space.from_json(r.config_json)
            except InvalidConfigError:
                continue
            if r.cold_only:
                cold.add(config.index)
            elif r.ok:
                timed[config.index] = timed.get(config.index, 0) + 1
            else:
                continue
            seen.setdefault(config.index, config)
        todo = [c for i, c in seen.items() if timed.get(i, 0) < max(1, repeats)]
        if todo:
            out[key] = todo
    return out


def remeasure(db: "str | os.PathLike | Records", target: str = "cpu",
              workloads: Optional[Sequence[str]] = None, time_budget: float = 0.0,
              threads: int = 0, early_stop: float = 4.0, progress: bool = True,
              measurer: Optional[Measurer] = None, repeats: int = 1) -> RemeasureReport:
    """Measure the cold-only configs of this machine's device in ``db`` again (see the module
    docstring), task by task, until done or ``time_budget`` seconds (0: no limit) are spent;
    with ``repeats`` > 1, then every timed config until it has that many timed records, one
    pass per record. A given ``measurer`` is used as it is (and not closed); it must not stop
    first runs."""
    if repeats < 1:
        raise TensorGymError(f"repeats is a number of timed records >= 1, got {repeats!r}")
    if time_budget < 0:
        raise TensorGymError(f"a time budget is seconds >= 0 (0: none), got {time_budget!r}")
    if not (early_stop == 0 or early_stop >= 1):
        raise TensorGymError(f"early_stop must be 0 (off) or a ratio >= 1, got {early_stop!r}")
    target = canonical_target(target)
    records = db if isinstance(db, Records) else Records(db)
    own = measurer is None
    if measurer is None:  # every record a checked, complete run, as a campaign's
        measurer = make_measurer(target, threads, options=MeasureOptions(stop_first_run=False))
    t0 = time.monotonic()
    report = RemeasureReport(measurer.device)
    try:
        others = {r.device for r in records.query(target=target)} - {measurer.device}
        report.other_devices = sum(len(v) for d in sorted(others)
                                   for v in cold_configs(records, d, target, workloads).values())
        batch = 4 * max(1, measurer.options.n_parallel or os.cpu_count() or 1)
        for level in range(1, repeats + 1):
            todo = configs_to_time(records, measurer.device, target, workloads, level)
            total = sum(len(v) for v in todo.values())
            if time_budget and time.monotonic() - t0 >= time_budget:
                report.left += total  # a config left in an earlier pass needs this pass's too
                break
            desc = "remeasure" if repeats == 1 else f"remeasure, pass {level}/{repeats}"
            with tqdm(total=total, desc=desc, unit=" configs", disable=not progress) as bar:
                for key, configs in todo.items():  # past the budget: each only counts its left
                    _measure_task(records, measurer, key, target, configs, batch, early_stop,
                                  time_budget, t0, report, bar)
    finally:
        if own:
            measurer.close()
        if records is not db:
            records.close()
        report.seconds = time.monotonic() - t0
    return report


def _measure_task(records: Records, measurer: Measurer, key: str, target: str,
                  configs: list[Config], batch: int, early_stop: float, time_budget: float,
                  t0: float, report: RemeasureReport, bar: tqdm) -> None:
    """Measure ``configs`` of workload ``key`` in batches, writing each batch's records,
    until done or the budget is spent (the rest counted in ``report.left``)."""
    w = get_workload(key)
    task = Task(w.key, target, measurer.device)
    for i in range(0, len(configs), batch):
        if time_budget and time.monotonic() - t0 >= time_budget:
            report.left += len(configs) - i
            return
        results = measurer.measure(w, configs[i:i + batch],
                                   stop_slower_than=task_bound(records, task, early_stop),
                                   early_stop=early_stop)
        options = batch_options(measurer, {"strategy": STRATEGY, "early_stop": early_stop})
        records.add_many(task, results, options=options, workload=w)
        report.measured += len(results)
        report.failures += sum(not r.ok for r in results)
        report.per_task[w.key] = report.per_task.get(w.key, 0) + len(results)
        bar.update(len(results))


__all__ = ["RemeasureReport", "STRATEGY", "cold_configs", "configs_to_time", "remeasure"]
