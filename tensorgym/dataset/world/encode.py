"""The config encoding of ``tensorgym.features.config_encoding.encode_config``, for a whole batch
of config indices at once.

An index is decoded into per-knob choices in mixed radix (the last knob varies fastest, as
``ConfigSpace.get``), with numpy; each knob's ``KNOB_WIDTH`` numbers are then a row of a lookup
table built once per space (``ConfigEncoder``). The rows are ``encode_config``'s bit for bit
(tests/test_world_model.py checks it). Keep one encoder per space (``EncoderCache``) to build the
tables once.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ...features.config_encoding import (KNOB_WIDTH, MAX_KNOBS, MAX_VALUES, N_CONFIG,
                                         knob_table)
from ...errors import InvalidConfigError
from ...space import ConfigSpace

CHUNK_ROWS = 2048  # rows of one run's table (see ConfigEncoder)


class ConfigEncoder:
    """``encoder(indices) -> (n, N_CONFIG) float32``: the rows of ``encode_config`` for the
    configs ``space.get(i)`` of ``indices``, without making a ``Config``.

    The knobs are cut, from the last, into runs whose product of sizes is at most
    ``CHUNK_ROWS``; each run gets a table of the encoded columns of every combination of its
    choices, so a batch costs one ``divmod`` and one ``np.take`` per run, not per knob."""

    def __init__(self, space: ConfigSpace) -> None:
        if len(space.knobs) > MAX_KNOBS:
            raise ValueError(f"space {space.name} has {len(space.knobs)} knobs; the config "
                             f"encoding holds at most {MAX_KNOBS}")
        if space.size >= 2 ** 63:
            raise ValueError(f"space {space.label} has {space.size:.3g} configs: its indices do "
                             "not fit int64")
        self.space = space
        self.size = space.size
        # runs of knobs [a, b), last first: (a, b, product of sizes, table (product, width))
        self.runs = _runs([knob_table(knob) for knob in space.knobs], "concatenate")

    def __call__(self, indices: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
        rest = check_indices(self.space, indices, self.size)
        n = len(rest)
        if out is None:
            out = np.zeros((n, N_CONFIG), np.float32)
        for a, b, radix, table in self.runs:
            if len(self.runs) > 1:
                rest, code = np.divmod(rest, radix)
            else:
                code = rest
            out[:, a * KNOB_WIDTH:b * KNOB_WIDTH] = np.take(table, code, axis=0)
        return out


def check_indices(space: ConfigSpace, indices: np.ndarray,
                  size: Optional[int] = None) -> np.ndarray:
    """``indices`` as a flat int64 array, each in [0, space.size) (``size``: the space's size,
    known already); else ``InvalidConfigError`` (a ``ValueError``)."""
    idx = np.asarray(indices)
    if idx.dtype.kind not in "iu":
        raise InvalidConfigError(f"config indices must be integers, got dtype {idx.dtype}")
    idx = idx.astype(np.int64, copy=False).reshape(-1)
    size = space.size if size is None else size
    if idx.size == 1:  # a single env's miss: no reductions
        if not 0 <= int(idx[0]) < size:
            raise InvalidConfigError(f"config index {int(idx[0])} out of range [0, {size}) of "
                                     f"space {space.label}")
    elif idx.size and (idx.min() < 0 or idx.max() >= size):
        raise InvalidConfigError(f"config indices out of range [0, {size}) of space "
                                 f"{space.label}")
    return idx


def _runs(knob_rows: list[np.ndarray], how: str) -> list[tuple[int, int, int, np.ndarray]]:
    """Cut the knobs, from the last, into runs [a, b) of at most ``CHUNK_ROWS`` combinations;
    each run's table has a row per combination (the run's last knob varying fastest): its
    knobs' rows side by side (``how="concatenate"``) or added up (``"add"``)."""
    runs = []
    b = len(knob_rows)
    while b > 0:
        a, rows = b - 1, knob_rows[b - 1]
        while a > 0 and len(rows) * len(knob_rows[a - 1]) <= CHUNK_ROWS:
            a -= 1
            prev = knob_rows[a]  # the outer knob: its choice varies slowest within the run
            if how == "concatenate":
                rows = np.concatenate([np.repeat(prev, len(rows), axis=0),
                                       np.tile(rows, (len(prev), 1))], axis=1)
            else:
                rows = (prev[:, None, :] + rows[None, :, :]).reshape(-1, rows.shape[1])
        runs.append((a, b, len(rows), np.ascontiguousarray(rows, np.float32)))
        b = a
    return runs




# The knob features: knobs by name, whatever their position in the space (the names of every
# template; the packing knobs of every op are one), then sums over the split knobs of log2 of
# their factors, level by level from the innermost: spatial axes' (the register tile, ...) and
# reduction axes'.
KNOB_NAMES = ("tile_b", "tile_g", "tile_oc", "tile_oh", "tile_ow", "tile_i", "tile_j",
              "tile_rc", "tile_ry", "tile_rx", "tile_rk", "reorder", "vectorize",
              "unroll_max_step", "parallel", "cache_write", "inline_pad", "vector_axis", "pack",
              "auto_unroll_max_step", "unroll_explicit", "vec_load", "contiguous_writeback",
              "pad_vector")
# The layout above is fixed by what was trained on it (the world model, the shipped edit
# policy), so knobs added since share the place of a knob their template never has: the GPU
# template's shared-memory knobs (issue 37) sit at CPU-only knobs of the nearest meaning.
ALIASES = {"pack_weight": "pack", "pack_b": "pack", "pack_w": "pack",
           "double_buffer": "cache_write", "smem_pad": "inline_pad", "vec_shared": "vectorize"}
SPATIAL_LEVELS, REDUCE_LEVELS = 4, 3
KNOB_FEATURE_NAMES = (
    tuple(f"{n}_{c}" for n in KNOB_NAMES for c in ("choice",) + tuple(f"v{i}" for i in
                                                                      range(MAX_VALUES)))
    + tuple(f"log2_spatial_level{j}" for j in range(SPATIAL_LEVELS))
    + tuple(f"log2_reduce_level{j}" for j in range(REDUCE_LEVELS)))
N_KNOB_FEATURES = len(KNOB_FEATURE_NAMES)


class KnobEncoder:
    """``encoder(indices) -> (n, N_KNOB_FEATURES) float32``: the knob features (``KNOB_NAMES``:
    each knob's ``encode_config`` columns at its name's place; then the level sums) of the
    configs of ``indices``. ``reduce_axes``: the names of the workload's reduction axes (their
    split knobs are ``tile_<name>``)."""

    def __init__(self, space: ConfigSpace, reduce_axes: "tuple[str, ...]" = ()) -> None:
        self.space = space
        self.size = space.size
        if space.size >= 2 ** 63:
            raise ValueError(f"space {space.label} has {space.size:.3g} configs: its indices do "
                             "not fit int64")
        base = len(KNOB_NAMES) * KNOB_WIDTH
        rows = []
        placed: dict[str, str] = {}
        for knob in space.knobs:
            full = np.zeros((knob.size, N_KNOB_FEATURES), np.float64)
            name = ALIASES.get(knob.name, knob.name)
            if placed.setdefault(name, knob.name) != knob.name:
                raise ValueError(f"knobs {placed[name]} and {knob.name} of space {space.label} "
                                 f"share the knob features' place {name!r}")
            if name in KNOB_NAMES:
                at = KNOB_NAMES.index(name) * KNOB_WIDTH
                full[:, at:at + KNOB_WIDTH] = knob_table(knob)
            if knob.kind == "split":
                reduce = knob.name.startswith("tile_") and knob.name[5:] in reduce_axes
                at, levels = (base + SPATIAL_LEVELS, REDUCE_LEVELS) if reduce else \
                    (base, SPATIAL_LEVELS)
                for c, factors in enumerate(knob.options):
                    for j, f in enumerate(reversed(factors[-levels:])):
                        full[c, at + j] = np.log2(f)
            rows.append(full)
        self.runs = _runs(rows, "add")

    def __call__(self, indices: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
        rest = check_indices(self.space, indices, self.size)
        n = len(rest)
        if out is None:
            out = np.zeros((n, N_KNOB_FEATURES), np.float32)
        else:
            out[:] = 0.0
        for _, _, radix, table in self.runs:
            if len(self.runs) > 1:
                rest, code = np.divmod(rest, radix)
            else:
                code = rest
            out += np.take(table, code, axis=0)
        return out


class EncoderCache:
    """Encoders by space key (or name, for a hand-made space): the tables of a space are built
    on its first batch."""

    def __init__(self) -> None:
        self._encoders: dict[str, ConfigEncoder] = {}
        self._knobs: dict[str, KnobEncoder] = {}

    def get(self, space: ConfigSpace) -> ConfigEncoder:
        key = space.label
        enc = self._encoders.get(key)
        if enc is None:
            enc = self._encoders[key] = ConfigEncoder(space)
        return enc

    def knobs(self, space: ConfigSpace, reduce_axes: "tuple[str, ...]" = ()) -> KnobEncoder:
        key = space.label
        enc = self._knobs.get(key)
        if enc is None:
            enc = self._knobs[key] = KnobEncoder(space, reduce_axes)
        return enc


def encode_indices(space: ConfigSpace, indices: np.ndarray,
                   cache: Optional[EncoderCache] = None) -> np.ndarray:
    """``encode_config(space, space.get(i))`` for every ``i`` of ``indices``, as one (n,
    ``N_CONFIG``) float32 array. Pass a ``cache`` to build the space's tables once."""
    encoder = cache.get(space) if cache is not None else ConfigEncoder(space)
    return encoder(indices)


__all__ = ["ConfigEncoder", "EncoderCache", "KNOB_FEATURE_NAMES", "KnobEncoder", "N_CONFIG",
           "N_KNOB_FEATURES", "encode_indices"]
