"""Parallel simulated annealing over a cost model (paper section 3.3).

A batch of Markov chains walks the config space with the model's score as (negative) energy;
proposals change one knob (``space.random_neighbors``). The chains' states persist across calls,
so after the model is retrained the walk resumes where it was rather than restarting cold, and
a resumed walk needs fewer steps (``resume_steps``) than the first one from random points.
"""
from __future__ import annotations

import heapq
from typing import Callable, Sequence

import numpy as np

from tensorgym.space import Config, ConfigSpace

ScoreFn = Callable[[Sequence[Config]], np.ndarray]


class ParallelAnnealer:
    """``n_chains`` chains, at most ``n_steps`` steps in the first call (from random points) and
    ``resume_steps`` (default ``n_steps``) in each later one, stopping early once the top-k has
    not changed for ``early_stop`` steps. The temperature falls linearly from ``temperature[0]``
    to ``temperature[1]``, in units of the score spread of the chains at the start of the call
    (so the walk behaves the same whatever the scale of the model's scores)."""

    def __init__(self, space: ConfigSpace, n_chains: int = 128, n_steps: int = 500,
                 early_stop: int = 50, temperature: tuple[float, float] = (1.0, 0.0),
                 seed: int | np.random.Generator = 0, resume_steps: int | None = None) -> None:
        resume_steps = n_steps if resume_steps is None else resume_steps
        if n_chains < 1 or n_steps < 0 or resume_steps < 0 or early_stop < 1:
            raise ValueError("need n_chains >= 1, n_steps >= 0, resume_steps >= 0, early_stop >= 1")
        self.space = space
        self.n_chains = n_chains
        self.n_steps = n_steps
        self.resume_steps = resume_steps
        self.early_stop = early_stop
        self.temperature = temperature
        self.rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        self.points: list[Config] = []
        self.steps_taken = 0  # of the last call, for inspection

    def _init_points(self) -> None:
        self.points = self.space.sample_unique(self.rng, self.n_chains)
        while len(self.points) < self.n_chains:  # tiny spaces: more chains than configs
            self.points += self.space.sample(self.rng, self.n_chains - len(self.points))

    def find_maximums(self, score: ScoreFn, k: int,
                      exclude: "set[int] | frozenset[int]" = frozenset(),
                      ) -> list[tuple[Config, float]]:
        """Run the chains and return up to ``k`` distinct configs not in ``exclude`` (indices)
        with the highest scores seen, best first, with their scores."""
        if k < 1:
            raise ValueError("k must be >= 1")
        n_steps = self.resume_steps if self.points else self.n_steps
        if not self.points:
            self._init_points()
        top: list[tuple[float, int, Config]] = []  # min-heap of the k best
        in_top: set[int] = set()

        def offer(configs: Sequence[Config], scores: np.ndarray) -> bool:
            changed = False
            for c, s in zip(configs, scores):
                if c.index in exclude or c.index in in_top:
                    continue
                if len(top) < k:
                    heapq.heappush(top, (float(s), c.index, c))
                elif s > top[0][0]:
                    in_top.discard(heapq.heapreplace(top, (float(s), c.index, c))[1])
                else:
                    continue
                in_top.add(c.index)
                changed = True
            return changed

        scores = np.asarray(score(self.points), np.float64)
        offer(self.points, scores)
        scale = float(np.std(scores)) or 1.0
        t0, t1 = self.temperature
        quiet = 0
        self.steps_taken = 0
        for step in range(n_steps):
            t = (t0 + (t1 - t0) * step / max(n_steps, 1)) * scale
            proposals = self.space.random_neighbors(self.points, self.rng)
            new_scores = np.asarray(score(proposals), np.float64)
            with np.errstate(over="ignore"):
                accept_p = np.exp(np.minimum((new_scores - scores) / (t + 1e-9 * scale), 0.0))
            accept = self.rng.random(len(proposals)) < accept_p
            self.points = [q if a else p for p, q, a in zip(self.points, proposals, accept)]
            scores = np.where(accept, new_scores, scores)
            self.steps_taken = step + 1
            quiet = 0 if offer(proposals, new_scores) else quiet + 1
            if quiet >= self.early_stop:
                break
        return [(c, s) for s, _, c in sorted(top, key=lambda e: (-e[0], e[1]))]
