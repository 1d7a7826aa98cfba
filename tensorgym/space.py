"""Schedule spaces: knobs in AutoTVM's style and a ``ConfigSpace`` over their product.

A config is a point of the product of the knobs' option lists. It has an integer index (O(1)
dedup, cheap sampling), a tuple of per-knob choices (the env's ``MultiDiscrete`` action), and a
JSON form that stores option *values*, not indices, so it survives changes to the space.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any, Iterator, Optional, Sequence

import numpy as np

from .errors import InvalidConfigError


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def factorizations(n: int, levels: int, policy: str = "all") -> list[tuple[int, ...]]:
    """Ordered factorizations of ``n`` into ``levels`` factors (outermost first).

    ``policy="pow2"`` keeps the inner factors powers of two (the outermost takes the rest).
    """
    if levels == 1:
        return [(n,)]
    out = []
    for d in divisors(n):
        if policy == "pow2" and d & (d - 1):
            continue
        for rest in factorizations(n // d, levels - 1, policy):
            out.append(rest + (d,))
    return sorted(out)


@dataclass(frozen=True)
class Knob:
    """A categorical knob: one of ``options``. ``kind`` tells what it means to the template."""

    name: str
    options: tuple[Any, ...]
    kind: str = "other"  # split | reorder | annotate | other
    # added to its template after configs were recorded: a config without it means options[0]
    # (the template's behaviour before the knob), so older records stay readable
    added: bool = False

    def __post_init__(self) -> None:
        if not self.options:
            raise ValueError(f"knob {self.name} has no options")

    @property
    def size(self) -> int:
        return len(self.options)

    def index_of(self, value: Any) -> int:
        try:
            v = _canonical(value)
        except (TypeError, ValueError, RecursionError):  # a value read from a file
            raise InvalidConfigError(f"{value!r:.80} is not an option of knob {self.name}") \
                from None
        for i, o in enumerate(self.options):
            if o == v:
                return i
        raise InvalidConfigError(f"{value!r} is not an option of knob {self.name}")


def split_knob(name: str, extent: int, levels: int, policy: str = "all") -> Knob:
    return Knob(name, tuple(factorizations(extent, levels, policy)), "split")


def reorder_knob(name: str, orders: Sequence[Sequence[str]]) -> Knob:
    return Knob(name, tuple(tuple(o) for o in orders), "reorder")


def annotate_knob(name: str, choices: Sequence[str]) -> Knob:
    return Knob(name, tuple(choices), "annotate")


def other_knob(name: str, values: Sequence[Any], added: bool = False) -> Knob:
    return Knob(name, tuple(values), "other", added)


def is_int(v: Any) -> bool:
    """An exact integer: a Python or NumPy int, not a bool, float or string."""
    return isinstance(v, (int, np.integer)) and not isinstance(v, bool)


def short_repr(v: Any, n: int = 120) -> str:
    """``repr(v)``, cut to ``n`` characters for error messages."""
    r = " ".join(repr(v).split())
    return r if len(r) <= n else r[:n] + "..."


def _canonical(v: Any) -> Any:
    if isinstance(v, list):
        return tuple(_canonical(x) for x in v)
    return v


@dataclass(frozen=True)
class SpaceKey:
    """The exact identity of a template's space: the workload, the template that built the space
    (and lowers its configs) and the template options that change its knobs. Two spaces with
    equal keys have the same knobs; ``ConfigSpace.name`` (``"conv2d/cpu"``) only names the
    family, shared by every conv2d."""

    workload_key: str  # ``Workload.key``
    template: str  # "cpu" | "gpu"
    options: tuple[tuple[str, Any], ...] = ()  # (name, value) of non-default options, sorted

    def __str__(self) -> str:
        opts = ",".join(f"{k}={v}" for k, v in self.options)
        return f"{self.workload_key}/{self.template}" + (f"[{opts}]" if opts else "")


@dataclass(frozen=True)
class Config:
    """One schedule: a value per knob. ``choices[i]`` is the option index of knob ``i``.
    ``space_key`` is the exact space it came from (None for a space no template built)."""

    space_name: str
    choices: tuple[int, ...]
    values: dict[str, Any] = field(compare=False, hash=False)
    index: int = field(compare=False)
    space_key: Optional[SpaceKey] = None

    @property
    def template(self) -> str:
        """The template that lowers this config; raises for a config of no template's space."""
        if self.space_key is None:
            raise InvalidConfigError(f"config {self.index} of space {self.space_name} comes from "
                                     "no template's space: make configs with templates.space_for")
        return self.space_key.template

    def __getitem__(self, knob: str) -> Any:
        return self.values[knob]

    def to_json(self) -> str:
        return json.dumps({"space": self.space_name, "knobs": self.values}, sort_keys=True)

    def __repr__(self) -> str:
        return f"Config({self.index}: {self.values})"


@dataclass(frozen=True)
class ConfigSpace:
    """The product of ``knobs``. ``name`` is the family (``"conv2d/cpu"``, stored in records);
    ``key`` the exact identity (see ``SpaceKey``; None for a hand-made space), which every config
    of the space carries."""

    name: str
    knobs: tuple[Knob, ...]
    key: Optional[SpaceKey] = None

    @property
    def template(self) -> Optional[str]:
        return self.key.template if self.key is not None else None

    @property
    def workload_key(self) -> Optional[str]:
        return self.key.workload_key if self.key is not None else None

    @property
    def label(self) -> str:
        return str(self.key) if self.key is not None else self.name

    @property
    def dims(self) -> tuple[int, ...]:
        return tuple(k.size for k in self.knobs)

    @property
    def size(self) -> int:
        return math.prod(self.dims)

    def __len__(self) -> int:
        return self.size

    def knob(self, name: str) -> Knob:
        for k in self.knobs:
            if k.name == name:
                return k
        raise KeyError(name)

    def check_choices(self, choices: Any) -> tuple[int, ...]:
        """``choices`` as a tuple of ints, validated strictly: a 1-D integer array or a list or
        tuple of exact integers (not bools, floats or strings), one per knob, each in range;
        anything else raises ``InvalidConfigError``."""
        n = len(self.knobs)
        if isinstance(choices, np.ndarray):
            if choices.shape != (n,) or choices.dtype.kind not in "iu":
                raise InvalidConfigError(
                    f"{self.name} takes {n} integer choices, got an array of shape "
                    f"{choices.shape} and dtype {choices.dtype}")
            out = tuple(int(c) for c in choices)
        elif isinstance(choices, (list, tuple)):
            if len(choices) != n:
                raise InvalidConfigError(
                    f"{self.name} has {n} knobs, got {len(choices)} choices: "
                    f"{short_repr(choices)}")
            bad = [i for i, c in enumerate(choices) if not is_int(c)]
            if bad:
                raise InvalidConfigError(
                    f"choices must be integers; choice {bad[0]} is {short_repr(choices[bad[0]])} "
                    f"({type(choices[bad[0]]).__name__})")
            out = tuple(int(c) for c in choices)
        else:
            raise InvalidConfigError(f"{self.name} takes a sequence of {n} integer choices, got "
                                     f"{type(choices).__name__} {short_repr(choices)}")
        for c, k in zip(out, self.knobs):
            if not 0 <= c < k.size:
                raise InvalidConfigError(f"choice {c} out of range for knob {k.name} "
                                         f"(0..{k.size - 1})")
        return out

    def from_choices(self, choices: Sequence[int]) -> Config:
        choices = self.check_choices(choices)
        values = {k.name: k.options[c] for c, k in zip(choices, self.knobs)}
        return Config(self.name, choices, values, self._index(choices), self.key)

    def validate(self, config: Any) -> None:
        """Raise ``InvalidConfigError`` unless ``config`` is a config of exactly this space: its
        key, and choices in range whose options are its values."""
        if not isinstance(config, Config):
            raise InvalidConfigError(f"expected a Config of space {self.label}, got "
                                     f"{type(config).__name__} {short_repr(config)}")
        if config.space_key != self.key or config.space_name != self.name:
            where = str(config.space_key) if config.space_key is not None else config.space_name
            raise InvalidConfigError(f"config of space {where}, not of {self.label}")
        ref = self.from_choices(config.choices)
        if config.values != ref.values or config.index != ref.index:
            raise InvalidConfigError(f"config {config.index}: its values or index are not those "
                                     f"its choices give in space {self.label}")

    def get(self, index: int) -> Config:
        if not is_int(index):
            raise InvalidConfigError(f"a config index is an integer, got {short_repr(index)}")
        index = int(index)
        if not 0 <= index < self.size:
            raise InvalidConfigError(f"index {index} out of range [0, {self.size})")
        choices = []
        rest = index
        for k in reversed(self.knobs):
            rest, c = divmod(rest, k.size)
            choices.append(c)
        return self.from_choices(choices[::-1])

    def from_values(self, values: dict[str, Any]) -> Config:
        if any(k.added and k.name not in values for k in self.knobs):
            values = {**{k.name: k.options[0] for k in self.knobs if k.added}, **values}
        missing = [k.name for k in self.knobs if k.name not in values]
        extra = [n for n in values if n not in {k.name for k in self.knobs}]
        if missing or extra:
            raise InvalidConfigError(
                f"config does not fit space {self.name}: missing {missing}, unknown {extra}")
        return self.from_choices([k.index_of(values[k.name]) for k in self.knobs])

    def spellings(self, config: Config) -> list[str]:
        """``config.to_json()``, then the JSON a tree before each added knob wrote for the same
        config: the added knobs, in their order, dropped from the last while they hold their
        first option (records keep the spelling they were written with)."""
        out = [config.to_json()]
        values = dict(config.values)
        for knob in reversed([k for k in self.knobs if k.added]):
            if values.get(knob.name) != knob.options[0]:
                break
            del values[knob.name]
            out.append(json.dumps({"space": config.space_name, "knobs": values}, sort_keys=True))
        return out

    def from_json(self, text: "str | dict") -> Config:
        try:
            obj = json.loads(text) if isinstance(text, str) else text
            values = obj["knobs"]
        except (ValueError, KeyError, TypeError, IndexError, RecursionError) as e:
            raise InvalidConfigError(f"malformed config JSON: {str(e)[:200]}") from None
        if not isinstance(values, dict):  # a config read from a file: knobs a list, an int...
            raise InvalidConfigError(f"malformed config JSON: knobs is a "
                                     f"{type(values).__name__}, not an object")
        if obj.get("space", self.name) != self.name:
            raise InvalidConfigError(f"config of space {obj['space']!r}, not {self.name!r}")
        return self.from_values(values)

    def sample(self, rng: np.random.Generator, n: int = 1) -> list[Config]:
        """``n`` uniform samples (with replacement) of the whole product."""
        cols = [rng.integers(0, k.size, size=n) for k in self.knobs]
        return self._from_matrix(np.stack(cols, axis=1) if cols else np.zeros((n, 0), np.int64))

    def _from_matrix(self, choices: np.ndarray) -> list[Config]:
        """Configs of the rows of an (n, knobs) matrix of choices known to be in range (search
        makes thousands per second: ``from_choices`` checks each one, this does not)."""
        if self.size < 2 ** 62:
            radix = np.cumprod((1,) + self.dims[:0:-1])[::-1].astype(np.int64)
            indices = (choices.astype(np.int64) @ radix).tolist() if self.knobs else [0] * len(choices)
        else:  # past int64: Python integers
            indices = [self._index(row) for row in choices.tolist()]
        names = [k.name for k in self.knobs]
        options = [k.options for k in self.knobs]
        out = []
        for row, index in zip(choices.tolist(), indices):
            values = {name: opts[c] for name, opts, c in zip(names, options, row)}
            out.append(Config(self.name, tuple(row), values, index, self.key))
        return out

    def _index(self, choices: Sequence[int]) -> int:
        index = 0
        for c, k in zip(choices, self.knobs):
            index = index * k.size + c
        return index

    def sample_unique(self, rng: np.random.Generator, n: int,
                      exclude: "set[int] | None" = None) -> list[Config]:
        """Up to ``n`` distinct samples whose indices are not in ``exclude``."""
        seen = set(exclude or ())
        out: list[Config] = []
        n = min(n, self.size - len(seen))
        tries = 0
        while len(out) < n and tries < 100 * n + 100:
            tries += 1
            c = self.sample(rng, 1)[0]
            if c.index not in seen:
                seen.add(c.index)
                out.append(c)
        return out

    def neighbors(self, config: Config) -> Iterator[Config]:
        """Every config that differs from ``config`` in exactly one knob."""
        for i, k in enumerate(self.knobs):
            for c in range(k.size):
                if c != config.choices[i]:
                    ch = list(config.choices)
                    ch[i] = c
                    yield self.from_choices(ch)

    def random_neighbor(self, config: Config, rng: np.random.Generator) -> Config:
        """A config that differs from ``config`` in one knob, drawn uniformly: the knob among
        those with several options, then its new option among the others."""
        return self.random_neighbors([config], rng)[0]

    def random_neighbors(self, configs: Sequence[Config], rng: np.random.Generator) -> list[Config]:
        """``random_neighbor`` of each of ``configs`` (of this space), drawn for all at once."""
        movable = np.array([i for i, k in enumerate(self.knobs) if k.size > 1], np.int64)
        if not len(movable) or not len(configs):
            return list(configs)
        choices = np.array([c.choices for c in configs], np.int64)
        rows = np.arange(len(choices))
        knob = movable[rng.integers(len(movable), size=len(choices))]
        new = rng.integers(np.asarray(self.dims, np.int64)[knob] - 1)
        new += new >= choices[rows, knob]
        choices[rows, knob] = new
        return self._from_matrix(choices)

    def __str__(self) -> str:
        lines = [f"ConfigSpace {self.name}: {self.size:,} configs"]
        for k in self.knobs:
            shown = ", ".join(map(str, k.options[:4])) + (", ..." if k.size > 4 else "")
            lines.append(f"  {k.name:<14} {k.kind:<8} {k.size:>5} options: {shown}")
        return "\n".join(lines)
