"""Replay: measurements served from a dataset, behind the ``Measurer`` interface, so the env, the
tuning loop, the agents and the baselines run on recorded data unchanged.

A recorded config answers with one of its records, drawn with the replay's seed (the env reseeds
it on ``reset(seed=...)``), its samples resampled with replacement (``resample``): every cost is
a recorded sample, and the median varies as a re-measurement's would. A config the dataset lacks
is a miss, answered as ``on_miss`` says:

- ``error``: ``ReplayMissError`` (a ``TensorGymError``), before anything is answered;
- ``nearest``: the recorded config that differs in the fewest knobs (then the smallest moves);
- ``surrogate``: the world model (``world/``: one model across tasks of time and failure, on the
  workload's descriptor and the schedule's knobs), ``world=`` a ``WorldModel`` or the directory
  of a saved one, by default fitted on this dataset's records of the device on the first miss and
  cached beside it. A predicted failure (``p_fail > 0.5``) is answered as the dataset's most
  common failure; a task the dataset has no record of is answered entirely by it;
- ``draw``: as ``surrogate``, each config's time multiplied by its fixed draw of the world
  model's error on held-out configs (``world/draws.py``), so that answers spread as measured
  times do and the best of many misses is not biased slow (the default world is then calibrated
  when fitted). ``world_seed`` picks the field of draws: one seed is one fixed world (the
  default, 0); a leaderboard can give each of its seeds its own (``RunOptions.world_seed``);
- ``measure``: measured on this machine, which must be the dataset's device.

A record whose only sample may be a kernel's cold first run (``Record.cold_only``) is no
measurement: it is left out, so its config is a miss unless another record holds it.

``source`` of every result is ``recorded``, ``surrogate`` (nearest and surrogate
answers: not a measurement of this config) or ``measured``; recorded and surrogate answers are
``cached`` (nothing was measured now) and a records database refuses to store them as
measurements. ``build_time`` and ``run_time`` are what the recorded measurement took (a
surrogate answer: the task's median ones), so a caller can add up the virtual time.

``speed`` (default 1) divides the seconds of every recorded and world-model answer, and of the
reference: the machine's speed now against the records' (``speed.live_speed`` reads it), so that
a replay promises this hour's seconds. It scales every answer alike (rewards, which are ratios to
the reference, and rankings do not move); the vector envs answer at the recorded speed.
"""
from __future__ import annotations

import math
import os
import random
import statistics
import warnings
from collections import Counter
from pathlib import Path
from dataclasses import asdict, dataclass, field, replace
from typing import Any, Callable, Optional, Sequence

import numpy as np

from ..errors import ErrorCode, InvalidConfigError, TensorGymError
from ..features import Featurizer, default_jobs
from ..hardware.target import get_target
from ..measure import LocalMeasurer, MeasureOptions, MeasurerDefaults
from ..measure.base import confirmed
from ..measure.result import MeasureResult, spread
from ..space import Config, ConfigSpace, is_int
from ..task import Task
from ..templates import check_config, space_for
from ..workloads import Workload
from .cache import CacheDir, feature_code_hash, load_rows, save_rows, short_hash
from .data import Dataset, DatasetError

ON_MISS = ("error", "nearest", "surrogate", "draw", "measure")
WORLD_MISS = ("surrogate", "draw")  # misses the world model answers
SOURCES = ("recorded", "surrogate", "measured")
CACHED_MODES = ("relation", "context", "config")  # feature modes kept per recorded config
MAX_MISS_ROWS = 200_000  # feature rows of missed configs kept in memory (then forgotten)
DRAW_SEED = 0  # the default world_seed of on_miss="draw": every replay of a dataset draws alike
FAIL_THRESHOLD = 0.5  # a miss the world model gives a higher probability of failing fails


def is_speed(value: Any) -> bool:
    """Whether ``value`` can be a replay's ``speed``: a finite positive number (not a bool)."""
    return (not isinstance(value, bool) and isinstance(value, (int, float))
            and 0 < value < math.inf)


class ReplayMissError(TensorGymError, KeyError):
    """A config the dataset has no record of, with ``on_miss="error"``."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True)
class ReplayResult(MeasureResult):
    """A ``MeasureResult`` whose median, GFLOP/s and spread are computed once (an env step asks
    for them a dozen times, and replay answers 20,000 steps a second)."""

    def __post_init__(self) -> None:
        ok = self.error == ErrorCode.NO_ERROR and bool(self.costs)
        median = statistics.median(self.costs) if ok else math.inf
        object.__setattr__(self, "_ok", ok)
        object.__setattr__(self, "_median", median)
        object.__setattr__(self, "_gflops", self.flops / median / 1e9
                           if ok and median > 0 else 0.0)
        object.__setattr__(self, "_cv", spread(self.costs) if ok else 0.0)

    @property
    def ok(self) -> bool:
        return self._ok

    @property
    def median(self) -> float:
        return self._median

    @property
    def gflops(self) -> float:
        return self._gflops

    @property
    def cv(self) -> float:
        return self._cv


@dataclass(frozen=True)
class _Sample:
    """One record, ready to answer with."""

    costs: tuple[float, ...]
    error: ErrorCode
    error_msg: str
    build_time: float
    run_time: float
    timestamp: float

    @property
    def ok(self) -> bool:
        return self.error == ErrorCode.NO_ERROR and len(self.costs) > 0


@dataclass
class ReplayTask:
    """The recorded configs of one task (a workload on the replay's device): ``configs[i]`` has
    the records ``samples[i]``; ``index_of`` maps a config index to ``i``."""

    task: Task
    workload: Workload
    space: ConfigSpace
    configs: list[Config]
    samples: list[list[_Sample]]
    index_of: dict[int, int]
    choices: np.ndarray  # (n, knobs) option indices, for on_miss="nearest"
    flops: int = 0
    rows: dict[str, np.ndarray] = field(default_factory=dict)  # mode -> (n, features)
    miss_rows: dict[str, dict[int, np.ndarray]] = field(default_factory=dict)
    _times: Optional[tuple[float, float]] = None

    def median_times(self) -> tuple[float, float]:
        """Median build and run seconds of the successful records (what a miss is charged),
        computed once: the samples never change."""
        if self._times is None:
            ok = [s for ss in self.samples for s in ss if s.ok] or [s for ss in self.samples
                                                                    for s in ss]
            self._times = ((float(np.median([s.build_time for s in ok])),
                            float(np.median([s.run_time for s in ok]))) if ok else (0.0, 0.0))
        return self._times


class ReplayMeasurer(MeasurerDefaults):
    """A ``Measurer`` whose answers come from ``dataset`` (a path or a ``Dataset``: share one
    between envs to load it once). ``device``: the dataset's device to replay (default: its
    only one for ``target``, or for ``workload`` if given). ``seed``: of the draws (``reseed`` starts again). ``live``: the
    measurer of ``on_miss="measure"`` (default: one made on the first miss, with ``options``
    and ``runtime_kwargs``). ``cache_dir``: where feature rows and the world model are kept
    (default: ``<dataset>.cache`` beside it). ``world``: the world model of
    ``on_miss="surrogate"`` (a ``WorldModel`` or a saved one's directory; default: fitted on this
    dataset). ``speed``: the module docstring's (> 0). ``world_seed``: the field of
    ``on_miss="draw"``'s draws (an integer >= 0; each seed a fixed world of its own)."""

    timed = False  # its answers were timed when the dataset was collected

    def __init__(self, dataset: "str | os.PathLike | Dataset", target: str = "cpu",
                 on_miss: str = "error", device: Optional[str] = None, seed: int = 0,
                 resample: bool = True, live: Any = None,
                 options: Optional[MeasureOptions] = None,
                 runtime_kwargs: Optional[dict] = None, cache_dir: Optional[str] = None,
                 workload: Optional[Workload] = None, world: Any = None,
                 speed: float = 1.0, world_seed: int = DRAW_SEED) -> None:
        if on_miss not in ON_MISS:
            raise TensorGymError(f"unknown on_miss {on_miss!r}; use one of {', '.join(ON_MISS)}")
        if not is_speed(speed):
            raise TensorGymError(f"speed must be a positive number (recorded seconds over this "
                                 f"machine's now), got {speed!r}")
        if not is_int(world_seed) or world_seed < 0:
            raise TensorGymError(f"world_seed must be an integer >= 0, got {world_seed!r}")
        if world_seed != DRAW_SEED and on_miss != "draw":
            raise TensorGymError(f"world_seed picks the draws of on_miss='draw'; it means nothing "
                                 f"with on_miss={on_miss!r}")
        self.speed = float(speed)
        self.world_seed = int(world_seed)
        self.dataset = dataset if isinstance(dataset, Dataset) else Dataset.load(dataset)
        self.target_info = get_target(target)
        self.target = self.target_info.kind
        self.on_miss = on_miss
        self.resample = resample
        self.options = options or MeasureOptions()
        self.runtime_kwargs = dict(runtime_kwargs or {})
        self._seed = seed
        self._rng = random.Random(seed)
        self._live = live
        self._own_live = live is None
        self._live_checked = False
        self._cache_dir = cache_dir
        self.cache = CacheDir(self.dataset.path, self.dataset.digest, cache_dir)
        self.seconds = {"build": 0.0, "run": 0.0}  # wall seconds of live measurements only
        self.sources: Counter = Counter()  # answers given, by source
        self._tasks: dict[str, ReplayTask] = {}
        self._last: tuple = (None, None)  # the workload asked last and its task
        self._featurizer = None
        self._world_spec = world
        self._world: Any = None
        devices = self.dataset.devices(self.target)
        if device is None and workload is not None:
            devices = [d for d in devices if self.dataset.by_task.get(
                Task(workload.key, self.target, d))] or devices
        if device is None:
            if len(devices) != 1:
                raise DatasetError(f"dataset {self.dataset.path} has {len(devices)} "
                                   f"{self.target} devices ({', '.join(devices) or 'none'}): "
                                   "choose one with device= (the env's dataset_device=)")
            device = devices[0]
        elif device not in devices:
            raise DatasetError(f"dataset {self.dataset.path} has no records of {self.target} "
                               f"device {device!r}; it has {', '.join(devices) or 'none'}")
        self.device = device

    # ---------------------------------------------------------------- the Measurer interface

    def reseed(self, seed: int) -> None:
        """Draw from the start of ``seed``'s stream (the env calls it on ``reset(seed=...)``)."""
        self._rng = random.Random(seed)

    def measure(self, workload: Workload, configs: Sequence[Config],
                stop_slower_than: float = 0.0, early_stop: float = 0.0) -> list[MeasureResult]:
        """The answers for ``configs`` (``stop_slower_than`` and ``early_stop`` apply to live
        measurements only: a recorded answer is a whole recorded measurement)."""
        task = self.task(workload)
        index_of, key = task.index_of, task.space.key
        if len(configs) == 1:  # an env step: the hot path
            c = configs[0]
            p = index_of.get(c.index) if c.space_key is key or c.space_key == key else None
            if p is not None:
                self.sources["recorded"] += 1
                return [self._recorded(task, p, c)]
        at = [index_of.get(c.index) if c.space_key == key else None for c in configs]
        misses = [i for i, p in enumerate(at) if p is None]
        if misses and self.on_miss == "error":
            raise self._miss_error(task, [configs[i] for i in misses])
        out: list[Optional[MeasureResult]] = [None] * len(configs)
        for i, p in enumerate(at):
            if p is not None:
                out[i] = self._recorded(task, p, configs[i])
        if misses:
            for i, r in zip(misses, self._answer_misses(task, [configs[i] for i in misses],
                                                        stop_slower_than, early_stop)):
                out[i] = r
        self.sources.update(r.source for r in out)
        return out  # type: ignore[return-value]

    def confirm(self, workload: Workload, result: MeasureResult) -> MeasureResult:
        """A recorded answer: ``confirm_repeat`` samples drawn again from the config's records
        (its run time charged again); a live one: ``Measurer.confirm``; a surrogate one has
        nothing to confirm it with and comes back as it is, marked confirmed."""
        source = result.source
        if source == "measured":
            return self._mark(self._with_live(lambda m: m.confirm(workload, result)), "measured")
        task = self.task(workload)
        p = task.index_of.get(result.config.index)
        if source != "recorded" or p is None:
            return replace(result, confirmed=True)
        return confirmed(result, self._recorded(task, p, result.config,
                                                self.options.confirm_repeat))

    def describe(self) -> dict:
        return {"target": self.target, "device": self.device, "replay": self.dataset.path,
                "dataset_digest": self.dataset.digest, "on_miss": self.on_miss,
                "resample": self.resample, "speed": self.speed,
                **({"world_seed": self.world_seed} if self.on_miss == "draw" else {}),
                **asdict(self.options)}

    def close(self) -> None:
        if self._own_live and self._live is not None:
            self._live.close()
            self._live = None
        if self._featurizer is not None:
            self._featurizer.close()

    def __deepcopy__(self, memo: dict) -> "ReplayMeasurer":
        return self

    def __reduce__(self):
        # the copy reloads the dataset, draws on where this one is, and makes its own live
        # measurer if it needs one
        return (_new_replay, (self.dataset, self.target, self.on_miss, self.device, self._seed,
                              self.resample, None, self.options, self.runtime_kwargs,
                              self._cache_dir, None, self._world_spec, self.speed,
                              self.world_seed),
                self._rng.getstate())

    def __setstate__(self, state: Any) -> None:
        self._rng.setstate(state)

    # ---------------------------------------------------------------- beyond Measurer

    def reference_seconds(self, workload: Workload, config: Config) -> float:
        """The reference schedule's seconds: the median of all its recorded samples (no draw:
        rewards keep one reference); a miss is answered as ``on_miss`` says."""
        task = self.task(workload)
        p = task.index_of.get(config.index)
        if p is None:
            r = self.measure(workload, [config])[0]
        else:
            costs = [c / self.speed for s in task.samples[p] if s.ok for c in s.costs]
            r = ReplayResult(config, tuple(costs), flops=workload.flops)
            if not costs:
                r = replace(r, error=task.samples[p][0].error)
        if not r.ok:
            raise TensorGymError(f"the reference schedule of {workload.label} has no successful "
                                 f"record in {self.dataset.path} ({r.error.name})")
        return r.median

    def features(self, workload: Workload, configs: Sequence[Config], mode: str,
                 compute: Callable[[list[Config]], np.ndarray]) -> np.ndarray:
        """Feature rows of ``configs``: recorded configs' from the cache beside the dataset
        (computed and written there once), others by ``compute`` (kept in memory); modes the
        cache does not keep, all by ``compute``."""
        if mode not in CACHED_MODES:
            return compute(list(configs))
        task = self.task(workload)
        rows = task.rows.get(mode)
        if rows is None:
            rows = task.rows[mode] = self._task_rows(task, mode)
        index_of, key = task.index_of, task.space.key
        if len(configs) == 1:  # the env's observation: the hot path
            c = configs[0]
            p = index_of.get(c.index) if c.space_key == key else None
            if p is not None:
                return rows[p:p + 1].copy()
        extra = task.miss_rows.setdefault(mode, {})
        out = np.empty((len(configs), rows.shape[1]), np.float32)
        todo = []
        for i, c in enumerate(configs):
            p = index_of.get(c.index) if c.space_key == key else None
            if p is not None:
                out[i] = rows[p]
            elif (row := extra.get(c.index)) is not None and c.space_key == key:
                out[i] = row
            else:
                todo.append(i)
        if todo:
            fresh = compute([configs[i] for i in todo])
            if len(extra) + len(todo) > MAX_MISS_ROWS:
                extra.clear()
            for i, row in zip(todo, fresh):
                out[i] = row
                if configs[i].space_key == key:
                    extra[configs[i].index] = row
        return out

    def task(self, workload: Workload) -> ReplayTask:
        if workload is self._last[0]:
            return self._last[1]
        key = workload.key
        task = self._tasks.get(key)
        if task is None:
            task = self._tasks[key] = self._load_task(workload)
        self._last = (workload, task)
        return task

    # ---------------------------------------------------------------- internals

    def _load_task(self, workload: Workload) -> ReplayTask:
        space = space_for(workload, self.target)
        task = Task(workload.key, self.target, self.device)
        recs = self.dataset.by_task.get(task) or []
        if not recs and self.on_miss not in WORLD_MISS:
            self.dataset.task_records(task)  # raises, saying what the dataset has
        configs: list[Config] = []
        samples: list[list[_Sample]] = []
        index_of: dict[int, int] = {}
        parsed: dict[str, Optional[Config]] = {}
        skipped = 0
        cold: set[int] = set()
        for r in recs:
            if r.config_json not in parsed:
                try:
                    parsed[r.config_json] = (space.from_json(r.config_json)
                                             if r.space_name == space.name else None)
                except InvalidConfigError:
                    parsed[r.config_json] = None
            c = parsed[r.config_json]
            if c is None:
                skipped += 1
                continue
            if r.cold_only:  # no measurement of the kernel (Record.cold_only)
                cold.add(c.index)
                continue
            s = _Sample(tuple(r.costs), r.error, r.error_msg, r.build_time, r.run_time,
                        r.timestamp)
            if c.index not in index_of:
                index_of[c.index] = len(configs)
                configs.append(c)
                samples.append([])
            samples[index_of[c.index]].append(s)
        if skipped:
            warnings.warn(f"replay: {skipped} records of {workload.label} in "
                          f"{self.dataset.path} are not configs of today's space {space.label} "
                          "(the template changed since they were collected); left out",
                          stacklevel=3)
        cold -= set(index_of)
        if cold:
            warnings.warn(f"replay: {len(cold)} configs of {workload.label} in "
                          f"{self.dataset.path} have only records of a cold first run, no "
                          "measurement: they are misses (time them again with `tensorgym "
                          "dataset remeasure --db DB` on their device)", stacklevel=3)
        if not configs and self.on_miss not in WORLD_MISS:
            raise DatasetError(f"dataset {self.dataset.path} has no usable records of "
                               f"{workload.label} on {self.device}")
        choices = np.array([c.choices for c in configs], np.int64).reshape(-1, len(space.knobs))
        return ReplayTask(task, workload, space, configs, samples, index_of, choices,
                          workload.flops)

    def draw(self, task: ReplayTask, p: int, rng: Optional[random.Random] = None,
             n: Optional[int] = None) -> tuple[_Sample, tuple[float, ...]]:
        """One answer of recorded config ``p`` of ``task``: one of its records and its samples
        (resampled with replacement, ``n`` of them if given), drawn from ``rng`` (default:
        this replay's stream; the vector env gives each of its envs its own)."""
        rng = rng or self._rng
        options = task.samples[p]
        s = options[0] if len(options) == 1 else rng.choice(options)
        costs = s.costs
        if s.error == ErrorCode.NO_ERROR and (self.resample or n is not None) and costs:
            costs = tuple(rng.choices(costs, k=n or len(costs)))
        return s, costs

    def invalid_reason(self, task: ReplayTask, config: Config) -> Optional[str]:
        """Why a build of ``config`` would fail the target's limits (the template's own
        check), or None: a miss that fails it is answered as that failure, not estimated."""
        try:
            check_config(task.workload, config, self.target_info.limits())
        except InvalidConfigError as e:
            return str(e)
        return None

    def valid(self, task: ReplayTask, config: Config) -> bool:
        return self.invalid_reason(task, config) is None

    def predict_misses(self, task: ReplayTask, configs: Sequence[Config]) -> tuple[np.ndarray, np.ndarray]:
        """The world model's (seconds, predicted failure) for ``configs`` of ``task`` (none of
        them recorded, all valid): what ``on_miss="surrogate"`` answers, in one batch."""
        return self.predict_miss_indices(task, np.array([c.index for c in configs], np.int64))

    def predict_miss_indices(self, task: ReplayTask,
                             indices: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``predict_misses`` of config indices of ``task.space``, with no ``Config`` made."""
        world = self.world_model()
        pred = (world.draw_indices(task.workload, self.target, indices, self.world_seed)
                if self.on_miss == "draw" else
                world.predict_indices(task.workload, self.target, indices, spread=False))
        return np.asarray(pred.seconds, np.float64), pred.p_fail > FAIL_THRESHOLD

    def world_model(self) -> Any:
        """The world model of ``on_miss="surrogate"`` (loaded or fitted on the first call)."""
        if self._world is None:
            from .world.model import WorldModel

            spec = self._world_spec
            if isinstance(spec, WorldModel):
                self._world = spec
            elif spec is not None:
                self._world = WorldModel.load(spec)
            else:
                self._world = self._fitted_world()
        return self._world

    def _fitted_world(self) -> Any:
        """The world model of this dataset's records of the device, from the cache or fitted
        now (a few seconds for ten thousand records) and cached."""
        import shutil

        from .world.model import MANIFEST, WorldModel
        from .world.samples import task_samples

        draws = self.on_miss == "draw"
        name = f"world-{short_hash(self.device)}-{_world_code_hash()}{'-draws' if draws else ''}"
        found = self.cache.find(f"{name}/{MANIFEST}")
        if found is not None:
            try:
                return WorldModel.load(found.parent)
            except TensorGymError:
                pass  # damaged: fitted again below
        samples = task_samples(self.dataset, self.device)
        wm = WorldModel.fit(samples, seed=self._seed)
        if draws:
            wm.calibrate(samples, seed=self._seed)

        def save(tmp: Any) -> None:  # a directory, renamed into place whole
            if os.path.isdir(tmp):
                shutil.rmtree(tmp)
            wm.save(tmp, dataset_digest=self.dataset.digest, device=self.device)

        try:
            self.cache.write(name, save)
        except OSError as e:
            warnings.warn(f"replay: the world model is not cached ({e}); it is fitted again "
                          "next time", stacklevel=3)
        return wm

    def failure_code(self) -> ErrorCode:
        """The dataset's most common failure on this device (how a predicted failure is
        answered; BUILD_TIMEOUT where none failed)."""
        if not hasattr(self, "_failure_code"):
            codes = Counter(r.error for t, rs in self.dataset.by_task.items()
                            if t.device == self.device for r in rs if not r.ok)
            self._failure_code = (codes.most_common(1)[0][0] if codes
                                  else ErrorCode.BUILD_TIMEOUT)
        return self._failure_code

    def _recorded(self, task: ReplayTask, p: int, config: Config,
                  n: Optional[int] = None) -> MeasureResult:
        s, costs = self.draw(task, p, n=n)
        if self.speed != 1.0:
            costs = tuple(c / self.speed for c in costs)
        return ReplayResult(config, costs, s.error, s.error_msg, task.flops,
                            s.build_time, s.run_time, s.timestamp, cached=True,
                            source="recorded")

    def _answer_misses(self, task: ReplayTask, configs: list[Config], stop_slower_than: float,
                       early_stop: float) -> list[MeasureResult]:
        if self.on_miss == "measure":
            results = self._with_live(lambda m: m.measure(task.workload, configs,
                                                           stop_slower_than=stop_slower_than,
                                                           early_stop=early_stop))
            return [self._mark(r, "measured") for r in results]
        out: list[Optional[MeasureResult]] = [None] * len(configs)
        valid = []
        for i, c in enumerate(configs):
            why = self.invalid_reason(task, c)
            if why is None:
                valid.append(i)
            else:
                out[i] = ReplayResult(c, (), ErrorCode.INSTANTIATION_ERROR, why,
                                       task.workload.flops, cached=True, source="surrogate",
                                       extra={"surrogate": "check"})
        if self.on_miss == "nearest":
            for i in valid:
                out[i] = self._nearest(task, configs[i])
        elif valid:
            for i, r in zip(valid, self._surrogate(task, [configs[i] for i in valid])):
                out[i] = r
        return out  # type: ignore[return-value]

    def _nearest(self, task: ReplayTask, config: Config) -> MeasureResult:
        dims = np.maximum(np.array(task.space.dims) - 1, 1)
        diff = task.choices - np.array(config.choices)
        score = (diff != 0).sum(1) + (np.abs(diff) / dims).sum(1) / (len(dims) + 1)
        p = int(np.argmin(score))
        r = self._recorded(task, p, config)
        return replace(r, source="surrogate", extra={"surrogate": "nearest",
                                 "nearest": task.configs[p].index})

    def _surrogate(self, task: ReplayTask, configs: list[Config]) -> list[MeasureResult]:
        seconds, failed = self.predict_misses(task, configs)
        build, run = task.median_times() if task.configs else self._device_times()
        code = self.failure_code()
        return [ReplayResult(c, () if bad else (float(t) / self.speed,),
                             code if bad else ErrorCode.NO_ERROR,
                             "the world model predicts a failure" if bad else "",
                             task.workload.flops, build, run, 0.0, cached=True,
                             source="surrogate",
                             extra={"surrogate": "world-draw" if self.on_miss == "draw"
                                    else "world"})
                for c, t, bad in zip(configs, seconds, failed)]

    def _device_times(self) -> tuple[float, float]:
        """Median build and run seconds of the device's successful records (a task with none
        charges a miss these)."""
        if not hasattr(self, "_times"):
            ok = [r for t, rs in self.dataset.by_task.items() if t.device == self.device
                  for r in rs if r.ok]
            self._times = ((float(np.median([r.build_time for r in ok])),
                            float(np.median([r.run_time for r in ok]))) if ok else (0.0, 0.0))
        return self._times

    def _task_rows(self, task: ReplayTask, mode: str) -> np.ndarray:
        """Rows of every recorded config of ``task``, from the cache or computed and cached."""
        if mode not in CACHED_MODES:
            raise TensorGymError(f"replay keeps feature rows of modes {CACHED_MODES}, not {mode!r}")
        jsons = [c.to_json() for c in task.configs]
        name = f"features-{mode}-{_task_hash(task.task)}-{feature_code_hash()}.npz"
        rows = load_rows(self.cache, name, jsons)
        if rows is None:
            rows = self._compute_rows(task, task.configs, mode)
            save_rows(self.cache, name, jsons, rows)
        return rows

    def _compute_rows(self, task: ReplayTask, configs: list[Config], mode: str) -> np.ndarray:
        if self._featurizer is None:
            self._featurizer = Featurizer()
        return np.asarray(self._featurizer.featurize(task.workload, configs, mode,
                                                     space=task.space, n_jobs=default_jobs()),
                          np.float32)

    def _with_live(self, fn: Callable[[Any], Any]) -> Any:
        if self._live is None:
            self._live = LocalMeasurer(self.target, self.options, **self.runtime_kwargs)
        m = self._live
        if not self._live_checked:
            if m.device != self.device:
                raise TensorGymError(f"on_miss='measure' would mix devices: the dataset was "
                                     f"recorded on {self.device!r}, this machine is "
                                     f"{m.device!r}; use on_miss='surrogate' or 'nearest'")
            self._live_checked = True
        before = dict(m.seconds)
        try:
            return fn(m)
        finally:
            for k in self.seconds:
                self.seconds[k] += m.seconds[k] - before[k]

    @staticmethod
    def _mark(r: MeasureResult, source: str) -> MeasureResult:
        return replace(r, source=source)

    def _miss_error(self, task: ReplayTask, missing: list[Config]) -> ReplayMissError:
        c = missing[0]
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        return ReplayMissError(
            f"config {c.index} of {task.workload.label}{more} is not in dataset "
            f"{self.dataset.path} ({len(task.configs)} configs recorded on {self.device}): "
            f"on_miss='error'; use on_miss='nearest', 'surrogate' or 'measure' to answer it")


def _task_hash(task: Task) -> str:
    """The short hash of a task in the names of its cache files (the target is the dataset's:
    it is not in them)."""
    return short_hash(task.workload + "|" + task.device)


def _world_code_hash() -> str:
    """The short hash of the world model's code and of the features it reads (its cache key)."""
    root = Path(__file__).resolve().parent / "world"
    text = "".join(f.read_text() for f in sorted(root.glob("*.py")))
    return short_hash(text + feature_code_hash())


def _new_replay(*args: Any) -> ReplayMeasurer:
    return ReplayMeasurer(*args)


__all__ = ["ON_MISS", "SOURCES", "ReplayMeasurer", "ReplayMissError", "ReplayTask"]
