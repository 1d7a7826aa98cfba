"""The moves of ``action_mode="edit"``: each action changes one knob of the current schedule to a
neighbouring option. A move is a table over its knob's options (``EditMoves``): the option it
leads to from each option, or -1 where it would leave the knob's options, so that masks and
steps are look-ups.

Two neighbourhoods (``EDIT_MOVES``):

- ``"step"`` (default): two moves per knob, ``down`` and ``up``: the previous / next option in
  the knob's option order. Action ``2k`` moves knob ``k`` down, ``2k + 1`` up, so the action
  space is ``Discrete(2 * n_knobs)``. What a neighbour is, per knob kind:

  * ``split``: the options are the factorizations of the axis (outermost factor first) sorted
    lexicographically, so a step mostly trades a factor between the two innermost levels
    (``(1, 2, 8)`` -> ``(1, 4, 4)``) and, at the end of a run, carries into an outer level
    (``(1, 16, 1)`` -> ``(2, 1, 8)``);
  * ``reorder``: the template's list of loop orders, in its order (no metric: a neighbour is
    the next listed order);
  * ``annotate``: the template's choices in order (``none`` <-> ``inner``);
  * ``other``: the values in the template's order, increasing for the numeric knobs
    (``unroll_max_step`` 0 -> 16 -> 64 -> 512, ``parallel`` 0 -> 1 -> 2, flags 0 <-> 1).

- ``"factor"``: ``step``'s two moves for every knob but the split knobs, and for a split knob
  of ``L`` levels ``2 (L - 1)`` moves, two per pair of adjacent levels ``(i, i + 1)``:
  ``inward`` moves a prime factor from level ``i`` to level ``i + 1``, ``outward`` from level
  ``i + 1`` to level ``i`` (the smallest prime of the source level whose move gives an option of
  the knob; invalid where none does). Each move keeps the product and changes two factors by one
  prime: a tiling's true neighbours, where sorted order can jump. Every tiling of a knob is
  reachable from every other (checked for every registered workload's CPU and GPU spaces). A split knob of 2 levels has 2
  moves either way; the action space stays fixed for a space (``len(moves)``), a little larger
  than ``2 * n_knobs`` where a template splits an axis in 3 or 4.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import numpy as np

from ..errors import TensorGymError
from ..space import ConfigSpace, Knob

EDIT_MOVES = ("step", "factor")
START_MODES = ("reference", "seed", "random")


@dataclass(frozen=True)
class Move:
    """One edit: knob ``knob`` (its index; ``name``) in ``direction`` (``down`` / ``up``, or a
    split's ``inward`` / ``outward`` between levels ``levels``); ``dest[c]`` is the option it
    leads to from option ``c``, -1 where there is none."""

    knob: int
    name: str
    direction: str
    dest: tuple[int, ...]
    levels: Optional[tuple[int, int]] = None

    def describe(self) -> dict[str, Any]:
        """``info["edit"]`` of this move."""
        out: dict[str, Any] = {"knob": self.name, "direction": self.direction}
        if self.levels is not None:
            out["levels"] = self.levels
        return out


def _primes(n: int) -> list[int]:
    out, p = [], 2
    while p * p <= n:
        if n % p == 0:
            out.append(p)
            while n % p == 0:
                n //= p
        p += 1
    return out + ([n] if n > 1 else [])


def _factor_dest(options: tuple, src: int, dst: int) -> tuple[int, ...]:
    """For each option of a split knob, the option with a prime moved from level ``src`` to
    level ``dst`` (the smallest prime that gives an option), or -1."""
    index = {tuple(o): i for i, o in enumerate(options)}
    dest = []
    for o in options:
        to = -1
        for p in _primes(o[src]):
            f = list(o)
            f[src] //= p
            f[dst] *= p
            to = index.get(tuple(f), -1)
            if to >= 0:
                break
        dest.append(to)
    return tuple(dest)


def step_moves(k: int, knob: Knob) -> list[Move]:
    n = knob.size
    down = tuple(c - 1 for c in range(n))  # -1 from option 0
    up = tuple(c + 1 if c + 1 < n else -1 for c in range(n))
    return [Move(k, knob.name, "down", down), Move(k, knob.name, "up", up)]


def factor_moves(k: int, knob: Knob) -> list[Move]:
    levels = len(knob.options[0])
    out = []
    for i in range(levels - 1):
        out.append(Move(k, knob.name, "inward", _factor_dest(knob.options, i, i + 1), (i, i + 1)))
        out.append(Move(k, knob.name, "outward", _factor_dest(knob.options, i + 1, i),
                        (i, i + 1)))
    return out


def _is_split(knob: Knob) -> bool:
    return knob.kind == "split" and all(isinstance(o, tuple) and len(o) == len(knob.options[0])
                                        and len(o) > 1 for o in knob.options)


class EditMoves:
    """The moves of ``space`` in neighbourhood ``kind`` (``EDIT_MOVES``), in action order."""

    def __init__(self, space: ConfigSpace, kind: str = "step") -> None:
        if kind not in EDIT_MOVES:
            raise TensorGymError(f"unknown edit_moves {kind!r}; use one of {EDIT_MOVES}")
        moves: list[Move] = []
        for k, knob in enumerate(space.knobs):
            if kind == "factor" and _is_split(knob):
                moves.extend(factor_moves(k, knob))
            else:
                moves.extend(step_moves(k, knob))
        self.kind = kind
        self.moves = tuple(moves)
        self._knob = np.array([m.knob for m in moves], np.int64)
        width = max(space.dims)
        self._dest = np.full((len(moves), width), -1, np.int64)
        for a, m in enumerate(moves):
            self._dest[a, : len(m.dest)] = m.dest

    def __len__(self) -> int:
        return len(self.moves)

    def masks(self, choices: tuple[int, ...]) -> np.ndarray:
        """Which moves lead somewhere from the schedule with ``choices``."""
        current = np.asarray(choices, np.int64)[self._knob]
        return self._dest[np.arange(len(self.moves)), current] >= 0

    def apply(self, choices: tuple[int, ...], action: int) -> Optional[tuple[int, ...]]:
        """The choices after move ``action``, or None where it leaves the knob's options."""
        m = self.moves[action]
        to = m.dest[choices[m.knob]]
        if to < 0:
            return None
        out = list(choices)
        out[m.knob] = to
        return tuple(out)
