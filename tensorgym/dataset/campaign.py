"""Collect a dataset over many tasks until a time budget is spent, resumably.

A campaign goes over its tasks in rounds, so that a budget that ends early still leaves every
task covered about equally. In round ``r`` each task gets, in the order given:

- ``random``: its reference schedule and the uniform samples of its random stream (the stream of
  ``collection.collect``, fixed by the seed and the workload) up to ``(r + 1) * chunk``;
- ``agent``: a tune of ``chunk`` new trials by the agent (``xgb``), told every record of the task
  this device has (``tune``'s ``prior``), so its model starts from them and it measures only
  configs the database lacks.

Resuming is what the database says: a task's random stream continues after the configs this
device measured, and a round whose records are there is skipped (records keep their device, so
another machine starts its own rounds). Early stop stays on (``early_stop``: stop timing a
kernel once it is surely that many times slower than the task's best): such a record has fewer
samples and is flagged ``early_stop``; first runs are never stopped (``stop_first_run`` off),
so every record is a checked, complete run. Each batch's records keep how loaded the machine
was (``collect.load``: the 1, 5 and 15-minute load averages as the batch started).
"""
from __future__ import annotations

import json
import os
import time
import zlib
from dataclasses import dataclass, field, replace
from typing import Any, Optional, Sequence

import numpy as np
from tqdm import tqdm

from .. import registry
from ..errors import TensorGymError
from ..measure import MeasureOptions, Measurer
from ..records import Records
from ..search import StopSearch, tune
from ..session import TuningSession
from ..task import Task
from ..templates import canonical_target, default_config, space_for
from ..workloads import Workload, get_workload
from .collection import (batch_options, is_recorded, make_measurer, recorded_configs,
                         task_bound)

PARTS = ("random", "agent")


@dataclass
class CampaignReport:
    """What a campaign did: records ``measured`` now (``failures`` among them), wall
    ``seconds``, rounds begun, and per task the records it now has on this device."""

    device: str
    measured: int = 0
    failures: int = 0
    seconds: float = 0.0
    rounds: int = 0
    stopped_by_budget: bool = False
    per_task: dict[str, int] = field(default_factory=dict)

    @property
    def records_per_second(self) -> float:
        return self.measured / self.seconds if self.seconds > 0 else 0.0


class Campaign:
    """Rounds of collection over ``workloads`` on ``target`` into ``db`` (see the module
    docstring). ``run(time_budget)`` collects until the budget (seconds) is spent or
    ``max_rounds`` rounds are done; call ``close()`` (or use ``with``) when done."""

    def __init__(self, workloads: Sequence["str | Workload"], db: "str | os.PathLike | Records",
                 target: str = "cpu", chunk: int = 32, parts: Sequence[str] = PARTS,
                 early_stop: float = 4.0, threads: int = 0, seed: int = 0,
                 ray: "str | bool | None" = None, agent: str = "xgb",
                 measurer: Optional[Measurer] = None,
                 options: Optional[MeasureOptions] = None) -> None:
        if isinstance(chunk, bool) or not isinstance(chunk, int) or chunk < 1:
            raise TensorGymError(f"chunk must be a positive integer, got {chunk!r}")
        bad = [p for p in parts if p not in PARTS]
        if bad or not parts:
            raise TensorGymError(f"unknown campaign parts {bad or list(parts)!r}; use some of "
                                 f"{', '.join(PARTS)}")
        if not (early_stop == 0 or early_stop >= 1):
            raise TensorGymError(f"early_stop must be 0 (off) or a ratio >= 1, got {early_stop!r}")
        self.target = canonical_target(target)
        self.works = [get_workload(w) for w in workloads]
        if not self.works:
            raise TensorGymError("no workloads to collect")
        self.chunk, self.parts, self.early_stop = chunk, tuple(parts), float(early_stop)
        self.seed, self.agent = seed, agent
        self.records = db if isinstance(db, Records) else Records(db)
        self._own_records = self.records is not db
        self._own_measurer = measurer is None
        opts = replace(options or MeasureOptions(), stop_first_run=False)
        self.measurer = measurer or make_measurer(self.target, threads, ray, opts)
        self.records.restore_unsaved()

    # -- the loop ------------------------------------------------------------------------------

    def run(self, time_budget: float, max_rounds: int = 0, progress: bool = True) -> CampaignReport:
        if not time_budget > 0:
            raise TensorGymError(f"a time budget is a positive number of seconds, got "
                                 f"{time_budget!r}")
        t0 = time.monotonic()
        deadline = t0 + time_budget
        report = CampaignReport(self.measurer.device)
        bar = tqdm(desc="collect", unit=" records", smoothing=0.1, disable=not progress)
        try:
            r = self._first_open_round()
            while time.monotonic() < deadline and (not max_rounds or report.rounds < max_rounds):
                report.rounds += 1
                for w in self.works:
                    for part in self.parts:
                        if time.monotonic() >= deadline:
                            break
                        bar.set_postfix_str(f"round {r} {part} {w.label}", refresh=False)
                        step = self._random if part == "random" else self._agent
                        n, failed = step(w, r, deadline, bar)
                        report.measured += n
                        report.failures += failed
                r += 1
            report.stopped_by_budget = time.monotonic() >= deadline
        finally:
            bar.close()
            report.seconds = time.monotonic() - t0
            report.per_task = {w.key: len(self._done(w)) for w in self.works}
        return report

    def _first_open_round(self) -> int:
        """The first round some task lacks the records of (a resumed campaign starts there)."""
        return min(self._rounds_done(w) for w in self.works)

    def _rounds_done(self, w: Workload) -> int:
        counts = {p: 0 for p in self.parts}
        for rec in self.records.query(w.key, self.target, self.device):
            part = _part_of(rec.options)
            if part in counts:
                counts[part] += 1
        if "random" in counts:  # the reference schedule is not one of the chunk's samples
            counts["random"] = max(0, counts["random"] - 1)
        return min(c // self.chunk for c in counts.values())

    # -- the parts -----------------------------------------------------------------------------

    def _random(self, w: Workload, r: int, deadline: float, bar: Any) -> tuple[int, int]:
        space = space_for(w, self.target)
        reference = default_config(w, self.target)
        rng = np.random.default_rng([self.seed, zlib.crc32(w.key.encode())])
        plan = [reference] + space.sample_unique(rng, (r + 1) * self.chunk,
                                                 exclude={reference.index})
        done = self._done(w)
        todo = [c for c in plan if not is_recorded(c, space, done)]
        batch = 4 * max(1, self.measurer.options.n_parallel or os.cpu_count() or 1)
        task = Task(w.key, self.target, self.device)
        measured = failed = 0
        for i in range(0, len(todo), batch):
            if time.monotonic() >= deadline:
                break
            opts = self._options("random")
            bound = task_bound(self.records, task, self.early_stop)
            results = self.measurer.measure(w, todo[i:i + batch], stop_slower_than=bound,
                                            early_stop=self.early_stop)
            self.records.add_many(task, results, options=opts, workload=w)
            measured += len(results)
            failed += sum(not x.ok for x in results)
            bar.update(len(results))
        rec = self.records.lookup(task, reference.to_json())
        if rec is not None and rec.ok and self.records.reference(task, reference.to_json()) is None:
            self.records.set_reference(task, reference.to_json(), rec.median)
        return measured, failed

    def _agent(self, w: Workload, r: int, deadline: float, bar: Any) -> tuple[int, int]:
        task = Task(w.key, self.target, self.device)
        have = sum(_part_of(rec.options) == "agent"
                   for rec in self.records.query(w.key, self.target, self.device))
        want = (r + 1) * self.chunk - have
        if want <= 0 or time.monotonic() >= deadline:
            return 0, 0
        space = space_for(w, self.target)
        prior = self.records.results(task, space)
        session = TuningSession(w, self.target, budget=want, records=self.records,
                                use_cache=True, measurer=self.measurer,
                                early_stop=self.early_stop)
        session.record_options = self._options("agent")

        def step(_strategy: Any, batch: list) -> None:
            bar.update(sum(not x.cached for x in batch))
            session.record_options = self._options("agent")
            if time.monotonic() >= deadline:
                raise StopSearch

        try:
            results = tune(session, registry.make(self.agent, **self._agent_options()), want,
                           seed=self.seed + r, callbacks=[step], prior=prior)
        finally:
            session.close()
        fresh = [x for x in results if not x.cached]
        return len(fresh), sum(not x.ok for x in fresh)

    # -- helpers -------------------------------------------------------------------------------

    @property
    def device(self) -> str:
        return self.measurer.device

    def _agent_options(self) -> dict:
        # the reference tuner's default batch is small; a round's trials in two asks keep its
        # simulated annealing (about a second an ask) from costing more than the measurements
        return {"batch_size": max(8, self.chunk // 2)} if self.agent == "xgb" else {}

    def _done(self, w: Workload) -> set[str]:
        return recorded_configs(self.records, w, self.target, self.device)

    def _options(self, part: str) -> dict:
        tag = "random" if part == "random" else f"agent:{self.agent}"
        return batch_options(self.measurer, {"strategy": tag, "seed": self.seed,
                                             "campaign": True, "chunk": self.chunk,
                                             "early_stop": self.early_stop})

    def close(self) -> None:
        if self._own_measurer:
            self.measurer.close()
        if self._own_records:
            self.records.close()

    def __enter__(self) -> "Campaign":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _part_of(options: str) -> Optional[str]:
    """Which part of a campaign (or a plain collection) a record came from, by its options."""
    try:
        obj = json.loads(options) if options else {}
    except ValueError:
        return None
    collect = obj.get("collect") if isinstance(obj, dict) else None
    tag = collect.get("strategy") if isinstance(collect, dict) else None
    if tag == "random":
        return "random"
    if isinstance(tag, str) and tag.startswith("agent:"):
        return "agent"
    return None


def parse_duration(text: str) -> float:
    """Seconds of ``"2h"``, ``"90m"``, ``"45s"``, ``"1h30m"`` or a plain number of seconds."""
    s = str(text).strip().lower()
    try:
        return float(s)
    except ValueError:
        pass
    total, num = 0.0, ""
    units = {"h": 3600.0, "m": 60.0, "s": 1.0}
    for ch in s:
        if ch.isdigit() or ch == ".":
            num += ch
        elif ch in units and num:
            total += float(num) * units[ch]
            num = ""
        else:
            raise TensorGymError(f"a duration is like 2h, 90m, 1h30m or seconds; got {text!r}")
    if num or not s:
        raise TensorGymError(f"a duration is like 2h, 90m, 1h30m or seconds; got {text!r}")
    return total


__all__ = ["Campaign", "CampaignReport", "PARTS", "parse_duration"]
