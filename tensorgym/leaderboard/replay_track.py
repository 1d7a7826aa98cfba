"""The leaderboard's replay track: every agent x task x seed answered from a dataset
(``tensorgym.dataset``), then each entry's best re-measured live on the dataset's device (here),
and only that live figure reported.

A config the dataset lacks is answered as ``RunOptions.on_miss`` says: ``surrogate`` (default;
the dataset's world model of the time), ``draw`` (that model's answer times the config's fixed
draw of its held-out error, ``tensorgym.dataset.world.draws``) or ``nearest`` (the recorded
config differing in fewest knobs). All three are marked ``surrogate`` in each trial's
``source``. ``measure`` is refused: it would put live measurements into a replay run; ``error``
only suits agents that propose recorded configs.

``RunOptions.replay_speed`` divides the replay's seconds by this machine's speed against the
records' (``tensorgym.dataset.speed``): a number for every task, or ``"live"``, read for each task
here, before its entries, from its fastest recorded configs timed live. The run's ``dataset``
keeps each task's factor (``speed``), so the search figures say in whose seconds they are.

``RunOptions.world_seed`` picks the field of ``draw``'s draws: one integer (0) puts every entry
in the same drawn world; ``"seed"`` gives each seed its own, so that an agent's mean over seeds
is over worlds as well as over its own randomness (the run's ``dataset`` keeps which).
"""
from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Callable, Sequence

from tensorgym.errors import TensorGymError
from tensorgym.measure import LocalMeasurer, Measurer
from tensorgym.space import is_int
from tensorgym.task import Task
from tensorgym.workloads import get_workload

from .harness import device_info, device_threads, runtime_options
from .results import Entry, ResultsDoc, Run
from .suites import Suite

if TYPE_CHECKING:
    from .run import RunOptions

REPLAY_ON_MISS = ("surrogate", "draw", "nearest", "error")


def run_suite_replay(suite: Suite, agents: Sequence[str], options: "RunOptions", trials: int,
                     seeds: list[int], say: Callable[[str], None]) -> ResultsDoc:
    """``run.run_suite`` with ``options.replay`` set (a dataset path, or a loaded ``Dataset``)."""
    from tensorgym.dataset import Dataset

    from .run import remeasure_bests, run_entry, start_run

    if options.on_miss not in REPLAY_ON_MISS:
        raise TensorGymError(f"on_miss {options.on_miss!r} does not suit a replay leaderboard; "
                             f"use one of {', '.join(REPLAY_ON_MISS)}")
    check_replay_speed(options.replay_speed)
    check_world_seed(options.world_seed, options.on_miss)
    if options.remeasure < 1:
        raise TensorGymError("a replay leaderboard reports only live re-measurements of each "
                             "best: remeasure must be >= 1")
    # a loaded Dataset is used as it is (a caller running task by task loads it once)
    data = options.replay if isinstance(options.replay, Dataset) else Dataset.load(options.replay)
    runs: dict[str, Run] = {}
    devices: dict[str, str] = {}
    for target in dict.fromkeys(t for _, t in suite.tasks):
        info = device_info(target, options.threads)
        devices[target] = info["name"]
        if info["name"] not in data.devices(target):
            raise TensorGymError(
                f"dataset {data.path} was recorded on {', '.join(data.devices(target)) or 'no '}"
                f"{'' if data.devices(target) else target + ' device'}; this machine is "
                f"{info['name']}: the replay track re-measures each best live on the dataset's "
                "device (run it there, or with the --threads the dataset was collected with)")
        runs[target] = start_run(target, options.threads,
                                 {**suite.to_json(), "trials": trials, "agents": list(agents)},
                                 seeds, info, track="replay",
                                 dataset={"path": data.path, "digest": data.digest,
                                          "device": info["name"], "on_miss": options.on_miss,
                                          "records": len(data), "speed": {},
                                          **({"world_seed": options.world_seed}
                                             if options.on_miss == "draw" else {})})
    missing = [f"{w}@{t}" for w, t in suite.tasks
               if not data.by_task.get(Task(get_workload(w).key, t, devices[t]))]
    if missing and options.on_miss not in ("surrogate", "draw"):  # the world model answers
        raise TensorGymError(f"dataset {data.path} has no records of {', '.join(missing)} on "
                             f"this device; on_miss='surrogate' answers them by the world model")
    if missing and options.replay_speed == "live":
        raise TensorGymError(f"replay_speed='live' times each task's recorded configs here, and "
                             f"dataset {data.path} has no records of {', '.join(missing)}: give "
                             "a number, or a suite the dataset holds")
    measurers: dict[str, Measurer] = {}
    try:
        for workload, target in suite.tasks:
            if target not in measurers:
                measurers[target] = LocalMeasurer(target, **runtime_options(target, options.threads))
            speed = task_speed(data, workload, target, devices[target], options,
                               measurers[target])
            runs[target].dataset["speed"][get_workload(workload).key] = speed
            if speed["read"]:
                say(f"{get_workload(workload).label}@{target}: this machine runs at "
                    f"{speed['speed']:.2f}x the records' speed; the replay answers at it")
            entries = []
            for agent in agents:
                for seed in seeds:
                    entry_options = replace(options, remeasure=0, records=False, session_options={
                        **options.session_options, "measure": "replay", "dataset": data,
                        "on_miss": options.on_miss, "dataset_device": devices[target],
                        "replay_speed": speed["speed"],
                        **world_seed_option(options.world_seed, options.on_miss, seed)})
                    e = run_entry(agent, workload, target, seed, trials, entry_options,
                                  measurer=measurers[target])
                    entries.append(e)
                    say(f"{e.label or e.workload}@{target}: {agent} seed {seed}: best "
                        f"{e.best.gflops_search if e.best else 0.0:.2f} GFLOP/s on replay "
                        f"({len(e.trials)} trials: {_sources(e)}; {e.wall_time:.1f}s)")
            runs[target].entries += entries
            vendor = remeasure_bests(entries, options.remeasure, measurers[target],
                                     options.vendor, device_threads(devices[target]) or 0)
            for e in entries:
                say(f"{e.label or e.workload}@{target}: {e.agent} seed {e.seed}: best "
                    f"re-measured live {e.best.gflops if e.best else 0.0:.2f} GFLOP/s")
            if vendor is not None:
                runs[target].vendor.append(vendor)
    finally:
        for m in measurers.values():
            m.close()
    return ResultsDoc(list(runs.values()))


def check_replay_speed(speed: "float | str") -> None:
    from tensorgym.dataset.replay import is_speed

    if speed != "live" and not is_speed(speed):
        raise TensorGymError(f"replay_speed is 'live' or a positive number (recorded seconds "
                             f"over this machine's now), not {speed!r}")


def check_world_seed(world_seed: "int | str", on_miss: str) -> None:
    if world_seed != "seed" and not (is_int(world_seed) and world_seed >= 0):
        raise TensorGymError(f"world_seed is an integer >= 0 or 'seed' (each entry's own), not "
                             f"{world_seed!r}")
    if world_seed not in (0, "seed") and on_miss != "draw":
        raise TensorGymError("world_seed picks the draws of on_miss='draw'; it means nothing "
                             f"with on_miss={on_miss!r}")


def world_seed_option(world_seed: "int | str", on_miss: str, seed: int) -> dict[str, int]:
    """The session option of an entry's drawn world (none where misses are not drawn)."""
    if on_miss != "draw":
        return {}
    return {"world_seed": int(seed) if world_seed == "seed" else int(world_seed)}


def task_speed(data: Any, workload: str, target: str, device: str, options: "RunOptions",
               measurer: Measurer) -> dict[str, Any]:
    """The speed a task's replay answers at: ``options.replay_speed``, or read live here."""
    if options.replay_speed != "live":
        return {"speed": float(options.replay_speed), "read": False}
    from tensorgym.dataset.replay import ReplayMeasurer
    from tensorgym.dataset.speed import live_speed

    replay = ReplayMeasurer(data, target, options.on_miss, device=device)
    try:
        reading = live_speed(replay, get_workload(workload), measurer)
    finally:
        replay.close()
    return {**reading.to_json(), "read": True}


def _sources(e: Entry) -> str:
    return ", ".join(f"{n} {k}" for k, n in sorted(e.sources().items()))


__all__ = ["REPLAY_ON_MISS", "run_suite_replay"]
