"""The machine's speed now against when a dataset was recorded.

The 2-vCPU VMs this project runs on change speed by 1.4-1.9x between hours (the same kernels,
re-timed: ``benchmarks/bench_record_speed.py``). A replay answers with recorded seconds, so what
it promises is the recording hour's speed, and no world of records can say how fast a kernel runs
*now*. ``live_speed`` reads the factor: it times a task's fastest recorded configs on this machine
(the dataset's device), in interleaved rounds, and returns recorded / live seconds (the median
over configs). A ``ReplayMeasurer(speed=...)`` divides every answer's seconds by it, recorded and
world-model answers alike, so that the replay's promises are in this hour's seconds. The factor
scales all answers of a task alike: it changes no ranking, and nothing an agent learns.

Why not the measurer's calibration kernel (``measure/drift.py``)? It is a small reference matmul;
``bench_speed_states.py`` saw a tuned kernel step between two speeds while that kernel kept its
own. The task's own best kernels are what a best is compared with.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Any

from ..errors import TensorGymError
from ..workloads import Workload

#: how many of a task's fastest recorded configs are timed, and in how many rounds
SPEED_CONFIGS = 5
SPEED_ROUNDS = 3


@dataclass(frozen=True)
class SpeedReading:
    """``speed``: recorded seconds over live seconds (2.0: the machine runs twice as fast as when
    the records were taken), the median of ``ratios`` (one per config timed)."""

    workload: str
    speed: float
    ratios: tuple[float, ...]
    rounds: int

    def to_json(self) -> dict[str, Any]:
        return {"speed": self.speed, "ratios": list(self.ratios), "rounds": self.rounds}


def live_speed(replay: Any, workload: Workload, measurer: Any, configs: int = SPEED_CONFIGS,
               rounds: int = SPEED_ROUNDS) -> SpeedReading:
    """Time ``workload``'s ``configs`` fastest recorded configs of ``replay`` (a
    ``ReplayMeasurer``) with ``measurer`` (a live one on the dataset's device) in ``rounds``
    rounds, each config once per round, and return the speed of this machine now against the
    records. A config that fails live (or in any round) is left out; none left is an error."""
    if configs < 1 or rounds < 1:
        raise TensorGymError(f"live_speed needs configs >= 1 and rounds >= 1, got {configs}, "
                             f"{rounds}")
    if measurer.device != replay.device:
        raise TensorGymError(f"the speed of {measurer.device!r} says nothing about records of "
                             f"{replay.device!r}: read it on the dataset's device")
    task = replay.task(workload)
    recorded = []
    for config, samples in zip(task.configs, task.samples):
        costs = [c for s in samples if s.ok for c in s.costs]
        if costs:
            recorded.append((statistics.median(costs), config))
    if not recorded:
        raise TensorGymError(f"{workload.label} has no timed record in {replay.dataset.path}: "
                             "there is no recorded speed to compare this machine's with")
    recorded.sort(key=lambda rc: rc[0])
    chosen = recorded[:configs]
    live: list[list[float]] = [[] for _ in chosen]
    for _ in range(rounds):
        for i, r in enumerate(measurer.measure(workload, [c for _, c in chosen])):
            live[i].append(r.median if r.ok else float("nan"))
    kept = [(s, ts) for (s, _), ts in zip(chosen, live) if all(t == t for t in ts)]
    if not kept:
        raise TensorGymError(f"none of {workload.label}'s {len(chosen)} fastest recorded configs "
                             "ran here: no speed can be read")
    ratios = tuple(s / statistics.median(ts) for s, ts in kept)
    return SpeedReading(workload.key, statistics.median(ratios), ratios, rounds)


__all__ = ["SPEED_CONFIGS", "SPEED_ROUNDS", "SpeedReading", "live_speed"]
