"""Grid search: the whole grid of knob choices, every config exactly once, in a strided order.

Index ``k`` of the enumeration is ``(offset + k * stride) mod size``: the space in index order
with a stride coprime to ``size``, so it covers every config once. The stride is the one nearest
``size / golden ratio`` (a Weyl sequence), so any prefix of the order is spread evenly over the
index space and a small budget does not spend itself varying only the last knob. The seed only
picks ``offset``, so runs with the same seed are identical (``randomize_start=False`` always
starts at index 0).
"""
from __future__ import annotations

import math

import numpy as np

from tensorgym.space import Config, ConfigSpace

from .base import BatchSearch

_INV_GOLDEN = (math.sqrt(5) - 1) / 2


def weyl_stride(size: int) -> int:
    """The integer closest to ``size / golden ratio`` that is coprime to ``size``."""
    if size <= 2:
        return 1
    base = max(1, round(size * _INV_GOLDEN))
    for delta in range(size):
        for s in (base - delta, base + delta):
            if 0 < s < size and math.gcd(s, size) == 1:
                return s
    return 1


class GridSearch(BatchSearch):
    name = "grid"

    def __init__(self, batch_size: int = 8, randomize_start: bool = True) -> None:
        super().__init__(batch_size)
        self.randomize_start = randomize_start

    def reset(self, space: ConfigSpace, seed: int) -> None:
        self._space = space
        self._size = space.size
        self._stride = weyl_stride(self._size)
        rng = np.random.default_rng(seed)
        self._offset = int(rng.integers(self._size)) if self.randomize_start else 0
        self._k = 0

    def ask(self, n: int) -> list[Config]:
        n = min(n, self._size - self._k)
        out = [self._space.get((self._offset + (self._k + j) * self._stride) % self._size)
               for j in range(n)]
        self._k += n
        return out
