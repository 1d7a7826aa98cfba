"""Random search without replacement: the baseline every tuner must beat."""
from __future__ import annotations

import numpy as np

from tensorgym.space import Config, ConfigSpace

from .base import BatchSearch

# Spaces up to this size are shuffled once (exact, never repeats, never gives up early);
# larger ones are sampled with rejection of seen indices.
_PERMUTE_LIMIT = 1 << 20


class RandomSearch(BatchSearch):
    name = "random"

    def reset(self, space: ConfigSpace, seed: int) -> None:
        self._space = space
        self._rng = rng = np.random.default_rng(seed)
        self._seen: set[int] = set()
        self._order = rng.permutation(space.size) if space.size <= _PERMUTE_LIMIT else None
        self._pos = 0

    def ask(self, n: int) -> list[Config]:
        if self._order is not None:
            idx = self._order[self._pos:self._pos + n]
            self._pos += len(idx)
            return [self._space.get(int(i)) for i in idx]
        out = self._space.sample_unique(self._rng, n, exclude=self._seen)
        self._seen.update(c.index for c in out)
        return out
