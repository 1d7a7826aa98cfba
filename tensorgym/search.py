"""One tuning loop for every search strategy: ask for configs, measure them in a tuning session,
tell the results.

A strategy implements ``reset(space, seed)``, ``ask(n) -> list[Config]`` and
``tell(results)`` (subclass :class:`SearchStrategy` or write any object with these methods).
:func:`tune` owns everything else: the trial budget, de-duplication, prior results, the
search-time meter, callbacks and early stop. Optional parts of the protocol:

- ``batch_size``: the most configs asked at once (default 8); ``None`` lets ``ask`` choose: it
  is then asked for the whole budget left and returns its own batch.
- ``prepare(session, n_trials)``: called before ``reset`` with the ``TuningSession`` and the
  number of trials
  this tune will measure, for strategies that need more than the space (a cost model's
  features, transfer learning's target, a population sized from the budget).
- ``drive(env, n_trials, seed, report)``: a strategy that steps a Gymnasium env itself (the RL
  agents) instead of answering ``ask``; ``report(results)`` hands each measured batch to the
  loop and returns False once the tune must end. Tuned on a session, it gets a
  ``TensorSchedEnv`` over it, made with ``env_kwargs``.
- ``env_kwargs``: keyword arguments the env must be made with (e.g. an action mode).
- ``close()``: called when the tune ends, however it ends (a strategy's helper processes stop).
"""
from __future__ import annotations

import warnings
from abc import ABC, abstractmethod
from typing import Any, Callable, Iterable, Sequence

from tqdm import tqdm

from .envs.tensor_sched import TensorSchedEnv
from .errors import TensorGymError
from .measure.result import MeasureResult
from .session import TuningSession
from .space import Config, ConfigSpace

Callback = Callable[[Any, list[MeasureResult]], Any]
Report = Callable[[list[MeasureResult]], bool]

DEFAULT_BATCH = 8
#: asks in a row that bring no new config before the loop gives up on a strategy
MAX_STALE_ASKS = 100


class StopSearch(Exception):
    """Raise it in a callback to end the tune after the current batch (the other callbacks of
    that batch still run). A callback's return value is ignored."""


class SearchStrategy(ABC):
    """Base class of search strategies (see the module docstring for the protocol)."""

    name: str = ""
    env_kwargs: dict[str, Any] = {}
    batch_size: "int | None" = DEFAULT_BATCH

    @abstractmethod
    def reset(self, space: ConfigSpace, seed: int) -> None:
        """Start a new search over ``space``; the same seed must give the same proposals."""

    @abstractmethod
    def ask(self, n: int) -> list[Config]:
        """Up to ``n`` configs to measure next; ``[]`` when there is nothing left to propose."""

    def tell(self, results: Sequence[MeasureResult]) -> None:
        """Learn from measured results (prior ones first, then each batch); default: nothing."""


def check_budget(n_trials: int) -> int:
    if isinstance(n_trials, bool) or int(n_trials) != n_trials or n_trials < 1:
        raise ValueError(f"n_trials must be a positive integer, got {n_trials!r}")
    return int(n_trials)


def drives_env(strategy: Any) -> bool:
    """Whether ``strategy`` steps the env itself (``drive``) rather than answering ``ask``."""
    return callable(getattr(strategy, "drive", None))


def takes_prior(strategy: Any) -> bool:
    """Whether :func:`tune` tells ``strategy`` the prior results (an ask/tell strategy)."""
    return not drives_env(strategy) and callable(getattr(strategy, "ask", None))


def session_of(env: Any) -> TuningSession:
    """The session a tune works on: ``env`` itself (a ``TuningSession``, or a stand-in with its
    ``space``, ``measure``, ``history``, ``trials``, ``trials_left`` and ``meter``), or the
    ``session`` of an env over one (through wrappers)."""
    u = getattr(env, "unwrapped", env)
    return getattr(u, "session", u)


class VirtualTimeBudget:
    """A :func:`tune` callback that ends the tune once the session's ``virtual_time`` reaches
    ``seconds`` (checked after each batch, as the trial budget is)."""

    def __init__(self, env: Any, seconds: float) -> None:
        if not seconds > 0:
            raise TensorGymError(f"a time budget is a positive number of seconds, got {seconds!r}")
        self.session, self.seconds = session_of(env), float(seconds)

    def __call__(self, strategy: Any, batch: list[MeasureResult]) -> None:
        if self.session.virtual_time >= self.seconds:
            raise StopSearch


def tune(env: Any, strategy: Any, n_trials: int, seed: int = 0,
         callbacks: Iterable[Callback] = (), prior: Sequence[MeasureResult] = (),
         max_stale_asks: int = MAX_STALE_ASKS) -> list[MeasureResult]:
    """Measure up to ``n_trials`` new configs proposed by ``strategy`` in ``env`` (a
    ``TuningSession``, or an env over one: ``session.measure``); return the results in order.

    - Budget: never more than ``n_trials``, nor more than the session's budget left.
    - ``prior``: earlier results of this task (e.g. ``Records.results``). With the session's own
      history they are told to the strategy first and never measured again.
    - De-duplication: a proposed config that was measured before (in this tune, in ``prior``,
      in the env's history) or twice in one batch is dropped, and the strategy is not told
      about it. When a whole batch is dropped the loop asks again; after ``max_stale_asks``
      such asks in a row it ends the tune with a warning. It also ends when ``ask`` returns
      ``[]`` or the whole space has been measured.
    - Meter: time inside ``prepare``, ``reset``, ``ask``, ``tell`` and ``drive`` goes to
      ``search`` on the session's ``meter``, less what the strategy charges to ``model`` or
      ``featurize`` inside (``with meter.time("model"): ...``); callbacks go to ``other``.
    - Callbacks: ``cb(strategy, results_batch)`` after each measured batch (after ``tell``);
      one raising :class:`StopSearch` ends the tune after that batch.

    A strategy that drives the env (``drive``) gets the budget, callbacks, stop and meter, but
    neither de-duplication nor ``prior``: what it steps, the env measures. An object with
    neither ``reset``/``ask``/``tell`` nor ``drive`` (one with only a ``tune`` method of its
    own, say) is refused with a ``TensorGymError``.

    The strategy's ``close()``, if it has one, is called when the tune ends.
    """
    try:
        return _tune(env, strategy, n_trials, seed, list(callbacks), prior, max_stale_asks)
    finally:
        if callable(getattr(strategy, "close", None)):
            strategy.close()


def _tune(env: Any, strategy: Any, n_trials: int, seed: int, callbacks: list[Callback],
          prior: Sequence[MeasureResult], max_stale_asks: int) -> list[MeasureResult]:
    n_trials = check_budget(n_trials)
    session = session_of(env)
    space = session.space
    if session.trials_left is not None:
        n_trials = min(n_trials, session.trials_left)
    if max_stale_asks < 1:
        raise ValueError("max_stale_asks must be >= 1")
    meter = session.meter
    history: list[MeasureResult] = []
    stopped = False

    def report(results: list[MeasureResult]) -> bool:
        nonlocal stopped
        history.extend(results)
        with meter.time("other"):
            for cb in callbacks:
                try:
                    cb(strategy, results)
                except StopSearch:
                    stopped = True
        return not stopped and len(history) < n_trials

    if n_trials == 0:
        return history
    if not takes_prior(strategy) and not drives_env(strategy):
        raise TensorGymError(f"{_name(strategy)} is not a search strategy: it needs "
                             "reset(space, seed), ask(n) and tell(results), or drive(env, "
                             "n_trials, seed, report)")
    known = [r for r in (*prior, *session.history) if r.config.space_name == space.name]
    with meter.time("search"):
        if callable(getattr(strategy, "prepare", None)):
            strategy.prepare(session, n_trials)
        strategy.reset(space, seed)
        if drives_env(strategy):
            strategy.drive(_env_for(env, session, strategy, n_trials), n_trials, seed, report)
            return history
        if known:
            strategy.tell(known)
    measured = {r.config.index for r in known}
    batch_size = getattr(strategy, "batch_size", DEFAULT_BATCH)
    stale = 0
    while not stopped and len(history) < n_trials and len(measured) < space.size:
        n = n_trials - len(history)
        if batch_size is not None:
            n = min(n, int(batch_size))
        with meter.time("search"):
            asked = list(strategy.ask(n))
        if not asked:
            break
        if len(asked) > n:
            raise TensorGymError(f"{_name(strategy)}.ask({n}) returned {len(asked)} configs")
        batch = []
        for c in asked:
            if c.index not in measured:
                measured.add(c.index)
                batch.append(c)
        if not batch:
            stale += 1
            if stale >= max_stale_asks:
                warnings.warn(f"{_name(strategy)} proposed only configs measured before "
                              f"{stale} times in a row; the tune ends after {len(history)} of "
                              f"{n_trials} trials", stacklevel=3)
                break
            continue
        stale = 0
        results = list(session.measure(batch))
        with meter.time("search"):
            strategy.tell(results)
        report(results)
    return history


def _env_for(env: Any, session: TuningSession, strategy: Any, n_trials: int) -> Any:
    """The env a driving strategy steps: ``env`` itself, or one over the session it was given."""
    if env is not session or not isinstance(session, TuningSession):
        return env
    budget = session.trials + n_trials if session.budget is None else session.budget
    return TensorSchedEnv(session=session, budget=budget, **getattr(strategy, "env_kwargs", {}))


def _name(strategy: Any) -> str:
    return getattr(strategy, "name", "") or type(strategy).__name__


class ProgressBar:
    """A tqdm progress bar as a callback: trials/s and the best GFLOP/s so far (starting from
    ``best``, e.g. that of prior results). ``close()`` it when the tune ends."""

    def __init__(self, total: int, desc: str, best: float = 0.0) -> None:
        self.best = best
        # rate_noinv: always trials/s (tqdm's own rate flips to s/trial below 1/s);
        # smoothing=0: the average since the start, as batches arrive in bursts
        self.bar = tqdm(total=total, desc=desc, unit=" trials", smoothing=0,
                        bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} "
                        "[{elapsed}<{remaining}, {rate_noinv_fmt}{postfix}]")

    def __call__(self, strategy: Any, batch: list[MeasureResult]) -> None:
        self.best = max([self.best, *(r.gflops for r in batch if r.ok)])
        self.bar.set_postfix(best=f"{self.best:.2f} GFLOP/s", refresh=False)
        self.bar.update(len(batch))

    def close(self) -> None:
        self.bar.close()


__all__ = ["Callback", "ProgressBar", "SearchStrategy", "StopSearch", "VirtualTimeBudget",
           "check_budget", "drives_env", "session_of", "takes_prior", "tune"]
