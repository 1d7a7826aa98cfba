"""``ppo-pretrained``: a search agent whose proposals come from the edit policy learned across the
corpus's train tasks on replay (``edit_policy.py``), run with numpy alone.

A hill climb with a learned proposal: the first proposals are the template's seed schedules
(``templates.seeds.seed_configs``: the reference schedule, then up to ``seeds - 1`` hand-derived
ones; the reference tuner's warm start measures the same ones first), or the reference schedule
alone with ``seeds=1`` (as the policy was trained); each later ask applies moves sampled
from the policy (the masked softmax over ``named_moves.MOVE_SLOTS``, from a ``seed``-ed
generator) to the best schedule measured so far, several distinct moves per ask when asked for
several configs. It never proposes a config measured (or proposed) before: the mask leaves
those out; when the policy has no allowed move left (a local optimum of the named moves) it
proposes a random unmeasured neighbour of the best (one knob changed), and, when even the best's
neighbours are all measured, a random unmeasured config of the space. ``tell`` keeps the best.

The observation's ``progress`` is moves made / the walk length the policy was trained with,
at most 1, so a longer tune goes on as at the end of a training walk.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import numpy as np

from tensorgym.envs.named_moves import NamedMoves
from tensorgym.errors import TensorGymError
from tensorgym.hardware.target import get_target
from tensorgym.measure.result import MeasureResult
from tensorgym.search import SearchStrategy
from tensorgym.space import Config, ConfigSpace
from tensorgym.templates.seeds import seed_configs
from tensorgym.workloads import get_workload

from .edit_policy import NumpyPolicy, default_policy_path, load_policy

RANDOM_TRIES = 64  # random configs drawn to find an unmeasured one before giving up


class EditPolicyAgent(SearchStrategy):
    """See the module docstring. ``policy``: the path of a saved policy (default: the shipped
    one of ``target``); ``batch_size``: the most configs asked at once (the seeds first, up to
    that many per ask); ``seeds``: how many seed schedules come first (1: the reference
    schedule alone)."""

    name = "ppo-pretrained"

    def __init__(self, policy: Optional[str] = None, target: str = "cpu",
                 batch_size: int = 4, seeds: int = 8) -> None:
        if batch_size < 1:
            raise TensorGymError(f"batch_size must be >= 1, got {batch_size}")
        if seeds < 1:
            raise TensorGymError(f"seeds must be >= 1, got {seeds}")
        self.seeds = int(seeds)
        self.policy: NumpyPolicy = load_policy(policy or default_policy_path(target))
        self.target = target
        self.batch_size = int(batch_size)
        self.budget = int(self.policy.header.get("about", {}).get("config", {})
                          .get("budget", 16))
        self.fallbacks = {"neighbour": 0, "random": 0}  # proposals the policy did not make

    @property
    def training(self) -> dict:
        """What the policy learned before any tune, as its weights file says (dataset, split,
        steps, seconds, ...): the generalization track reports it beside the score."""
        return dict(self.policy.header.get("about", {}))

    def reset(self, space: ConfigSpace, seed: int) -> None:
        if space.workload_key is None:
            raise TensorGymError(f"{self.name} needs a template's space (with a workload key), "
                                 f"not {space.name}")
        if space.template != get_target(self.target).template:
            raise TensorGymError(f"{self.name}'s policy was trained on {self.target} spaces, "
                                 f"not on {space.label}")
        workload = get_workload(space.workload_key)
        self.space = space
        self.moves = NamedMoves(workload, self.target, space)
        self.rng = np.random.default_rng(seed)
        self.start = seed_configs(workload, self.target, max_seeds=self.seeds)
        self.start_indices = {c.index for c in self.start}
        self.reference = self.start[0]
        self.reference_seconds: Optional[float] = None
        self.best: Optional[MeasureResult] = None
        self.measured: set[int] = set()
        self.moves_made = 0
        self.fallbacks = {"neighbour": 0, "random": 0}

    def ask(self, n: int) -> list[Config]:
        start = [c for c in self.start if c.index not in self.measured][:n]
        if start:
            self.measured.update(c.index for c in start)
            return start
        base = self.best.config if self.best is not None else self.reference
        current = np.array(base.choices, np.int64)
        mask = self._unmeasured(current, self.moves.masks(current))
        out: list[Config] = []
        while len(out) < n and mask.any():
            slot = self.policy.sample(self._observe(current), mask, self.rng)
            mask[slot] = False
            knob, dest = self.moves.dest(current, np.array([slot]))
            choices = current.copy()
            choices[knob[0]] = dest[0]
            out.append(self._propose(choices))
        while len(out) < n:
            c = self._fallback(base)
            if c is None:
                break
            out.append(c)
        return out

    def tell(self, results: Sequence[MeasureResult]) -> None:
        for r in results:
            self.measured.add(r.config.index)
            if r.config.index == self.reference.index and r.ok:
                self.reference_seconds = r.median
            if r.ok and (self.best is None or r.median < self.best.median):
                self.best = r
            if r.config.index not in self.start_indices:
                self.moves_made += 1

    # ---------------------------------------------------------------- internals

    def _observe(self, current: np.ndarray) -> np.ndarray:
        gain = 0.0
        if self.best is not None and self.reference_seconds:
            gain = math.log(self.reference_seconds / self.best.median)
        return self.moves.observe(current[None], np.array([self.moves_made / self.budget]),
                                  np.array([gain]))[0]

    def _unmeasured(self, current: np.ndarray, mask: np.ndarray) -> np.ndarray:
        slots = np.flatnonzero(mask)
        if len(slots):
            rows = np.repeat(current[None], len(slots), axis=0)
            knob, dest = self.moves.dest(rows, slots)
            rows[np.arange(len(slots)), knob] = dest
            mask[slots] = [int(i) not in self.measured for i in self.moves.indices(rows)]
        return mask

    def _propose(self, choices: np.ndarray) -> Config:
        c = self.space.from_choices([int(x) for x in choices])
        self.measured.add(c.index)
        return c

    def _fallback(self, base: Config) -> Optional[Config]:
        """A random unmeasured neighbour of ``base``, else a random unmeasured config."""
        neighbours = [c for c in self.space.neighbors(base) if c.index not in self.measured]
        if neighbours:
            self.fallbacks["neighbour"] += 1
            return self._propose(np.array(neighbours[self.rng.integers(len(neighbours))]
                                          .choices))
        for c in self.space.sample(self.rng, RANDOM_TRIES):
            if c.index not in self.measured:
                self.fallbacks["random"] += 1
                return self._propose(np.array(c.choices))
        return None


__all__ = ["EditPolicyAgent"]
