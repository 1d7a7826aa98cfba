"""Collect a dataset: measure configs of workloads into a records database, resumably.

Strategies: ``random`` measures the reference schedule and then ``n_configs`` distinct uniform
samples of the space, drawn from a stream fixed by the seed and the workload (so a re-run, or one
with a larger ``n_configs``, skips what this device already measured and continues the same
stream); ``agent`` runs a tune of the registered agent (``xgb``, the paper's tuner) for
``n_configs`` trials and keeps every config it visits, and the reference schedule if the
database lacks it (replay's rewards need it; a re-run serves the configs measured
before from the database, so the tune retraces its steps and goes on). Early stop is off: every
record has all its samples. Each record keeps how it was measured (``options``: the measurer's
options, threads, and the strategy under ``collect``)."""
from __future__ import annotations

import os
import time
import zlib
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np
from tqdm import tqdm

from .. import registry
from ..errors import TensorGymError
from ..measure import MeasureOptions, Measurer
from ..records import Records
from ..space import Config, ConfigSpace
from ..search import ProgressBar, tune
from ..session import TuningSession
from ..session import make_measurer as make_session_measurer
from ..processes.host import available_cpus
from ..task import Task
from ..templates import canonical_target, default_config, space_for
from ..workloads import Workload, get_workload

STRATEGIES = ("random", "agent")


@dataclass(frozen=True)
class CollectReport:
    """One workload's collection: ``measured`` now, ``skipped`` (already in the database for
    this device), ``failures`` among the measured, the wall ``seconds``, and the best GFLOP/s of
    the task in the database afterwards."""

    workload: str
    strategy: str
    device: str
    measured: int
    skipped: int
    failures: int
    seconds: float
    best_gflops: float


def make_measurer(target: str, threads: int = 0, ray: "str | bool | None" = None,
                  options: Optional[MeasureOptions] = None) -> Measurer:
    """The measurer of a collection: ``threads`` CPU threads (0: all cores); ``ray``: None for
    this machine, else measure through Ray (``True``/"" for a local or default cluster, or its
    address)."""
    return make_session_measurer(target, options=options, num_threads=threads, ray=ray)


def task_bound(records: Records, task: Task, early_stop: float) -> float:
    """The early-stop bound of a batch of ``task``: ``early_stop`` x the median of its best
    record on the task's device (0: early stop off, or no record yet)."""
    best = records.best(task.workload, task.target, task.device)
    return early_stop * best[0].median if early_stop and best else 0.0


def batch_options(measurer: Measurer, collect: dict) -> dict:
    """A collected batch's record options: how it was measured and ``collect``, with the
    machine's 1, 5 and 15-minute load averages as the batch started."""
    return {"measurer": measurer.describe(), "runtime": dict(measurer.runtime_kwargs),
            "collect": {**collect, "load": [round(x, 2) for x in os.getloadavg()]}}


def collect(workloads: Sequence["str | Workload"], target: str = "cpu", n_configs: int = 100,
            strategy: str = "random", db: "str | os.PathLike | Records | None" = None,
            threads: int = 0, seed: int = 0, ray: "str | bool | None" = None,
            progress: bool = True, batch_size: int = 0, agent: str = "xgb",
            agent_options: Optional[dict] = None, measurer: Optional[Measurer] = None,
            options: Optional[MeasureOptions] = None) -> list[CollectReport]:
    """Measure ``n_configs`` configs of each workload into the records database ``db`` (see the
    module docstring); returns one report per workload. ``batch_size``: configs built and
    timed per batch, each batch written when done (0: four per builder process). A given
    ``measurer`` is used as it is (and not closed)."""
    if strategy not in STRATEGIES:
        raise TensorGymError(f"unknown strategy {strategy!r}; use one of {', '.join(STRATEGIES)}")
    if isinstance(n_configs, bool) or not isinstance(n_configs, int) or n_configs < 1:
        raise TensorGymError(f"n_configs must be a positive integer, got {n_configs!r}")
    target = canonical_target(target)
    works = [get_workload(w) for w in workloads]
    if not works:
        raise TensorGymError("no workloads to collect")
    records = db if isinstance(db, Records) else Records(db)
    own = measurer is None
    m = measurer or make_measurer(target, threads, ray, options)
    try:
        records.restore_unsaved()
        tags = {"strategy": strategy if strategy == "random" else f"agent:{agent}", "seed": seed}
        opts = {"measurer": m.describe(), "runtime": dict(m.runtime_kwargs), "collect": tags}
        run = _random if strategy == "random" else _agent
        return [run(w, target, n_configs, records, m, seed, progress, batch_size, opts,
                    agent, agent_options or {}) for w in works]
    finally:
        if own:
            m.close()
        if records is not db:
            records.close()


def recorded_configs(records: Records, w: Workload, target: str, device: str) -> set[str]:
    """The config JSON of every record of the task, as each was written (test a config against
    it with ``is_recorded``)."""
    return {r.config_json for r in records.query(w.key, target, device)}


def is_recorded(config: Config, space: ConfigSpace, done: set[str]) -> bool:
    """Whether ``config`` is in ``done`` under any spelling it was written with
    (``ConfigSpace.spellings``: a record made before a knob was added lacks the knob)."""
    return not done.isdisjoint(space.spellings(config))


def _random(w: Workload, target: str, n: int, records: Records, m: Measurer, seed: int,
            progress: bool, batch_size: int, opts: dict, *_: Any) -> CollectReport:
    t0 = time.perf_counter()
    device = m.device
    space = space_for(w, target)
    reference = default_config(w, target)
    rng = np.random.default_rng([seed, zlib.crc32(w.key.encode())])
    plan = [reference] + space.sample_unique(rng, n, exclude={reference.index})
    done = recorded_configs(records, w, target, device)
    todo = [c for c in plan if not is_recorded(c, space, done)]
    batch = batch_size or 4 * max(1, m.options.n_parallel or _cores())
    failures = 0
    bar = _bar(progress, len(todo), f"random {w.label}")
    try:
        for i in range(0, len(todo), batch):
            results = m.measure(w, todo[i:i + batch], stop_slower_than=0.0)
            records.add_many(Task(w.key, target, device), results, options=opts, workload=w)
            failures += sum(not r.ok for r in results)
            if bar is not None:
                bar.update(len(results))
    finally:
        if bar is not None:
            bar.close()
    _set_reference(records, w, target, device, reference)
    return CollectReport(w.label, "random", device, len(todo), len(plan) - len(todo), failures,
                         time.perf_counter() - t0, _best(records, w, target, device))


def _agent(w: Workload, target: str, n: int, records: Records, m: Measurer, seed: int,
           progress: bool, batch_size: int, opts: dict, agent: str,
           agent_options: dict) -> CollectReport:
    t0 = time.perf_counter()
    strategy = registry.make(agent, **agent_options)
    reference = default_config(w, target)
    measured_ref = 0
    if records.lookup(Task(w.key, target, m.device), reference.to_json()) is None:
        # replay's rewards need it; not one of the tune's trials
        records.add_many(Task(w.key, target, m.device), m.measure(w, [reference]), options=opts,
                         workload=w)
        measured_ref = 1
    session = TuningSession(w, target, budget=n, records=records, use_cache=True, measurer=m,
                            early_stop=0)
    session.record_options = opts
    bar = ProgressBar(n, f"{agent} {w.label}") if progress else None
    try:
        results = tune(session, strategy, n, seed=seed, callbacks=[bar] if bar else [])
    finally:
        if bar is not None:
            bar.close()
        session.close()
    device = m.device
    fresh = [r for r in results if not r.cached]
    _set_reference(records, w, target, device, reference)
    return CollectReport(w.label, f"agent:{agent}", device, len(fresh) + measured_ref,
                         len(results) - len(fresh), sum(not r.ok for r in fresh),
                         time.perf_counter() - t0, _best(records, w, target, device))


def _set_reference(records: Records, w: Workload, target: str, device: str, ref: Any) -> None:
    """The reference schedule's median from its records (what the live env would measure)."""
    task = Task(w.key, target, device)
    rec = records.lookup(task, ref.to_json())
    if rec is not None and rec.ok and records.reference(task, ref.to_json()) is None:
        records.set_reference(task, ref.to_json(), rec.median)


def _best(records: Records, w: Workload, target: str, device: str) -> float:
    best = records.best(w.key, target, device)
    return best[0].gflops if best else 0.0


def _cores() -> int:
    return available_cpus()


def _bar(progress: bool, total: int, desc: str) -> Any:
    if not progress or total == 0:
        return None
    return tqdm(total=total, desc=desc, unit=" configs", smoothing=0)


__all__ = ["CollectReport", "STRATEGIES", "collect", "make_measurer"]
