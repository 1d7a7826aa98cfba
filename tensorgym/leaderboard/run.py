"""Run a suite: every agent x task x seed on this machine, with the vendor library measured in the
same run, each run's best config re-measured, and every trial kept in a results document.

    doc = run_suite(get_suite("quick-cpu"), ["random", "grid", "ga"], trials=32)
    doc.save("results.json"); print(markdown(doc))
"""
from __future__ import annotations

import dataclasses
import os
import time
import uuid
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from tensorgym import registry
from tensorgym.errors import TensorGymError
from tensorgym.measure import LocalMeasurer, Measurer
from tensorgym.search import tune
from tensorgym.session import TuningSession
from tensorgym.workloads import get_workload

from .compare import remeasure as side_by_side
from .peak import device_peak_gflops
from .harness import device_info, device_threads, runtime_options, software_versions
from .results import Best, Entry, ResultsDoc, ResultsError, Run, Trial, VendorResult, utc_now
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
    session_options: dict[str, Any] = field(default_factory=dict)  # of each TuningSession
    threads: int = 0  # CPU threads of the kernels' parallel loops (0: all cores)
    ray: "str | None" = None  # run on this Ray cluster ("": ray.init's default): _run_suite_ray
    journal: "str | None" = None  # with ray: entries done so far, read back to resume
    replay: Any = None  # a dataset (path or loaded Dataset): trials answered from it (the replay track)
    on_miss: str = "surrogate"  # replay: how configs the dataset lacks are answered
    # replay: seconds divided by this machine's speed against the records' (dataset.speed):
    # a number for every task, or "live" to read each task's here before its entries
    replay_speed: "float | str" = 1.0
    # replay, on_miss="draw": the field of draws, one integer for every entry, or "seed" for
    # each entry's own seed (each seed then searches its own drawn world)
    world_seed: "int | str" = 0
    track: str = "live"  # "generalization": scored at each k of ``ks`` (leaderboard.generalization)
    ks: tuple[int, ...] = (8, 32, 128)


def run_entry(agent_name: str, workload: str, target: str, seed: int, trials: int,
              options: RunOptions, display_name: str = "", measurer: Any = None) -> Entry:
    """One agent on one task with one seed (listed as ``display_name`` if given). A shared
    ``measurer`` saves starting a measurement worker per entry.

    Times come from the session's meter (``tensorgym.meter``), the same way for every agent:
    ``build_time`` and ``measure_time`` are the wall seconds of the build and timing phases,
    ``search_time`` the agent's own time (featurize + model + search)."""
    w = get_workload(workload)
    agent_opts = agent_options(agent_name, options.agent_options.get(display_name or agent_name,
                                                                     {}))
    agent = registry.make(agent_name, **agent_opts)
    session = TuningSession(w, target, budget=trials, records=options.records, measurer=measurer,
                            **options.session_options)
    if options.replay is not None:
        session.reset(seed)  # the replay's draws follow the entry's seed
    meter = session.meter
    start = meter.copy()
    try:
        t0 = time.perf_counter()
        history = tune(session, agent, trials, seed=seed)
        wall = time.perf_counter() - t0
    finally:
        session.close()
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


def agent_options(agent_name: str, given: dict) -> dict:
    """``given``, with pretraining off unless asked for: a run must not depend on what the
    records database held before it, nor on the order of the suite's tasks."""
    if any(o.name == "pretrain" for o in registry.spec(agent_name).options):
        return {"pretrain": False, **given}
    return dict(given)


def start_run(target: str, threads: int, suite: dict, seeds: list[int],
              info: "dict | None" = None, **fields: Any) -> Run:
    """A new run on this machine's ``target`` device (``info``: its ``device_info`` if known),
    holding the CPU's FMA peak for the tables' "peak %"; ``fields``: the Run's others (track,
    dataset)."""
    run = Run(uuid.uuid4().hex, utc_now(), info or device_info(target, threads),
              software_versions(), suite, seeds, **fields)
    if (peak := device_peak_gflops(target, threads)) is not None:
        run.device["fma_peak_gflops"] = peak
    return run


def run_suite(suite: Suite, agents: Sequence[str], options: "RunOptions | None" = None,
              progress: "Progress | None" = None) -> ResultsDoc:
    options = options or RunOptions()
    trials = options.trials or suite.trials
    seeds = list(options.seeds if options.seeds is not None else suite.seeds)
    say = progress or (lambda msg: None)
    if options.ray is not None:
        return _run_suite_ray(suite, agents, options, trials, seeds, say)
    if options.track == "generalization":
        if options.ray is not None or options.replay is not None:
            raise TensorGymError("the generalization track runs live on this machine: not with "
                                 "ray or replay")
        from .generalization import run_suite_generalization

        return run_suite_generalization(suite, agents, options, trials, seeds, say)
    if options.replay is not None:
        from .replay_track import run_suite_replay

        return run_suite_replay(suite, agents, options, trials, seeds, say)
    runs: dict[str, Run] = {}  # one run per target in the suite
    measurers: dict[str, Measurer] = {}
    for target in dict.fromkeys(t for _, t in suite.tasks):  # fail early on a missing device
        runs[target] = start_run(target, options.threads,
                                 {**suite.to_json(), "trials": trials, "agents": list(agents)},
                                 seeds)
    try:
        for workload, target in suite.tasks:
            if target not in measurers:
                measurers[target] = LocalMeasurer(target,
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
    recheck_peak(run, target, options.threads, entries, say)
    for e in entries:
        say(f"{w.label}@{target}: {e.agent} seed {e.seed}: best re-measured "
            f"{e.best.gflops if e.best else 0.0:.2f} GFLOP/s")
    if vendor is not None:
        run.vendor.append(vendor)
        say(f"{w.label}@{target}: vendor {vendor.library}: "
            + (f"{vendor.gflops:.2f} GFLOP/s" if not vendor.skipped else
               f"skipped ({vendor.skipped})"))


def recheck_peak(run: Run, target: str, threads: int, entries: list[Entry],
                 say: Progress) -> None:
    """A re-measured best above the run's FMA peak means the peak read low: measure it again
    (``PeakBook.check``) and keep the higher; the tables flag what stays above it."""
    peak = run.device.get("fma_peak_gflops")
    best = max((e.best.gflops for e in entries if e.best), default=0.0)
    if not peak or best <= peak:
        return
    new = device_peak_gflops(target, threads, gflops=best)
    run.device["fma_peak_gflops"] = max(peak, new or 0.0)
    say(f"{entries[0].workload}@{target}: best {best:.2f} GFLOP/s was above the FMA peak "
        f"{peak:.2f}; measured again: {run.device['fma_peak_gflops']:.2f}"
        + (" (still below the best: flagged in the tables)"
           if best > run.device["fma_peak_gflops"] else ""))


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


def read_journal(journal: "str | os.PathLike", say: Progress) -> dict[tuple, Entry]:
    """The entries a ``--ray`` run wrote to its journal (``OUT.partial.jsonl``), by (agent,
    workload, target, seed, budget). A damaged line (cut short by a kill mid-write, say) is
    left out, its run run again, and ``say`` tells how many and the first's line and why."""
    import json
    from pathlib import Path

    from .results import _build

    done: dict[tuple, Entry] = {}
    damaged: list[tuple[int, str]] = []
    try:
        data = Path(journal).read_bytes()
    except OSError as e:
        raise TensorGymError(f"cannot read the journal {journal}: {e}") from None
    for n, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            e = _build(Entry, json.loads(line.decode("utf-8")), f"{journal}:{n}")
            done[(e.agent, e.workload, e.target, e.seed, e.budget)] = e
        except (ValueError, ResultsError, RecursionError) as err:
            damaged.append((n, str(err)[:120]))
    if damaged:
        n, why = damaged[0]
        say(f"{journal}: {len(damaged)} damaged line(s) (first at line {n}): those runs are run "
            f"again (line {n}: {why})")
    return done


def _run_suite_ray(suite: Suite, agents: Sequence[str], options: RunOptions, trials: int,
                   seeds: list[int], say: Progress) -> ResultsDoc:
    """Every (agent, task, seed) as a Ray task (one progress bar; each entry times on the
    cluster's device actors), then each task's bests re-measured side by side with the vendor
    library on a node with the device. Entries done are kept in ``options.journal``, so a
    rerun after a failure runs only the rest."""
    import json
    from pathlib import Path

    from tensorgym.measure.ray import connect, device_node, on_node, run_tasks

    from .results import _clean

    connect(options.ray or None)
    runs, nodes = {}, {}
    for target in dict.fromkeys(t for _, t in suite.tasks):
        nodes[target], name = device_node(target, runtime_options(target, options.threads))
        runs[target] = Run(uuid.uuid4().hex, utc_now(), {"name": name, "target": target,
                                                      "host": f"ray node {nodes[target][:8]}"},
                           software_versions(),
                           {**suite.to_json(), "trials": trials, "agents": list(agents)}, seeds)
    calls = [(a, get_workload(w).key, t, s, trials) for w, t in suite.tasks for a in agents
             for s in seeds]
    journal = Path(options.journal) if options.journal else None
    done: dict[tuple, Entry] = {}
    if journal is not None and journal.exists():
        done = read_journal(journal, say)
        say(f"resuming: {len(done)} of {len(calls)} runs done earlier ({journal})")
    todo = [c for c in calls if c not in done]

    def finished(i: int, entry: Entry) -> None:
        done[todo[i]] = entry
        if journal is not None:
            with journal.open("a") as f:
                f.write(json.dumps(_clean(dataclasses.asdict(entry))) + "\n")

    entry_options = replace(options, remeasure=0, records=False, ray=None, journal=None)
    failed = run_tasks(_entry_on_ray, [(*c, entry_options) for c in todo], finished,
                       desc=f"{suite.name} on Ray")
    if failed:
        raise TensorGymError(f"{len(failed)} of {len(todo)} runs failed (rerun to resume): "
                             + "; ".join(f"{todo[i][:4]}: {e}" for i, e in failed[:3]))
    for workload, target in suite.tasks:
        key = get_workload(workload).key
        entries = [done[c] for c in calls if c[1] == key and c[2] == target]
        threads = device_threads(runs[target].device["name"]) or 0
        entries, vendor = on_node(_remeasure_entries, nodes[target], entries, options.remeasure,
                                  options.vendor, threads)
        runs[target].entries += entries
        if vendor is not None:
            runs[target].vendor.append(vendor)
        for e in entries:
            say(f"{e.label or e.workload}@{target}: {e.agent} seed {e.seed}: best re-measured "
                f"{e.best.gflops if e.best else 0.0:.2f} GFLOP/s")
    if journal is not None:
        journal.unlink(missing_ok=True)
    return ResultsDoc(list(runs.values()))


def _entry_on_ray(agent: str, workload: str, target: str, seed: int, trials: int,
                  options: RunOptions) -> Entry:
    """One entry, in a Ray task: measured through the cluster's device actors."""
    from tensorgym.measure.ray import RayMeasurer  # imports ray: only on the Ray path

    m = RayMeasurer(target, **runtime_options(target, options.threads))
    try:
        return run_entry(agent, workload, target, seed, trials, options, measurer=m)
    finally:
        m.close()


def _remeasure_entries(entries: list[Entry], rounds: int, vendor: bool,
                       threads: int) -> "tuple[list[Entry], VendorResult | None]":
    """``remeasure_bests`` in a Ray task on the device's node, returning what it changed."""
    return entries, remeasure_bests(entries, rounds, None, vendor, threads)


__all__ = ["RunOptions", "run_entry", "run_suite"]
