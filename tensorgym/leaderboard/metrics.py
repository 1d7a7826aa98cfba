"""Scores computed from trial histories: best-so-far curves, area under them, trials to reach a
fraction of the best known config, geometric means."""
from __future__ import annotations

import math
from typing import Iterable, Sequence

import numpy as np

from tensorgym.measure.result import MeasureResult


def best_so_far(history: "Iterable[MeasureResult | float]", n: "int | None" = None) -> np.ndarray:
    """Best GFLOP/s after trial 1..n: of measurements (a failed one counts 0) or of figures (one
    below 0, or NaN, counts 0); a history shorter than ``n`` (the space ran out) keeps its last
    value."""
    g = np.array([h.gflops if isinstance(h, MeasureResult) else float(h)
                  for h in list(history)[:n]], np.float64)
    curve = np.fmax.accumulate(np.fmax(g, 0.0)) if len(g) else g
    if n is not None and len(curve) < n:
        curve = np.r_[curve, np.full(n - len(curve), curve[-1] if len(curve) else 0.0)]
    return curve


def trials_to_reach(curve: Sequence[float], goal: float) -> "int | None":
    """How many trials the best-so-far ``curve`` needs to reach ``goal`` (None: never)."""
    for i, g in enumerate(curve):
        if g >= goal:
            return i + 1
    return None


def normalized_auc(curve: Sequence[float], reference: float, budget: "int | None" = None) -> float:
    """Mean of ``curve / reference`` over ``budget`` trials (a curve that stops early keeps its
    last value): 1.0 means the best known config was found at the first trial."""
    if not curve or reference <= 0:
        return 0.0
    budget = budget or len(curve)
    padded = list(curve[:budget]) + [curve[-1]] * max(0, budget - len(curve))
    return sum(padded) / (budget * reference)


def geomean(values: Iterable[float]) -> float:
    vals = [v for v in values if v is not None]
    if not vals or any(v <= 0 for v in vals):
        return 0.0
    return math.exp(sum(math.log(v) for v in vals) / len(vals))
