"""``ReplayVectorEditEnv``: ``ReplayVectorEnv`` with the single env's ``action_mode="edit"``.

Each env walks from the reference schedule: an action is one move of ``envs/edit.py``'s table
(``edit_moves``: "step" or "factor"), applied to the whole batch with look-ups; the valid moves
are answered as ``ReplayVectorEnv`` answers configs (recorded draws, the world model for the
rest, in one call). The reward is the single env's: ``log(t_prev) - log(t_new)`` with ``t_prev``
the time of the walk's current schedule (the reference's before the first move); a failed
schedule costs ``failure_reward`` and the walk stays; a masked move costs ``failure_reward``,
measures nothing and counts toward ``max_invalid_actions`` (default ``budget * knobs``), whose
reaching truncates. Observations: the current schedule's config encoding, then the workload
descriptor (``features.descriptor``). Env ``i`` of ``reset(seed=s)`` is the single env
``TensorSched-v0(measure="replay", action_mode="edit", obs_mode="config", confirm_best=False,
start="reference")`` reset with seed ``s + i``, step for step (``tests/test_replay_vector.py``).
``action_masks()`` gives the ``(num_envs, moves)`` masks, as sb3-contrib's vector envs ask.
"""
from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import batch_space

from ..errors import InvalidConfigError, TensorGymError
from ..features import feature_length
from ..features.descriptor import DESCRIPTOR_LENGTH, workload_descriptor
from ..space import is_int
from .edit import EditMoves
from .replay_vector import SOURCE_NAMES, ReplayVectorEnv


def discrete_actions(actions: Any, num_envs: int) -> np.ndarray:
    """A batch of one integer action per env, as int64; else ``InvalidConfigError``."""
    a = np.asarray(actions)
    if a.shape != (num_envs,) or a.dtype.kind not in "iu":
        raise InvalidConfigError(f"actions are an integer array of shape ({num_envs},), "
                                 f"got {a.dtype} {a.shape}")
    return a.astype(np.int64, copy=False)


class ReplayVectorEditEnv(ReplayVectorEnv):
    """See the module docstring; the arguments are ``ReplayVectorEnv``'s, ``edit_moves`` and
    ``max_invalid_actions``."""

    def __init__(self, workload: Any, dataset: Any, num_envs: int = 64,
                 edit_moves: str = "step", max_invalid_actions: Optional[int] = None,
                 **kwargs: Any) -> None:
        super().__init__(workload, dataset, num_envs=num_envs, **kwargs)
        if kwargs.get("reward", "log_speedup") != "log_speedup":
            raise TensorGymError("the edit vector env's reward is log_speedup (over the "
                                 "walk's previous schedule)")
        self.moves = EditMoves(self.space, edit_moves)
        n_moves = len(self.moves)
        width = max(self.space.dims)
        self._move_knob = np.array([m.knob for m in self.moves.moves], np.int64)
        self._move_dest = np.full((n_moves, width), -1, np.int64)
        for i, m in enumerate(self.moves.moves):
            self._move_dest[i, :len(m.dest)] = m.dest
        limit = self.budget * len(self.space.knobs) if max_invalid_actions is None \
            else max_invalid_actions
        if not is_int(limit) or limit < 1:
            raise TensorGymError(f"max_invalid_actions must be an integer >= 1, got {limit!r}")
        self.max_invalid_actions = int(limit)
        self._descriptor = workload_descriptor(self.workload, self.replay.target)
        self.single_action_space = spaces.Discrete(n_moves)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        big = np.finfo(np.float32).max
        self.single_observation_space = spaces.Box(
            0.0, big, (feature_length("config") + DESCRIPTOR_LENGTH,), np.float32)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self._current = np.tile(self._reference_choices, (self.num_envs, 1))
        self._previous = np.full(self.num_envs, self.reference_seconds)
        self._invalid = np.zeros(self.num_envs, np.int64)

    def reset(self, *, seed: "int | Sequence[int] | None" = None,
              options: Optional[dict] = None) -> tuple[np.ndarray, dict]:
        _, info = super().reset(seed=seed, options=options)
        self._current[:] = self._reference_choices
        self._previous[:] = self.reference_seconds
        self._invalid[:] = 0
        return self._observe(), info

    def action_masks(self) -> np.ndarray:
        """(num_envs, moves): the moves that stay in their knob's options, per env."""
        options = self._current[:, self._move_knob]  # (n, moves) each move's knob's option
        return self._move_dest[np.arange(len(self._move_knob)), options] >= 0

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        a = discrete_actions(actions, self.num_envs)
        resetting = self._done | (self._invalid >= self.max_invalid_actions)
        self._restart(resetting)
        live = ~resetting
        in_range = (a >= 0) & (a < len(self._move_knob))
        safe = np.where(in_range, a, 0)
        rows = np.arange(self.num_envs)
        knob = self._move_knob[safe]
        dest = self._move_dest[safe, self._current[rows, knob]]
        valid = live & in_range & (dest >= 0)
        invalid = live & ~valid
        proposed = self._current.copy()
        proposed[rows, knob] = np.where(valid, dest, proposed[rows, knob])
        seconds, source = self._answer(proposed, valid)
        ok = valid & np.isfinite(seconds) & (seconds > 0)
        rewards = np.zeros(self.num_envs)
        with np.errstate(divide="ignore"):
            rewards[ok] = np.log(self._previous[ok]) - np.log(seconds[ok])
        rewards[(valid & ~ok) | invalid] = self.failure_reward
        previous = self._previous.copy()
        self._current[ok] = proposed[ok]
        self._previous[ok] = seconds[ok]
        self._best = np.where(valid, np.minimum(self._best, seconds), self._best)
        self._trials[valid] += 1
        self._invalid[invalid] += 1
        terminated = live & (self._trials >= self.budget)
        truncated = live & ~terminated & (self._invalid >= self.max_invalid_actions)
        self._done = terminated
        self.sources += np.bincount(source[valid], minlength=len(SOURCE_NAMES))
        infos = {"runtime": seconds, "previous_runtime": previous, "trials": self._trials.copy(),
                 "source": source, "invalid": invalid, "reset": resetting,
                 "best_gflops": np.where(np.isfinite(self._best),
                                         self._flops / self._best / 1e9, 0.0)}
        return self._observe(), rewards, terminated, truncated, infos

    def _restart(self, envs: np.ndarray) -> None:
        """Next-step autoreset of the envs that ended (or were truncated) last step."""
        self._trials[envs] = 0
        self._best[envs] = math.inf
        self._current[envs] = self._reference_choices
        self._previous[envs] = self.reference_seconds
        self._invalid[envs] = 0

    def _observe(self) -> np.ndarray:
        obs = np.empty((self.num_envs, self.single_observation_space.shape[0]), np.float32)
        obs[:, :feature_length("config")] = self._encoder.encode(self._current)
        obs[:, feature_length("config"):] = self._descriptor
        return obs


__all__ = ["ReplayVectorEditEnv"]
