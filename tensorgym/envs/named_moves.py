"""Named moves: one action space for every task, so that one policy can edit any schedule.

``MOVE_SLOTS`` is a fixed table of moves over knob *names* (``dataset.world.encode.KNOB_NAMES``,
``ALIASES`` folding the packing knobs of every op into ``pack`` and placing the GPU template's
shared-memory knobs at CPU-only names): for a split knob name
(``tile_*``) the slots ``(name, inward|outward, pair i)`` for ``i < MAX_LEVELS - 1``, for every
other name ``(name, down|up)``. ``NamedMoves(workload, target)`` maps each slot to the task's
``EditMoves(space, "factor")`` move of that name, direction and level pair, or to nothing: a
slot with no move (a knob the template lacks, a level pair past its split, a ``tile_*`` knob of
one level, which ``EditMoves`` steps down/up instead) is always masked.

The observation of a schedule (``OBS_LAYOUT``, ``OBS_LENGTH`` numbers) is the same for every
task: the knob features by name (``KnobEncoder``), the workload descriptor
(``features.descriptor``), then ``progress`` (moves made / moves of the walk, at most 1) and
``log_gain`` (log(reference seconds / best seconds so far)).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..dataset.world.encode import ALIASES, KNOB_NAMES, N_KNOB_FEATURES, KnobEncoder
from ..features.descriptor import DESCRIPTOR_LENGTH, workload_descriptor
from ..space import ConfigSpace
from ..templates import space_for
from ..workloads import Workload, get_workload
from .edit import EditMoves

MAX_LEVELS = 4  # the most levels a split knob of any template has


@dataclass(frozen=True)
class MoveSlot:
    """One named move: knob ``name`` in ``direction``; ``pair`` the level pair ``(pair,
    pair + 1)`` of a split's ``inward`` / ``outward`` move, None for ``down`` / ``up``."""

    name: str
    direction: str
    pair: Optional[int] = None

    def key(self) -> tuple:
        return (self.name, self.direction, self.pair)


def _slots() -> tuple[MoveSlot, ...]:
    out = []
    for name in KNOB_NAMES:
        if name.startswith("tile_"):
            out += [MoveSlot(name, d, i) for i in range(MAX_LEVELS - 1)
                    for d in ("inward", "outward")]
        else:
            out += [MoveSlot(name, d) for d in ("down", "up")]
    return tuple(out)


MOVE_SLOTS = _slots()
N_SLOTS = len(MOVE_SLOTS)
OBS_LAYOUT = (("knobs", N_KNOB_FEATURES), ("descriptor", DESCRIPTOR_LENGTH),
              ("progress", 1), ("log_gain", 1))
OBS_LENGTH = sum(n for _, n in OBS_LAYOUT)


def slot_table() -> list[list]:
    """``MOVE_SLOTS`` as JSON-ready ``[name, direction, pair]`` rows (saved with a policy)."""
    return [[s.name, s.direction, s.pair] for s in MOVE_SLOTS]


class NamedMoves:
    """The named moves and observations of one task (``workload`` on ``target``): see the
    module docstring. Schedules are rows of option indices (``Config.choices``). ``space``:
    the workload's space on ``target`` (default ``space_for(workload, target)``)."""

    def __init__(self, workload: "str | Workload", target: str = "cpu",
                 space: Optional[ConfigSpace] = None) -> None:
        self.workload = get_workload(workload)
        self.target = target
        self.space = space if space is not None else space_for(self.workload, target)
        self.moves = EditMoves(self.space, "factor")
        at = {s.key(): i for i, s in enumerate(MOVE_SLOTS)}
        self.slot_move = np.full(N_SLOTS, -1, np.int64)
        for a, m in enumerate(self.moves.moves):
            name = ALIASES.get(m.name, m.name)
            slot = at.get((name, m.direction, m.levels[0] if m.levels else None))
            if slot is not None and self.slot_move[slot] < 0:  # a name twice: the first knob
                self.slot_move[slot] = a
        width = max(self.space.dims)
        self.slot_knob = np.zeros(N_SLOTS, np.int64)
        self.slot_dest = np.full((N_SLOTS, width), -1, np.int64)
        for slot, a in enumerate(self.slot_move):
            if a >= 0:
                m = self.moves.moves[a]
                self.slot_knob[slot] = m.knob
                self.slot_dest[slot, :len(m.dest)] = m.dest
        dims = np.array(self.space.dims, np.int64)
        self._radix = np.cumprod(np.concatenate([[1], dims[:0:-1]]))[::-1].astype(np.int64)
        reduce_axes = tuple(ax.name for ax in self.workload.output.op.reduce_axes)
        self._encoder = KnobEncoder(self.space, reduce_axes)
        self.descriptor = workload_descriptor(self.workload, target)

    def masks(self, choices: np.ndarray) -> np.ndarray:
        """(n, N_SLOTS) bool for (n, knobs) schedules (or (N_SLOTS,) for one): the slots with a
        move that stays in its knob's options."""
        c = np.asarray(choices, np.int64)
        one = c.ndim == 1
        c = np.atleast_2d(c)
        out = self.slot_dest[np.arange(N_SLOTS), c[:, self.slot_knob]] >= 0
        return out[0] if one else out

    def dest(self, choices: np.ndarray, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(knob, option) that slot ``slots[e]`` moves row ``e`` of ``choices`` to (option -1:
        no move)."""
        c = np.atleast_2d(np.asarray(choices, np.int64))
        knob = self.slot_knob[slots]
        return knob, self.slot_dest[slots, c[np.arange(len(c)), knob]]

    def indices(self, choices: np.ndarray) -> np.ndarray:
        """Config indices (``ConfigSpace.get``'s) of (n, knobs) schedules."""
        return np.atleast_2d(np.asarray(choices, np.int64)) @ self._radix

    def observe(self, choices: np.ndarray, progress: np.ndarray,
                log_gain: np.ndarray) -> np.ndarray:
        """(n, OBS_LENGTH) float32 observations of (n, knobs) schedules."""
        c = np.atleast_2d(np.asarray(choices, np.int64))
        obs = np.empty((len(c), OBS_LENGTH), np.float32)
        self._encoder(self.indices(c), out=obs[:, :N_KNOB_FEATURES])
        obs[:, N_KNOB_FEATURES:N_KNOB_FEATURES + DESCRIPTOR_LENGTH] = self.descriptor
        obs[:, -2] = np.minimum(np.asarray(progress, np.float64), 1.0)
        obs[:, -1] = log_gain
        return obs


__all__ = ["MAX_LEVELS", "MOVE_SLOTS", "MoveSlot", "N_SLOTS", "NamedMoves", "OBS_LAYOUT",
           "OBS_LENGTH", "slot_table"]
