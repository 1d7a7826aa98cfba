"""The raw config encoding (the paper's "configuration space" features S).

Each knob takes ``KNOB_WIDTH`` numbers: its choice normalised to [0, 1] (index / (size - 1)),
then up to four option values as sign * log2(1 + |v|): the factors of a split knob, the value of
a numeric knob, zeros for string knobs (reorder/annotate, identified by their index alone).
Knobs keep the space's order and the vector is zero-padded to ``MAX_KNOBS`` knobs, so the length
is the same for every space, but position p means different knobs in different spaces.
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..space import Config, ConfigSpace

MAX_KNOBS = 20  # grouped conv2d has 17 knobs on the CPU template
MAX_VALUES = 4
KNOB_WIDTH = 1 + MAX_VALUES
N_CONFIG = MAX_KNOBS * KNOB_WIDTH


def _scaled(v: Any) -> float:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, (int, float)):
        return math.copysign(math.log2(1.0 + abs(v)), v)
    return 0.0


def encode_config(space: ConfigSpace, config: Config) -> np.ndarray:
    if len(space.knobs) > MAX_KNOBS:
        raise ValueError(f"space {space.name} has {len(space.knobs)} knobs; the config encoding "
                         f"holds at most {MAX_KNOBS}")
    if len(config.choices) != len(space.knobs) or config.space_name != space.name or \
            config.space_key != space.key:
        raise ValueError(f"config of {config.space_key or config.space_name} with "
                         f"{len(config.choices)} knobs does not belong to space "
                         f"{space.key or space.name}: pass the space it came from")
    out = np.zeros(N_CONFIG, dtype=np.float32)
    for k, (knob, c) in enumerate(zip(space.knobs, config.choices)):
        if not 0 <= c < knob.size:
            raise ValueError(f"choice {c} out of range for knob {knob.name}; pass the space the "
                             "config came from")
        value = config.values[knob.name]
        if knob.options[c] != value:
            raise ValueError(f"knob {knob.name}: choice {c} is {knob.options[c]!r} in space "
                             f"{space.name} but the config says {value!r}; pass the space the "
                             "config came from")
        base = k * KNOB_WIDTH
        out[base] = c / (knob.size - 1) if knob.size > 1 else 0.0
        values = value if isinstance(value, tuple) else (value,)
        for t, v in enumerate(values[:MAX_VALUES]):
            out[base + 1 + t] = _scaled(v)
    return out


def knob_table(knob: Any) -> np.ndarray:
    """(size, KNOB_WIDTH) float32: a knob's ``encode_config`` columns for each of its options
    (what the batched encoders look up)."""
    table = np.zeros((knob.size, KNOB_WIDTH), np.float32)
    for c, value in enumerate(knob.options):
        table[c, 0] = c / (knob.size - 1) if knob.size > 1 else 0.0
        values = value if isinstance(value, tuple) else (value,)
        for t, v in enumerate(values[:MAX_VALUES]):
            table[c, 1 + t] = _scaled(v)
    return table


class ChoiceEncoder:
    """``encode_config`` of whole batches: ``encode(choices)`` maps an (n, knobs) matrix of
    option indices of ``space`` to its (n, N_CONFIG) rows, row for row equal to
    ``encode_config``, from per-knob tables built once (a vector env encodes thousands of
    configs a step)."""

    def __init__(self, space: ConfigSpace) -> None:
        if len(space.knobs) > MAX_KNOBS:
            raise ValueError(f"space {space.name} has {len(space.knobs)} knobs; the config "
                             f"encoding holds at most {MAX_KNOBS}")
        self.tables = [knob_table(knob) for knob in space.knobs]

    def encode(self, choices: np.ndarray) -> np.ndarray:
        choices = np.asarray(choices)
        out = np.zeros((len(choices), N_CONFIG), np.float32)
        for k, table in enumerate(self.tables):
            out[:, k * KNOB_WIDTH:(k + 1) * KNOB_WIDTH] = table[choices[:, k]]
        return out
