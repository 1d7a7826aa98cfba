"""Featurizing big batches on several cores.

Simulated annealing scores thousands of configs per model update, and lowering plus analysing one
config is about a millisecond of pure Python, so a batch of missing rows is split over a few
helper processes (``Child``: started with ``python -m``, so they never re-import the caller's
``__main__``, and they die with it); the caller computes one share itself. Rows are pure
functions of (workload, config), so the split changes nothing but the time.

The fast path (``fast.py``) is split too, by loop order (``split_groups``): each side analyses
its loop orders in one nest, and a nest of fewer orders has fewer places, so the annealer's calls
of ~128 configs in 4 orders cost about 20% less on two cores. While a tuner anneals, its
builders and measurement worker are idle, so the second core is free. Its helper starts in the
background (``HelperPool.ready``): until it serves, calls are computed here alone.
"""
from __future__ import annotations

import warnings
from typing import Callable, Sequence

import numpy as np

from ..processes.child import Child, ChildDied, ChildError, ChildPool
from ..processes.host import available_cpus
from .fast import fast_rows
from .nest import Unsupported

MIN_CONFIGS_PER_JOB = 128  # below this the pickling and hand-off cost more than they save


def default_jobs() -> int:
    """Processes to featurize with: the cores this process may use, at most 8."""
    return max(1, min(8, available_cpus()))


class FeatureServer:
    """What a feature process serves."""

    def rows(self, workload, configs: Sequence, mode: str) -> np.ndarray:
        """The reference rows (``rows_by_lowering``): the caller checked the configs, split them by
        template and looked up its cache."""
        from . import rows_by_lowering  # noqa: PLC0415  (cycle: features/__init__ imports this)

        return rows_by_lowering(workload, configs, mode)

    def fast_rows(self, workload, configs: Sequence, mode: str,
                  max_loops: int) -> "np.ndarray | None":
        """The fast path's rows; None where it does not model the configs (the caller then
        lowers them)."""
        try:
            return fast_rows(workload, configs, mode, max_loops)
        except Unsupported:
            return None


class HelperPool:
    """Feature helper processes, started on the first big batch; ``close`` stops them (they
    start again if needed). A ``Featurizer`` owns one."""

    def __init__(self) -> None:
        self.pool: "ChildPool | None" = None

    @property
    def starting(self) -> "Child | None":
        """The first helper while it starts (``ready`` started it), else None."""
        child = self.pool.children[0] if self.pool is not None else None
        return child if child is not None and child.alive and child.starting else None

    def children(self, n: int) -> list[Child]:
        if self.pool is None or len(self.pool.children) < n:
            self.close()
            self.pool = ChildPool(FeatureServer, size=n, name="feature")
        return self.pool.children[:n]

    def ready(self) -> "Child | None":
        """The first helper if it serves; else None, and it starts without waiting: a start
        costs ~0.25 s of interpreter and imports, about 30 of the annealer's calls, which the
        caller meanwhile computes alone (the other core is idle while a tuner anneals)."""
        child = self.children(1)[0]
        if not child.alive and not child.starting:
            child.spawn()
        return child if child.ready() else None

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()
        self.pool = None


MIN_CONFIGS_PER_GROUP_JOB = 48  # fewer: the hand-off costs about what it saves


def split_groups(compute: Callable[[Sequence], np.ndarray], remote: Callable[[Child, Sequence], None],
                 configs: Sequence, key: Callable, n_jobs: int,
                 helpers: HelperPool) -> np.ndarray:
    """Rows of ``configs`` computed by ``compute`` here for some groups (by ``key``) of configs,
    and by one helper for the others (``remote(child, configs)`` sends it the job): whole groups,
    about half the configs each side."""
    if n_jobs < 2 or len(configs) < 2 * MIN_CONFIGS_PER_GROUP_JOB:
        return compute(configs)
    groups: dict = {}
    for i, c in enumerate(configs):
        groups.setdefault(key(c), []).append(i)
    if len(groups) < 2:
        return compute(configs)
    theirs: list[int] = []
    for idx in sorted(groups.values(), key=len, reverse=True):
        if len(theirs) + len(idx) <= len(configs) / 2:
            theirs += idx
    if not theirs or len(theirs) == len(configs):
        return compute(configs)
    mine = sorted(set(range(len(configs))) - set(theirs))
    try:
        child = helpers.ready()
        if child is None:
            return compute(configs)
        remote(child, [configs[i] for i in theirs])
        rows_mine = compute([configs[i] for i in mine])
        rows_theirs = child.result()
        if rows_theirs is None:  # the helper could not compute its share: that share here
            rows_theirs = compute([configs[i] for i in theirs])
    except (ChildDied, ChildError) as e:
        _helpers_failed(helpers, e)
        return compute(configs)
    out = np.empty((len(configs), rows_mine.shape[1]), rows_mine.dtype)
    out[mine], out[theirs] = rows_mine, rows_theirs
    return out


def split_rows(compute: Callable[[Sequence], np.ndarray], workload, configs: Sequence,
               mode: str, n_jobs: int, helpers: HelperPool) -> np.ndarray:
    """Rows of ``configs`` computed by ``compute`` here and by ``n_jobs - 1`` helpers."""
    n_jobs = max(1, min(n_jobs, len(configs) // MIN_CONFIGS_PER_JOB))
    if n_jobs == 1:
        return compute(configs)
    chunks = np.array_split(np.arange(len(configs)), n_jobs)
    try:
        children = helpers.children(n_jobs - 1)
        ChildPool._start([c for c in children if not c.alive])
        for child, idx in zip(children, chunks[1:]):
            child.send("rows", workload, [configs[i] for i in idx], mode)
        mine = compute([configs[i] for i in chunks[0]])
        return np.concatenate([mine, *(child.result() for child in children)])
    except (ChildDied, ChildError) as e:
        _helpers_failed(helpers, e)
        return compute(configs)


def _helpers_failed(helpers: HelperPool, e: Exception) -> None:
    """A helper died (killed, out of memory): close them all; the caller finishes alone."""
    helpers.close()
    warnings.warn(f"a feature helper process failed ({e}); featurizing in this process",
                  RuntimeWarning, stacklevel=3)
