"""Featurizing big batches on several cores.

Simulated annealing scores thousands of configs per model update, and lowering plus analysing one
config is about a millisecond of pure Python, so a batch of missing rows is split over a small
pool of spawned worker processes (the caller computes one share itself). Rows are pure functions
of (workload, config), so the split changes nothing but the time.
"""
from __future__ import annotations

import atexit
import multiprocessing as mp
import os
import warnings
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Callable, Sequence

import numpy as np

MIN_CONFIGS_PER_JOB = 128  # below this the pickling and hand-off cost more than they save
_pool: "ProcessPoolExecutor | None" = None
_pool_size = 0


def default_jobs() -> int:
    """Processes to featurize with: the cores this process may use, at most 8."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        n = os.cpu_count() or 1
    return max(1, min(8, n))


def _get_pool(workers: int) -> ProcessPoolExecutor:
    global _pool, _pool_size
    if _pool is None or _pool_size != workers:
        shutdown()
        _pool = ProcessPoolExecutor(workers, mp_context=mp.get_context("spawn"))
        _pool_size = workers
    return _pool


def shutdown() -> None:
    """Stop the worker processes (they start again on the next big batch)."""
    global _pool, _pool_size
    if _pool is not None:
        _pool.shutdown(wait=False, cancel_futures=True)
    _pool, _pool_size = None, 0


atexit.register(shutdown)


def _rows(workload, configs, mode: str) -> np.ndarray:
    from . import featurize  # noqa: PLC0415

    return featurize(workload, configs, mode)


def split_rows(compute: Callable[[Sequence], np.ndarray], workload, configs: Sequence,
               mode: str, n_jobs: int) -> np.ndarray:
    """Rows of ``configs`` computed by ``compute`` here and by ``n_jobs - 1`` workers."""
    n_jobs = max(1, min(n_jobs, len(configs) // MIN_CONFIGS_PER_JOB))
    if n_jobs == 1:
        return compute(configs)
    chunks = np.array_split(np.arange(len(configs)), n_jobs)
    try:
        pool = _get_pool(n_jobs - 1)
        futures = [pool.submit(_rows, workload, [configs[i] for i in idx], mode)
                   for idx in chunks[1:]]
        mine = compute([configs[i] for i in chunks[0]])
        return np.concatenate([mine, *(f.result() for f in futures)])
    except BrokenProcessPool as e:  # a worker died (killed, out of memory): finish here
        shutdown()
        warnings.warn(f"feature worker pool broke ({e}); featurizing in this process",
                      RuntimeWarning, stacklevel=2)
        return compute(configs)
