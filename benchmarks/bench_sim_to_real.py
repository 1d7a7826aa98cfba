"""Sim-to-real agreement: does the replay world (a dataset's answers, misses by its surrogate or
world model) rank search agents as the real machine does, and do its promised bests hold live?

    python benchmarks/bench_sim_to_real.py --dataset data/reference.parquet \\
        [--suite corpus-test-cpu] [--tasks N | --task KEY ...] [--agents random,grid,ga,xgb,ppo] \\
        [--seeds 0,1,2] [--trials 64] [--on-miss surrogate] [--threads T] [--remeasure 3] \\
        [--replay-speed live|X] [--out sim_to_real.json] [--resume] [--docs DIR] \
        [--live-from EARLIER.json] [--world-seed N|seed]

Per task (task by task, so that the machine's drift over a long run hits every agent of a task
alike), every agent x seed runs twice, both times through the leaderboard harness
(``tensorgym.leaderboard.run``):

1. **Replay**: ``run_suite`` with ``RunOptions.replay`` (the leaderboard's replay track,
   ``tensorgym leaderboard run ... --replay DATASET``): every trial answered by the dataset,
   misses as ``--on-miss`` says. Each entry's *replay-predicted best* is the best GFLOP/s the
   replay answered during its search (``best.gflops_search``). The track also re-measures that
   config live (``best.gflops``): the *replay config, live* figure. ``--replay-speed live``
   first times the task's fastest recorded configs here and divides the replay's seconds by
   recorded / live (``tensorgym.dataset.speed``): its promises are then in this hour's seconds,
   which the live side is measured in; each task's factor is kept in the JSON (``speed``).
   The live side (2.) runs first, so that this reading follows its re-measured bests at once:
   the VM's speed moves by 2x within half an hour.
2. **Live**: ``run_entry`` for every agent x seed with real measurements on this machine, in an
   interleaved order (round r runs seed r's entries, the agents rotated by r), then the task's
   bests re-measured together side by side in ``--remeasure`` rounds (``remeasure_bests``, as
   ``_run_task`` of a live leaderboard does): the *live best* is that re-measured figure.

Definitions (per task; an agent's figure is its mean over seeds):

- **Rankings**: the replay ranking orders the agents by their mean replay-predicted best, the
  live ranking by their mean live best. The two are never mixed: a ranking holds figures of one
  world only.
- **Kendall tau** (tau-b) between the two rankings: over the n(n-1)/2 pairs of agents, with C
  pairs ordered alike in both, D pairs ordered oppositely, and T_r / T_l pairs tied in the
  replay / live figures, tau = (C - D) / sqrt((C + D + T_r') (C + D + T_l')), where T_r' counts
  pairs tied in replay only and T_l' in live only (a pair tied in both counts in neither).
  1: the same order; -1: reversed; undefined (null) if either ranking ties every pair.
  ``scipy.stats.kendalltau`` computes it where scipy is installed; ``tau_b`` otherwise.
- **Ratio** (per agent): mean replay-predicted best / mean live best. 1: the replay world's
  promise holds; 2: replay promised twice what the agent reaches for real. Null when the live
  mean is 0 (every live best failed).
- **Promise** (per agent): mean replay-predicted best / mean of the same configs re-measured
  live: whether the configs replay rates highly are as fast as replay says.

Summary: the mean tau over tasks (null taus left out, and counted) and the median ratio over
every task x agent; the issue's targets are mean tau >= 0.6 and a median ratio within 20% of 1.
With ``--replay-speed``, also the median speed over tasks and the median ratio at the records'
speed (each ratio divided by its task's speed: what replay would have promised unscaled).

``--live-from EARLIER.json`` runs the replay side only, against the live side of an earlier run
of this script (same suite, agents, seeds, trials and threads): each task's live bests and the
speed factor its replay answered at are taken from that file, so a new replay world (another
``--on-miss``, another world model) is judged against the same live measurements, at the same
hour's speed. The replay track still re-measures each replay best live, now: ``promise`` then
compares replay figures in that hour's seconds with this hour's times (a diagnostic only).

``--world-seed`` (with ``--on-miss draw``): the drawn world every seed searches (0), or ``seed``
for each seed its own (``RunOptions.world_seed``); ``sim_to_real_worlds.py`` compares the two.

The JSON (``--out``) is rewritten after each task; ``--resume`` keeps the tasks it holds (the
same agents, seeds, trials, dataset, on_miss, threads and remeasure rounds, else it refuses) and
runs the rest. ``--docs DIR`` also keeps each task's two leaderboard results documents
(``DIR/<i>-replay.json``, ``DIR/<i>-live.json``: ``tensorgym validate`` / ``leaderboard show``
read them).
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from tensorgym import registry
from tensorgym.dataset import Dataset
from tensorgym.errors import TensorGymError
from tensorgym.leaderboard.harness import (device_info, device_threads, runtime_options,
                                           software_versions)
from tensorgym.leaderboard.results import Entry, ResultsDoc, Run, utc_now
from tensorgym.leaderboard.run import RunOptions, remeasure_bests, run_entry, run_suite
from tensorgym.leaderboard.suites import Suite, get_suite
from tensorgym.measure import LocalMeasurer
from tensorgym.workloads import get_workload

DEFAULT_AGENTS = ("random", "grid", "ga", "xgb", "ppo")
TARGET_TAU = 0.6
TARGET_RATIO_TOLERANCE = 0.2
Say = Callable[[str], None]


# --- Kendall tau -------------------------------------------------------------------------------

def tau_b(x: Sequence[float], y: Sequence[float]) -> Optional[float]:
    """Kendall's tau-b of two equally long sequences (see the module docstring); None where it
    is undefined (fewer than two items, or either sequence constant)."""
    if len(x) != len(y):
        raise ValueError(f"tau_b of sequences of {len(x)} and {len(y)} items")
    c = d = tied_x = tied_y = 0
    for i in range(len(x)):
        for j in range(i + 1, len(x)):
            s = _sign(x[i] - x[j]) * _sign(y[i] - y[j])
            c, d = c + (s > 0), d + (s < 0)
            tied_x += x[i] == x[j] and y[i] != y[j]
            tied_y += y[i] == y[j] and x[i] != x[j]
    denominator = math.sqrt((c + d + tied_x) * (c + d + tied_y))
    return (c - d) / denominator if denominator else None


def _sign(v: float) -> int:
    return (v > 0) - (v < 0)


def kendall_tau(x: Sequence[float], y: Sequence[float]) -> Optional[float]:
    """tau-b by ``scipy.stats.kendalltau`` if scipy is installed, else by ``tau_b``; None where
    it is undefined."""
    if len(x) < 2:
        return None
    try:
        from scipy.stats import kendalltau
    except ImportError:
        return tau_b(x, y)
    import warnings

    with warnings.catch_warnings():  # a constant input: nan, with a warning
        warnings.simplefilter("ignore")
        t = float(kendalltau(x, y).statistic)
    return None if math.isnan(t) else t


# --- the two runs of one task ------------------------------------------------------------------

def run_replay(task: tuple[str, str], agents: Sequence[str], options: RunOptions,
               say: Say) -> ResultsDoc:
    """The leaderboard's replay track on one task."""
    suite = Suite(f"sim-to-real:{task[0]}", (task,), options.trials, tuple(options.seeds))
    return run_suite(suite, agents, options, progress=say)


def interleaved(agents: Sequence[str], seeds: Sequence[int]) -> list[tuple[str, int]]:
    """(agent, seed) pairs: seed by seed, the agents' order rotated by one each seed."""
    out = []
    for r, seed in enumerate(seeds):
        k = r % len(agents)
        out += [(a, seed) for a in [*agents[k:], *agents[:k]]]
    return out


def run_live(task: tuple[str, str], agents: Sequence[str], options: RunOptions,
             say: Say) -> ResultsDoc:
    """Every agent x seed measured live in an interleaved order, then the task's bests
    re-measured together (the live leaderboard's ``_run_task``, in another order)."""
    workload, target = task
    suite = Suite(f"sim-to-real:{workload}", (task,), options.trials, tuple(options.seeds))
    run = Run(uuid.uuid4().hex, utc_now(), device_info(target, options.threads),
              software_versions(),
              {**suite.to_json(), "agents": list(agents)}, list(options.seeds))
    measurer = LocalMeasurer(target, **runtime_options(target, options.threads))
    try:
        for agent, seed in interleaved(agents, options.seeds):
            e = run_entry(agent, workload, target, seed, options.trials,
                          replace(options, remeasure=0), measurer=measurer)
            run.entries.append(e)
            say(f"{e.label or e.workload}@{target}: {agent} seed {seed}: best "
                f"{_best(e, search=True):.2f} GFLOP/s live in search ({e.wall_time:.1f}s)")
        remeasure_bests(run.entries, options.remeasure, measurer, vendor=False,
                        threads=device_threads(run.device["name"]) or 0)
    finally:
        measurer.close()
    return ResultsDoc([run])


def _best(e: Entry, search: bool = False) -> float:
    if e.best is None:
        return 0.0
    return e.best.gflops_search if search else e.best.gflops


# --- per task figures --------------------------------------------------------------------------

def by_agent(doc: ResultsDoc, agents: Sequence[str], search: bool) -> dict[str, dict[int, float]]:
    """Each agent's best per seed: the search figure (``search``) or the re-measured one."""
    out: dict[str, dict[int, float]] = {a: {} for a in agents}
    for run in doc.runs:
        for e in run.entries:
            out[e.agent][e.seed] = _best(e, search)
    return out


def _mean(per_seed: dict[int, float]) -> float:
    return statistics.fmean(per_seed.values()) if per_seed else 0.0


def _ratio(a: float, b: float) -> Optional[float]:
    return a / b if b > 0 else None


def task_summary(task: tuple[str, str], agents: Sequence[str], replay: ResultsDoc,
                 live_best: dict[str, dict[int, float]]) -> dict[str, Any]:
    """One task's figures (the module docstring defines them); ``live_best``: each agent's
    re-measured live best per seed (``by_agent(live_doc, agents, search=False)``)."""
    predicted = by_agent(replay, agents, search=True)
    replay_live = by_agent(replay, agents, search=False)
    per_agent = {}
    for a in agents:
        p, q, m = _mean(predicted[a]), _mean(replay_live[a]), _mean(live_best[a])
        per_agent[a] = {"replay_predicted": p, "replay_config_live": q, "live": m,
                        "ratio": _ratio(p, m), "promise": _ratio(p, q),
                        "seeds": {"replay_predicted": predicted[a],
                                  "replay_config_live": replay_live[a], "live": live_best[a]}}
    ratios = [r["ratio"] for r in per_agent.values() if r["ratio"] is not None]
    w = get_workload(task[0])
    return {"workload": w.key, "label": w.label, "target": task[1], "agents": per_agent,
            "replay_ranking": _ranking(per_agent, "replay_predicted"),
            "live_ranking": _ranking(per_agent, "live"),
            "tau": kendall_tau([per_agent[a]["replay_predicted"] for a in agents],
                               [per_agent[a]["live"] for a in agents]),
            "median_ratio": statistics.median(ratios) if ratios else None}


def _ranking(per_agent: dict[str, dict], key: str) -> list[str]:
    return sorted(per_agent, key=lambda a: -per_agent[a][key])


def summary(tasks: list[dict]) -> dict[str, Any]:
    """Mean tau over tasks and median ratio over task x agent, against the issue's targets."""
    taus = [t["tau"] for t in tasks if t["tau"] is not None]
    ratios = [r["ratio"] for t in tasks for r in t["agents"].values() if r["ratio"] is not None]
    promises = [r["promise"] for t in tasks for r in t["agents"].values()
                if r["promise"] is not None]
    mean_tau = statistics.fmean(taus) if taus else None
    median_ratio = statistics.median(ratios) if ratios else None
    # what the ratio would have been at the records' speed: every replay answer of a task is
    # divided by its speed, so its promised GFLOP/s are the recorded ones times the speed
    unscaled = [r["ratio"] / _speed(t) for t in tasks for r in t["agents"].values()
                if r["ratio"] is not None]
    return {"tasks": len(tasks), "tasks_without_tau": len(tasks) - len(taus),
            "mean_tau": mean_tau, "median_ratio": median_ratio,
            "median_ratio_at_recorded_speed": statistics.median(unscaled) if unscaled else None,
            "median_speed": (statistics.median(_speed(t) for t in tasks) if tasks else None),
            "median_promise": statistics.median(promises) if promises else None,
            "tau_target_met": mean_tau is not None and mean_tau >= TARGET_TAU,
            "ratio_target_met": (median_ratio is not None
                                 and abs(median_ratio - 1) <= TARGET_RATIO_TOLERANCE)}


def _speed(task: dict) -> float:
    """The factor a task's replay answers were divided by (1 in files from before it was kept)."""
    return float((task.get("speed") or {}).get("speed", 1.0))


# --- tables ------------------------------------------------------------------------------------

def _f(v: Optional[float], fmt: str = ".2f") -> str:
    return "-" if v is None else format(v, fmt)


def table(tasks: list[dict], agents: Sequence[str]) -> str:
    """Markdown: one row per task (tau, median ratio, ratio per agent), then the summary."""
    head = ["task", "speed", "tau", "median ratio", *(f"{a} ratio" for a in agents)]
    rows = [[t["label"], _f(_speed(t)), _f(t["tau"]), _f(t["median_ratio"]),
             *(_f(t["agents"][a]["ratio"]) for a in agents)] for t in tasks]
    return _markdown(head, rows)


def detail_table(tasks: list[dict], agents: Sequence[str]) -> str:
    """Markdown: per task x agent, the three figures (GFLOP/s, means over seeds) and ratios."""
    head = ["task", "agent", "replay predicted", "replay config, live", "live best", "ratio",
            "promise"]
    rows = [[t["label"], a, _f(r["replay_predicted"]), _f(r["replay_config_live"]),
             _f(r["live"]), _f(r["ratio"]), _f(r["promise"])]
            for t in tasks for a, r in ((a, t["agents"][a]) for a in agents)]
    return _markdown(head, rows)


def _markdown(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    return "\n".join(lines + ["| " + " | ".join(r) + " |" for r in rows])


def summary_text(s: dict[str, Any]) -> str:
    return (f"mean tau over {s['tasks'] - s['tasks_without_tau']} task(s) "
            f"({s['tasks_without_tau']} without one): {_f(s['mean_tau'], '.3f')} "
            f"(target >= {TARGET_TAU}: {'met' if s['tau_target_met'] else 'not met'}); "
            f"median ratio replay/live: {_f(s['median_ratio'], '.3f')} (target within "
            f"{TARGET_RATIO_TOLERANCE:.0%} of 1: {'met' if s['ratio_target_met'] else 'not met'});"
            f" median promise: {_f(s['median_promise'], '.3f')}; median speed (recorded / live "
            f"seconds): {_f(s.get('median_speed'), '.3f')}, the ratio at the records' speed: "
            f"{_f(s.get('median_ratio_at_recorded_speed'), '.3f')}")


# --- the command -------------------------------------------------------------------------------

def parse_args(argv: "Sequence[str] | None" = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--dataset", required=True, help="records database or export (.parquet)")
    p.add_argument("--suite", default="corpus-test-cpu")
    p.add_argument("--tasks", type=int, default=0, help="only the suite's first N tasks")
    p.add_argument("--task", action="append", default=[], metavar="KEY",
                   help="only this task of the suite (repeatable)")
    p.add_argument("--agents", default=",".join(DEFAULT_AGENTS))
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--trials", type=int, default=64)
    p.add_argument("--on-miss", default="surrogate")
    p.add_argument("--threads", type=int, default=0, help="CPU threads (0: all cores)")
    p.add_argument("--remeasure", type=int, default=3, help="rounds re-measuring bests (>= 1)")
    p.add_argument("--replay-speed", default="1", metavar="live|X",
                   help="divide the replay's seconds by X, or by the speed read per task here")
    p.add_argument("--world-seed", default="0", metavar="N|seed",
                   help="with --on-miss draw: the field of draws, or 'seed' for each seed's own")
    p.add_argument("--out", default="sim_to_real.json")
    p.add_argument("--resume", action="store_true")
    p.add_argument("--docs", help="a folder for each task's two leaderboard results documents")
    p.add_argument("--verbose", action="store_true", help="the harness's line per entry")
    p.add_argument("--live-from", metavar="EARLIER.json",
                   help="replay side only: each task's live bests and replay speed from this "
                   "earlier output")
    return p.parse_args(argv)


def select_tasks(suite: Suite, n: int, keys: Sequence[str]) -> list[tuple[str, str]]:
    tasks = list(suite.tasks)
    if keys:
        wanted = [get_workload(k).key for k in keys]
        have = {get_workload(w).key: (w, t) for w, t in tasks}
        missing = [k for k in wanted if k not in have]
        if missing:
            raise TensorGymError(f"suite {suite.name} has no task {', '.join(missing)}")
        tasks = [have[k] for k in wanted]
    return tasks[:n] if n > 0 else tasks


def settings(args: argparse.Namespace, agents: list[str], seeds: list[int]) -> dict[str, Any]:
    """What a resumed run must share with the one it continues."""
    return {"suite": args.suite, "agents": agents, "seeds": seeds, "trials": args.trials,
            "dataset": str(Path(args.dataset).resolve()), "on_miss": args.on_miss,
            "threads": args.threads, "remeasure": args.remeasure, "order": "live, replay",
            **({} if args.replay_speed == "1" else {"replay_speed": args.replay_speed}),
            **({} if args.world_seed == "0" else {"world_seed": args.world_seed}),
            **({"live_from": str(Path(args.live_from).resolve())} if args.live_from else {})}


def load_live(path: Path, config: dict[str, Any]) -> dict[str, dict]:
    """The tasks of an earlier run (``--live-from``), by workload key; it must share the suite,
    agents, seeds, trials and threads (the replay side is compared with its live side)."""
    old = json.loads(path.read_text())
    theirs = old.get("settings", {})
    for k in ("suite", "agents", "seeds", "trials", "threads"):
        if theirs.get(k) != config[k]:
            raise TensorGymError(f"{path} was run with {k}={theirs.get(k)!r}, this run with "
                                 f"{config[k]!r}: its live side cannot be reused")
    return {t["workload"]: t for t in old.get("tasks", [])}


def stored_live(task: dict, agents: Sequence[str]) -> dict[str, dict[int, float]]:
    """An earlier task summary's live bests per agent and seed."""
    return {a: {int(s): float(v) for s, v in task["agents"][a]["seeds"]["live"].items()}
            for a in agents}


def load_done(out: Path, config: dict[str, Any], resume: bool) -> list[dict]:
    if not (resume and out.exists()):
        return []
    old = json.loads(out.read_text())
    if old.get("settings") != config:
        raise TensorGymError(f"{out} was written with other settings ({old.get('settings')}); "
                             "rerun without --resume or with the same options")
    return list(old.get("tasks", []))


def save(out: Path, config: dict[str, Any], tasks: list[dict]) -> None:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text(json.dumps({"settings": config, "tasks": tasks, "summary": summary(tasks)},
                              indent=1))
    tmp.replace(out)  # a kill mid-write leaves the previous file whole


def run_task(task: tuple[str, str], agents: list[str], options: RunOptions, say: Say,
             docs: "Path | None", index: int, earlier: Optional[dict] = None) -> dict[str, Any]:
    """Live, then replay, for one task; its summary with the wall seconds of each side. Live
    first: a speed read live by the replay track (``--replay-speed live``) is then read right
    after the live bests were re-measured, in the same minute. With ``earlier`` (the task's
    summary in a ``--live-from`` file), only the replay side runs, at that summary's speed."""
    t0 = time.perf_counter()
    if earlier is None:
        live = run_live(task, agents, replace(options, replay=None), say)
        live_best = by_agent(live, agents, search=False)
    else:
        live = None
        live_best = stored_live(earlier, agents)
        options = replace(options, replay_speed=_speed(earlier))
    t1 = time.perf_counter()
    replay = run_replay(task, agents, options, say)
    t2 = time.perf_counter()
    if docs is not None:
        replay.save(docs / f"{index}-replay.json")
        if live is not None:
            live.save(docs / f"{index}-live.json")
    speed = replay.runs[0].dataset.get("speed", {}).get(get_workload(task[0]).key)
    if earlier is not None:
        speed = {**(earlier.get("speed") or {}), "read": False, "from": "live_from"}
    return {**task_summary(task, agents, replay, live_best), "speed": speed,
            "replay_s": round(t2 - t1, 1),
            "live_s": round(t1 - t0, 1) if earlier is None else earlier.get("live_s")}


def main(argv: "Sequence[str] | None" = None) -> dict[str, Any]:
    """Run the benchmark; returns the document written to ``--out``."""
    args = parse_args(argv)
    agents = [a for a in args.agents.split(",") if a]
    seeds = [int(s) for s in args.seeds.split(",") if s]
    for a in agents:
        registry.spec(a)  # an unknown name fails before any run
    tasks = select_tasks(get_suite(args.suite), args.tasks, args.task)
    config = settings(args, agents, seeds)
    out = Path(args.out)
    done = load_done(out, config, args.resume)
    earlier = load_live(Path(args.live_from), config) if args.live_from else None
    options = RunOptions(trials=args.trials, seeds=seeds, remeasure=args.remeasure,
                         vendor=False, records=False, threads=args.threads,
                         replay=Dataset.load(args.dataset), on_miss=args.on_miss,
                         replay_speed=(args.replay_speed if args.replay_speed == "live"
                                       else float(args.replay_speed)),
                         world_seed=(args.world_seed if args.world_seed == "seed"
                                     else int(args.world_seed)))
    say: Say = (lambda m: print(m, file=sys.stderr, flush=True)) if args.verbose else (
        lambda m: None)
    docs = Path(args.docs) if args.docs else None
    keys = {(t["workload"], t["target"]) for t in done}
    for i, task in enumerate(tasks, 1):
        if (get_workload(task[0]).key, task[1]) in keys:
            print(f"[{i}/{len(tasks)}] {task[0]}@{task[1]}: done earlier, kept", flush=True)
            continue
        if earlier is not None and get_workload(task[0]).key not in earlier:
            raise TensorGymError(f"{args.live_from} has no live side of {task[0]}")
        done.append(run_task(task, agents, options, say, docs, i,
                             None if earlier is None else earlier[get_workload(task[0]).key]))
        save(out, config, done)
        t = done[-1]
        speed = (t.get("speed") or {}).get("speed")
        print(f"[{i}/{len(tasks)}] {t['label']}@{t['target']}: tau {_f(t['tau'])}, median "
              f"ratio {_f(t['median_ratio'])}, speed {_f(speed)}; replay "
              f"{' > '.join(t['replay_ranking'])}, live "
              f"{' > '.join(t['live_ranking'])} ({t['replay_s']:.0f}s replay, "
              f"{t['live_s']:.0f}s live)", flush=True)
    save(out, config, done)
    print("\n" + table(done, agents) + "\n\n" + detail_table(done, agents) + "\n\n"
          + summary_text(summary(done)))
    return json.loads(out.read_text())


if __name__ == "__main__":
    main()
