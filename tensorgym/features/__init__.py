"""Features of lowered programs for cost models (paper section 4).

Modes (``FEATURE_MODES``):

- ``"relation"`` (default): context relation features R (see ``relation.py``), then the
  whole-program figures; fixed length, transfers across shapes and operator types.
- ``"context"``: the per-loop context vectors (``context.py``) flattened, loops in pre-order,
  zero-padded / truncated to ``MAX_LOOPS`` rows, then the whole-program figures.
- ``"config"``: the raw knob encoding (``config_encoding.py``), padded to ``MAX_KNOBS`` knobs.
- ``"ast"``: one dict of arrays per program for a tree model (``ast.py``); not a matrix.

All features are pure functions of the lowered program (or, for ``config``, of the config):
no names, no randomness. Lowering and analysing one config costs about half a millisecond of
Python, so ``relation`` and ``context`` rows of a batch come from the fast path where it applies
(``fast.py``): the template's loop structure with the knob values as NumPy arrays over the whole
batch (``nest.py``, ``nest_cpu.py``, ``nest_gpu.py``), no lowering, the same rows bit for bit;
``featurize(..., fast=False)`` always lowers (the reference). A ``Featurizer`` holds the state:
an LRU cache of ``CACHE_SIZE`` rows per mode keyed by each config's space and knob choices (search
revisits configs) and the helper processes of big batches; whoever creates one closes it (``with
Featurizer() as f:``; an env owns one). The cache is not locked: call a featurizer from one thread
at a time. The module's ``featurize`` is one call of a featurizer of its own, created and closed
in the call: nothing lasts between calls. ``feature_names(mode)`` names every column.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Sequence

import numpy as np

from ..loopast import Program
from ..lower import lower
from ..space import Config, ConfigSpace, SpaceKey
from ..templates import space_of
from ..workloads import Workload
from .ast import NODE_TYPES, ast_arrays
from .ast import loop_names as names_of_loops
from .config_encoding import MAX_KNOBS, N_CONFIG, encode_config
from .context import (CONTEXT_NAMES, KIND_NAMES, N_CONTEXT, N_PROGRAM, PROGRAM_NAMES, SLOT_ROLES,
                      ProgramSummary, context_matrix, summarize)
from .fast import fast_rows, worthwhile
from .nest import Unsupported
from .parallel import HelperPool, default_jobs, split_groups, split_rows
from .relation import N_RELATION, RELATION_NAMES, RELATION_PAIRS, THRESHOLDS, relation_features

FEATURE_MODES = ("relation", "context", "config", "ast")
MAX_LOOPS = 32
_LENGTHS = {"relation": N_RELATION + N_PROGRAM, "context": MAX_LOOPS * N_CONTEXT + N_PROGRAM,
            "config": N_CONFIG}
CACHE_SIZE = 8192

__all__ = ["FEATURE_MODES", "MAX_LOOPS", "MAX_KNOBS", "NODE_TYPES", "CONTEXT_NAMES",
           "PROGRAM_NAMES", "RELATION_PAIRS", "RELATION_NAMES", "THRESHOLDS", "KIND_NAMES",
           "SLOT_ROLES", "Featurizer", "featurize", "feature_length", "context_matrix", "extract",
           "feature_names", "default_jobs"]


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


class Featurizer:
    """Feature rows with their state: a row cache per mode, the spaces configs came from, and the
    helper processes that lower big batches. Whoever creates one closes it (``close``, or a
    ``with`` block); an env owns one and closes it in ``env.close()``."""

    def __init__(self, cache_size: int = CACHE_SIZE) -> None:
        self.rows = {m: _LRU(cache_size) for m in ("relation", "context")}
        self.spaces: dict[SpaceKey, ConfigSpace] = {}
        self.helpers = HelperPool()

    def clear(self) -> None:
        for c in self.rows.values():
            c.data.clear()
        self.spaces.clear()

    def close(self) -> None:
        """Stop the helper processes; the caches stay usable (helpers start again if needed)."""
        self.helpers.close()

    def __enter__(self) -> "Featurizer":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __getstate__(self) -> dict:  # a copy starts empty: caches and processes stay here
        return {"size": self.rows["relation"].size}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["size"])

    def featurize(self, workload: Workload, configs: Sequence[Config], mode: str = "relation",
                  space: "ConfigSpace | None" = None, n_jobs: int = 1, fast: bool = True,
                  loop_names: bool = False) -> "np.ndarray | list[dict]":
        """Features of ``configs`` of ``workload``: float32 (n, feature_length(mode)), or for
        ``mode="ast"`` a list of dicts. ``space`` (for ``config`` mode) defaults to the template's
        default space of the configs' target; pass it when the configs come from another one.

        ``relation`` and ``context`` rows come from the fast path (``fast.py``: the template's loop
        structure evaluated for the whole batch with NumPy, no lowering) where it covers the
        workload and template and the batch is big enough to pay for it (``fast.worthwhile``), else
        from lowering each config; both give the same rows bit for bit. ``fast=False`` always lowers
        (the reference). ``n_jobs`` > 1 lowers big batches in that many processes
        (``parallel.default_jobs()`` is what this machine allows); the fast path needs none.
        ``loop_names`` adds each ``ast`` tree's ``loop_var`` (``ast.loop_names``)."""
        _check_mode(mode)
        configs = list(configs)
        checked: set[int] = set()  # the spaces seen: configs of one space pass or fail alike
        for c in configs:
            if not isinstance(c, Config) or id(c.space_key) not in checked:
                _check_config(workload, c)
                if c.space_key is not None:
                    checked.add(id(c.space_key))
        if mode == "ast":
            programs = [lower(workload, c) for c in configs]
            trees = [ast_arrays(p) for p in programs]
            if loop_names:  # for models that embed identifiers (the vanilla TreeGRU)
                for tree, p in zip(trees, programs):
                    tree["loop_var"] = names_of_loops(p)
            return trees
        out = np.empty((len(configs), _LENGTHS[mode]), dtype=np.float32)
        if mode == "config":
            for r, c in enumerate(configs):
                out[r] = encode_config(space or self._space(workload, c), c)
            return out
        cache = self.rows[mode]
        wkey = workload.key
        keys = [(c.space_key, c.choices) if c.space_key is not None  # knob values, cheaply
                else (wkey, c.space_name, tuple(c.values.items())) for c in configs]
        missing: dict = {}
        for r, key in enumerate(keys):
            row = cache.get(key)
            if row is None:
                missing.setdefault(key, r)
            else:
                out[r] = row
        if missing:
            rows = self._compute_rows(workload, [configs[r] for r in missing.values()], mode,
                                      n_jobs, fast)
            fresh = {key: i for i, key in enumerate(missing)}
            for key, i in fresh.items():
                # a row of its own: the caller may write into ``out``, and a view would keep the
                # whole batch alive while the cache holds one of its rows
                cache.put(key, rows[i].copy())
            if len(missing) == len(configs):  # all new and distinct: rows are in the configs' order
                return rows
            where = [(r, fresh[key]) for r, key in enumerate(keys) if key in fresh]
            out[[r for r, _ in where]] = rows[[i for _, i in where]]
        return out

    def _space(self, workload: Workload, config: Config) -> ConfigSpace:
        """The exact space ``config`` came from (its ``space_key``)."""
        if config.space_key is None:
            raise ValueError(f"config of space {config.space_name} comes from no template's space: "
                             "pass the space it came from (space=)")
        if config.space_key not in self.spaces:
            self.spaces[config.space_key] = space_of(workload, config.space_key)
        return self.spaces[config.space_key]

    def _compute_rows(self, workload: Workload, configs: list[Config], mode: str, n_jobs: int,
                      fast: bool) -> np.ndarray:
        by_space: dict[str, list[int]] = {}
        for i, c in enumerate(configs):
            by_space.setdefault(_template_of(c), []).append(i)
        parts = []
        for name, idx in by_space.items():
            batch = [configs[i] for i in idx] if len(by_space) > 1 else configs
            rows = None
            if fast and worthwhile(workload, name, mode, len(batch)):
                try:
                    rows = split_groups(
                        lambda cs: fast_rows(workload, cs, mode, MAX_LOOPS),
                        lambda child, cs: child.send("fast_rows", workload, cs, mode, MAX_LOOPS),
                        batch, _loop_order, n_jobs, self.helpers)
                except Unsupported:  # knob values the template's nest does not model: lower them
                    pass
            if rows is None:
                rows = split_rows(lambda cs: rows_by_lowering(workload, cs, mode), workload, batch,
                                  mode, n_jobs, self.helpers)
            parts.append((idx, rows))
        if len(parts) == 1:
            return parts[0][1]
        out = np.empty((len(configs), _LENGTHS[mode]), dtype=np.float32)
        for idx, rows in parts:
            out[idx] = rows
        return out


def featurize(workload: Workload, configs: Sequence[Config], mode: str = "relation",
              space: "ConfigSpace | None" = None, n_jobs: int = 1, fast: bool = True,
              loop_names: bool = False) -> "np.ndarray | list[dict]":
    """``Featurizer.featurize`` (see there) on a featurizer of this call alone: no rows are kept
    for later calls, and helper processes (``n_jobs`` > 1) are closed before it returns. Callers
    that featurize again and again keep a ``Featurizer`` of their own."""
    with Featurizer() as featurizer:
        return featurizer.featurize(workload, configs, mode, space, n_jobs, fast, loop_names)


def _check_config(workload: Workload, config: Config) -> None:
    if not isinstance(config, Config):
        raise TypeError(f"expected a Config, got {type(config).__name__}")
    key = config.space_key
    if (key.workload_key != workload.key) if key is not None else \
            config.space_name.split("/")[0] != workload.op:
        raise ValueError(f"config of space {key or config.space_name} does not fit "
                         f"{workload.label}")


def _loop_order(config: Config) -> "tuple | None":
    """The unit the fast path's work splits by over processes (``split_groups``): a side with
    fewer loop orders (``reorder``) analyses a nest with fewer places."""
    order = config.values.get("reorder")
    return tuple(order) if order is not None else None


def _template_of(config: Config) -> str:
    """The template whose lowering gives the config's rows (its family name for a config of no
    template's space, which lowering then refuses)."""
    return config.space_key.template if config.space_key is not None else config.space_name


def rows_by_lowering(workload: Workload, configs: Sequence[Config], mode: str) -> np.ndarray:
    """The reference rows: lower every config and analyse its loop AST."""
    return np.stack([_from_summary(summarize(lower(workload, c)), mode) for c in configs])


