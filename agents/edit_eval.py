"""Replay evaluations of an edit policy (``python -m tensorgym.agents.edit_policy evaluate``):
mean log-speedup over the reference schedule, on the replay world of a dataset (its records,
misses answered by its default world model). Replay figures, not measurements.

- ``evaluate_walks``: the training walks (``ReplayMultiTaskEditEnv``), moves from the policy or
  uniformly among the allowed ones;
- ``evaluate_agents``: whole tunes through ``tensorgym.search.tune`` on a replay env per task
  (the agent as ``tensorgym tune`` runs it: batches, fallbacks), one seed per task.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Optional, Sequence

import numpy as np

from .edit_policy import NumpyPolicy, load_policy


def _data(dataset: Any) -> Any:
    from tensorgym.dataset import Dataset

    return dataset if isinstance(dataset, Dataset) else Dataset.load(dataset)


def evaluate_walks(policy: Optional[NumpyPolicy], dataset: Any, keys: Sequence[str],
                   episodes: int = 2, budget: int = 16, seed: int = 0, world: Any = None,
                   target: str = "cpu") -> float:
    """Mean ``log(reference / best)`` after ``budget`` moves of walks over ``keys``
    (``episodes`` walks per task on average: tasks are drawn at random), moves sampled from
    ``policy`` (None: uniformly among the allowed ones)."""
    from tensorgym.envs.replay_multitask import ReplayMultiTaskEditEnv, WalkConfig

    n = len(keys) * episodes
    env = ReplayMultiTaskEditEnv(keys, _data(dataset), WalkConfig(num_envs=n, budget=budget,
                                                                  target=target), world=world)
    obs, _ = env.reset(seed=seed)
    rng = np.random.default_rng(seed)
    gains: list[float] = []
    done = np.zeros(n, bool)
    while not done.all():
        masks = env.action_masks()
        acts = np.array([policy.sample(o, m, rng) if policy is not None else
                         int(rng.choice(np.flatnonzero(m))) for o, m in zip(obs, masks)])
        obs, _, term, _, info = env.step(acts)
        for e in np.flatnonzero(term & ~done):
            gains.append(float(info["final_obs"][e, -1]))
        done |= term
    env.close()
    return float(np.mean(gains)) if gains else math.nan


def evaluate_agents(agents: dict[str, Callable[[], Any]], dataset: Any, keys: Sequence[str],
                    trials: int, seed: int = 0, target: str = "cpu",
                    world: Any = None) -> dict[str, float]:
    """Mean ``log(reference / best)`` of a ``trials``-trial tune of each task of ``keys`` by
    each agent (``agents``: name -> a factory of a fresh strategy), seed ``seed``; ``world``
    answers misses (default: the dataset's own world model)."""
    import gymnasium as gym

    from tensorgym.dataset.replay import ReplayMeasurer
    from tensorgym.search import tune
    from tensorgym.templates import default_config

    data = _data(dataset)
    if world is None:
        world = ReplayMeasurer(data, target, on_miss="surrogate").world_model()
    gains: dict[str, list[float]] = {name: [] for name in agents}
    for key in keys:
        for name, make in agents.items():
            env = gym.make("TensorSched-v0", workload=key, target=target, measure="replay",
                           dataset=data, on_miss="surrogate", world=world, records=False,
                           budget=trials)
            try:
                u = env.unwrapped
                ref = u.session.measurer.reference_seconds(
                    u.workload, default_config(u.workload, target))
                results = tune(env, make(), trials, seed=seed)
            finally:
                env.close()
            best = min([r.median for r in results if r.ok] or [math.inf])
            gains[name].append(math.log(ref / best) if math.isfinite(best) else 0.0)
    return {name: float(np.mean(g)) for name, g in gains.items()}


def report(dataset: Any, policy_path: Any, suite: str, episodes: int, budget: int, seed: int,
           trials: int, say: Callable[[str], None]) -> None:
    """What ``edit_policy evaluate`` prints."""
    from tensorgym import registry
    from tensorgym.leaderboard.suites import get_suite

    policy = load_policy(policy_path)
    keys = [k for k, _ in get_suite(suite).tasks]
    data = _data(dataset)
    for name, pol in (("policy", policy), ("random moves", None)):
        g = evaluate_walks(pol, data, keys, episodes, budget, seed)
        say(f"{suite} ({len(keys)} tasks, replay world), walks of {budget} moves, {name}: mean "
            f"log-speedup over the reference {g:.3f} ({math.exp(g):.2f}x geomean)")
    if trials > 0:
        agents = {"ppo-pretrained": lambda: registry.make("ppo-pretrained",
                                                          policy=str(policy_path)),
                  "random": lambda: registry.make("random")}
        for name, g in evaluate_agents(agents, data, keys, trials, seed).items():
            say(f"{suite} ({len(keys)} tasks, replay world), tune of {trials} trials, {name}: "
                f"mean log-speedup over the reference {g:.3f} ({math.exp(g):.2f}x geomean)")


__all__ = ["evaluate_agents", "evaluate_walks", "report"]
