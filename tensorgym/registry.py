"""One registry: name -> factory with declared options, for two kinds of entries: search
strategies (``AGENT``: ``make``, ``names``, ``AGENTS``) and the cost models a model-based tuner
builds by name (``COST_MODEL``: ``make_model``, ``names(COST_MODEL)``, ``COST_MODELS``).

``tensorgym.baselines`` (random, grid, ga, ppo, maskable-ppo) and ``tensorgym.agents`` (the
strategies xgb, treegru, ...; the cost models xgb, xgb-reg, treegru, ...) register theirs when
imported; the first lookup imports them by name (this module
never imports them itself), and the modules named in ``$TENSORGYM_AGENT_MODULES``
(comma-separated), so that your own strategies reach ``tensorgym tune --agent``. Options are
checked against their declarations before the factory runs; a bad name or option is one
line of :class:`AgentOptionError` / :class:`UnknownAgentError` (``TensorGymError``s).
"""
from __future__ import annotations

import importlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from .errors import TensorGymError

PROVIDERS = ("tensorgym.baselines", "tensorgym.agents")
MODULES_ENV = "TENSORGYM_AGENT_MODULES"
AGENT, COST_MODEL = "agent", "cost model"  # the kinds of entries, each a table of its own
KINDS = (AGENT, COST_MODEL)


class UnknownAgentError(TensorGymError, ValueError):
    """A name no provider registers (of an agent, or of a cost model)."""


class AgentOptionError(TensorGymError, ValueError):
    """An option that is not declared, of the wrong type, or refused by the factory."""


@dataclass(frozen=True)
class Option:
    """A declared option. ``type``: a type or a tuple of types (``object``: anything); ints are
    accepted for floats and lists for tuples, never bools for numbers; ``None`` is accepted
    when the default is ``None``. ``choices``: the allowed values, if limited."""

    name: str
    type: "type | tuple[type, ...]"
    default: Any = None
    help: str = ""
    choices: tuple = ()

    def check(self, value: Any) -> None:
        if value is None and self.default is None:
            return
        types = self.type if isinstance(self.type, tuple) else (self.type,)
        if float in types:
            types += (int,)
        if tuple in types:
            types += (list,)
        ok = isinstance(value, types) and not (
            isinstance(value, bool) and bool not in types and object not in types)
        if not ok:
            raise ValueError(f"{self.name} must be {self.type_name()}, got {value!r}")
        if self.choices and value not in self.choices:
            raise ValueError(f"{self.name} must be one of {', '.join(map(str, self.choices))}, "
                             f"got {value!r}")

    def type_name(self) -> str:
        types = self.type if isinstance(self.type, tuple) else (self.type,)
        names = [t.__name__ for t in types] + (["None"] if self.default is None else [])
        return " or ".join(names)

    def describe(self) -> str:
        text = f"{self.name}: {self.type_name()} = {self.default!r}"
        if self.choices:
            text += f" ({'|'.join(map(str, self.choices))})"
        return f"{text}  {self.help}" if self.help else text


@dataclass(frozen=True)
class AgentSpec:
    """A registered entry (a strategy, or of another ``kind``): ``spec(**options)`` checks the
    options and builds it."""

    name: str
    factory: Callable[..., Any]
    options: tuple[Option, ...] = ()
    help: str = ""
    kind: str = AGENT

    def check(self, options: dict[str, Any]) -> None:
        declared = {o.name: o for o in self.options}
        for key, value in options.items():
            if key not in declared:
                known = ", ".join(declared) or "none"
                raise AgentOptionError(f"bad options for {self.kind} {self.name!r}: unknown "
                                       f"option {key!r} (options: {known})")
            try:
                declared[key].check(value)
            except ValueError as e:
                raise AgentOptionError(f"bad options for {self.kind} {self.name!r}: {e}") from None

    def __call__(self, **options: Any) -> Any:
        self.check(options)
        try:
            return self.factory(**options)
        except AgentOptionError:
            raise
        except ValueError as e:  # the factory's own checks of option values
            msg = " ".join(str(e).split())
            raise AgentOptionError(f"bad options for {self.kind} {self.name!r}: {msg}") from e


_SPECS: dict[str, dict[str, AgentSpec]] = {kind: {} for kind in KINDS}  # kind -> name -> spec
_loaded = False
_failed: dict[str, str] = {}  # provider module -> why it could not be imported


def _table(kind: str) -> dict[str, AgentSpec]:
    try:
        return _SPECS[kind]
    except KeyError:
        raise TensorGymError(f"no registry of {kind!r}s; kinds: {', '.join(KINDS)}") from None


def register(name: str, factory: Callable[..., Any], options: "tuple[Option, ...] | list" = (),
             help: str = "", replace: bool = False, kind: str = AGENT) -> AgentSpec:
    """Register ``factory(**options)`` under ``name`` (among the entries of ``kind``); every
    option it takes must be declared."""
    table = _table(kind)
    if name in table and not replace:
        raise TensorGymError(f"{kind} {name!r} is already registered (replace=True overrides)")
    names = [o.name for o in options]
    if len(set(names)) != len(names):
        raise TensorGymError(f"{kind} {name!r} declares an option twice: {names}")
    spec = table[name] = AgentSpec(name, factory, tuple(options), help, kind)
    return spec


def unregister(name: str, kind: str = AGENT) -> None:
    _table(kind).pop(name, None)


def _load() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    extra = [m.strip() for m in os.environ.get(MODULES_ENV, "").split(",") if m.strip()]
    for module in (*PROVIDERS, *extra):
        try:
            importlib.import_module(module)
        except ImportError as e:
            if module not in PROVIDERS:
                raise TensorGymError(f"{MODULES_ENV}: cannot import {module}: {e}") from None
            _failed[module] = str(e)


def names(kind: str = AGENT) -> list[str]:
    table = _table(kind)
    _load()
    return list(table)


def specs(kind: str = AGENT) -> list[AgentSpec]:
    table = _table(kind)
    _load()
    return list(table.values())


def spec(name: str, kind: str = AGENT) -> AgentSpec:
    table = _table(kind)
    _load()
    try:
        return table[name]
    except KeyError:
        missing = "".join(f"; {m} failed to import: {e}" for m, e in _failed.items())
        raise UnknownAgentError(f"unknown {kind} {name!r}; choose from "
                                f"{', '.join(table)}{missing}") from None


def make(name: str, **options: Any) -> Any:
    """The strategy registered as ``name``, built with ``options`` (checked first)."""
    return spec(name)(**options)


def make_model(name: str, **options: Any) -> Any:
    """The cost model registered as ``name``, built with ``options`` (checked first)."""
    return spec(name, COST_MODEL)(**options)


class _View(Mapping):
    """One kind's table as a read-only mapping name -> AgentSpec (``AGENTS``, ``COST_MODELS``)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def __getitem__(self, name: str) -> AgentSpec:
        try:
            return spec(name, self.kind)
        except UnknownAgentError:
            raise KeyError(name) from None

    def __contains__(self, name: object) -> bool:
        return name in names(self.kind)

    def __iter__(self) -> Iterator[str]:
        return iter(names(self.kind))

    def __len__(self) -> int:
        return len(names(self.kind))


AGENTS: Mapping = _View(AGENT)
COST_MODELS: Mapping = _View(COST_MODEL)

__all__ = ["AGENT", "AGENTS", "COST_MODEL", "COST_MODELS", "KINDS", "AgentOptionError",
           "AgentSpec", "Option", "UnknownAgentError", "make", "make_model", "names", "register",
           "spec", "specs", "unregister"]
