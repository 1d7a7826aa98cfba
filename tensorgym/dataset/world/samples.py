"""A dataset's records as the world model's training rows: one row per distinct config of a
task, with its three targets, and the train/test split of tasks.

- **time**: the median over the config's successful records of each record's median sample
  (seconds per run); NaN when every record of the config failed.
- **failure**: the share of the config's records that failed (build, run, check, timeout).
- **noise**: the coefficient of variation (sample standard deviation / mean,
  ``tensorgym.measure.result.spread``) of a record's timing samples, for successful records with
  at least ``MIN_NOISE_SAMPLES`` samples; the median over the config's records; NaN without one.

Records whose config is not one of today's space (the template changed since) are left out, and
counted. So is the time of a record whose only sample may be the kernel's cold first run
(``Record.cold_only``; it counts as a success for the failure target). Nothing is invented: a
config without a timed successful record has no time.
"""
from __future__ import annotations

import statistics
import warnings
import zlib
from dataclasses import dataclass
from typing import Iterable, Optional, Sequence

import numpy as np

from ...errors import InvalidConfigError, TensorGymError
from ...measure.result import spread
from ...space import ConfigSpace
from ...task import Task
from ...templates import space_for
from ...workloads import Workload, get_workload
from ..data import Dataset, DatasetError

MIN_NOISE_SAMPLES = 3
HOLDOUT = 0.2  # share of each train task's configs held out for evaluation


@dataclass
class TaskSamples:
    """The distinct configs of one task and their targets (see the module docstring);
    ``split`` is ``"train"`` or ``"test"``."""

    task: Task
    workload: Workload
    space: ConfigSpace
    indices: np.ndarray  # (n,) int64 config indices in ``space``
    seconds: np.ndarray  # (n,) float64, NaN: every record failed
    fail: np.ndarray  # (n,) float64 in [0, 1]
    noise: np.ndarray  # (n,) float64 coefficient of variation, NaN: no record to tell
    split: str = "train"

    def __len__(self) -> int:
        return len(self.indices)

    def subset(self, mask: np.ndarray) -> "TaskSamples":
        return TaskSamples(self.task, self.workload, self.space, self.indices[mask],
                           self.seconds[mask], self.fail[mask], self.noise[mask], self.split)


def pick_device(data: Dataset, device: Optional[str] = None) -> str:
    """The device to model: ``device`` (which the dataset must have), else the dataset's only
    one; several without ``device`` is an error naming them."""
    devices = data.devices()
    if not devices:
        raise DatasetError(f"dataset {data.path or '(in memory)'} has no records")
    if device is not None:
        if device not in devices:
            raise DatasetError(f"dataset {data.path} has no records of device {device!r}; it "
                               f"has {', '.join(devices)}")
        return device
    if len(devices) > 1:
        raise DatasetError(f"dataset {data.path} holds several devices ({', '.join(devices)}): "
                           "a world model is of one; pick it with --device")
    return devices[0]


def task_samples(data: Dataset, device: Optional[str] = None,
                 test_keys: Iterable[str] = ()) -> list[TaskSamples]:
    """One ``TaskSamples`` per task of ``device`` (see ``pick_device``) with a usable record, in
    the dataset's order; tasks whose workload key is in ``test_keys`` are ``"test"``."""
    device = pick_device(data, device)
    test = set(test_keys)
    out: list[TaskSamples] = []
    skipped = cold = 0
    for task, recs in data.by_task.items():
        if task.device != device:
            continue
        try:
            workload = get_workload(task.workload)
            space = space_for(workload, task.target)
        except TensorGymError:
            skipped += len(recs)
            continue
        by_config: dict[int, list] = {}
        parsed: dict[str, Optional[int]] = {}
        for r in recs:
            if r.config_json not in parsed:
                try:
                    parsed[r.config_json] = (space.from_json(r.config_json).index
                                             if r.space_name == space.name else None)
                except InvalidConfigError:
                    parsed[r.config_json] = None
            index = parsed[r.config_json]
            if index is None:
                skipped += 1
                continue
            by_config.setdefault(index, []).append(r)
        if not by_config:
            continue
        indices = np.fromiter(by_config, np.int64, len(by_config))
        seconds, fail, noise = (np.full(len(indices), np.nan) for _ in range(3))
        for i, rs in enumerate(by_config.values()):
            ok = [r for r in rs if r.ok]
            fail[i] = 1.0 - len(ok) / len(rs)
            timed = [r for r in ok if not r.cold_only]
            cold += bool(ok) and not timed  # a config left without a time
            ok = timed
            if ok:
                seconds[i] = statistics.median(r.median for r in ok)
                cvs = [spread(r.costs) for r in ok if len(r.costs) >= MIN_NOISE_SAMPLES]
                if cvs:
                    noise[i] = statistics.median(cvs)
        out.append(TaskSamples(task, workload, space, indices, seconds, fail, noise,
                               "test" if task.workload in test else "train"))
    if skipped:
        warnings.warn(f"world model: {skipped} records of {data.path} are not configs of "
                      "today's spaces (or of no known workload); left out", stacklevel=2)
    if cold:
        warnings.warn(f"world model: {cold} configs in {data.path} have only records of a "
                      "cold first run (measured before it was timed again warm), so no time; "
                      "time them again with `tensorgym dataset remeasure --db DB` on their "
                      "device", stacklevel=2)
    if not out:
        raise DatasetError(f"dataset {data.path or '(in memory)'} has no usable records on "
                           f"{device}")
    return out


def holdout_mask(samples: TaskSamples, seed: int, share: float = HOLDOUT) -> np.ndarray:
    """Boolean mask of the configs held out of a train task: ``round(share * n)`` of them, drawn
    by a generator seeded with ``seed`` and the task's workload key (so the same whatever other
    tasks the dataset has); none of a test task (all of it is held out already)."""
    n = len(samples)
    mask = np.zeros(n, bool)
    if samples.split != "train" or n < 2:
        return mask
    rng = np.random.default_rng([seed, zlib.crc32(samples.task.workload.encode())])
    k = min(n - 1, int(round(share * n)))
    mask[rng.permutation(n)[:k]] = True
    return mask


def split_samples(tasks: Sequence[TaskSamples], seed: int, share: float = HOLDOUT
                  ) -> tuple[list[TaskSamples], list[TaskSamples], list[TaskSamples]]:
    """(fit, held-out, test): the train tasks' configs less the held-out share, the held-out
    configs of each train task, and the test tasks whole."""
    fit, held, test = [], [], []
    for s in tasks:
        if s.split == "test":
            test.append(s)
            continue
        mask = holdout_mask(s, seed, share)
        fit.append(s.subset(~mask))
        if mask.any():
            held.append(s.subset(mask))
    return fit, held, test


__all__ = ["HOLDOUT", "MIN_NOISE_SAMPLES", "TaskSamples", "holdout_mask",
           "pick_device", "split_samples", "task_samples"]
