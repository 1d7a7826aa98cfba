"""``TensorSchedNetwork-v0``: the task-scheduling problem of a whole network as an environment.

An episode is one network's tuning under a global trial budget. ``reset`` gives every task its
first batch (the warm-up of ``tune-model``, so that each task has a time); then each step's
action picks the task that gets the next batch of ``batch`` trials, tuned by ``agent`` told the
task's earlier trials (``tensorgym.nn.scheduler.TaskScheduler.step_task``). The episode ends once
the budget is spent.

- Observation: ``(MAX_TASKS, TASK_FEATURES)`` float32, one row per task (rows past the model's
  tasks are zero): its share of the weights ``w_i / sum w``, its share of the estimated latency
  ``w_i t_i / L``, its trials over the budget, the relative drop of its time in its last batch,
  log10 of its FLOPs (one occurrence) / 10, and 1 for a task that can still take a batch.
- Action: ``Discrete(MAX_TASKS)``; ``action_masks()`` marks the model's open tasks. A masked
  action costs ``invalid_reward`` and spends nothing; the ``max_invalid_actions``-th in an
  episode truncates it.
- Reward: the drop of the estimated latency ``L = sum_i w_i t_i`` over the step, divided by
  ``L`` after the warm-up, so an episode's return is the share of the latency it took away.

Baselines are the scheduler's rules: ``RoundRobinPolicy`` and ``GradientPolicy`` (act on an
env's ``scheduler``). ``measure="replay"`` with ``dataset=`` answers every trial from a dataset
(for training); live measures on this machine (for evaluation). Trials are kept in the episode
only, not in a records database: an episode starts from nothing, as the scheduling problem does
(``tune-model --db`` is the tool that keeps them).
"""
from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from ..errors import TensorGymError
from ..session import make_measurer
from .scheduler import TaskScheduler, model_tasks_of

MAX_TASKS = 64
TASK_FEATURES = 6


class NetworkSchedEnv(gym.Env):
    """See the module docstring. ``model``: a built-in model (its tasks from the corpus), or
    ``tasks``: (workload, weight) pairs."""

    metadata = {"render_modes": ["ansi"]}

    def __init__(self, model: str = "resnet18", tasks: Optional[Sequence[tuple[Any, int]]] = None,
                 target: str = "cpu", budget: int = 2000, batch: int = 16, agent: str = "xgb",
                 measure: str = "live", dataset: Any = None, on_miss: str = "surrogate",
                 num_threads: int = 0, invalid_reward: float = -1.0,
                 max_invalid_actions: int = 100, render_mode: Optional[str] = None) -> None:
        self.model = model
        self.task_list = list(tasks) if tasks is not None else model_tasks_of(model)
        if not 1 <= len(self.task_list) <= MAX_TASKS:
            raise TensorGymError(f"a network env holds 1 to {MAX_TASKS} tasks, {model} has "
                                 f"{len(self.task_list)}")
        self.target, self.budget, self.batch, self.agent = target, budget, batch, agent
        self.invalid_reward = float(invalid_reward)
        self.render_mode = render_mode
        self.max_invalid_actions = int(max_invalid_actions)
        self._invalid = 0
        self.measurer = make_measurer(target, measure, dataset=dataset,
                                      on_miss=on_miss if measure == "replay" else None,
                                      num_threads=num_threads)
        self.action_space = spaces.Discrete(MAX_TASKS)
        self.observation_space = spaces.Box(-1.0, 10.0, (MAX_TASKS, TASK_FEATURES), np.float32)
        self.scheduler: Optional[TaskScheduler] = None
        self._gains: dict[int, float] = {}
        self._l0 = math.nan

    def reset(self, *, seed: Optional[int] = None, options: Optional[dict] = None):
        super().reset(seed=seed)
        if self.scheduler is not None:
            self.scheduler.close()
        seed = int(self.np_random.integers(2 ** 31)) if seed is None else seed
        if hasattr(self.measurer, "reseed"):
            self.measurer.reseed(seed)
        self.scheduler = TaskScheduler(self.model, self.task_list, None, self.budget,
                                       target=self.target, scheduler="round-robin",
                                       batch=self.batch, agent=self.agent, seed=seed,
                                       measurer=self.measurer)
        s = self.scheduler
        self._gains, self._invalid = {}, 0
        for i, t in enumerate(s.tasks):  # the warm-up
            if s.spent >= self.budget:
                break
            self._batch(i, min(self.batch, self.budget - s.spent))
        self._l0 = s.latency()
        return self._observe(), self._info()

    def step(self, action: Any):
        s = self._scheduler()
        if s.spent >= self.budget:
            raise TensorGymError("the trial budget is spent: call reset()")
        a = int(action)
        if not self.action_masks()[a]:
            self._invalid += 1
            return self._observe(), self.invalid_reward, False, \
                self._invalid >= self.max_invalid_actions, {
                    **self._info(), "error": f"task {a} takes no batch (masked)"}
        before = s.latency()
        self._batch(a, min(self.batch, self.budget - s.spent))
        after = s.latency()
        reward = ((before - after) / self._l0 if math.isfinite(before) and
                  math.isfinite(after) and math.isfinite(self._l0) and self._l0 > 0 else 0.0)
        terminated = s.spent >= self.budget or not self.action_masks().any()
        return self._observe(), float(reward), terminated, False, self._info()

    def action_masks(self) -> np.ndarray:
        mask = np.zeros(MAX_TASKS, bool)
        s = self._scheduler()
        for i, t in enumerate(s.tasks):
            mask[i] = not t.exhausted
        return mask

    def render(self) -> Optional[str]:
        if self.render_mode != "ansi" or self.scheduler is None:
            return None
        s = self.scheduler
        return (f"{self.model}: {s.spent}/{self.budget} trials, estimated latency "
                f"{s.latency() * 1e3:.3f} ms")

    def close(self) -> None:
        if self.scheduler is not None:
            self.scheduler.close()
        self.measurer.close()
        super().close()

    # ---------------------------------------------------------------- internals

    def _scheduler(self) -> TaskScheduler:
        if self.scheduler is None:
            raise TensorGymError("call reset() before step()")
        return self.scheduler

    def _batch(self, i: int, n: int) -> None:
        t = self._scheduler().tasks[i]
        old = t.best
        self._scheduler().step_task(t, n)
        self._gains[i] = (1.0 - t.best / old) if math.isfinite(old) and old > 0 else 0.0

    def _observe(self) -> np.ndarray:
        s = self._scheduler()
        obs = np.zeros((MAX_TASKS, TASK_FEATURES), np.float32)
        total_w = sum(t.weight for t in s.tasks)
        latency = s.latency()
        for i, t in enumerate(s.tasks):
            share = t.latency / latency if math.isfinite(latency) and latency > 0 else 0.0
            obs[i] = (t.weight / total_w, share, t.trials / self.budget, self._gains.get(i, 0.0),
                      math.log10(max(t.workload.flops, 1)) / 10, 0.0 if t.exhausted else 1.0)
        return np.clip(obs, -1.0, 10.0)

    def _info(self) -> dict:
        s = self._scheduler()
        return {"latency": s.latency(), "trials": s.spent, "initial_latency": self._l0,
                "tasks": len(s.tasks)}


class RoundRobinPolicy:
    """The round-robin rule as a policy of ``NetworkSchedEnv``."""

    def __call__(self, env: NetworkSchedEnv) -> int:
        s = env.unwrapped.scheduler
        s.scheduler = "round-robin"
        return s.tasks.index(s.next_task())


class GradientPolicy:
    """Ansor's gradient rule (``TaskScheduler.gain``) as a policy of ``NetworkSchedEnv``."""

    def __call__(self, env: NetworkSchedEnv) -> int:
        s = env.unwrapped.scheduler
        s.scheduler = "gradient"
        return s.tasks.index(s.next_task())


__all__ = ["GradientPolicy", "MAX_TASKS", "NetworkSchedEnv", "RoundRobinPolicy", "TASK_FEATURES"]
