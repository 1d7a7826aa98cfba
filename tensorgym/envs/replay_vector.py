"""``ReplayVectorEnv``: many replay episodes of one task stepped together, at training speed.

A native Gymnasium ``VectorEnv`` over replay (``tensorgym.dataset.ReplayMeasurer``): one step of
``num_envs`` config actions decodes them as one matrix, finds the recorded ones with one sorted
search, answers every miss of the step with one surrogate call, and encodes the observations
with per-knob tables (``features.config_encoding.ChoiceEncoder``). Each of its envs is the
single env ``TensorSched-v0`` with ``measure="replay"``, ``action_mode="config"``,
``obs_mode="config"`` and ``confirm_best=False``: given the same seed (env ``i`` is seeded
``seed + i``) and the same actions, it returns the same observations, rewards, terminations
and sources, step for step (``tests/test_replay_vector.py``).

Differences from ``SyncVectorEnv`` over single envs, besides speed: ``infos`` holds arrays
(``runtime``, ``gflops``, ``best_gflops``, ``trials``, ``source``: 0 recorded, 1 surrogate;
``SOURCE_NAMES`` names them), there are no records and no confirmations (a replayed best has
nothing new to be confirmed with), and only ``obs_mode="config"`` is served (the loop-AST modes
cost more than a step: use ``AsyncVectorEnv`` over single envs for them). Autoreset is
Gymnasium's default, next step: the step after an episode ends resets that env and ignores its
action.
"""
from __future__ import annotations

import math
import random
from typing import Any, Optional, Sequence

import numpy as np
from gymnasium import spaces
from gymnasium.vector import AutoresetMode, VectorEnv
from gymnasium.vector.utils import batch_space

from ..dataset.data import Dataset
from ..dataset.replay import ReplayMeasurer
from ..errors import ErrorCode, InvalidConfigError, TensorGymError
from ..features import feature_length
from ..features.config_encoding import ChoiceEncoder
from ..space import is_int
from ..templates import default_config
from ..workloads import Workload, get_workload
from .tensor_sched import REWARDS

SOURCE_NAMES = ("recorded", "surrogate")


class ReplayVectorEnv(VectorEnv):
    """``num_envs`` replay episodes of ``workload`` on ``target``, answered from ``dataset``
    (a path or a loaded ``Dataset``); misses as ``on_miss`` says ("surrogate": the world model,
    ``world`` or the one fitted on the dataset; "draw": its answers times each config's fixed
    draw of its error, from the field ``world_seed`` picks; or "error").
    ``budget``, ``reward`` and ``failure_reward`` are the single env's."""

    metadata = {"autoreset_mode": AutoresetMode.NEXT_STEP}

    def __init__(self, workload: "str | Workload", dataset: "str | Dataset",
                 num_envs: int = 64, target: str = "cpu", budget: int = 200,
                 reward: str = "log_speedup", failure_reward: Optional[float] = None,
                 on_miss: str = "surrogate", dataset_device: Optional[str] = None,
                 resample: bool = True, world: Any = None, world_seed: int = 0) -> None:
        if not is_int(num_envs) or num_envs < 1:
            raise TensorGymError(f"num_envs must be an integer >= 1, got {num_envs!r}")
        if not is_int(budget) or budget < 1:
            raise TensorGymError(f"budget must be an integer >= 1, got {budget!r}")
        if reward not in REWARDS:
            raise TensorGymError(f"unknown reward {reward!r}; use one of {REWARDS}")
        if on_miss not in ("surrogate", "draw", "error"):
            raise TensorGymError(f"the vector env answers misses with on_miss='surrogate', "
                                 f"'draw' or 'error', not {on_miss!r} (use the single env for "
                                 "'nearest' or 'measure')")
        self.workload = get_workload(workload)
        self.replay = ReplayMeasurer(dataset, target, on_miss=on_miss, device=dataset_device,
                                     resample=resample, workload=self.workload, world=world,
                                     world_seed=world_seed)
        self.task = self.replay.task(self.workload)
        self.space = self.task.space
        if self.space.size >= 2 ** 62:
            raise TensorGymError(f"space {self.space.label} has {self.space.size} configs, past "
                                 "what int64 indices hold; use the single env")
        self.num_envs, self.budget, self.reward_kind = int(num_envs), int(budget), reward
        self.failure_reward = float(failure_reward if failure_reward is not None
                                    else (-5.0 if reward == "log_speedup" else 0.0))
        dims = np.array(self.space.dims, np.int64)
        self._dims = dims
        self._radix = np.cumprod(np.concatenate([[1], dims[:0:-1]]))[::-1].astype(np.int64)
        order = np.argsort([c.index for c in self.task.configs], kind="stable")
        self._recorded_index = np.array([self.task.configs[p].index for p in order], np.int64)
        self._recorded_pos = order.astype(np.int64)
        self._encoder = ChoiceEncoder(self.space)
        ref = default_config(self.workload, self.replay.target)
        self._reference_choices = np.array(ref.choices, np.int64)
        self.reference_seconds = self.replay.reference_seconds(self.workload, ref)
        self._log_reference = math.log(self.reference_seconds)
        self._flops = self.workload.flops

        self.single_action_space = spaces.MultiDiscrete(dims)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        big = np.finfo(np.float32).max
        self.single_observation_space = spaces.Box(0.0, big, (feature_length("config"),),
                                                   np.float32)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self._rngs = [random.Random(i) for i in range(self.num_envs)]
        self._trials = np.zeros(self.num_envs, np.int64)
        self._best = np.full(self.num_envs, math.inf)
        self._done = np.zeros(self.num_envs, bool)
        self.sources = np.zeros(len(SOURCE_NAMES), np.int64)  # answers given, by source

    # ---------------------------------------------------------------- gymnasium API

    def reset(self, *, seed: "int | Sequence[int] | None" = None,
              options: Optional[dict] = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        if seed is not None:
            seeds = ([seed + i for i in range(self.num_envs)] if is_int(seed) else list(seed))
            if len(seeds) != self.num_envs:
                raise TensorGymError(f"reset got {len(seeds)} seeds for {self.num_envs} envs")
            self._rngs = [random.Random(s) for s in seeds]
        self._trials[:] = 0
        self._best[:] = math.inf
        self._done[:] = False
        obs = self._encoder.encode(np.broadcast_to(self._reference_choices,
                                                   (self.num_envs, len(self._dims))))
        return obs, {"trials": self._trials.copy(), "space_size": self.space.size}

    def step(self, actions: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict]:
        choices = self._checked(actions)
        n = self.num_envs
        resetting = self._done.copy()
        live = ~resetting
        seconds, source = self._answer(choices, live)
        rewards = self._rewards(seconds, live)
        with np.errstate(divide="ignore"):
            self._best = np.where(live, np.minimum(self._best, seconds), self._best)
        self._trials[live] += 1
        terminated = live & (self._trials >= self.budget)
        obs = self._encoder.encode(np.where(live[:, None], choices, self._reference_choices))
        # next-step autoreset: the envs that ended last step start again now
        self._trials[resetting] = 0
        self._best[resetting] = math.inf
        self._done = terminated
        self.sources += np.bincount(source[live], minlength=len(SOURCE_NAMES))
        ok = np.isfinite(seconds) & (seconds > 0)
        with np.errstate(divide="ignore"):
            infos = {"runtime": seconds,
                     "gflops": np.where(ok, self._flops / np.where(ok, seconds, 1.0) / 1e9, 0.0),
                     "best_gflops": np.where(np.isfinite(self._best),
                                             self._flops / self._best / 1e9, 0.0),
                     "trials": self._trials.copy(), "source": source, "reset": resetting}
        return obs, rewards, terminated, np.zeros(n, bool), infos

    def close_extras(self, **kwargs: Any) -> None:
        self.replay.close()

    def _answer(self, choices: np.ndarray, ask: np.ndarray,
                rngs: Optional[Sequence[random.Random]] = None) -> tuple[np.ndarray, np.ndarray]:
        """(seconds per run, source) of the configs ``choices`` of the envs ``ask`` (a mask;
        the others get inf): recorded ones drawn from their env's stream (row ``e`` from
        ``rngs[e]`` where given: a caller batching rows of its own, as the multi-task env
        does), the rest in one call of the world model. Inf: a failure."""
        rngs = self._rngs if rngs is None else rngs
        n = len(choices)
        seconds = np.full(n, math.inf)
        source = np.zeros(n, np.int8)
        idx = choices @ self._radix
        if len(self._recorded_index):
            at = np.minimum(np.searchsorted(self._recorded_index, idx),
                            len(self._recorded_index) - 1)
            hit = (self._recorded_index[at] == idx) & ask
        else:  # a task the dataset has no record of: the world model answers everything
            at, hit = np.zeros(n, np.int64), np.zeros(n, bool)
        miss = ~hit & ask
        for e in np.flatnonzero(hit):  # recorded: each env draws from its own stream
            s, costs = self.replay.draw(self.task, int(self._recorded_pos[at[e]]), rngs[e])
            if s.error == ErrorCode.NO_ERROR and costs:
                seconds[e] = _median(costs)
        if miss.any():
            if self.replay.on_miss == "error":
                e = int(np.flatnonzero(miss)[0])
                raise self.replay._miss_error(self.task, [self.space.get(int(idx[e]))])
            seconds[miss] = self._predict(choices[miss], idx[miss])
            source[miss] = 1
        return seconds, source

    # ---------------------------------------------------------------- internals

    def _checked(self, actions: Any) -> np.ndarray:
        a = np.asarray(actions)
        if a.shape != (self.num_envs, len(self._dims)) or a.dtype.kind not in "iu":
            raise InvalidConfigError(f"actions are an integer array of shape "
                                     f"{(self.num_envs, len(self._dims))}, got {a.dtype} "
                                     f"{a.shape}")
        a = a.astype(np.int64, copy=False)
        bad = (a < 0) | (a >= self._dims)
        if bad.any():
            e, k = map(int, np.argwhere(bad)[0])
            raise InvalidConfigError(f"env {e}: option {a[e, k]} out of range for knob "
                                     f"{self.space.knobs[k].name} ({self._dims[k]} options)")
        return a

    def _predict(self, choices: np.ndarray, indices: np.ndarray) -> np.ndarray:
        """Seconds of the missed configs (inf: a failure), in one call of the world model;
        configs checked against the target's limits first where the template has any."""
        out = np.full(len(indices), math.inf)
        valid = np.ones(len(indices), bool)
        if self.space.template == "gpu":
            valid[:] = [self.replay.valid(self.task, self.space.get(int(i))) for i in indices]
        if valid.any():
            seconds, failed = self.replay.predict_miss_indices(self.task, indices[valid])
            out[valid] = np.where(failed, math.inf, seconds)
        return out

    def _rewards(self, seconds: np.ndarray, live: np.ndarray) -> np.ndarray:
        ok = np.isfinite(seconds) & (seconds > 0)
        safe = np.where(ok, seconds, 1.0)
        if self.reward_kind == "log_speedup":
            r = self._log_reference - np.log(safe)
        else:
            ref_gflops = self._flops / self.reference_seconds / 1e9
            before = np.maximum(np.where(np.isfinite(self._best), self._flops /
                                         np.where(np.isfinite(self._best), self._best, 1.0) /
                                         1e9, 0.0), max(ref_gflops, 5e-324))
            r = np.maximum(0.0, np.log(np.maximum(self._flops / safe / 1e9, before))
                           - np.log(before))
        r = np.where(ok, r, self.failure_reward)
        return np.where(live, r, 0.0)


def _median(costs: Sequence[float]) -> float:
    """``statistics.median`` (as ``ReplayResult`` takes it), without its overhead."""
    s = sorted(costs)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


__all__ = ["REWARDS", "ReplayVectorEnv", "SOURCE_NAMES"]
