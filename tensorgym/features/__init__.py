"""Features of lowered programs for cost models (paper section 4).

Modes (``FEATURE_MODES``):

- ``"relation"`` (default): context relation features R (see ``relation.py``), then the
  whole-program figures; fixed length, transfers across shapes and operator types.
- ``"context"``: the per-loop context vectors (``context.py``) flattened, loops in pre-order,
  zero-padded / truncated to ``MAX_LOOPS`` rows, then the whole-program figures.
- ``"config"``: the raw knob encoding (``config_encoding.py``), padded to ``MAX_KNOBS`` knobs.
- ``"ast"``: one dict of arrays per program for a tree model (``ast.py``); not a matrix.

All features are pure functions of the lowered program (or, for ``config``, of the config):
no names, no randomness. Lowering and featurizing one config costs about a millisecond of
Python, so ``featurize`` keeps an LRU cache of ``CACHE_SIZE`` rows per mode keyed by (workload,
space name, knob values): search revisits configs. The cache is per process and not locked;
call ``featurize`` from one thread at a time. ``feature_names(mode)`` names every column.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Sequence

import numpy as np

from ..loopast import Program
from ..space import Config, ConfigSpace
from ..workloads import Workload
from .ast import NODE_TYPES, ast_arrays
from .config_encoding import MAX_KNOBS, N_CONFIG, encode_config
from .context import (CONTEXT_NAMES, KIND_NAMES, N_CONTEXT, N_PROGRAM, PROGRAM_NAMES, SLOT_ROLES,
                      ProgramSummary, context_matrix, summarize)
from .parallel import default_jobs, split_rows
from .relation import N_RELATION, RELATION_NAMES, RELATION_PAIRS, THRESHOLDS, relation_features

FEATURE_MODES = ("relation", "context", "config", "ast")
MAX_LOOPS = 32
_LENGTHS = {"relation": N_RELATION + N_PROGRAM, "context": MAX_LOOPS * N_CONTEXT + N_PROGRAM,
            "config": N_CONFIG}
CACHE_SIZE = 8192

__all__ = ["FEATURE_MODES", "MAX_LOOPS", "MAX_KNOBS", "NODE_TYPES", "CONTEXT_NAMES",
           "PROGRAM_NAMES", "RELATION_PAIRS", "RELATION_NAMES", "THRESHOLDS", "KIND_NAMES",
           "SLOT_ROLES", "featurize", "feature_length", "context_matrix", "extract",
           "feature_names", "clear_cache", "default_jobs"]


def _check_mode(mode: str) -> None:
    if mode not in FEATURE_MODES:
        raise ValueError(f"unknown feature mode {mode!r}; use one of {', '.join(FEATURE_MODES)}")


def feature_length(mode: str = "relation") -> int:
    """Length of a feature row of a fixed-length mode (``ast`` has none)."""
    _check_mode(mode)
    if mode == "ast":
        raise ValueError("mode 'ast' gives per-program dicts of arrays, not fixed-length rows")
    return _LENGTHS[mode]


def feature_names(mode: str = "relation") -> tuple[str, ...]:
    feature_length(mode)
    if mode == "relation":
        return RELATION_NAMES + PROGRAM_NAMES
    if mode == "context":
        return tuple(f"loop{k}_{n}" for k in range(MAX_LOOPS) for n in CONTEXT_NAMES) + PROGRAM_NAMES
    return tuple(f"knob{k}_{f}" for k in range(MAX_KNOBS)
                 for f in ("choice", "v0", "v1", "v2", "v3"))


def _from_summary(summary: ProgramSummary, mode: str) -> np.ndarray:
    if mode == "relation":
        return np.concatenate([relation_features(summary.context), summary.program])
    flat = np.zeros((MAX_LOOPS, N_CONTEXT), dtype=np.float32)
    n = min(MAX_LOOPS, summary.context.shape[0])
    flat[:n] = summary.context[:n]
    return np.concatenate([flat.ravel(), summary.program])


def extract(program: Program, mode: str = "relation") -> "np.ndarray | dict":
    """Features of one lowered program: a float32 row, or a dict of arrays for ``ast``."""
    _check_mode(mode)
    if mode == "config":
        raise ValueError("mode 'config' encodes a config, not a program; use featurize()")
    summary = summarize(program)
    if mode == "ast":
        return ast_arrays(program, summary)
    return _from_summary(summary, mode)


class _LRU:
    def __init__(self, size: int) -> None:
        self.size = size
        self.data: OrderedDict = OrderedDict()

    def get(self, key):
        row = self.data.get(key)
        if row is not None:
            self.data.move_to_end(key)
        return row

    def put(self, key, row) -> None:
        self.data[key] = row
        if len(self.data) > self.size:
            self.data.popitem(last=False)


_rows = {m: _LRU(CACHE_SIZE) for m in ("relation", "context")}
_spaces: dict[tuple[str, str], ConfigSpace] = {}


def clear_cache() -> None:
    for c in _rows.values():
        c.data.clear()
    _spaces.clear()


def _space(workload: Workload, config: Config) -> ConfigSpace:
    key = (workload.key, config.space_name)
    if key not in _spaces:
        from ..templates import space_for  # noqa: PLC0415

        kind = config.space_name.split("/")[-1]
        # "<op>/gpu" is one space shared by both GPU targets.
        _spaces[key] = space_for(workload, "cuda" if kind == "gpu" else kind)
    return _spaces[key]


def _check_config(workload: Workload, config: Config) -> None:
    if not isinstance(config, Config):
        raise TypeError(f"expected a Config, got {type(config).__name__}")
    if config.space_name.split("/")[0] != workload.op:
        raise ValueError(f"config of space {config.space_name} does not fit a {workload.op} "
                         f"workload ({workload.label})")


def featurize(workload: Workload, configs: Sequence[Config], mode: str = "relation",
              space: "ConfigSpace | None" = None, n_jobs: int = 1) -> "np.ndarray | list[dict]":
    """Features of ``configs`` of ``workload``: float32 (n, feature_length(mode)), or for
    ``mode="ast"`` a list of dicts. ``space`` (for ``config`` mode) defaults to the template's
    default space of the configs' target; pass it when the configs come from another one.
    ``n_jobs`` > 1 lowers big batches of uncached ``relation``/``context`` rows in that many
    processes (``parallel.default_jobs()`` is what this machine allows)."""
    from ..lower import lower  # noqa: PLC0415

    _check_mode(mode)
    configs = list(configs)
    for c in configs:
        _check_config(workload, c)
    if mode == "ast":
        return [ast_arrays(lower(workload, c)) for c in configs]
    out = np.empty((len(configs), _LENGTHS[mode]), dtype=np.float32)
    if mode == "config":
        for r, c in enumerate(configs):
            out[r] = encode_config(space or _space(workload, c), c)
        return out
    cache = _rows[mode]
    wkey = workload.key
    keys = [(wkey, c.space_name, tuple(c.values.items())) for c in configs]
    missing: dict = {}
    for r, key in enumerate(keys):
        row = cache.get(key)
        if row is None:
            missing.setdefault(key, r)
        else:
            out[r] = row
    if missing:
        todo = [configs[r] for r in missing.values()]

        def compute(cs: Sequence[Config]) -> np.ndarray:
            return np.stack([_from_summary(summarize(lower(workload, c)), mode) for c in cs])

        rows = split_rows(compute, workload, todo, mode, n_jobs)
        fresh = dict(zip(missing, rows))
        for key, row in fresh.items():
            cache.put(key, row)
        for r, key in enumerate(keys):
            if key in fresh:
                out[r] = fresh[key]
    return out
