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

from ...features.config_encoding import KNOB_WIDTH, MAX_KNOBS, MAX_VALUES, N_CONFIG, _scaled
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
        knob_rows = [_knob_rows(knob) for knob in space.knobs]
        # runs of knobs [a, b), last first: (a, b, product of sizes, table (product, width))
        self.runs: list[tuple[int, int, int, np.ndarray]] = []
        b = len(space.knobs)
        while b > 0:
            a, rows = b - 1, knob_rows[b - 1]
            while a > 0 and len(rows) * len(knob_rows[a - 1]) <= CHUNK_ROWS:
                a -= 1
                prev = knob_rows[a]  # outer knob: its choice varies slowest within the run
                rows = np.concatenate([np.repeat(prev, len(rows), axis=0),
                                       np.tile(rows, (len(prev), 1))], axis=1)
            self.runs.append((a, b, len(rows), np.ascontiguousarray(rows, np.float32)))
            b = a

    def check(self, indices: np.ndarray) -> np.ndarray:
        """``indices`` as a flat int64 array, each in [0, space.size); else ``ValueError``."""
        idx = np.asarray(indices)
        if idx.dtype.kind not in "iu":
            raise ValueError(f"config indices must be integers, got dtype {idx.dtype}")
        idx = idx.astype(np.int64, copy=False).reshape(-1)
        if idx.size and (idx.min() < 0 or idx.max() >= self.size):
            raise ValueError(f"config indices out of range [0, {self.size}) of space "
                             f"{self.space.label}")
        return idx

    def __call__(self, indices: np.ndarray, out: Optional[np.ndarray] = None) -> np.ndarray:
        rest = self.check(indices)
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


def _knob_rows(knob) -> np.ndarray:
    """(size, KNOB_WIDTH) float32: a knob's encoded columns for each of its choices, computed
    as ``encode_config`` computes them."""
    rows = np.zeros((knob.size, KNOB_WIDTH), np.float32)
    for c, value in enumerate(knob.options):
        rows[c, 0] = c / (knob.size - 1) if knob.size > 1 else 0.0
        values = value if isinstance(value, tuple) else (value,)
        for t, v in enumerate(values[:MAX_VALUES]):
            rows[c, 1 + t] = _scaled(v)
    return rows


class EncoderCache:
    """Encoders by space key (or name, for a hand-made space): the tables of a space are built
    on its first batch."""

    def __init__(self) -> None:
        self._encoders: dict[str, ConfigEncoder] = {}

    def get(self, space: ConfigSpace) -> ConfigEncoder:
        key = space.label
        enc = self._encoders.get(key)
        if enc is None:
            enc = self._encoders[key] = ConfigEncoder(space)
        return enc


def encode_indices(space: ConfigSpace, indices: np.ndarray,
                   cache: Optional[EncoderCache] = None) -> np.ndarray:
    """``encode_config(space, space.get(i))`` for every ``i`` of ``indices``, as one (n,
    ``N_CONFIG``) float32 array. Pass a ``cache`` to build the space's tables once."""
    encoder = cache.get(space) if cache is not None else ConfigEncoder(space)
    return encoder(indices)


__all__ = ["ConfigEncoder", "EncoderCache", "encode_indices", "N_CONFIG"]
