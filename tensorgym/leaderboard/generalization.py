"""The generalization track: agents that trained only on the corpus's train split (replay, or live
at their own cost), scored live on its test tasks.

Every agent x task x seed runs ``max(ks)`` live trials. Then, task by task, the best config of
each run's first k trials, for every k in ``ks`` (8, 32 and 128), is re-measured side by side with
the vendor operator in interleaved rounds. An agent's score at k is that re-measured GFLOP/s over
the vendor's, and over the reference tuner's at the same k (``xgb`` from scratch, always run
beside the others). The training an agent brings (its weights file's dataset, split, steps and
seconds) stands beside its score; an agent trained on anything but a train split is refused.

    tensorgym leaderboard run corpus-test-cpu --track generalization \\
        --agents ppo-pretrained,xgb-pretrained,random --seeds 0,1,2 --out gen.json
"""
from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Sequence

from tensorgym import registry
from tensorgym.errors import TensorGymError
from tensorgym.measure import LocalMeasurer
from tensorgym.workloads import get_workload

from .harness import device_threads, runtime_options
from .metrics import geomean
from .results import Best, Entry, PrefixBest, ResultsDoc, Run
from .suites import Suite

if TYPE_CHECKING:
    from .run import RunOptions

KS = (8, 32, 128)
REFERENCE = "xgb"  # the reference tuner, from scratch: what a learned agent must match


def training_of(agent_name: str, options: dict) -> dict:
    """What ``agent_name`` learned before the run, as its weights declare (``agent.training``:
    dataset, split, steps, seconds, ...); ``{}`` for an agent that brings nothing. Raises when it
    trained on anything but a train split: the test tasks would then not be unseen."""
    agent = registry.make(agent_name, **options)
    info = dict(getattr(agent, "training", None) or {})
    if info and info.get("split") != "train":
        raise TensorGymError(f"agent {agent_name} was trained on split {info.get('split')!r}; "
                             "the generalization track scores only agents trained on a train "
                             "split (corpus-train-*)")
    return info


def prefix_best(entry: Entry, k: int) -> "tuple[int, float] | None":
    """(trial index, GFLOP/s in search) of the fastest ok trial among ``entry``'s first k."""
    ok = [(t.gflops, i) for i, t in enumerate(entry.trials[:k]) if t.ok]
    if not ok:
        return None
    g, i = max(ok)
    return i, g


def run_suite_generalization(suite: Suite, agents: Sequence[str], options: "RunOptions",
                             trials: int, seeds: list[int],
                             say: Callable[[str], None]) -> ResultsDoc:
    """``run.run_suite`` with ``options.track == "generalization"``."""
    from .compare import remeasure as side_by_side
    from .run import agent_options, recheck_peak, run_entry, start_run

    ks = tuple(sorted(set(options.ks)))
    if not ks or ks[0] < 1:
        raise TensorGymError(f"the generalization track needs budgets k >= 1, got {ks}")
    ks = tuple(k for k in ks if k < trials) + (trials,)  # the run's budget is the last k
    if options.remeasure < 1:
        raise TensorGymError("the generalization track reports re-measured bests: remeasure "
                             "must be >= 1")
    agents = list(dict.fromkeys([*agents, REFERENCE]))  # the normaliser runs beside the others
    budget = trials
    training = {a: training_of(a, agent_options(a, options.agent_options.get(a, {})))
                for a in agents}
    runs: dict[str, Run] = {}
    for target in dict.fromkeys(t for _, t in suite.tasks):
        runs[target] = start_run(target, options.threads,
                                 {**suite.to_json(), "trials": budget, "agents": agents,
                                  "ks": list(ks), "reference": REFERENCE, "training": training},
                                 seeds, track="generalization")
    measurers: dict[str, Any] = {}
    try:
        for workload, target in suite.tasks:
            if target not in measurers:
                measurers[target] = LocalMeasurer(target,
                                                  **runtime_options(target, options.threads))
            m, run = measurers[target], runs[target]
            w = get_workload(workload)
            entries = []
            for agent in agents:
                for seed in seeds:
                    e = run_entry(agent, workload, target, seed, budget,
                                  replace(options, remeasure=0), measurer=m)
                    entries.append(e)
                    say(f"{w.label}@{target}: {agent} seed {seed}: best {_found(e):.2f} "
                        f"GFLOP/s in search ({len(e.trials)} trials, {e.wall_time:.1f}s)")
            threads = device_threads(run.device["name"]) or 0
            vendor = _remeasure_prefixes(entries, ks, options, m, threads, side_by_side)
            run.entries += entries
            recheck_peak(run, target, options.threads, entries, say)
            if vendor is not None:
                run.vendor.append(vendor)
            for e in entries:
                say(f"{w.label}@{target}: {e.agent} seed {e.seed}: re-measured "
                    + ", ".join(f"k={p.k} {p.best.gflops:.2f}" for p in e.at_k if p.best))
    finally:
        for m in measurers.values():
            m.close()
    return ResultsDoc(list(runs.values()))


def _found(e: Entry) -> float:
    return max((t.gflops for t in e.trials if t.ok), default=0.0)


def _remeasure_prefixes(entries: list[Entry], ks: tuple[int, ...], options: "RunOptions",
                        measurer: Any, threads: int, remeasure: Callable) -> Any:
    """Re-measure, side by side with the vendor, each distinct config that is some entry's best
    of its first k trials; fill each entry's ``at_k`` and its ``best`` (the largest k's)."""
    configs: dict[str, dict] = {}  # one name per distinct config: a best found early counts once
    picks: list[tuple[Entry, int, int, float, str]] = []
    for e in entries:
        for k in ks:
            found = prefix_best(e, k)
            if found is None:
                continue
            i, g = found
            config = e.trials[i].config
            name = next((n for n, c in configs.items() if c == config), None)
            if name is None:
                name = str(len(configs))
                configs[name] = config
            picks.append((e, k, i, g, name))
    e0 = entries[0]
    c = remeasure(e0.workload, e0.target, configs, options.remeasure, measurer, options.vendor,
                  threads)
    for e in entries:
        e.at_k = []
        e.best = None
    for e, k, i, g, name in picks:
        gflops = 0.0 if name in c.errors else c.gflops(name)  # failing now: not reproducible
        best = Best(e.trials[i].config, i, g, gflops, c.costs(name))
        e.at_k.append(PrefixBest(k, best))
        e.best = best  # picks come in k order: the last is the largest k's
    return c.vendor_result() if options.vendor else None


@dataclass
class GeneralizationRow:
    """One agent at one budget k: geometric means over the tasks of the mean over seeds."""

    agent: str
    k: int
    tasks: int
    seeds: int
    vs_vendor: "float | None"  # best at k / the vendor operator
    vs_reference: "float | None"  # best at k / the reference tuner's best at k
    training_steps: "float | None"
    training_seconds: "float | None"
    trained_on: str
    wall_s: float  # mean wall seconds of one run of max(ks) trials


def generalization_rows(doc: ResultsDoc) -> list[GeneralizationRow]:
    at: dict[tuple[str, str, str, int], list[float]] = defaultdict(list)  # agent, task, dev, k
    wall: dict[str, list[float]] = defaultdict(list)
    vendor: dict[tuple[str, str], float] = {}
    training: dict[str, dict] = {}
    ks: set[int] = set()
    reference = REFERENCE
    seeds: dict[str, set] = defaultdict(set)
    for run in doc.runs:
        if run.track != "generalization":
            continue
        reference = run.suite.get("reference", REFERENCE)
        training.update(run.suite.get("training", {}))
        dev = str(run.device.get("name", "unknown"))
        for v in run.vendor:
            if v.gflops > 0:
                vendor[(v.workload, dev)] = v.gflops
        for e in run.entries:
            wall[e.agent].append(e.wall_time)
            seeds[e.agent].add(e.seed)
            for p in e.at_k:
                ks.add(p.k)
                at[(e.agent, e.workload, dev, p.k)].append(p.best.gflops)
    mean = {key: statistics.fmean(v) for key, v in at.items()}
    rows = []
    for agent in sorted({a for a, *_ in mean}, key=lambda a: (a != reference, a)):
        info = training.get(agent, {})
        for k in sorted(ks):
            tasks = [(w, d) for a, w, d, kk in mean if a == agent and kk == k]
            vs_v = [mean[(agent, w, d, k)] / vendor[(w, d)] for w, d in tasks if (w, d) in vendor]
            vs_r = [mean[(agent, w, d, k)] / mean[(reference, w, d, k)] for w, d in tasks
                    if mean.get((reference, w, d, k))]
            rows.append(GeneralizationRow(
                agent, k, len(tasks), len(seeds[agent]),
                geomean(vs_v) if vs_v and all(x > 0 for x in vs_v) else None,
                geomean(vs_r) if vs_r and all(x > 0 for x in vs_r) else None,
                info.get("steps"), info.get("seconds"),
                _trained_on(info),
                statistics.fmean(wall[agent]) if wall[agent] else 0.0))
    return rows


def _trained_on(info: dict) -> str:
    if not info:
        return "nothing"
    size = ", ".join(f"{int(info[k]):,} {k}" for k in ("tasks", "rows") if info.get(k))
    return f"{info.get('dataset', '?')} ({info.get('split')}{', ' + size if size else ''})"


def generalization_markdown(doc: ResultsDoc) -> str:
    rows = generalization_rows(doc)
    if not rows:
        return ""

    def f(v: "float | None", digits: int = 2) -> str:
        return "-" if v is None else f"{v:,.{digits}f}"

    ref = next((r.suite.get("reference", REFERENCE) for r in doc.runs), REFERENCE)
    lines = ["## Generalization (live, geometric means over the tasks of the mean over seeds; "
             f"bests re-measured; / {ref}: the reference tuner at the same k)", "",
             "| agent | k | tasks | seeds | / vendor | / " + ref + " | trained on "
             "| training steps | training s | wall s per run |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r.agent} | {r.k} | {r.tasks} | {r.seeds} | {f(r.vs_vendor)} "
                     f"| {f(r.vs_reference)} | {r.trained_on} | {f(r.training_steps, 0)} "
                     f"| {f(r.training_seconds, 1)} | {r.wall_s:.1f} |")
    return "\n".join(lines) + "\n\n"

