"""A genetic algorithm in the style of AutoTVM's GA tuner, over ``config.choices``.

A population of ``pop_size`` configs (default: a quarter of the budget, 8 to 64) is measured;
the next generation keeps the ``elite_num`` best of it (already measured, so not re-proposed)
and breeds the rest from it: two parents drawn with probability proportional to GFLOP/s, a
knob-wise (uniform) crossover, then each knob mutated with probability ``mutation_prob``.
Children that were measured before are redrawn, so every trial is a new config; when breeding
keeps producing repeats, fresh random configs fill the gap.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from tensorgym.measure.result import MeasureResult
from tensorgym.space import Config, ConfigSpace

from .base import BatchSearch


class GeneticSearch(BatchSearch):
    name = "ga"

    def __init__(self, batch_size: int = 8, pop_size: "int | None" = None, elite_num: int = 3,
                 mutation_prob: float = 0.1) -> None:
        super().__init__(batch_size)
        if pop_size is not None and (pop_size < 2 or not 0 <= elite_num < pop_size):
            raise ValueError(f"GA needs pop_size >= 2 and 0 <= elite_num < pop_size; got "
                             f"{pop_size}, {elite_num}")
        if not 0.0 <= mutation_prob <= 1.0 or elite_num < 0:
            raise ValueError(f"GA needs 0 <= mutation_prob <= 1 and elite_num >= 0; got "
                             f"{mutation_prob}, {elite_num}")
        self.pop_size, self.elite_num, self.mutation_prob = pop_size, elite_num, mutation_prob

    @staticmethod
    def auto_pop_size(budget: int) -> int:
        """A quarter of the budget, within [8, 64]: at least four generations when it can."""
        return min(64, max(8, budget // 4))

    def reset(self, space: ConfigSpace, seed: int) -> None:
        budget = getattr(self, "budget", None) or space.size  # prepare() sets the tune's
        self._pop = self.pop_size or self.auto_pop_size(budget)
        self._elites = min(self.elite_num, self._pop - 1)
        self._space = space
        self._rng = np.random.default_rng(seed)
        self._dims = np.array(space.dims)
        self._visited: set[int] = set()
        self._scores: dict[int, float] = {}  # index -> GFLOP/s of every measured config
        self._population: list[int] = []  # the current generation (measured members)
        self._generation = 0
        self._pending = self._fresh(min(self._pop, space.size))

    @property
    def generation(self) -> int:
        return self._generation

    def ask(self, n: int) -> list[Config]:
        if not self._pending:
            self._pending = self._breed()
            self._generation += 1
        out, self._pending = self._pending[:n], self._pending[n:]
        return out

    def tell(self, results: Sequence[MeasureResult]) -> None:
        for r in results:
            self._scores[r.config.index] = r.gflops
            self._population.append(r.config.index)

    def _fresh(self, n: int) -> list[Config]:
        out = self._space.sample_unique(self._rng, n, exclude=self._visited)
        self._visited.update(c.index for c in out)
        return out

    def _breed(self) -> list[Config]:
        pool = self._population
        if not pool:
            return self._fresh(min(self._pop, self._space.size - len(self._visited)))
        parents = np.array([self._space.get(i).choices for i in pool])
        scores = np.array([self._scores[i] for i in pool], dtype=float)
        probs = scores / scores.sum() if scores.sum() > 0 else np.full(len(pool), 1 / len(pool))
        elites = [pool[i] for i in np.argsort(-scores, kind="stable")[:self._elites]]
        self._population = elites  # the children join as they are measured (tell)
        want = min(self._pop - len(elites), self._space.size - len(self._visited))
        children: list[Config] = []
        tries = 0
        while len(children) < want and tries < 20 * want + 20:
            tries += 1
            a, b = self._rng.choice(len(parents), size=2, p=probs)
            take_a = self._rng.random(len(self._dims)) < 0.5
            child = np.where(take_a, parents[a], parents[b])
            mutate = self._rng.random(len(self._dims)) < self.mutation_prob
            child = np.where(mutate, self._rng.integers(0, self._dims), child)
            config = self._space.from_choices(child)
            if config.index not in self._visited:
                self._visited.add(config.index)
                children.append(config)
        return children + self._fresh(want - len(children))
