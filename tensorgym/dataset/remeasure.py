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
    ``seconds``, configs still ``left`` on this device (the budget ran out), and cold-only
    configs of ``other_devices`` (not measurable here)."""

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
    keys = workloads if workloads is not None else records.workload_keys()
    out: dict[str, list[Config]] = {}
    for key in keys:
        recs = records.query(key, target, device)
        if not any(r.cold_only for r in recs):
            continue
        try:
            space = space_for(get_workload(key), target)
        except TensorGymError:
            continue  # no workload or template of today's tree
        cold: dict[int, Config] = {}
        timed: set[int] = set()
        for r in recs:
            if r.space_name != space.name:
                continue
            try:
                config = space.from_json(r.config_json)
            except InvalidConfigError:
                continue
            if r.cold_only:
                cold[config.index] = config
            elif r.ok:
                timed.add(config.index)
        todo = [c for i, c in cold.items() if i not in timed]
        if todo:
            out[key] = todo
    return out


def remeasure(db: "str | os.PathLike | Records", target: str = "cpu",
              workloads: Optional[Sequence[str]] = None, time_budget: float = 0.0,
              threads: int = 0, early_stop: float = 4.0, progress: bool = True,
              measurer: Optional[Measurer] = None) -> RemeasureReport:
    """Measure the cold-only configs of this machine's device in ``db`` again (see the module
    docstring), task by task, until done or ``time_budget`` seconds (0: no limit) are spent. A
    given ``measurer`` is used as it is (and not closed); it must not stop first runs."""
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
        todo = cold_configs(records, measurer.device, target, workloads)
        others = {r.device for r in records.query(target=target)} - {measurer.device}
        report.other_devices = sum(len(v) for d in sorted(others)
                                   for v in cold_configs(records, d, target, workloads).values())
        total = sum(len(v) for v in todo.values())
        batch = 4 * max(1, measurer.options.n_parallel or os.cpu_count() or 1)
        with tqdm(total=total, desc="remeasure", unit=" configs", disable=not progress) as bar:
            for key, configs in todo.items():
                if time_budget and time.monotonic() - t0 >= time_budget:
                    report.left += len(configs)
                    continue
                w = get_workload(key)
                task = Task(w.key, target, measurer.device)
                for i in range(0, len(configs), batch):
                    if time_budget and time.monotonic() - t0 >= time_budget:
                        report.left += len(configs) - i
                        break
                    results = measurer.measure(w, configs[i:i + batch],
                                               stop_slower_than=task_bound(records, task,
                                                                           early_stop),
                                               early_stop=early_stop)
                    options = batch_options(measurer, {"strategy": STRATEGY,
                                                       "early_stop": early_stop})
                    records.add_many(task, results, options=options, workload=w)
                    report.measured += len(results)
                    report.failures += sum(not r.ok for r in results)
                    report.per_task[key] = report.per_task.get(key, 0) + len(results)
                    bar.update(len(results))
    finally:
        if own:
            measurer.close()
        if records is not db:
            records.close()
        report.seconds = time.monotonic() - t0
    return report


__all__ = ["RemeasureReport", "STRATEGY", "cold_configs", "remeasure"]
