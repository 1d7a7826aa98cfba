"""What the search baselines share: the search protocol of ``tensorgym.search`` (the loop there
owns budgets, de-duplication, the meter and callbacks) and a batch size.

Agents never build or time kernels themselves: every trial goes through
``env.unwrapped.session.measure(configs)``, so the env's trial count, records and best-so-far are honest.
Batches (default 8) let the env build a batch's kernels in parallel.
"""
from __future__ import annotations

from typing import Any

from tensorgym.search import SearchStrategy


class BatchSearch(SearchStrategy):
    """A strategy asked for ``batch_size`` configs at a time; ``budget`` is the trials of the
    current tune (set by ``prepare``; None when driven by hand without one)."""

    def __init__(self, batch_size: int = 8) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.batch_size = int(batch_size)

    def prepare(self, env: Any, n_trials: int) -> None:
        self.budget = n_trials

    def __repr__(self) -> str:
        return f"{type(self).__name__}(batch_size={self.batch_size})"


__all__ = ["BatchSearch"]
