"""A tuning session: one task (workload, target, device) and everything its trials go through.

A :class:`TuningSession` owns the task's measurer (or shares one it was given), its featurizer,
records, history, budget, meter and the end-of-tune re-confirmation. ``tensorgym.search.tune``,
the agents, the leaderboard and the CLI work on a session; ``TensorSchedEnv`` is a Gymnasium
adapter over one. :func:`make_measurer` builds the measurer a session asks for: live on this
machine, on a Ray cluster, or a replay of a dataset.
"""
from __future__ import annotations

import math
import os
import time
from dataclasses import replace
from typing import Any, Optional, Sequence

from .dataset.replay import ReplayMeasurer
from .errors import TensorGymError
from .features import Featurizer, default_jobs
from .measure import LocalMeasurer, MeasureOptions, MeasureResult, Measurer
from .meter import Meter
from .processes.host import available_cpus
from .records import Records
from .space import Config, is_int
from .task import Task
from .templates import canonical_target, default_config, space_for
from .workloads import Workload, get_workload

MEASURE_MODES = ("live", "replay")


def make_measurer(target: str, measure: str = "live", *, options: Optional[MeasureOptions] = None,
                  num_threads: int = 0, ray: "str | bool | None" = None,
                  dataset: Any = None, on_miss: Optional[str] = None,
                  dataset_device: Optional[str] = None, workload: Optional[Workload] = None,
                  live: Optional[Measurer] = None, world: Any = None,
                  replay_speed: float = 1.0, world_seed: int = 0) -> Measurer:
    """The measurer of ``measure`` ("live": this machine, or the Ray cluster ``ray`` — True or
    "" for a local or default one, else its address; "replay": answers from ``dataset``, misses
    answered as ``on_miss`` says, with ``live`` for ``on_miss="measure"`` and ``world`` (a world
    model or its directory) for ``on_miss="surrogate"``, its seconds divided by
    ``replay_speed``: this machine's speed against the records', ``dataset.speed``; and
    ``world_seed``: the field of ``on_miss="draw"``'s draws). ``num_threads``: CPU threads of parallel loops (0: all)."""
    target = canonical_target(target)
    check_measure(measure, dataset, ray, on_miss, dataset_device, replay_speed, world_seed)
    if world is not None and measure != "replay":
        raise TensorGymError("world= is the world model of measure='replay' (its misses)")
    kwargs = runtime_kwargs(target, num_threads, here=ray in (None, False))
    options = options or MeasureOptions()
    if measure == "replay":
        return ReplayMeasurer(dataset, target, on_miss or "error", device=dataset_device, live=live,
                              options=options, runtime_kwargs=kwargs, workload=workload,
                              world=world, speed=replay_speed, world_seed=world_seed)
    if ray is None or ray is False:
        return LocalMeasurer(target, options, **kwargs)
    from .measure.ray import RayMeasurer  # imports ray, an optional dependency

    return RayMeasurer(target, options, address=ray if isinstance(ray, str) and ray else None,
                       **kwargs)


def check_measure(measure: str, dataset: Any = None, ray: "str | bool | None" = None,
                  on_miss: Optional[str] = None, dataset_device: Optional[str] = None,
                  replay_speed: float = 1.0, world_seed: int = 0) -> None:
    """Refuse a combination of ``make_measurer``'s choices that names no measurer, or an option
    that does not apply to the one it names."""
    if measure not in MEASURE_MODES:
        raise TensorGymError(f"unknown measure {measure!r}; use 'live' or 'replay'")
    if (measure == "replay") != (dataset is not None):
        raise TensorGymError("measure='replay' needs dataset=PATH, and dataset= needs "
                             "measure='replay'")
    if measure == "replay" and ray not in (None, False):
        raise TensorGymError("a replay measures nothing on a Ray cluster: drop ray=")
    if measure == "live" and (on_miss is not None or dataset_device is not None):
        raise TensorGymError("on_miss and dataset_device are options of measure='replay'; a "
                             "live session measures every config")
    if measure == "live" and replay_speed != 1.0:
        raise TensorGymError("replay_speed= scales a replay's answers: it needs measure='replay'")
    if world_seed != 0 and on_miss != "draw":
        raise TensorGymError("world_seed= picks the draws of on_miss='draw' (a replay's "
                             "misses); it means nothing without them")
    if ray not in (None, False, True) and not isinstance(ray, str):
        raise TensorGymError(f"ray is an address ('auto', host:port), True or None, not "
                             f"{ray!r}")


def runtime_kwargs(target: str, num_threads: int = 0, here: bool = True) -> dict:
    """The runtime arguments of ``num_threads`` CPU threads (0: all cores; CPU only). ``here``:
    the kernels run on this machine, so at most as many threads as its cores this process may
    use (a Ray cluster's nodes may have more)."""
    cores = available_cpus()
    if not is_int(num_threads) or num_threads < 0 or (here and num_threads > cores):
        limit = f"0 (all cores) to {cores}, the cores this process may use" if here else \
            "0 (all cores) or more"
        raise TensorGymError(f"num_threads must be an integer from {limit}; got "
                             f"{num_threads!r}")
    return {"num_threads": int(num_threads)} if canonical_target(target) == "cpu" else {}


def _check_options(records: Any, measurer: Any, measure_options: Any, use_cache: Any,
                   confirm_best: Any, early_stop: Any) -> None:
    """Refuse a session option of the wrong kind, in one line that says what is allowed."""
    if not (records is None or records is False or isinstance(records, (str, os.PathLike,
                                                                         Records))):
        raise TensorGymError(f"records is a path, a Records, None (the default database) or "
                             f"False (none), not {type(records).__name__} {records!r}")
    if measurer is not None and not isinstance(measurer, Measurer):
        raise TensorGymError(f"measurer is a tensorgym Measurer (LocalMeasurer, RayMeasurer, "
                             f"ReplayMeasurer), not {type(measurer).__name__}")
    if measure_options is not None and not isinstance(measure_options, MeasureOptions):
        raise TensorGymError(f"measure_options is a tensorgym.measure.MeasureOptions, not "
                             f"{type(measure_options).__name__} {measure_options!r}")
    for name, value in (("use_cache", use_cache), ("confirm_best", confirm_best)):
        if not isinstance(value, bool):
            raise TensorGymError(f"{name} is True or False, not {value!r}")
    if isinstance(early_stop, bool) or not isinstance(early_stop, (int, float)) or not (
            early_stop == 0 or 1 <= early_stop < math.inf):
        raise TensorGymError(f"early_stop must be 0 (off) or a ratio >= 1, got {early_stop!r}")


class TuningSession:
    """One task's tuning: ``measure`` builds and times configs (each one a trial, written to
    ``records``), keeping ``history``, the confirmed ``best`` and the ``virtual_time`` the trials
    took; ``featurize`` gives their loop-AST features; ``reconfirm`` times the best again at the
    end. ``meter`` counts the seconds of build, run and featurize (agents add model and search).

    ``measurer``: a measurer to share (the session does not close it); without one the session
    makes its own on the first measurement, as ``measure`` / ``ray`` / ``dataset`` /
    ``on_miss`` / ``dataset_device`` / ``world`` / ``replay_speed`` / ``world_seed`` /
    ``measure_options`` / ``num_threads`` say (:func:`make_measurer`). A replay's is made at
    once (a dataset without this task fails here), with ``measurer`` as the live one that ``on_miss="measure"`` measures with.
    ``records``: a path, a ``Records``, ``None`` (the default database under the user cache dir)
    or ``False`` (keep nothing). ``use_cache``: serve configs already in the records instead of
    measuring them again. ``budget``: the most trials (None: no limit); ``budget_seconds``: the
    most virtual seconds. ``confirm_best``: time a would-be best again before it counts.
    ``early_stop`` (a ratio, 0: off): stop timing a kernel once it is surely that much slower
    than the best or the batch's fastest (``Measurer.measure``).
    """

    def __init__(self, workload: "str | Workload" = "conv2d-C6", target: str = "cpu", *,
                 measurer: Optional[Measurer] = None, records: Any = None,
                 budget: Optional[int] = None, budget_seconds: Optional[float] = None,
                 use_cache: bool = False, confirm_best: bool = True, early_stop: float = 3.0,
                 measure: str = "live", ray: "str | bool | None" = None, dataset: Any = None,
                 on_miss: Optional[str] = None, dataset_device: Optional[str] = None,
                 measure_options: Optional[MeasureOptions] = None,
                 num_threads: int = 0, world: Any = None, replay_speed: float = 1.0,
                 world_seed: int = 0) -> None:
        self.workload = get_workload(workload)
        self.target = canonical_target(target)
        if budget is not None and (not is_int(budget) or budget < 1):
            raise TensorGymError(f"budget must be an integer >= 1, got {budget!r}")
        if budget_seconds is not None and not (isinstance(budget_seconds, (int, float))
                                               and 0 < budget_seconds < math.inf):
            raise TensorGymError(f"budget_seconds must be a positive number, got "
                                 f"{budget_seconds!r}")
        _check_options(records, measurer, measure_options, use_cache, confirm_best, early_stop)
        if measurer is not None and measurer.target != self.target:
            raise TensorGymError(f"measurer is for {measurer.target}, session for {self.target}")
        self.budget = None if budget is None else int(budget)
        self.budget_seconds = budget_seconds
        self.use_cache, self.confirm_best = use_cache, confirm_best
        self.early_stop = float(early_stop)
        self.space = space_for(self.workload, self.target)
        self.reference_config = default_config(self.workload, self.target)
        self.record_options: dict = {}  # kept with each record written (e.g. by a collection)
        self._make = dict(measure=measure, options=measure_options or MeasureOptions(),
                          num_threads=num_threads, ray=ray, dataset=dataset, on_miss=on_miss,
                          dataset_device=dataset_device, world=world, replay_speed=replay_speed,
                          world_seed=world_seed)
        runtime_kwargs(self.target, num_threads, here=ray in (None, False))  # fails here
        self._measurer, self._own_measurer = measurer, measurer is None
        if measure == "replay":
            self._measurer = make_measurer(self.target, workload=self.workload, live=measurer,
                                           **self._make)
            self._own_measurer = True  # it closes the live one only if it made it itself
            self._measurer.task(self.workload)  # a dataset without this task fails here
        else:
            check_measure(measure, dataset, ray, on_miss, dataset_device, replay_speed,
                          world_seed)
            if world is not None:
                raise TensorGymError("world= is the world model of measure='replay' (its "
                                     "misses)")
        self.records = (None if records is False else
                        records if isinstance(records, Records) else Records(records))
        self._reference_seconds: Optional[float] = None
        self.meter = Meter()
        self.featurizer = Featurizer()  # its row cache and helper processes are this session's
        self.reset()

    # ---------------------------------------------------------------- state

    def reset(self, seed: Optional[int] = None) -> None:
        """Start a new session of the same task: no history, no best, no time spent (the
        records, the reference and the meter stay). ``seed`` restarts a replay's draws."""
        self.history: list[MeasureResult] = []
        self.best: Optional[MeasureResult] = None
        self.virtual_time = 0.0  # build + run seconds of this session's trials, as measured
        if seed is not None and self._measurer is not None:
            self._measurer.reseed(seed)

    @property
    def measurer(self) -> Measurer:
        if self._measurer is None:
            self._measurer = make_measurer(self.target, workload=self.workload, **self._make)
        return self._measurer

    @property
    def device(self) -> str:
        return self.measurer.device

    @property
    def task(self) -> Task:
        """The task: this workload on this target and the measurer's device."""
        return Task(self.workload.key, self.target, self.device)

    @property
    def trials(self) -> int:
        return len(self.history)

    @property
    def trials_left(self) -> "int | None":
        """Trials the budget still allows (None: no trial budget)."""
        return None if self.budget is None else max(0, self.budget - self.trials)

    @property
    def spent(self) -> bool:
        """Whether the trial or the time budget is spent."""
        return (self.budget is not None and self.trials >= self.budget) or (
            self.budget_seconds is not None and self.virtual_time >= self.budget_seconds)

    # ---------------------------------------------------------------- trials

    def featurize(self, configs: Sequence[Config], mode: str = "relation",
                  n_jobs: Optional[int] = None, loop_names: bool = False):
        """Features of ``configs`` in ``mode``; big batches are lowered on ``n_jobs`` processes
        (default: every core this process may use); ``loop_names`` adds the loop variable names
        to ``ast`` trees (vanilla TreeGRU). A replay's recorded configs' rows come with it."""
        def compute(cs: list[Config]):  # metered: rows a measurer answers itself are not
            with self.meter.time("featurize"):
                jobs = default_jobs() if n_jobs is None else n_jobs
                return self.featurizer.featurize(self.workload, cs, mode, space=self.space,
                                                 n_jobs=jobs, loop_names=loop_names)

        if loop_names or self._measurer is None:  # no measurer is started to featurize
            return compute(list(configs))
        return self._measurer.features(self.workload, configs, mode, compute)

    def measure(self, configs: Sequence[Config]) -> list[MeasureResult]:
        """Build and time ``configs``; every config counts as a trial and goes to the records."""
        configs = list(configs)
        for c in configs:  # a config of exactly this space, not merely of one with its name
            self.space.validate(c)
        return self.measure_valid(configs)

    def _recorded(self, config: Config) -> Any:
        """The task's record of ``config`` under any spelling it was written with (a record
        made before a knob was added lacks it), or None."""
        for text in self.space.spellings(config):
            rec = self.records.lookup(self.task, text)
            if rec is not None:
                return rec
        return None

    def measure_valid(self, configs: list[Config]) -> list[MeasureResult]:
        """``measure`` of configs known to be of this space (an env's own actions)."""
        results: list[Optional[MeasureResult]] = [None] * len(configs)
        if self.use_cache and self.records is not None:
            with self.meter.time("other"):
                for i, c in enumerate(configs):
                    rec = self._recorded(c)
                    if rec is not None:
                        results[i] = MeasureResult(c, rec.costs, rec.error, rec.error_msg,
                                                   self.workload.flops, rec.build_time,
                                                   rec.run_time, rec.timestamp, cached=True)
        todo = [i for i, r in enumerate(results) if r is None]
        if todo:
            bound = self.early_stop * self.best.median if self.early_stop and self.best else 0.0
            fresh = self._measure_now([configs[i] for i in todo], stop_slower_than=bound,
                                      early_stop=self.early_stop)
            if self.records is not None and not all(r.cached for r in fresh):
                with self.meter.time("other"):
                    self.records.add_many(self.task, fresh,
                                          options={"measurer": self.measurer.describe(),
                                                   **self.record_options},
                                          workload=self.workload)
            for i, r in zip(todo, fresh):
                results[i] = r
        for r in results:
            self.history.append(r)
            self.virtual_time += r.build_time + r.run_time
            if r.ok and (self.best is None or r.gflops > self.best.gflops):
                self.best = r
        return results  # type: ignore[return-value]

    def _measure_now(self, configs: list[Config], **kwargs: Any) -> list[MeasureResult]:
        """``measurer.measure`` (and the confirmation of new bests), its build and timing
        phases charged to ``meter``."""
        m = self.measurer
        before = dict(m.seconds)
        fresh = m.measure(self.workload, configs, **kwargs)
        if self.confirm_best:
            fresh = self._confirm_new_bests(fresh)
        if not m.timed and m.seconds == before:  # all replayed: nothing built or run
            return fresh
        self._charge(before, [r for r in fresh if not r.cached])  # replay built nothing
        return fresh

    def _charge(self, before: dict, built: list[MeasureResult]) -> None:
        """Charge the measurer's build and run seconds since ``before`` (a copy of its
        ``seconds``) to the meter, with the build seconds of ``built``."""
        m = self.measurer
        self.meter.add_measurement(m.seconds["build"] - before["build"],
                                   m.seconds["run"] - before["run"], built)

    def _confirm_new_bests(self, fresh: list[MeasureResult]) -> list[MeasureResult]:
        """Re-time each result that would become the best, until the batch's fastest
        unconfirmed result no longer beats the best: the best is always a confirmed figure,
        never the luckiest of many noisy samples."""
        fresh = list(fresh)
        best = self.best.gflops if self.best else 0.0
        while True:
            open_ = [i for i, r in enumerate(fresh) if r.ok and not r.confirmed
                     and r.gflops > best]
            if not open_:
                return fresh
            i = max(open_, key=lambda j: fresh[j].gflops)
            fresh[i] = self.measurer.confirm(self.workload, fresh[i])
            if fresh[i].ok:
                best = max(best, fresh[i].gflops)

    # ---------------------------------------------------------------- the reference

    @property
    def reference_seconds(self) -> float:
        """The reference schedule's median seconds: known to a replay, else cached in the
        records database per device, else measured once."""
        if self._reference_seconds is None:
            self._reference_seconds = self.measurer.reference_seconds(self.workload,
                                                                      self.reference_config)
        if self._reference_seconds is None:
            cfg_json = self.reference_config.to_json()
            cached = None
            for text in (self.space.spellings(self.reference_config)
                         if self.records is not None else ()):
                cached = self.records.reference(self.task, text)
                if cached is not None:
                    break
            if cached is not None and not (math.isfinite(cached) and cached > 0):
                cached = None  # a damaged database: measure the reference again
            if cached is None:
                r = self._measure_now([self.reference_config])[0]
                if not r.ok:
                    raise TensorGymError(f"the reference schedule of {self.workload.label} failed "
                                         f"on {self.target}: {r.error.name} {r.error_msg}")
                cached = r.median
                if self.records is not None:
                    self.records.set_reference(self.task, cfg_json, cached)
            self._reference_seconds = cached
        return self._reference_seconds

    @property
    def reference_gflops(self) -> float:
        return self.workload.flops / self.reference_seconds / 1e9

    # ---------------------------------------------------------------- the end of a tune

    def reconfirm(self, results: Sequence[MeasureResult], top: int = 3, rounds: int = 3,
                  tolerance: float = 0.05, max_sets: int = 3, slow: float = 0.2,
                  slow_retakes: int = 2, slow_wait: float = 2.0) -> Optional[MeasureResult]:
        """The best of ``results`` as this machine runs it now (docs/measurement.md):

        1. the ``top`` fastest distinct configs are confirmed once each;
        2. the fastest of those is timed in a set of ``rounds`` confirmations, samples pooled;
        3. a set more than ``tolerance`` off the config's figure in ``results`` is taken again,
           up to ``max_sets`` sets, until one agrees with that figure or with the set before it;
           where none agrees, the median set is reported;
        4. a set during which the calibration kernel ran more than ``slow`` slower than usual
           (``Measurer.slowdown``) is set aside and taken again after ``slow_wait`` seconds, up
           to ``slow_retakes`` times.

        The result becomes ``best``, flagged ``extra["reconfirmed"]``, with ``extra["rounds"]``,
        ``"sets"`` and ``"set_gflops"`` (several sets), ``"slow_retakes"`` and
        ``"set_slowdowns"``. Not trials, nor records; the time goes to the meter. With a
        measurer that times nothing now (a replay), or when every re-timing fails: the fastest
        of ``results`` as it is."""
        ranked: dict[int, MeasureResult] = {}
        for r in sorted((r for r in results if r.ok), key=lambda r: -r.gflops):
            ranked.setdefault(r.config.index, r)
        candidates = list(ranked.values())[:max(1, top)]
        if not candidates:
            return None
        m = self.measurer
        if not m.timed:
            return candidates[0]
        before = dict(m.seconds)
        again = [r for r in (m.confirm(self.workload, c) for c in candidates) if r.ok]
        if again:  # the chosen one's own timing, not the luckiest of several
            chosen = max(again, key=lambda r: r.gflops)
            sets: list[MeasureResult] = []
            settled, retakes, slowdowns = False, 0, []
            while len(sets) < max(1, max_sets) and not settled:
                mark = m.calibrations()
                final = self._rounds(chosen, max(1, rounds))
                if final is None:
                    break
                slowdown = m.slowdown(mark)
                slowdowns.append(slowdown)
                if slowdown is not None and slowdown > 1.0 + slow and retakes < slow_retakes:
                    retakes += 1
                    time.sleep(slow_wait)
                    continue
                sets.append(final)
                marks = [ranked[chosen.config.index].gflops] + [r.gflops for r in sets[-2:-1]]
                settled = any(abs(final.gflops / x - 1.0) <= tolerance for x in marks if x > 0)
            if sets:
                pick = sets[-1] if settled else sorted(sets, key=lambda r: r.gflops)[
                    (len(sets) - 1) // 2]
                extra = {**pick.extra, **({"sets": len(sets), "set_gflops": [
                    r.gflops for r in sets]} if len(sets) > 1 else {}),
                    **({"slow_retakes": retakes} if retakes else {}),
                    "set_slowdowns": slowdowns}
                again = [replace(pick, extra=extra)]
        self._charge(before, [])
        if not again:
            return candidates[0]
        best = max(again, key=lambda r: r.gflops)
        self.best = replace(best, extra={**best.extra, "reconfirmed": True})
        return self.best

    def _rounds(self, chosen: MeasureResult, rounds: int) -> Optional[MeasureResult]:
        """``chosen`` confirmed ``rounds`` times, their samples together (None: all failed)."""
        final = [r for r in (self.measurer.confirm(self.workload, chosen)
                             for _ in range(rounds)) if r.ok]
        if not final:
            return None
        return replace(final[0], costs=tuple(c for r in final for c in r.costs),
                       run_time=sum(r.run_time for r in final),
                       extra={**final[0].extra, "rounds": len(final)})

    # ---------------------------------------------------------------- life

    def close(self) -> None:
        if self._own_measurer and self._measurer is not None:
            self._measurer.close()
            self._measurer = None
        self.featurizer.close()

    def __enter__(self) -> "TuningSession":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __getstate__(self) -> dict:
        # Processes do not travel: the copy makes its own measurer, with the same settings, when
        # it first measures (a shared one stays with its owner). Records reconnects itself.
        state = self.__dict__.copy()
        m = state["_measurer"]
        if m is not None and m.timed:  # a replay copies itself (it reloads its dataset)
            if not self._own_measurer:
                state["_make"] = {**self._make, "options": m.options,
                                  "num_threads": m.runtime_kwargs.get("num_threads", 0)}
            state["_measurer"] = None
        state["_own_measurer"] = True
        return state

