"""Baselines for tensorgym: random, grid and genetic search, and RL agents (stable-baselines3).
Importing it registers its agents in ``tensorgym.registry`` (with the reference agents of
``tensorgym.agents``: the registry loads both on its first lookup);
``tensorgym.registry.make(name, **options)`` builds any of them. The leaderboard that ranks
them is ``tensorgym.leaderboard``.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable

from tensorgym import registry
from tensorgym.registry import Option

from .base import BatchSearch


def _lazy(path: str) -> Callable[..., Any]:
    """A factory that imports its module when first used (the RL agents need torch)."""
    module, _, attr = path.partition(":")

    def build(**opts: Any) -> Any:
        return getattr(importlib.import_module(module, __name__), attr)(**opts)

    return build


_BATCH = Option("batch_size", int, 8, "configs measured per batch")
_RL = (
    Option("policy_path", str, None, "start from this pre-trained policy"),
    Option("learn", bool, True, "keep learning online (False: only act)"),
    Option("n_steps", int, None, "env steps per update (None: about four updates a budget)"),
    Option("batch_size", int, 16, "PPO minibatch size"),
    Option("n_epochs", int, 4, "PPO epochs per update"),
    Option("learning_rate", float, 3e-4),
    Option("gamma", float, 0.9),
    Option("ent_coef", float, 0.01),
    Option("net_arch", tuple, (64, 64), "hidden layer sizes"),
    Option("device", str, "cpu", "torch device"),
    Option("torch_threads", int, 1, "torch threads while tuning"),
)
registry.register("random", _lazy(".random_search:RandomSearch"), (_BATCH,),
                  "random search without replacement")
registry.register("grid", _lazy(".grid:GridSearch"), (
    _BATCH, Option("randomize_start", bool, True, "the seed picks the first config")),
    "every config once, in a strided order spread over the space")
registry.register("ga", _lazy(".ga:GeneticSearch"), (
    _BATCH, Option("pop_size", int, None, "population (None: budget/4, 8 to 64)"),
    Option("elite_num", int, 3, "best configs kept each generation"),
    Option("mutation_prob", float, 0.1, "per-knob mutation probability")),
    "AutoTVM-style genetic algorithm over the knob choices")
registry.register("ppo", _lazy(".rl:PPOAgent"), _RL,
                  "stable-baselines3 PPO, a whole config per step (action_mode='config')")
registry.register("maskable-ppo", _lazy(".rl:MaskablePPOAgent"), (
    *_RL, Option("max_options", int, 128, "padded options per knob"),
    Option("max_knobs", int, 16, "padded knobs")),
    "sb3-contrib MaskablePPO, one knob per step, masked (action_mode='knob')")


__all__ = ["BatchSearch"]
