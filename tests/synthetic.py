"""A test fixture: a synthetic tuning problem with the session interface the search loop and the
agents use (``space``, ``featurize``, ``measure``, ``history``, ``trials``, ``trials_left``,
``meter``; no ``workload`` or ``target``) and a known objective.

For unit tests and quick experiments with search parts only: no program is compiled, so every
feature mode is the one-hot encoding of the config's choices.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from tensorgym.errors import ErrorCode
from tensorgym.measure.result import MeasureResult
from tensorgym.meter import Meter
from tensorgym.space import Config, ConfigSpace


def one_hot(space: ConfigSpace, configs: Sequence[Config]) -> np.ndarray:
    offsets = np.cumsum((0,) + space.dims[:-1])
    X = np.zeros((len(configs), sum(space.dims)), np.float32)
    for row, c in enumerate(configs):
        X[row, offsets + np.asarray(c.choices)] = 1.0
    return X


class SyntheticEnv:
    """``objective(config) -> gflops``; a value <= 0 is a failed build/run."""

    workload = target = records = device = featurizer = None  # no task: no warm start, no transfer

    def __init__(self, space: ConfigSpace, objective: Callable[[Config], float],
                 budget: int | None = None, flops: int = 10**9) -> None:
        self.space = space
        self.objective = objective
        self.budget = budget
        self.flops = flops
        self.history: list[MeasureResult] = []
        self.meter = Meter()

    @property
    def trials_left(self) -> int | None:
        return None if self.budget is None else max(0, self.budget - self.trials)

    @property
    def unwrapped(self) -> "SyntheticEnv":
        return self

    @property
    def trials(self) -> int:
        return len(self.history)

    @property
    def best(self) -> MeasureResult | None:
        ok = [r for r in self.history if r.ok]
        return max(ok, key=lambda r: r.gflops) if ok else None

    def featurize(self, configs: Sequence[Config], mode: str | None = None) -> np.ndarray:
        return one_hot(self.space, configs)

    def measure(self, configs: Sequence[Config]) -> list[MeasureResult]:
        if self.budget is not None and self.trials + len(configs) > self.budget:
            raise RuntimeError(f"budget of {self.budget} trials exceeded")
        out = []
        for c in configs:
            g = float(self.objective(c))
            if g > 0:
                out.append(MeasureResult(c, (self.flops / (g * 1e9),), flops=self.flops))
            else:
                out.append(MeasureResult(c, (), ErrorCode.RUNTIME_DEVICE, "synthetic failure",
                                         flops=self.flops))
        self.history += out
        return out
