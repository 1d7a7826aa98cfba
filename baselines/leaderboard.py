"""Run a suite: every agent x task x seed on this machine, with the vendor library measured in the
same run, each run's best config re-measured, and every trial kept in a results document.

    doc = run_suite(get_suite("quick-cpu"), ["random", "grid", "ga"], trials=32)
    doc.save("results.json"); print(markdown(doc))
"""
from __future__ import annotations

import datetime
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from tensorgym import registry
from tensorgym.errors import TensorGymError
from tensorgym.hardware.measure import Measurer
from tensorgym.search import tune
from tensorgym.workloads import get_workload

from .compare import remeasure as side_by_side
from .harness import (device_info, device_threads, make_env, runtime_options,
                      software_versions)
from .results import Best, Entry, ResultsDoc, Run, Trial, VendorResult
from .suites import Suite

Progress = Callable[[str], None]


@dataclass
class RunOptions:
    trials: "int | None" = None  # default: the suite's
    seeds: "Sequence[int] | None" = None  # default: the suite's
    remeasure: int = 3  # rounds re-measuring a task's bests side by side (each several samples)
    vendor: bool = True
    records: Any = None  # passed to the env (path, Records or None)
    agent_options: dict[str, dict] = field(default_factory=dict)
    env_options: dict[str, Any] = field(default_factory=dict)
    threads: int = 0  # CPU threads of the kernels' parallel loops (0: all cores)


def run_entry(agent_name: str, workload: str, target: str, seed: int, trials: int,
              options: RunOptions, display_name: str = "", measurer: Any = None) -> Entry:
    """One agent on one task with one seed (listed as ``display_name`` if given). A shared
    ``measurer`` saves starting a measurement worker per entry.

    Times come from the env's meter (``tensorgym.meter``), the same way for every agent:
    ``build_time`` and ``measure_time`` are the wall seconds of the build and timing phases,
    ``search_time`` the agent's own time (featurize + model + search)."""
    w = get_workload(workload)
    agent_opts = options.agent_options.get(display_name or agent_name, {})
    agent = registry.make(agent_name, **agent_opts)
    env = make_env(w, target, budget=trials, records=options.records, measurer=measurer,
                   **{**options.env_options, **getattr(agent, "env_kwargs", {})})
    meter = env.unwrapped.meter
    start = meter.copy()
    try:
        t0 = time.perf_counter()
        history = tune(env, agent, trials, seed=seed)
        wall = time.perf_counter() - t0
    finally:
        env.close()
    spent = meter.since(start)
    if len(history) > trials:
        raise TensorGymError(f"agent {agent_name} used {len(history)} trials, budget {trials}")
    entry = Entry(display_name or agent_name, w.key, target, seed, trials, w.flops, wall,
                  spent.build, spent.run, spent.featurize + spent.model + spent.search,
                  [Trial.from_result(r) for r in history],
                  agent_options=agent_opts, label=w.name)
    entry.best = best_of(entry, options.remeasure, measurer)
    return entry


def best_of(entry: Entry, repeats: int, measurer: Any = None) -> "Best | None":
    """The fastest trial, re-measured in ``repeats`` rounds (0: its search figure)."""
    ok = [(t.gflops, i) for i, t in enumerate(entry.trials) if t.ok]
    if not ok:
        return None
    g, i = max(ok)
    entry.best = Best(entry.trials[i].config, i, g, g)
    remeasure_bests([entry], repeats, measurer, vendor=False)
    return entry.best


def run_suite(suite: Suite, agents: Sequence[str], options: "RunOptions | None" = None,
              progress: "Progress | None" = None) -> ResultsDoc:
    options = options or RunOptions()
    trials = options.trials or suite.trials
    seeds = list(options.seeds if options.seeds is not None else suite.seeds)
    say = progress or (lambda msg: None)
    runs: dict[str, Run] = {}  # one run per target in the suite
    measurers: dict[str, Measurer] = {}
    for target in dict.fromkeys(t for _, t in suite.tasks):  # fail early on a missing device
        runs[target] = Run(uuid.uuid4().hex, _now(), device_info(target, options.threads),
                           software_versions(),
                           {**suite.to_json(), "trials": trials, "agents": list(agents)}, seeds)
    try:
        for workload, target in suite.tasks:
            if target not in measurers:
                measurers[target] = Measurer(target,
                                             **runtime_options(target, options.threads))
            _run_task(runs[target], workload, target, agents, seeds, trials, options,
                      measurers[target], say)
    finally:
        for m in measurers.values():
            m.close()
    return ResultsDoc(list(runs.values()))


def _run_task(run: Run, workload: str, target: str, agents: Sequence[str], seeds: list[int],
              trials: int, options: RunOptions, measurer: Measurer, say: Progress) -> None:
    w = get_workload(workload)
    entries = []
    for agent in agents:
        for seed in seeds:  # the bests are re-measured together below, not one by one
            entry = run_entry(agent, workload, target, seed, trials,
                              replace(options, remeasure=0), measurer=measurer)
            entries.append(entry)
            best = entry.best.gflops if entry.best else 0.0
            say(f"{w.label}@{target}: {agent} seed {seed}: best {best:.2f} GFLOP/s in search "
                f"({len(entry.trials)} trials, {entry.failures} failed, "
                f"{entry.wall_time:.1f}s)")
    run.entries += entries
    vendor = remeasure_bests(entries, options.remeasure, measurer, options.vendor,
                             device_threads(run.device["name"]) or 0)
    for e in entries:
        say(f"{w.label}@{target}: {e.agent} seed {e.seed}: best re-measured "
            f"{e.best.gflops if e.best else 0.0:.2f} GFLOP/s")
    if vendor is not None:
        run.vendor.append(vendor)
        say(f"{w.label}@{target}: vendor {vendor.library}: "
            + (f"{vendor.gflops:.2f} GFLOP/s" if not vendor.skipped else
               f"skipped ({vendor.skipped})"))


def remeasure_bests(entries: list[Entry], rounds: int, measurer: Any = None,
                    vendor: bool = True, threads: int = 0) -> "VendorResult | None":
    """Re-measure the best configs of one task's ``entries`` side by side, interleaved with
    the vendor library, in ``rounds`` rounds; sets each ``entry.best`` from them and returns the
    vendor's result (None without ``vendor``). With ``rounds`` 0 only the vendor is timed."""
    if not entries:
        return None
    e0 = entries[0]
    bests = {str(i): e.best.config for i, e in enumerate(entries) if e.best and rounds > 0}
    if not bests and not vendor:
        return None
    c = side_by_side(e0.workload, e0.target, bests, rounds or 2, measurer, vendor, threads)
    for i, e in enumerate(entries):
        if str(i) in bests:  # a config that passed once and fails now is not reproducible
            gflops = 0.0 if str(i) in c.errors else c.gflops(str(i))
            e.best = Best(e.best.config, e.best.trial, e.best.gflops_search, gflops,
                          c.costs(str(i)))
    return c.vendor_result() if vendor else None


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


__all__ = ["RunOptions", "run_entry", "run_suite"]
