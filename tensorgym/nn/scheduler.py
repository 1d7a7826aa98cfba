"""The task scheduler of ``tensorgym tune-model``: one trial budget spent across a network's tasks.

A network's estimated latency is ``L = sum_i w_i * t_i``: ``w_i`` is how often task ``i`` occurs
in it (its weight in the corpus or task table), ``t_i`` the best time of one occurrence found so
far on this device (any record of the task in the database counts). Operators that are no task
(pooling, softmax, ...) are not in ``L``: it is the tunable share of the network's time.

The budget goes out in batches of ``batch`` trials. ``round-robin`` gives the tasks a batch in
turn. ``gradient`` (Ansor's task scheduler, Zheng et al., OSDI 2020, section 6) first gives every
task one batch (the warm-up), then each batch to the task with the largest estimated drop of
``L`` per trial, ``-w_i * dt_i/dk``, with

    dt_i/dk ~ alpha * (t_i(k_i) - t_i(k_i - d)) / d
            + (1 - alpha) * min(-t_i(k_i) / k_i, beta * C_i / V_i - t_i(k_i))

where ``k_i`` is the task's trials, ``d`` its last batch, ``C_i`` its FLOPs and ``V_i`` the best
FLOP/s of a task of the same operator kind (``conv2d``, ``depthwise``, ``dense``...): the first
term looks back at what the last batch gained, the second guesses what more trials can gain
(at most the whole time over the trials so far, or down to ``beta`` times the speed a similar
task already reached). alpha = 0.2 and beta = 2 are Ansor's; with probability ``epsilon``
(0.05) a random task gets the batch instead, so that no estimate starves a task forever.

Every batch is a tune of the agent (``xgb``: the reference tuner, whose cost model starts from
the records of the other tasks in the database: the transfer across tasks; its pretrained model
is shared by the batches through its ``pretrain_cache`` and fitted again only once the records
grew by half; its annealing chains, configs' features and annealing helper process are
carried from a task's batch to its next through ``carry``) told the task's records first. Its
records are tagged ``tune_model`` with the model's name, so that a second run with the same
database resumes: the trials already spent are counted from the database, and the budget is
the total over all runs.
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

import numpy as np
from tqdm import tqdm

from .. import registry
from ..errors import TensorGymError
from ..measure import Measurer
from ..records import Records
from ..search import tune
from ..session import TuningSession
from ..session import make_measurer
from ..task import Task
from ..templates import canonical_target, space_for
from ..workloads import Workload, get_workload
from .corpus import kind_of

SCHEDULERS = ("gradient", "round-robin")
ALPHA, BETA, EPSILON = 0.2, 2.0, 0.05


@dataclass
class TaskState:
    """One task of the schedule: its weight, trials spent (by this model's runs), best seconds
    of one occurrence (``inf`` until one succeeds) and the best after each batch."""

    workload: Workload
    weight: int
    trials: int = 0
    best: float = math.inf
    curve: list[tuple[int, float]] = field(default_factory=list)  # (trials, best) per batch
    exhausted: bool = False
    results: list = field(default_factory=list)  # this run's trials (the prior without records)

    @property
    def key(self) -> str:
        return self.workload.key

    @property
    def kind(self) -> str:
        return kind_of(self.key)

    @property
    def latency(self) -> float:
        return self.weight * self.best


@dataclass
class ScheduleReport:
    model: str
    scheduler: str
    device: str
    budget: int
    trials: int  # spent in all, over every run of this model in the database
    trials_now: int  # spent by this run
    latency: float  # the estimated latency (seconds) at the end
    curve: list[tuple[int, float]]  # (trials, estimated latency) after each batch of this run
    tasks: list[dict]


class TaskScheduler:
    """Spends ``budget`` trials across ``tasks`` ((workload, weight) pairs) of ``model`` on
    ``target``, as ``scheduler`` says (module docstring); records go to ``db`` (None: none, as
    on replay, where ``measurer`` is a ``ReplayMeasurer``: each task's prior is then the trials
    of this run)."""

    def __init__(self, model: str, tasks: Sequence[tuple["str | Workload", int]],
                 db: "str | os.PathLike | Records | None", budget: int, target: str = "cpu",
                 scheduler: str = "gradient", batch: int = 16, agent: str = "xgb",
                 seed: int = 0, threads: int = 0, ray: "str | bool | None" = None,
                 measurer: Optional[Measurer] = None) -> None:
        if scheduler not in SCHEDULERS:
            raise TensorGymError(f"unknown scheduler {scheduler!r}; use one of "
                                 f"{', '.join(SCHEDULERS)}")
        for name, v in (("budget", budget), ("batch", batch)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise TensorGymError(f"{name} must be a positive integer, got {v!r}")
        if not tasks:
            raise TensorGymError(f"model {model} has no tunable task")
        self.model, self.scheduler, self.budget, self.batch = model, scheduler, budget, batch
        self.target = canonical_target(target)
        self.agent, self.seed = agent, seed
        self.records = db if isinstance(db, Records) or db is None else Records(db)
        self._own_records = self.records is not db
        self._own_measurer = measurer is None
        self.measurer = measurer or make_measurer(self.target, num_threads=threads, ray=ray)
        self.rng = np.random.default_rng(seed)
        # an agent that declares it (the reference tuner) keeps its pretrained cost model here,
        # so that the batches of every task share it instead of each fitting one anew
        # and its annealing chains and configs' features per task (``carry``), so that a
        # task's next batch resumes its walk instead of starting one from random points
        declared = {o.name for o in registry.spec(agent).options}
        self._agent_options = {name: {} for name in ("pretrain_cache", "carry")
                               if name in declared}
        self.tasks = [TaskState(get_workload(w), int(n)) for w, n in tasks]
        if self.records is not None:
            self.records.restore_unsaved()
            for t in self.tasks:
                self._load(t)

    # ---------------------------------------------------------------- the schedule

    @property
    def spent(self) -> int:
        return sum(t.trials for t in self.tasks)

    def latency(self) -> float:
        """The estimated latency ``sum_i w_i t_i`` (inf while a task has no success)."""
        return sum(t.latency for t in self.tasks)

    def run(self, progress: bool = True) -> ScheduleReport:
        start = self.spent
        curve: list[tuple[int, float]] = []
        bar = tqdm(total=self.budget, initial=min(start, self.budget), unit=" trials",
                   desc=f"{self.scheduler} {self.model}", disable=not progress, smoothing=0)
        try:
            while self.spent < self.budget:
                task = self.next_task()
                if task is None:  # every space measured whole
                    break
                self.step_task(task, min(self.batch, self.budget - self.spent), bar)
                curve.append((self.spent, self.latency()))
                bar.set_postfix_str(f"est. latency {_ms(self.latency())}", refresh=False)
        finally:
            bar.close()
        return ScheduleReport(self.model, self.scheduler, self.measurer.device, self.budget,
                              self.spent, self.spent - start, self.latency(), curve,
                              [self._row(t) for t in self.tasks])

    def next_task(self) -> Optional[TaskState]:
        """The task that gets the next batch (None when every task is exhausted)."""
        open_ = [t for t in self.tasks if not t.exhausted]
        if not open_:
            return None
        if self.scheduler == "round-robin":
            return min(open_, key=lambda t: (t.trials, self.tasks.index(t)))
        cold = [t for t in open_ if t.trials == 0 or not math.isfinite(t.best)]
        if cold:  # the warm-up: every task's first batch, in order
            return cold[0]
        if self.rng.random() < EPSILON:
            return open_[int(self.rng.integers(len(open_)))]
        gains = [self.gain(t) for t in open_]
        return open_[int(np.argmax(gains))]

    def gain(self, t: TaskState) -> float:
        """``-w_i * dt_i/dk``: the estimated drop of the latency per trial given to ``t``."""
        k = max(t.trials, 1)
        before = t.curve[-2][1] if len(t.curve) >= 2 else t.best
        d = max(t.trials - (t.curve[-2][0] if len(t.curve) >= 2 else 0), 1)
        backward = (t.best - before) / d if math.isfinite(before) else 0.0
        speeds = [s.workload.flops / s.best for s in self.tasks
                  if s.kind == t.kind and math.isfinite(s.best) and s.best > 0]
        forward = -t.best / k
        if speeds:
            forward = min(forward, BETA * t.workload.flops / max(speeds) - t.best)
        return -t.weight * (ALPHA * backward + (1 - ALPHA) * forward)

    def step_task(self, t: TaskState, n: int, bar: Any = None) -> int:
        """Tune ``t`` for ``n`` more trials; returns the trials spent (0: its space is spent,
        and the task is marked exhausted)."""
        got = self._tune(t, n, bar)
        if got == 0:
            t.exhausted = True
        t.curve.append((t.trials, t.best))
        return got

    # ---------------------------------------------------------------- internals

    def _tune(self, t: TaskState, n: int, bar: Any) -> int:
        space = space_for(t.workload, self.target)
        task = Task(t.key, self.target, self.measurer.device)
        prior = self.records.results(task, space) if self.records is not None else list(t.results)
        session = TuningSession(t.workload, self.target, budget=n,
                                records=self.records if self.records is not None else False,
                                use_cache=self.records is not None, measurer=self.measurer)
        session.record_options = {"tune_model": {"model": self.model,
                                                 "scheduler": self.scheduler}}

        def step(_strategy: Any, results: list) -> None:
            if bar is not None:
                bar.update(len(results))

        try:
            results = tune(session, registry.make(self.agent, **self._agent_options), n,
                           seed=self.seed + self.spent, prior=prior, callbacks=[step])
        finally:
            session.close()
        # the prior holds every config measured before, so each result is a new trial (replay's
        # answers among them, which are "cached": nothing was timed now)
        t.trials += len(results)
        t.results.extend(results)
        ok = [r.median for r in results if r.ok]
        if ok:
            t.best = min(t.best, min(ok))
        return len(results)

    def _load(self, t: TaskState) -> None:
        """Trials this model's runs spent on ``t`` and its best, from the database."""
        for rec in self.records.query(t.key, self.target, self.measurer.device):
            if _is_ours(rec.options, self.model):
                t.trials += 1
            if rec.ok:
                t.best = min(t.best, rec.median)

    def _row(self, t: TaskState) -> dict:
        total = self.latency()
        return {"task": t.key, "kind": t.kind, "weight": t.weight, "trials": t.trials,
                "best_ms": t.best * 1e3 if math.isfinite(t.best) else None,
                "gflops": t.workload.flops / t.best / 1e9 if math.isfinite(t.best) else 0.0,
                "share": t.latency / total if math.isfinite(total) and total > 0 else None}

    def close(self) -> None:
        # what the agent kept for the next batches (the reference tuner's annealing helper
        # process): ended here, duck-typed, as tensorgym never imports the agents
        for item in list(self._agent_options.get("carry", {}).values()):
            if callable(getattr(item, "close", None)):
                item.close()
        self._agent_options.get("carry", {}).clear()
        if self._own_measurer:
            self.measurer.close()
        if self._own_records and self.records is not None:
            self.records.close()

    def __enter__(self) -> "TaskScheduler":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def model_tasks_of(model: str) -> list[tuple[str, int]]:
    """(task key, occurrences) of a built-in model, from the corpus file (no torch needed)."""
    from .corpus import load_corpus

    corpus = load_corpus()
    names = [m.name for m in corpus.models]
    if model not in names:
        raise TensorGymError(f"unknown model {model!r}; built-in: {', '.join(names)}")
    return [(t.key, dict(t.models)[model]) for t in corpus.tasks if model in dict(t.models)]


def _is_ours(options: str, model: str) -> bool:
    try:
        obj = json.loads(options) if options else {}
    except ValueError:
        return False
    tag = obj.get("tune_model") if isinstance(obj, dict) else None
    return isinstance(tag, dict) and tag.get("model") == model


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms" if math.isfinite(seconds) else "? ms (a task has no time yet)"


__all__ = ["SCHEDULERS", "ScheduleReport", "TaskScheduler", "TaskState", "model_tasks_of"]
