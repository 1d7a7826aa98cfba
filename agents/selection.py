"""Diversity-aware batch selection (paper Equation 3) and epsilon-greedy exploration.

    L(S) = sum_{s in S} q(s) + alpha * |{(j, s_j) : s in S, j = 1..m}|

q is the model score rescaled to [0, 1] over the candidate pool (so alpha has a fixed meaning:
one newly covered knob value is worth alpha of the pool's score range). Both terms are
nonnegative, the coverage term is submodular and the quality term modular, so L is monotone
submodular and the greedy algorithm is within 1 - 1/e of the best subset of a given size.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from tensorgym.space import Config, ConfigSpace


def normalized_quality(scores: Sequence[float]) -> np.ndarray:
    s = np.asarray(scores, np.float64)
    if s.size == 0:
        return s
    span = s.max() - s.min()
    return (s - s.min()) / span if span > 0 else np.ones_like(s)


def knob_values(config: Config) -> set[tuple[int, int]]:
    """The (knob position, option index) pairs a config covers."""
    return set(enumerate(config.choices))


def diversity_objective(configs: Sequence[Config], quality: Sequence[float], alpha: float) -> float:
    """Equation 3 for the set ``configs`` with per-config ``quality``."""
    covered: set[tuple[int, int]] = set()
    for c in configs:
        covered |= knob_values(c)
    return float(np.sum(quality)) + alpha * len(covered)


def submodular_select(candidates: Sequence[Config], quality: Sequence[float], b: int,
                      alpha: float) -> list[int]:
    """Greedy maximization of Equation 3: positions (into ``candidates``) of up to ``b`` picks,
    in pick order. Ties go to the earlier candidate (candidates usually come best first)."""
    if b < 0 or alpha < 0:
        raise ValueError("need b >= 0 and alpha >= 0")
    if len(candidates) != len(quality):
        raise ValueError("one quality value per candidate")
    q = np.asarray(quality, np.float64)
    values = [knob_values(c) for c in candidates]
    covered: set[tuple[int, int]] = set()
    remaining = list(range(len(candidates)))
    picked: list[int] = []
    while remaining and len(picked) < b:
        gains = [q[i] + alpha * len(values[i] - covered) for i in remaining]
        best = remaining.pop(int(np.argmax(gains)))
        picked.append(best)
        covered |= values[best]
    return picked


def select_batch(candidates: Sequence[tuple[Config, float]], space: ConfigSpace, b: int,
                 alpha: float, epsilon: float, rng: np.random.Generator,
                 exclude: "set[int]") -> list[Config]:
    """Algorithm 1's batch: about ``(1 - epsilon) * b`` configs picked from the ranked
    ``candidates`` by :func:`submodular_select`, the rest drawn uniformly from the unmeasured
    part of the space (epsilon-greedy). ``exclude`` holds the indices already measured.
    The fractional part of ``epsilon * b`` is rounded at random so the mean rate is epsilon."""
    if not 0.0 <= epsilon <= 1.0:
        raise ValueError(f"epsilon must be in [0, 1], got {epsilon}")
    fresh = [(c, s) for c, s in candidates if c.index not in exclude]
    exact = epsilon * b
    n_random = int(exact) + int(rng.random() < exact - int(exact))
    n_model = min(b - n_random, len(fresh))
    picks = submodular_select([c for c, _ in fresh], normalized_quality([s for _, s in fresh]),
                              n_model, alpha)
    batch = [fresh[i][0] for i in picks]
    taken = set(exclude) | {c.index for c in batch}
    batch += space.sample_unique(rng, b - len(batch), exclude=taken)
    return batch
