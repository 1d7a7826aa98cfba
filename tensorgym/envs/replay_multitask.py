"""``ReplayMultiTaskEditEnv``: edit walks over many tasks of a replay world, stepped as one batch,
for training one policy across tasks (``tensorgym.agents.edit_policy``).

Each of ``num_envs`` walks samples a task from ``workloads`` at each episode start (from the
seed of ``reset``), starts at the task's reference schedule (``templates.default_config``) and
makes ``budget`` moves. An action is a slot of ``named_moves.MOVE_SLOTS``, the same for every
task; ``action_masks()`` allows a slot where the task has its move, the move stays in its
knob's options and leads to a schedule this walk has not measured yet (a search never measures a
config twice). A walk with no allowed move left ends early (terminated).

The walk is a hill climb with a learned proposal: a move's schedule is answered as
``ReplayVectorEnv`` answers (the recorded draws of the env's own stream, the world model for the
rest, one call per task and step) and the walk moves to it only when it is faster than its
best. The reward is the gain of the best-so-far, ``log(best_before / min(best_before, t_new))``
(>= 0); a failed schedule or a masked move gets ``failure_penalty`` (``FAILURE_PENALTY``, -0.1:
small, so that a walk is not scared away from knobs that sometimes fail). An episode's return is
thus ``log(reference / best after budget moves)`` less the penalties: what a search of that many
trials is judged on.

Observations (``named_moves.OBS_LAYOUT``): the knob features of the walk's schedule by name,
the workload descriptor, ``moves / budget`` and ``log(reference / best)``. Autoreset is
same-step: the step that ends an episode returns the next episode's first observation, the last
one in ``infos["final_obs"]`` (what stable-baselines3's vector envs expect). One ``Dataset`` and
one world model serve every task (``world``: a ``WorldModel``, default the one the dataset's
replay fits or has cached).
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any, Optional, Sequence

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from ..dataset.data import Dataset
from ..dataset.replay import ReplayMeasurer
from ..errors import TensorGymError
from ..space import is_int
from ..templates import default_config
from .named_moves import N_SLOTS, OBS_LENGTH, NamedMoves
from .replay_vector import ReplayVectorEnv
from .replay_vector_edit import discrete_actions

FAILURE_PENALTY = -0.1


@dataclass(frozen=True)
class WalkConfig:
    """The walks: ``num_envs`` of them, ``budget`` moves each, ``failure_penalty`` for a failed
    or masked move; replay of ``target`` (``dataset_device``: the dataset's device, if it has
    several; ``resample``: ``ReplayMeasurer``'s)."""

    num_envs: int = 64
    budget: int = 16
    failure_penalty: float = FAILURE_PENALTY
    target: str = "cpu"
    dataset_device: Optional[str] = None
    resample: bool = True

    def check(self) -> None:
        for name in ("num_envs", "budget"):
            v = getattr(self, name)
            if not is_int(v) or v < 1:
                raise TensorGymError(f"{name} must be an integer >= 1, got {v!r}")
        if not math.isfinite(self.failure_penalty) or self.failure_penalty > 0:
            raise TensorGymError(f"failure_penalty must be a finite number <= 0, got "
                                 f"{self.failure_penalty!r}")


class _Task:
    """One task's answering (a one-env ``ReplayVectorEnv``), moves and reference."""

    def __init__(self, key: str, data: Dataset, cfg: WalkConfig, world: Any) -> None:
        self.replay_env = ReplayVectorEnv(key, data, num_envs=1, target=cfg.target,
                                          budget=cfg.budget, dataset_device=cfg.dataset_device,
                                          resample=cfg.resample, world=world)
        self.moves = NamedMoves(self.replay_env.workload, cfg.target)
        ref = default_config(self.moves.workload, cfg.target)
        self.reference = np.array(ref.choices, np.int64)
        self.reference_index = int(ref.index)
        self.reference_seconds = self.replay_env.reference_seconds


class ReplayMultiTaskEditEnv(VectorEnv):
    """See the module docstring. ``workloads``: task keys (or ``Workload``s) of ``dataset`` (a
    path or a loaded ``Dataset``); ``config``: a ``WalkConfig``."""

    metadata = {"autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(self, workloads: Sequence[Any], dataset: "str | Dataset",
                 config: Optional[WalkConfig] = None, world: Any = None) -> None:
        self.config = cfg = config or WalkConfig()
        cfg.check()
        if not workloads:
            raise TensorGymError("the multi-task env needs at least one workload")
        data = dataset if isinstance(dataset, Dataset) else Dataset.load(dataset)
        if world is None:  # loaded (or fitted) once, shared by every task
            world = ReplayMeasurer(data, cfg.target, on_miss="surrogate",
                                   device=cfg.dataset_device).world_model()
        self.world = world
        self.tasks = [_Task(w if isinstance(w, str) else w.key, data, cfg, world)
                      for w in workloads]
        self.num_envs, self.budget = int(cfg.num_envs), int(cfg.budget)
        self.single_action_space = spaces.Discrete(N_SLOTS)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        big = np.finfo(np.float32).max
        self.single_observation_space = spaces.Box(-big, big, (OBS_LENGTH,), np.float32)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self._task_rng = np.random.default_rng(0)
        self._rngs = [random.Random(i) for i in range(self.num_envs)]
        self._task = np.zeros(self.num_envs, np.int64)
        self._current: list[np.ndarray] = [self.tasks[0].reference] * self.num_envs
        self._best = np.zeros(self.num_envs)
        self._moves = np.zeros(self.num_envs, np.int64)
        self._measured: list[set[int]] = [set() for _ in range(self.num_envs)]
        self._masks = np.zeros((self.num_envs, N_SLOTS), bool)
        self._return = np.zeros(self.num_envs)

    # ---------------------------------------------------------------- gymnasium API

    def reset(self, *, seed: Optional[int] = None,
              options: Optional[dict] = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        if seed is not None:
            self._task_rng = np.random.default_rng(seed)
            self._rngs = [random.Random(seed + i) for i in range(self.num_envs)]
        for e in range(self.num_envs):
            self._start(e)
        return self._observe(np.arange(self.num_envs)), {"task": self._task.copy()}

    def action_masks(self) -> np.ndarray:
        """(num_envs, N_SLOTS): the moves each walk may make now (module docstring)."""
        return self._masks.copy()

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        a = discrete_actions(actions, self.num_envs)
        n = self.num_envs
        rewards = np.zeros(n)
        runtime = np.full(n, math.inf)
        source = np.full(n, -1, np.int8)
        allowed = np.zeros(n, bool)
        in_range = (a >= 0) & (a < N_SLOTS)
        allowed[in_range] = self._masks[np.flatnonzero(in_range), a[in_range]]
        for t in np.unique(self._task[allowed]):
            envs = np.flatnonzero(allowed & (self._task == t))
            task = self.tasks[t]
            current = np.stack([self._current[e] for e in envs])
            knob, dest = task.moves.dest(current, a[envs])
            proposed = current.copy()
            proposed[np.arange(len(envs)), knob] = dest
            seconds, src = task.replay_env._answer(proposed, np.ones(len(envs), bool),
                                                   rngs=[self._rngs[e] for e in envs])
            for row, e in enumerate(envs):
                self._measured[e].add(int(task.moves.indices(proposed[row])[0]))
                s = float(seconds[row])
                runtime[e], source[e] = s, src[row]
                if not (math.isfinite(s) and s > 0):
                    rewards[e] = self.config.failure_penalty
                elif s < self._best[e]:
                    rewards[e] = math.log(self._best[e] / s)
                    self._best[e], self._current[e] = s, proposed[row]
        rewards[~allowed] = self.config.failure_penalty
        self._moves += 1
        self._return += rewards
        for e in range(n):
            self._masks[e] = self._allowed(e)
        terminated = (self._moves >= self.budget) | ~self._masks.any(axis=1)
        infos: dict[str, Any] = {"runtime": runtime, "source": source, "invalid": ~allowed,
                                 "task": self._task.copy(), "moves": self._moves.copy(),
                                 "log_gain": self._log_gain(np.arange(n))}
        if terminated.any():
            infos["final_obs"], infos["_final_obs"] = self._observe(np.arange(n)), terminated
            infos["episode_return"] = np.where(terminated, self._return, 0.0)
            for e in np.flatnonzero(terminated):
                self._start(int(e))
        return self._observe(np.arange(n)), rewards, terminated, np.zeros(n, bool), infos

    def close_extras(self, **kwargs: Any) -> None:
        for t in self.tasks:
            t.replay_env.replay.close()

    # ---------------------------------------------------------------- internals

    def _start(self, e: int) -> None:
        t = int(self._task_rng.integers(len(self.tasks)))
        task = self.tasks[t]
        self._task[e] = t
        self._current[e] = task.reference
        self._best[e] = task.reference_seconds
        self._moves[e] = 0
        self._return[e] = 0.0
        self._measured[e] = {task.reference_index}
        self._masks[e] = self._allowed(e)

    def _allowed(self, e: int) -> np.ndarray:
        moves = self.tasks[self._task[e]].moves
        mask = moves.masks(self._current[e])
        slots = np.flatnonzero(mask)
        if len(slots):
            current = np.broadcast_to(self._current[e], (len(slots), len(self._current[e])))
            knob, dest = moves.dest(current, slots)
            proposed = current.copy()
            proposed[np.arange(len(slots)), knob] = dest
            seen = self._measured[e]
            mask[slots] = [int(i) not in seen for i in moves.indices(proposed)]
        return mask

    def _log_gain(self, envs: np.ndarray) -> np.ndarray:
        return np.array([math.log(self.tasks[self._task[e]].reference_seconds / self._best[e])
                         for e in envs])

    def _observe(self, envs: np.ndarray) -> np.ndarray:
        obs = np.empty((len(envs), OBS_LENGTH), np.float32)
        for t in np.unique(self._task[envs]):
            rows = np.flatnonzero(self._task[envs] == t)
            es = envs[rows]
            obs[rows] = self.tasks[t].moves.observe(
                np.stack([self._current[e] for e in es]), self._moves[es] / self.budget,
                self._log_gain(es))
        return obs


__all__ = ["FAILURE_PENALTY", "ReplayMultiTaskEditEnv", "WalkConfig"]
