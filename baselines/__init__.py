"""Baselines for tensorgym: random, grid and genetic search, RL agents (stable-baselines3), and a
leaderboard harness. ``get_agent(name, **opts)`` builds any agent by name, including the
reference agents of ``tensorgym.agents`` (``xgb``, ``treegru``) when that package provides them.
"""
from __future__ import annotations

import importlib
from typing import Any, Callable

from tensorgym.errors import TensorGymError

from .base import Agent, BatchSearchAgent


def _lazy(path: str) -> Callable[..., Agent]:
    module, _, attr = path.partition(":")

    def build(**opts: Any) -> Agent:
        return getattr(importlib.import_module(module, __name__), attr)(**opts)

    return build


def _reference_module() -> Any:
    try:
        return importlib.import_module("tensorgym.agents")
    except ImportError as e:
        raise TensorGymError(f"the reference agents need tensorgym.agents, which failed to "
                             f"import: {e}") from None


def reference_agent_names() -> list[str]:
    """Names ``tensorgym.agents`` registers (empty if it is missing or has no registry)."""
    try:
        registry = getattr(_reference_module(), "AGENTS", None)
    except TensorGymError:
        return []
    return list(registry) if isinstance(registry, dict) else []


def _reference(name: str) -> Callable[..., Agent]:
    """The reference agents live in ``tensorgym.agents``, written separately; accept the factory
    names it may expose and say clearly what is missing."""

    def build(**opts: Any) -> Agent:
        agents = _reference_module()
        for factory in ("make_agent", "get_agent", "create_agent"):
            fn = getattr(agents, factory, None)
            if callable(fn):
                try:
                    return fn(name, **opts)
                except (KeyError, ValueError) as e:  # its own "unknown agent" / bad option
                    raise TensorGymError(f"agent {name!r}: {e}") from None
        registry = getattr(agents, "AGENTS", None)
        if isinstance(registry, dict) and name in registry:
            return registry[name](**opts)
        raise TensorGymError(f"agent {name!r} is not available: tensorgym.agents has no "
                             "make_agent(name, **opts) or AGENTS entry for it yet")

    return build


AGENTS: dict[str, Callable[..., Agent]] = {
    "random": _lazy(".random_search:RandomSearch"),
    "grid": _lazy(".grid:GridSearch"),
    "ga": _lazy(".ga:GeneticSearch"),
    "ppo": _lazy(".rl:PPOAgent"),
    "maskable-ppo": _lazy(".rl:MaskablePPOAgent"),
    "xgb": _reference("xgb"),
    "treegru": _reference("treegru"),
}


def available_agents() -> list[str]:
    """The names above plus every other agent ``tensorgym.agents`` registers (``xgb-rank``...)."""
    return list(AGENTS) + [n for n in reference_agent_names() if n not in AGENTS]


def get_agent(name: str, **opts: Any) -> Agent:
    """An agent by registry name; options go to its constructor."""
    factory = AGENTS.get(name)
    if factory is None and name in reference_agent_names():
        factory = _reference(name)
    if factory is None:
        raise TensorGymError(f"unknown agent {name!r}; choose from "
                             f"{', '.join(available_agents())}")
    try:
        return factory(**opts)
    except TypeError as e:
        if "argument" not in str(e):  # not a misspelt or missing option: a real bug
            raise
        raise TensorGymError(f"bad options for agent {name!r}: {e}") from None


__all__ = ["AGENTS", "Agent", "BatchSearchAgent", "available_agents", "get_agent"]
