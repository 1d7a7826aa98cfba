"""The tensor-program scheduling environment."""
from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Any, Optional, Sequence

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from ..errors import InvalidConfigError, StepError, TensorGymError
from ..features import Featurizer
from ..hardware.measure import Measurer, MeasureOptions
from ..hardware.result import MeasureResult
from ..meter import Meter
from ..records import Records
from ..space import Config, is_int, short_repr
from ..task import Task
from ..templates import canonical_target, default_config, space_for
from ..workloads import Workload, get_workload

REWARDS = ("log_speedup", "best_improvement")
AST_MAX_NODES = 64  # loop ASTs of the templates have at most ~45 statement nodes


def _ast_node_features() -> int:
    from ..features.ast import NODE_TYPES
    from ..features.context import N_CONTEXT

    return len(NODE_TYPES) + N_CONTEXT


AST_NODE_FEATURES = _ast_node_features()


def pad_ast(tree: dict) -> dict:
    """The ``ast`` observation: a tree of ``tensorgym.features`` mode ``ast`` padded to
    ``AST_MAX_NODES`` nodes (pre-order, so truncation keeps the outer loops); ``parent`` is -1
    for the root and for padding, ``mask`` marks real nodes."""
    n = min(len(tree["parent"]), AST_MAX_NODES)
    feats = np.zeros((AST_MAX_NODES, AST_NODE_FEATURES), np.float32)
    feats[:n] = tree["node_features"][:n]
    parent = np.full(AST_MAX_NODES, -1, np.int64)
    parent[:n] = tree["parent"][:n]
    mask = np.zeros(AST_MAX_NODES, np.int8)
    mask[:n] = 1
    return {"node_features": feats, "parent": parent, "mask": mask}


ACTION_MODES = ("config", "knob")


class TensorSchedEnv(gym.Env):
    """
    ## Description
    Find a fast schedule for one tensor operator (``workload``) on one ``target``. Each trial
    builds the program a schedule describes, checks it against NumPy and times it on this
    machine's hardware; an episode is one tuning session with a budget of ``budget`` trials.
    This is the problem of "Learning to Optimize Tensor Programs" (Chen et al., NeurIPS 2018).

    ## Action Space
    * ``action_mode="config"`` (default): ``MultiDiscrete(space.dims)``; one step proposes a whole
      schedule (one option index per knob), which is built and measured.
      **Invalid actions raise** ``InvalidConfigError`` before anything is built: an action must
      be a 1-D integer array of shape ``(len(space.knobs),)`` or a list/tuple of that many exact
      integers (Python or NumPy ints; not bools, floats, strings or nested lists), each in
      range. Nothing is measured or counted and the episode goes on as before the call.
    * ``action_mode="knob"``: ``Discrete(max(space.dims))``; one step sets the next knob, and the
      program is measured when the last knob is set. ``action_masks()`` gives the valid options
      of the knob to set (for MaskablePPO).
      **Invalid actions get** ``failure_reward``: an action that is not one exact integer (a
      Python or NumPy int, or a 0-d integer array) or is out of range for the knob to set sets
      nothing, returns ``failure_reward`` with ``info["error"] == "INVALID_ACTION"`` (the reason
      in ``info["error_msg"]``), and counts toward ``max_invalid_actions`` per episode.
    No exception other than a ``TensorGymError`` subclass leaves ``step``: failures outside the
    action (measurement machinery, records database) raise ``StepError`` with the original
    exception as its cause.

    ## Observation Space
    ``Box`` of loop-AST features of the program just built (``obs_mode``: ``relation`` — the
    paper's context-relation features, the default —, ``context`` or ``config``). They are pure
    functions of the program, never of its measured time. In ``knob`` mode the observation also
    carries the partial choices (``(choice + 1) / size``, 0 for a knob not set yet).
    ``obs_mode="ast"`` gives a ``Dict`` for tree models: ``node_features`` (64 x 72: node-type
    one-hot and the loop's context vector, statement nodes in pre-order), ``parent`` (-1 for the
    root and padding) and ``mask`` (1 for real nodes), plus ``partial`` in knob mode.
    ``reset`` observes the reference schedule.

    ## Rewards
    * ``log_speedup`` (default): ``log(t_ref / t)``, with ``t_ref`` the time of the reference
      schedule (``templates.default_config``), measured once per device and cached in the records
      database.
    * ``best_improvement``: increase of ``log`` best-so-far throughput, starting from the
      reference; an episode's return is the log speedup of the best program found (0 if none
      beats the reference).
    A program that fails (invalid config, compile error, crash, hang, wrong result) gets
    ``failure_reward`` (default -5 for ``log_speedup``, i.e. worse than 100x slower than the
    reference; 0 for ``best_improvement``). An invalid action in ``knob`` mode gets
    ``failure_reward`` too and sets nothing. Intermediate knob steps give 0.

    ## Episode End
    Terminates when ``budget`` trials have been measured. In ``knob`` mode the episode is
    truncated by the step whose invalid action is the episode's ``max_invalid_actions``-th
    (default ``budget * len(space.knobs)``), so at most ``budget * len(space.knobs) +
    max_invalid_actions`` steps end any episode. A step after the end raises
    ``TensorGymError`` (call ``reset()``).

    ## Arguments
    ``workload`` (registered name, shape key, or ``Workload``), ``target`` (cpu/llvm, opencl,
    cuda), ``budget`` (200), ``reward``, ``obs_mode``, ``action_mode``, ``records`` (path,
    ``Records``, or ``None`` for the default database under the user cache dir; ``False`` keeps
    nothing), ``use_cache`` (serve configs already in the database instead of re-measuring),
    ``measure_options`` (``MeasureOptions``), ``measurer`` (share one between envs),
    ``failure_reward``, ``max_invalid_actions`` (knob mode, see Episode End), ``num_threads``
    (CPU threads of parallel loops; 0 = all cores), ``confirm_best`` and ``early_stop`` (below).

    ## Measurements: confirmed bests, early stops
    A result that would become the best is timed again with ``confirm_repeat`` samples
    (``confirm_best``, default on) and keeps only those samples (``info["confirmed"]``): ``best`` and
    ``info["best_gflops"]`` are confirmed figures, not the luckiest of many noisy samples.
    ``reconfirm`` times the top configs once more at the end of a tune (``tensorgym tune`` reports
    that figure): a best confirmed minutes earlier shows the machine's speed of then.
    With ``early_stop`` = r (default 3; 0 turns it off, as datasets should), timing a kernel
    stops once even its fastest sample is over r times the best's median, or over r times the
    fastest median of the kernels timed before it in the same batch (so the first batch, before
    any best, and the batches of random search or a GA stop early too). Samples past
    ``repeat`` (while their spread is over ``target_cv``) go only to a kernel whose fastest sample
    beats that best or batch fastest (``worker.contends``): a loser needs no precise time, and a
    new best is confirmed anyway. A kernel whose checked
    (cold) first run alone is over twice that bound keeps that run as its one sample
    (``worker.cold_run_lost``). Its time is a real sample, from fewer samples, flagged
    ``info["early_stop"]``; rewards treat it like any time (it is far from the best either way).
    A first run that goes on past that and past ``worker.KILL_AFTER_S`` (0.05 s for a worker
    forked from a zygote, as on the CPU; 0.25 s for one started anew) is stopped by replacing
    the worker: its time is the seconds it had run, a lower bound, and since its output was never
    compared with NumPy it is flagged ``info["unchecked"]`` too.
    ``info["drift"]`` flags a measurement taken while the machine's speed moved (see
    ``MeasureOptions.calibrate``).

    ## Replay: recorded measurements and virtual time
    ``measure="replay"`` with ``dataset`` (a records database or its export, or a
    ``tensorgym.dataset.Dataset``) answers every trial from the dataset instead of the hardware
    (``tensorgym.dataset.replay``): a recorded config gets one of its records, its samples drawn
    with the env's seed (``reset(seed=...)``); a config the dataset lacks is answered as
    ``on_miss`` says (``error``, ``nearest``, ``surrogate``, ``measure``). ``info["source"]`` is
    ``recorded``, ``surrogate`` or ``measured``; ``info["virtual_time"]`` adds up the build and run
    seconds the episode's trials took when they were measured (live: as they are measured), and
    ``budget_seconds`` ends the episode once it is spent, as ``budget`` does after that many
    trials. Nothing answered from the dataset is written to ``records`` as a measurement.
    ``dataset_device`` picks the device to replay in a dataset of several.

    The env pickles (``pickle.dumps(env)``, and so ``AsyncVectorEnv``): the copy keeps the
    episode (history, best, partial knobs, ``np_random``), reconnects to the same records
    database, and starts its own measurer (same target and options) when it first measures.

    ``env.unwrapped`` exposes ``space``, ``featurize(configs)``, ``measure(configs)``, ``history``,
    ``best`` and ``reference_gflops`` for search agents, and ``meter`` (``tensorgym.meter.Meter``:
    seconds in build, run, featurize, model and search, over the env's life, across ``reset()``;
    the env fills the first three, agents the others).

    ## Version History
    * v0: first version.
    """

    metadata = {"render_modes": ["ansi"], "render_fps": 4}

    def __init__(self, workload: "str | Workload" = "conv2d-C6", target: str = "cpu",
                 budget: int = 200, reward: str = "log_speedup", obs_mode: str = "relation",
                 action_mode: str = "config", records: Any = None, use_cache: bool = False,
                 measure_options: Optional[MeasureOptions] = None,
                 measurer: Optional[Measurer] = None, failure_reward: Optional[float] = None,
                 num_threads: int = 0, render_mode: Optional[str] = None,
                 max_invalid_actions: Optional[int] = None, confirm_best: bool = True,
                 early_stop: float = 3.0, measure: str = "live", dataset: Any = None,
                 on_miss: str = "error", budget_seconds: Optional[float] = None,
                 dataset_device: Optional[str] = None) -> None:
        from ..features import FEATURE_MODES, feature_length

        self.workload = get_workload(workload)
        self.target = canonical_target(target)
        if reward not in REWARDS:
            raise TensorGymError(f"unknown reward {reward!r}; use one of {REWARDS}")
        if action_mode not in ACTION_MODES:
            raise TensorGymError(f"unknown action_mode {action_mode!r}; use one of {ACTION_MODES}")
        if obs_mode not in FEATURE_MODES:
            raise TensorGymError(f"unknown obs_mode {obs_mode!r}; use one of {FEATURE_MODES}")
        if not is_int(budget) or budget < 1:
            raise TensorGymError(f"budget must be an integer >= 1, got {budget!r}")
        self.budget = int(budget)
        self.reward_kind = reward
        self.obs_mode = obs_mode
        self.action_mode = action_mode
        self.use_cache = use_cache
        self.confirm_best = confirm_best
        if not (early_stop == 0 or early_stop >= 1):
            raise TensorGymError(f"early_stop must be 0 (off) or a ratio >= 1, got {early_stop!r}")
        self.early_stop = float(early_stop)
        self.failure_reward = (failure_reward if failure_reward is not None
                               else (-5.0 if reward == "log_speedup" else 0.0))
        self.render_mode = render_mode
        self.space = space_for(self.workload, self.target)
        self.reference_config = default_config(self.workload, self.target)
        if measurer is not None and measurer.target != self.target:
            raise TensorGymError(f"measurer is for {measurer.target}, env for {self.target}")
        self._measurer = measurer
        self._own_measurer = measurer is None
        self._measure_options = measure_options or MeasureOptions()
        self._runtime_kwargs = {"num_threads": num_threads} if self.target == "cpu" else {}
        self._init_replay(measure, dataset, on_miss, budget_seconds, dataset_device)
        self.records = (None if records is False else
                        records if isinstance(records, Records) else Records(records))
        self._reference_seconds: Optional[float] = None
        self._obs_cache = None
        self._configs: dict = {}  # action bytes -> config (config mode)
        self._json: dict = {}  # config index -> its JSON (info["config"])
        self.meter = Meter()
        self.featurizer = Featurizer()  # its row cache and helper processes are this env's

        n_knobs = len(self.space.knobs)
        if max_invalid_actions is None:
            max_invalid_actions = self.budget * n_knobs
        if not is_int(max_invalid_actions) or max_invalid_actions < 1:
            raise TensorGymError(f"max_invalid_actions must be an integer >= 1, got "
                                 f"{max_invalid_actions!r}")
        self.max_invalid_actions = int(max_invalid_actions)
        self._action_shape = (n_knobs,)
        if action_mode == "config":
            self.action_space = spaces.MultiDiscrete(np.array(self.space.dims, dtype=np.int64))
        else:
            self.action_space = spaces.Discrete(max(self.space.dims))
        # Features are log-scaled magnitudes: non-negative and finite.
        big = np.finfo(np.float32).max
        partial = n_knobs if action_mode == "knob" else 0
        if obs_mode == "ast":
            obs = {"node_features": spaces.Box(0.0, big, (AST_MAX_NODES, AST_NODE_FEATURES),
                                               np.float32),
                   "parent": spaces.Box(-1, AST_MAX_NODES - 1, (AST_MAX_NODES,), np.int64),
                   "mask": spaces.Box(0, 1, (AST_MAX_NODES,), np.int8)}
            if partial:
                obs["partial"] = spaces.Box(0.0, 1.0, (partial,), np.float32)
            self.observation_space = spaces.Dict(obs)
        else:
            self.observation_space = spaces.Box(0.0, big, (feature_length(obs_mode) + partial,),
                                                np.float32)
        self._reset_state()

    # ---------------------------------------------------------------- public API for agents

    def _init_replay(self, measure: str, dataset: Any, on_miss: str,
                     budget_seconds: Optional[float], device: Optional[str]) -> None:
        if measure not in ("live", "replay"):
            raise TensorGymError(f"unknown measure {measure!r}; use 'live' or 'replay'")
        if (measure == "replay") != (dataset is not None):
            raise TensorGymError("measure='replay' needs dataset=PATH, and dataset= needs "
                                 "measure='replay'")
        if budget_seconds is not None and not (isinstance(budget_seconds, (int, float))
                                               and 0 < budget_seconds < math.inf):
            raise TensorGymError(f"budget_seconds must be a positive number, got "
                                 f"{budget_seconds!r}")
        self.measure_mode = measure
        self.budget_seconds = budget_seconds
        self.record_options: dict = {}  # kept with each record written (e.g. by a collection)
        self._replay = None
        if measure == "replay":
            from ..dataset.replay import ReplayMeasurer

            self._replay = ReplayMeasurer(dataset, self.target, on_miss, device=device,
                                          live=self._measurer, options=self._measure_options,
                                          runtime_kwargs=self._runtime_kwargs,
                                          workload=self.workload)
            self._replay.task(self.workload)  # a dataset without this task fails here

    @property
    def measurer(self) -> Measurer:
        if self._replay is not None:
            return self._replay
        if self._measurer is None:
            self._measurer = Measurer(self.target, self._measure_options, **self._runtime_kwargs)
        return self._measurer

    @property
    def device(self) -> str:
        return self.measurer.device

    def featurize(self, configs: Sequence[Config], mode: Optional[str] = None,
                  n_jobs: Optional[int] = None, loop_names: bool = False):
        """Features of ``configs`` (``mode`` defaults to the observation mode); big batches are
        lowered on ``n_jobs`` processes (default: every core this process may use);
        ``loop_names`` adds the loop variable names to ``ast`` trees (vanilla TreeGRU)."""
        from ..features import default_jobs

        if self._replay is not None and (mode or self.obs_mode) in ("relation", "context",
                                                                    "config"):
            with self.meter.time("featurize"):  # recorded configs' rows come with the dataset
                return self._replay.featurize(
                    self.workload, configs, mode or self.obs_mode,
                    lambda cs: self.featurizer.featurize(
                        self.workload, cs, mode or self.obs_mode, space=self.space,
                        n_jobs=default_jobs() if n_jobs is None else n_jobs))
        with self.meter.time("featurize"):
            return self.featurizer.featurize(
                self.workload, list(configs), mode or self.obs_mode, space=self.space,
                n_jobs=default_jobs() if n_jobs is None else n_jobs, loop_names=loop_names)

    def measure(self, configs: Sequence[Config]) -> list[MeasureResult]:
        """Build and time ``configs``; every config counts as a trial and goes to the records."""
        configs = list(configs)
        for c in configs:  # a config of exactly this space, not merely of one with its name
            self.space.validate(c)
        return self._measure_valid(configs)

    def reconfirm(self, results: Sequence[MeasureResult], top: int = 3, rounds: int = 3,
                  tolerance: float = 0.05, max_sets: int = 3, slow: float = 0.2,
                  slow_retakes: int = 2, slow_wait: float = 2.0) -> Optional[MeasureResult]:
        """The best of ``results`` as this machine runs it now: the ``top`` fastest distinct
        configs timed again, one confirmation each (``Measurer.confirm``), and the fastest of
        those timed ``rounds`` times more, each a confirmation of its own, its samples all
        together (their median) flagged ``extra["reconfirmed"]`` (and ``extra["rounds"]``); it
        becomes ``best``. A tune that reports it reports a figure of its end, not of minutes
        earlier when the machine may have run at another speed; a figure independent of the
        choice among the ``top``, which the fastest of their noisy timings would overstate; and
        one spread over several loads, as a re-measurement is: one confirmation alone (~0.1 s)
        can catch a slow moment of this machine (1 in 12 tries read 27% below a re-measurement
        right after it; 5 rounds read 6% below). Each round costs ~0.15 s.
        A whole set of rounds can still fall in a slow moment (one tune in 12 reported 14% below
        a re-measurement right after it). So where the set's figure is more than ``tolerance``
        off the config's figure in ``results``, the rounds are taken again, up to ``max_sets``
        sets, until one agrees with that figure or with the set before it (then the machine's
        speed has changed since, and the report is of now): the figure is that set's. Where no
        set agreed it is the median set's (the lower middle one of an even count): the last of
        sets that kept moving is no truer than the others, and one of them may have caught a
        moment of the machine at two thirds of its speed (seen on a Zen 3 VM: 136, 125, then
        75 GFLOP/s, then 121 re-measured right after). ``extra["sets"]`` says how many were taken
        and ``extra["set_gflops"]`` each one's figure (a kernel whose speed steps between two
        levels shows both). Sets that agree with each other can still all fall in one slow
        moment (seen on that VM: 75, 70, 64, then 156 re-measured seconds later), since the
        measurer's drift check compares the calibration kernel within a phase only. So a set
        during which the calibration kernel ran more than ``slow`` slower than it usually did
        over the tune (``Measurer.slowdown``) is set aside, and taken again after
        ``slow_wait`` seconds, up to ``slow_retakes`` times (then kept: the machine may have
        slowed for good); ``extra["slow_retakes"]`` counts them, and ``extra["set_slowdowns"]``
        holds each set's slowdown (None where it could not be judged), set-aside ones included.
        Not trials, nor records; the time goes to the meter.
        In replay mode (nothing to time) or when every re-timing fails: the fastest as it is."""
        ranked: dict[int, MeasureResult] = {}
        for r in sorted((r for r in results if r.ok), key=lambda r: -r.gflops):
            ranked.setdefault(r.config.index, r)
        candidates = list(ranked.values())[:max(1, top)]
        if not candidates:
            return None
        if self.measurer is self._replay:
            return candidates[0]
        before = dict(self.measurer.seconds)
        again = [r for r in (self.measurer.confirm(self.workload, c) for c in candidates) if r.ok]
        if again:  # the chosen one's own timing, not the luckiest of several
            chosen = max(again, key=lambda r: r.gflops)
            sets: list[MeasureResult] = []
            settled, retakes, slowdowns = False, 0, []
            while len(sets) < max(1, max_sets) and not settled:
                mark = self.measurer.calibrations()
                final = self._rounds(chosen, max(1, rounds))
                if final is None:
                    break
                slowdown = self.measurer.slowdown(mark)
                slowdowns.append(slowdown)
                if slowdown is not None and slowdown > 1.0 + slow and retakes < slow_retakes:
                    retakes += 1
                    time.sleep(slow_wait)
                    continue
                sets.append(final)
                marks = [ranked[chosen.config.index].gflops] + [r.gflops for r in sets[-2:-1]]
                settled = any(abs(final.gflops / m - 1.0) <= tolerance for m in marks if m > 0)
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

    def _measure_valid(self, configs: list[Config]) -> list[MeasureResult]:
        results: list[Optional[MeasureResult]] = [None] * len(configs)
        if self.use_cache and self.records is not None:
            with self.meter.time("other"):
                for i, c in enumerate(configs):
                    rec = self.records.lookup(Task(self.workload.key, self.target, self.device),
                                              c.to_json())
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
                    self.records.add_many(Task(self.workload.key, self.target, self.device), fresh,
                                          options={"measurer": self.measurer.describe(),
                                                   **self.record_options}, workload=self.workload)
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
        if m is self._replay and m.seconds == before:  # all replayed: nothing built or run
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
        """Re-time each result that would become the best, until the batch's
        fastest unconfirmed result no longer beats the best: the best is always a confirmed
        figure, never the luckiest of many noisy samples."""
        fresh = list(fresh)
        best = self.best.gflops if self.best else 0.0
        while True:
            open_ = [i for i, r in enumerate(fresh) if r.ok and not r.extra.get("confirmed")
                     and r.gflops > best]
            if not open_:
                return fresh
            i = max(open_, key=lambda j: fresh[j].gflops)
            fresh[i] = self.measurer.confirm(self.workload, fresh[i])
            if fresh[i].ok:
                best = max(best, fresh[i].gflops)

    @property
    def trials(self) -> int:
        return len(self.history)

    @property
    def reference_seconds(self) -> float:
        if self._reference_seconds is None and self._replay is not None:
            self._reference_seconds = self._replay.reference_seconds(self.workload,
                                                                     self.reference_config)
        if self._reference_seconds is None:
            cfg_json = self.reference_config.to_json()
            cached = (self.records.reference(Task(self.workload.key, self.target, self.device),
                                             cfg_json) if self.records is not None else None)
            if cached is not None and not (math.isfinite(cached) and cached > 0):
                cached = None  # a damaged database: measure the reference again
            if cached is None:
                r = self._measure_now([self.reference_config])[0]
                if not r.ok:
                    raise TensorGymError(f"the reference schedule of {self.workload.label} failed "
                                         f"on {self.target}: {r.error.name} {r.error_msg}")
                cached = r.median
                if self.records is not None:
                    self.records.set_reference(Task(self.workload.key, self.target, self.device),
                                               cfg_json, cached)
            self._reference_seconds = cached
        return self._reference_seconds

    @property
    def reference_gflops(self) -> float:
        return self.workload.flops / self.reference_seconds / 1e9

    # ---------------------------------------------------------------- gymnasium API

    def _reset_state(self) -> None:
        self.history: list[MeasureResult] = []
        self.best: Optional[MeasureResult] = None
        self._partial: list[int] = []
        self.invalid_actions = 0  # this episode's, knob mode
        self._truncated = False
        self._last_config = self.reference_config
        self._best_log = None
        self.virtual_time = 0.0  # build + run seconds of this episode's trials, as measured

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        self._reset_state()
        if self._replay is not None and seed is not None:
            self._replay.reseed(seed)
        return self._observe(), {"trials": 0, "space_size": self.space.size}

    def step(self, action):
        if self.trials >= self.budget:
            raise TensorGymError("the trial budget is spent: call reset() to start a new session")
        if self._truncated:
            raise TensorGymError(f"the episode was truncated after {self.invalid_actions} "
                                 "invalid actions: call reset() to start a new one")
        if self._time_spent():
            raise TensorGymError(f"the time budget ({self.budget_seconds:g} s) is spent: call "
                                 "reset() to start a new session")
        try:
            if self.action_mode == "knob":
                return self._step_knob(action)
            return self._step_config(self._config_of(action))
        except TensorGymError:
            raise
        except Exception as e:  # noqa: BLE001 - the documented contract: one exception family
            raise StepError(f"step failed: {type(e).__name__}: {e}") from e

    def _step_config(self, config: Config):
        best_before = self.best
        result = self._measure_valid([config])[0]  # from_choices made it of this space
        self._last_config = config
        reward = self._reward(result, best_before)
        terminated = self.trials >= self.budget or self._time_spent()
        return self._observe(), reward, terminated, False, self._info(result)

    def _config_of(self, action: Any):
        """The config of a config-mode action. Integer arrays seen before come from a memo
        (validating an action costs more than a whole replayed step)."""
        key = (action.tobytes(), action.dtype.char) if (
            isinstance(action, np.ndarray) and action.dtype.kind in "iu"
            and action.shape == self._action_shape) else None
        config = self._configs.get(key) if key is not None else None
        if config is None:
            try:
                config = self.space.from_choices(action)
            except InvalidConfigError as e:
                raise InvalidConfigError(f"invalid action {short_repr(action)}: {e}") from None
            if key is not None:
                if len(self._configs) >= 65536:
                    self._configs.clear()
                self._configs[key] = config
        return config

    def _time_spent(self) -> bool:
        return self.budget_seconds is not None and self.virtual_time >= self.budget_seconds

    def _knob_option(self, action: Any) -> "int | str":
        """The option ``action`` sets on the next knob, or why it is invalid."""
        knob = self.space.knobs[len(self._partial)]
        if isinstance(action, np.ndarray) and action.shape == () and action.dtype.kind in "iu":
            action = action.item()
        if not is_int(action):
            return (f"an action is one integer, the option of knob {knob.name}; got "
                    f"{type(action).__name__} {short_repr(action)}")
        if not 0 <= action < knob.size:
            return f"option {action} out of range for knob {knob.name} ({knob.size} options)"
        return int(action)

    def _step_knob(self, action):
        a = self._knob_option(action)
        if isinstance(a, str):
            self.invalid_actions += 1
            self._truncated = self.invalid_actions >= self.max_invalid_actions
            info = {"trials": self.trials, "error": "INVALID_ACTION", "error_msg": a,
                    "invalid_actions": self.invalid_actions}
            return self._observe(), float(self.failure_reward), False, self._truncated, info
        self._partial.append(a)
        if len(self._partial) < len(self.space.knobs):
            return self._observe(), 0.0, False, False, {"trials": self.trials}
        config = self.space.from_choices(self._partial)
        self._partial = []
        return self._step_config(config)

    def action_masks(self) -> np.ndarray:
        """Valid actions of the next step (knob mode: the options of the knob to set)."""
        if self.action_mode == "config":
            return np.concatenate([np.ones(d, bool) for d in self.space.dims])
        mask = np.zeros(self.action_space.n, bool)
        mask[: self.space.knobs[len(self._partial)].size] = True
        return mask

    def _reward(self, r: MeasureResult, best_before: Optional[MeasureResult]) -> float:
        if not (r.ok and r.median > 0):
            return float(self.failure_reward)
        if self.reward_kind == "log_speedup":
            return float(math.log(self.reference_seconds / r.median))
        before = max(best_before.gflops if best_before else 0.0, self.reference_gflops)
        return float(max(0.0, math.log(max(r.gflops, before) / before)))

    def _observe(self):
        cfg = self._last_config
        if self._obs_cache is None or self._obs_cache[0] is not cfg:  # knob steps re-observe
            row = (self._replay.recorded_row(self.workload, cfg, self.obs_mode)
                   if self._replay is not None else None)  # a lookup: not metered
            self._obs_cache = (cfg, row if row is not None else self.featurize([cfg])[0])
        feats = self._obs_cache[1]
        part = np.zeros(len(self.space.knobs), np.float32)
        for i, c in enumerate(self._partial):
            part[i] = (c + 1) / self.space.knobs[i].size
        if self.obs_mode == "ast":
            obs = pad_ast(feats)
            if self.action_mode == "knob":
                obs["partial"] = part
            return obs
        feats = feats.astype(np.float32)
        return np.concatenate([feats, part]) if self.action_mode == "knob" else feats

    def _config_json(self, config: Config) -> str:
        text = self._json.get(config.index)
        if text is None:
            if len(self._json) >= 65536:
                self._json.clear()
            text = self._json[config.index] = config.to_json()
        return text

    def _info(self, r: MeasureResult) -> dict:
        return {"runtime": r.median, "gflops": r.gflops, "config": self._config_json(r.config),
                "error": r.error.name, "error_msg": r.error_msg,
                "best_gflops": self.best.gflops if self.best else 0.0,
                "trials": self.trials, "cached": r.cached,
                "build_time": r.build_time, "run_time": r.run_time, "cv": r.cv,
                "confirmed": bool(r.extra.get("confirmed")),
                "early_stop": bool(r.extra.get("early_stop")),
                "unchecked": bool(r.extra.get("unchecked")), "drift": r.extra.get("drift"),
                "source": r.extra.get("source") or ("recorded" if r.cached else "measured"),
                "virtual_time": self.virtual_time}

    def render(self):
        if self.render_mode != "ansi":
            return None
        best = f"{self.best.gflops:.2f} GFLOP/s" if self.best else "none yet"
        return (f"{self.workload.label} on {self.target}: {self.trials}/{self.budget} trials, "
                f"best {best}")

    def close(self) -> None:
        if self._own_measurer and self._measurer is not None:
            self._measurer.close()
            self._measurer = None
        if self._replay is not None:
            self._replay.close()
        self.featurizer.close()
        super().close()

    def __getstate__(self) -> dict:
        # Processes do not travel: the copy starts its own measurer, with the same settings, when
        # it first measures (a shared one stays with its owner). Records reconnects itself.
        state = self.__dict__.copy()
        m = state["_measurer"]
        if m is not None and not self._own_measurer:
            state["_measure_options"], state["_runtime_kwargs"] = m.options, dict(m.runtime_kwargs)
        state["_measurer"], state["_own_measurer"] = None, True
        return state
