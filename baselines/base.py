"""The loop every search baseline shares: ask for a batch, measure it through the env, tell.

Agents never build or time kernels themselves: every trial goes through
``env.unwrapped.measure(configs)``, so the env's trial count, records and best-so-far are honest.
Batches (default 8) let the env build a batch's kernels in parallel.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from tensorgym.hardware.result import MeasureResult
from tensorgym.meter import meter_of
from tensorgym.space import Config, ConfigSpace

Callback = Callable[[Any, list[MeasureResult]], None]


def check_budget(n_trials: int) -> int:
    if int(n_trials) != n_trials or n_trials < 1:
        raise ValueError(f"n_trials must be a positive integer, got {n_trials!r}")
    return int(n_trials)


class Agent(ABC):
    """Common interface: ``tune(env, n_trials, seed=0, callbacks=()) -> list[MeasureResult]``."""

    name: str = ""
    #: keyword arguments the env should be made with for this agent (e.g. an action mode)
    env_kwargs: dict = {}
    # Where the time goes is metered on the env (``env.unwrapped.meter``, tensorgym.meter):
    # an agent charges its own work there with ``meter.time("search")`` / ``("model")``.

    @abstractmethod
    def tune(self, env: Any, n_trials: int, seed: int = 0,
             callbacks: Iterable[Callback] = ()) -> list[MeasureResult]:
        """Spend at most ``n_trials`` measurements on ``env``; return them in order."""


class BatchSearchAgent(Agent):
    """An ask/tell search: subclasses propose configs (``ask``) and learn from results (``tell``).
    ``reset``, ``ask`` and ``tell`` are metered as ``search`` on the env's meter."""

    def __init__(self, batch_size: int = 8) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.batch_size = int(batch_size)

    @abstractmethod
    def reset(self, space: ConfigSpace, rng: np.random.Generator, budget: int) -> None:
        """Start a new search over ``space`` that will measure at most ``budget`` configs."""

    @abstractmethod
    def ask(self, n: int) -> list[Config]:
        """Up to ``n`` configs not proposed before; fewer (or none) when the space runs out."""

    def tell(self, configs: Sequence[Config], results: Sequence[MeasureResult]) -> None:
        """Learn from a measured batch (default: nothing to learn)."""

    def tune(self, env: Any, n_trials: int, seed: int = 0, callbacks: Iterable[Callback] = (),
             prior: Sequence[MeasureResult] = ()) -> list[MeasureResult]:
        """``prior``: results of this task measured before (e.g. ``Records.results``); they are
        told to the agent first and never measured again."""
        n_trials = check_budget(n_trials)
        callbacks = list(callbacks)
        base = env.unwrapped
        meter = meter_of(env)
        prior = [r for r in prior if r.config.space_name == base.space.name]
        with meter.time("search"):
            self.reset(base.space, np.random.default_rng(seed), n_trials)
            if prior:
                self.tell([r.config for r in prior], prior)
        known = {r.config.index for r in prior}
        proposed = 0
        history: list[MeasureResult] = []
        while len(history) < n_trials:
            with meter.time("search"):
                asked = self.ask(min(self.batch_size, n_trials - len(history)))
                configs = [c for c in asked if c.index not in known]
            proposed += len(asked)
            if not configs:
                # ask never repeats itself: a space's worth of proposals means it ran out
                if asked and proposed < base.space.size:
                    continue  # only configs measured before: ask again
                break  # the whole space has been measured
            known.update(c.index for c in configs)
            results = list(base.measure(configs))
            with meter.time("search"):
                self.tell(configs, results)
            history.extend(results)
            for cb in callbacks:
                cb(self, results)
        return history

    def __repr__(self) -> str:
        return f"{type(self).__name__}(batch_size={self.batch_size})"
