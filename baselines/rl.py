"""RL baselines with stable-baselines3: PPO on the env's ``config`` action mode (MultiDiscrete:
one choice per knob, one trial per step) and MaskablePPO (sb3-contrib) on the ``knob`` action
mode (one knob per step, invalid options masked through ``env.action_masks()``).

What tuning does (``tensorgym.search.tune(env, agent, n)``, or ``agent.tune(env, n)``, which
calls it): **short online training on that env within the budget**. The agents step the env
themselves (``drive``): the loop gives them the budget, callbacks, early stop and the meter, but
they have no ``ask`` (``tell`` does nothing) and ignore prior results. The policy
learns from the real measurements it makes; every measured config is a trial, counted by the env
itself, and training stops the moment the budget is spent. With ``policy_path`` the agent starts
from a pre-trained policy instead of a fresh one, and either keeps learning online
(``learn=True``, default) or only acts (``learn=False``: pure evaluation of the pre-trained
policy, sampled stochastically so it does not re-propose one config forever).

Time on the env's meter (``env.unwrapped.meter``): ``model`` is building the policy and its
gradient updates (PPO's ``train()``); ``search`` is everything else in learning or acting:
policy forward passes that choose actions, rollout buffers, advantages, stable-baselines3's own
bookkeeping. The env's steps charge build, run and featurize (observations) themselves, and the
callbacks run inside a step count as ``other``.

Train/evaluate split (``python -m tensorgym.leaderboard.rl_split``): train one policy on some
workloads (real envs, real measurements), save it, then evaluate it with
``policy_path=..., learn=False`` on held-out workloads with a fixed trial budget. MaskablePPO
pads the knob-mode spaces to a fixed size (``max_options``, ``max_knobs``; the masks hide the
padding), so one policy runs on every workload; PPO's MultiDiscrete action has the shape of one
space, so a pre-trained PPO policy only runs on workloads with the same knob sizes.
``train_on_replay`` trains the policy on recorded measurements instead (a dataset,
``tensorgym.dataset``: no hardware, 10^5 steps in minutes), one replay env per workload stepped
together.
"""
from __future__ import annotations

import os
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from tensorgym.errors import TensorGymError
from tensorgym.measure.result import MeasureResult
from tensorgym.meter import meter_of
from tensorgym.search import Report, SearchStrategy
from tensorgym.space import Config, ConfigSpace


class TrialRecorder(gym.Wrapper):
    """Wraps the env given to stable-baselines3: hands every trial the env measures to
    ``report`` (in the step that measured it, before any auto-reset clears the env's history)
    and marks the session ``spent`` once ``report`` says so."""

    def __init__(self, env: Any, report: Report) -> None:
        super().__init__(env)
        self.report = report
        self.spent = False

    def step(self, action: Any):
        base = self.env.unwrapped
        before = len(base.history)
        obs, reward, terminated, truncated, info = self.env.step(action)
        new = list(base.history[before:])
        if new and not self.report(new):
            self.spent = True
        if self.spent:
            # the learner stops after this step; not ending the episode keeps the env's
            # history (a vectorized env would reset it at once)
            terminated = truncated = False
        return obs, reward, terminated, truncated, info


class FixedKnobSpaces(gym.Wrapper):
    """Pads the knob-mode env to ``Discrete(max_options)`` actions and a fixed observation
    length, so one MaskablePPO policy fits every workload (the masks hide padded options)."""

    def __init__(self, env: Any, max_options: int, max_knobs: int) -> None:
        super().__init__(env)
        base = env.unwrapped
        self.n_knobs, n_opts = len(base.space.knobs), max(base.space.dims)
        if self.n_knobs > max_knobs or n_opts > max_options:
            raise TensorGymError(f"{base.workload.label} has {self.n_knobs} knobs and up to "
                                 f"{n_opts} options; the policy allows {max_knobs} and "
                                 f"{max_options}")
        self.max_options, self.max_knobs = max_options, max_knobs
        n_feat = env.observation_space.shape[0] - self.n_knobs
        self.action_space = spaces.Discrete(max_options)
        self.observation_space = spaces.Box(0.0, np.finfo(np.float32).max,
                                            (n_feat + max_knobs,), np.float32)

    def _pad(self, obs: np.ndarray) -> np.ndarray:
        return np.concatenate([obs, np.zeros(self.max_knobs - self.n_knobs, np.float32)])

    def reset(self, **kwargs: Any):
        obs, info = self.env.reset(**kwargs)
        return self._pad(obs), info

    def step(self, action: Any):
        obs, reward, terminated, truncated, info = self.env.step(action)
        return self._pad(obs), reward, terminated, truncated, info

    def action_masks(self) -> np.ndarray:
        mask = np.zeros(self.max_options, bool)
        inner = self.env.unwrapped.action_masks()
        mask[:len(inner)] = inner
        return mask


class SB3Agent(SearchStrategy):
    """An RL agent as a strategy that drives the env itself (``drive``): ``tensorgym.search.tune``
    gives it the budget, callbacks, early stop and the meter; it has no ``ask`` (its configs
    come from env.step) and ignores prior results."""

    action_mode = ""

    def __init__(self, policy_path: "str | None" = None, learn: bool = True,
                 n_steps: "int | None" = None, batch_size: int = 16, n_epochs: int = 4,
                 learning_rate: float = 3e-4, gamma: float = 0.9, ent_coef: float = 0.01,
                 net_arch: tuple[int, ...] = (64, 64), device: str = "cpu",
                 torch_threads: int = 1) -> None:
        self.policy_path, self.learn = policy_path, learn
        self.hyper = dict(n_steps=n_steps, batch_size=batch_size, n_epochs=n_epochs,
                          learning_rate=learning_rate, gamma=gamma, ent_coef=ent_coef)
        self.net_arch, self.device = list(net_arch), device
        # small MLPs gain nothing from threads, and spinning threads slow the kernels measured
        self.torch_threads = torch_threads
        self.model: Any = None
        self.env_kwargs = {"action_mode": self.action_mode}

    def _algo(self) -> Any:
        raise NotImplementedError

    def _check_env(self, env: Any) -> None:
        mode = env.unwrapped.action_mode  # a TensorSchedEnv's (search.tune makes one)
        if mode != self.action_mode:
            raise TensorGymError(f"{self.name} needs an env made with action_mode="
                                 f"{self.action_mode!r}, got {mode!r}")

    def rollout_steps(self, n_trials: int, steps_per_trial: int) -> int:
        """Env steps per PPO update: the given ``n_steps``, or enough for about four updates
        within the budget (8..256), so a short session still learns."""
        if self.hyper["n_steps"]:
            return int(self.hyper["n_steps"])
        return max(8, min(256, n_trials * steps_per_trial // 4))

    def build(self, env: Any, seed: int, n_trials: int = 64) -> Any:
        """A fresh model on ``env``, or the pre-trained one re-bound to it."""
        algo = self._algo()
        if self.policy_path:
            # a stable-baselines3 zip holds pickles: loading one runs the code it carries
            print(f"loading policy {os.path.abspath(self.policy_path)} (a policy file is code: "
                  "load only files from a source you trust)", file=sys.stderr)
            return algo.load(self.policy_path, env=env, device=self.device, seed=seed)
        steps_per_trial = 1 if self.action_mode == "config" else len(env.unwrapped.space.knobs)
        n_steps = self.rollout_steps(n_trials, steps_per_trial)
        batch = min(self.hyper["batch_size"], n_steps)
        # whole minibatches: a minibatch of one sample normalizes its advantage to NaN
        n_steps = -(-n_steps // batch) * batch
        hyper = {**self.hyper, "n_steps": n_steps, "batch_size": batch}
        return algo("MlpPolicy", env, seed=seed, verbose=0, device=self.device,
                    policy_kwargs={"net_arch": self.net_arch}, **hyper)

    # ---------------------------------------------------------------- the search protocol
    def reset(self, space: ConfigSpace, seed: int) -> None:
        """Nothing to do: ``drive`` builds (or loads) the policy on the env it gets."""

    def ask(self, n: int) -> list[Config]:
        raise TensorGymError(f"{self.name} chooses its configs through env.step (it drives the "
                             "env), so it has no ask(); run it with "
                             "tensorgym.search.tune(env, agent, n_trials)")

    def tell(self, results: Sequence[MeasureResult]) -> None:
        """Nothing: the policy learns only from the steps it takes itself."""

    def drive(self, env: Any, n_trials: int, seed: int, report: Report) -> None:
        """Learn online (or only act, ``learn=False``) on ``env`` until ``report`` says the
        tune is over; every measured config goes to ``report`` in the step that measured it."""
        import torch

        self._check_env(env)
        saved = torch.get_num_threads()
        torch.set_num_threads(self.torch_threads)
        try:
            self._drive(env, n_trials, seed, report)
        finally:
            torch.set_num_threads(saved)

    def _drive(self, env: Any, n_trials: int, seed: int, report: Report) -> None:
        meter = meter_of(env)
        recorder = TrialRecorder(env, report)
        wrapped = self._wrap(recorder)
        with meter.time("model"):
            self.model = self.build(wrapped, seed, n_trials)
        # every step measures at most one config; the step limit is only a safety net
        limit = n_trials * (1 + len(env.unwrapped.space.knobs)) * 4 + self.model.n_steps
        if not self.learn:
            self._act(wrapped, recorder, seed, limit)
            return
        train = self.model.train

        def metered_train() -> None:
            with meter.time("model"):
                train()

        self.model.train = metered_train  # learn() calls self.train() per rollout
        try:
            self.model.learn(total_timesteps=limit, reset_num_timesteps=True,
                             callback=lambda _locals, _globals: not recorder.spent)
        finally:
            del self.model.train  # back to the class's method (and out of save())

    def _wrap(self, env: Any) -> Any:
        return env

    def _act(self, env: Any, recorder: Any, seed: int, limit: int) -> None:
        obs, _ = env.reset(seed=seed)
        steps = 0
        while not recorder.spent and steps < limit:
            obs, _, terminated, truncated, _ = env.step(self._predict(env, obs))
            steps += 1
            if terminated or truncated:
                obs, _ = env.reset()

    def _predict(self, env: Any, obs: Any) -> Any:
        action, _ = self.model.predict(obs, deterministic=False)
        return action

    def save(self, path: str) -> None:
        if self.model is None:
            raise TensorGymError("nothing to save: the agent has not been trained")
        self.model.save(path)

    def train_on_replay(self, *args: Any, **kwargs: Any) -> "ReplayTraining":
        """``train_on_replay(self.name, *args, **kwargs)``: a fresh policy of this agent's kind
        (this agent's own options are not used). How the leaderboard's RL split reaches the
        training through ``tensorgym.registry`` without importing the baselines."""
        return train_on_replay(self.name, *args, **kwargs)


class PPOAgent(SB3Agent):
    name = "ppo"
    action_mode = "config"

    def _algo(self) -> Any:
        from stable_baselines3 import PPO

        return PPO


class MaskablePPOAgent(SB3Agent):
    name = "maskable-ppo"
    action_mode = "knob"

    def _algo(self) -> Any:
        from sb3_contrib import MaskablePPO

        return MaskablePPO

    def __init__(self, *args: Any, max_options: int = 128, max_knobs: int = 16,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_options, self.max_knobs = max_options, max_knobs

    def _wrap(self, env: Any) -> Any:
        return FixedKnobSpaces(env, self.max_options, self.max_knobs)

    def _predict(self, env: Any, obs: Any) -> Any:
        action, _ = self.model.predict(obs, deterministic=False, action_masks=env.action_masks())
        return action


class StepClock(gym.Wrapper):
    """Adds up the wall seconds spent inside the wrapped env's ``step`` and ``reset``."""

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        self.seconds = 0.0
        self.episodes = 0
        self.rewards: list[float] = []  # of each trial (a step that measured a config)

    def step(self, action: Any):
        t0 = time.perf_counter()
        out = self.env.step(action)
        self.seconds += time.perf_counter() - t0
        if "runtime" in out[4]:
            self.rewards.append(float(out[1]))
        return out

    def reset(self, **kwargs: Any):
        t0 = time.perf_counter()
        out = self.env.reset(**kwargs)
        self.seconds += time.perf_counter() - t0
        self.episodes += 1
        return out

    def action_masks(self) -> np.ndarray:
        return self.env.action_masks()


@dataclass
class ReplayTraining:
    """What ``train_on_replay`` did: env steps and trials, where the wall time went (``env_s``:
    inside the envs' steps, replay and featurizing misses; ``update_s``: PPO's gradient
    updates; the rest of ``wall_s`` is PPO's rollouts: policy forward passes, buffers), and
    how many trials each source answered (``recorded`` or ``surrogate``)."""

    agent: str
    workloads: list[str]
    dataset: str
    digest: str
    on_miss: str
    steps: int
    trials: int
    episodes: int
    wall_s: float
    env_s: float
    update_s: float
    sources: dict[str, int] = field(default_factory=dict)
    # mean reward (log speedup over the reference schedule, as answered) of each workload's
    # first and last tenth of its trials: did the policy learn?
    reward_first: dict[str, float] = field(default_factory=dict)
    reward_last: dict[str, float] = field(default_factory=dict)

    @property
    def steps_per_s(self) -> float:
        return self.steps / self.wall_s if self.wall_s > 0 else 0.0


def train_on_replay(agent_name: str, workloads: Sequence[str], target: str, dataset: Any,
                    total_steps: int, seed: int, path: str, episode_trials: int = 64,
                    on_miss: str = "surrogate", env_options: "dict | None" = None,
                    progress: bool = False, **agent_opts: Any) -> ReplayTraining:
    """Train one policy for ``total_steps`` env steps on replay envs of ``workloads`` (one
    env each, stepped together: every PPO rollout holds every workload), episodes of
    ``episode_trials`` trials, and save it to ``path`` (``SB3Agent(policy_path=path)`` loads
    it). Hyperparameters the caller leaves out: 128 steps per env per rollout, batches of
    256."""
    import torch
    from stable_baselines3.common.vec_env import DummyVecEnv

    from tensorgym import make_env, registry
    from tensorgym.dataset import Dataset

    if total_steps < 1 or episode_trials < 1:
        raise TensorGymError("total_steps and episode_trials must be >= 1")
    data = dataset if isinstance(dataset, Dataset) else Dataset.load(dataset)
    if not isinstance(registry.make(agent_name), SB3Agent):
        raise TensorGymError(f"{agent_name} is not a stable-baselines3 agent (ppo, maskable-ppo)")
    agent = registry.make(agent_name, learn=True,
                          **{"n_steps": 128, "batch_size": 256, **agent_opts})
    opts = {"records": False, **(env_options or {}), **agent.env_kwargs,
            "measure": "replay", "dataset": data, "on_miss": on_miss}
    clocks: list[StepClock] = []

    def factory(w: str) -> Any:
        def make() -> Any:
            clock = StepClock(make_env(w, target, budget=episode_trials, **opts))
            clocks.append(clock)
            return agent._wrap(clock)
        return make

    vec = DummyVecEnv([factory(w) for w in workloads])
    try:
        if len({tuple(e.action_space.nvec) if hasattr(e.action_space, "nvec") else
                (e.action_space.n,) for e in vec.envs}) > 1:
            raise TensorGymError(f"{agent_name}'s action has the shape of one space and "
                                 f"{', '.join(workloads)} have different knob sizes: train "
                                 "maskable-ppo (padded knob actions) across them")
        saved = torch.get_num_threads()
        torch.set_num_threads(agent.torch_threads)
        t0 = time.perf_counter()
        try:
            model = agent._algo()("MlpPolicy", vec, seed=seed, verbose=0, device=agent.device,
                                  policy_kwargs={"net_arch": agent.net_arch}, **agent.hyper)
            update = [0.0]
            train = model.train

            def timed_train() -> None:
                t = time.perf_counter()
                train()
                update[0] += time.perf_counter() - t

            model.train = timed_train
            model.learn(total_timesteps=total_steps, progress_bar=progress)
            del model.train
            wall = time.perf_counter() - t0
        finally:
            torch.set_num_threads(saved)
        agent.model = model
        agent.save(path)
        sources: Counter = Counter()
        first, last = {}, {}
        for w, clock in zip(workloads, clocks):
            sources.update(clock.unwrapped.session.measurer.sources)
            r, k = clock.rewards, max(1, len(clock.rewards) // 10)
            first[w], last[w] = float(np.mean(r[:k] or [0.0])), float(np.mean(r[-k:] or [0.0]))
        return ReplayTraining(agent_name, list(workloads), data.path, data.digest, on_miss,
                              int(model.num_timesteps), sum(sources.values()),
                              sum(c.episodes for c in clocks), wall,
                              sum(c.seconds for c in clocks), update[0], dict(sources),
                              first, last)
    finally:
        vec.close()


__all__ = ["MaskablePPOAgent", "PPOAgent", "ReplayTraining", "SB3Agent", "StepClock",
           "train_on_replay"]
