"""Where a tune's time goes: seconds per category, metered where they are spent.

The env owns one ``Meter`` (``env.unwrapped.meter``): it fills ``build``, ``run`` and the
records' share of ``other`` in ``measure`` and ``featurize`` in ``featurize``; agents add
``model`` and ``search`` with ``meter.time(...)``. Nothing here knows about a tuning loop, so any
loop (or an ask/tell driver) meters the same way.
"""
from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from time import perf_counter
from typing import Any, Iterator, Sequence

#: the metered categories; a report adds ``other`` = wall minus their sum
CATEGORIES = ("build", "run", "featurize", "model", "search")


@dataclass
class Meter:
    """Seconds of wall time per category. Categories never overlap: a timer opened inside
    another (``featurize`` inside ``search``, ``build`` inside an RL agent's ``search``) is
    charged to its own category and left out of the enclosing one, so the parts of a tune add
    up to no more than its wall time.

    - ``build``: wall seconds of the measurer's build phases (``Measurer.seconds["build"]``):
      lowering and compiling in parallel builder processes, starting them, waiting for the
      host's lock. Builds run in parallel, so this is not the sum of per-config build seconds;
      that sum is ``build_cpu``, for information.
    - ``run``: wall seconds of the measurer's timing phases (``Measurer.seconds["run"]``):
      starting the worker, checks against NumPy, samples, calibrations and phases re-taken
      after a drift, timeouts in full, confirmations of new bests. Results served from the
      records database add nothing to either.
    - ``featurize``: wall seconds inside ``env.featurize`` (the agent's features and the env's
      observations alike).
    - ``model``: building, fitting and predicting with the cost model (RL agents: building the
      policy and its gradient updates).
    - ``search``: the agent's own proposal work (annealing, batch selection, GA operators,
      sampling; RL: acting and rollout bookkeeping), without the featurize and model time
      spent inside it.
    - ``other``: time charged explicitly as overhead (the env's records reads and writes in
      ``measure``, callbacks an RL agent runs inside its timed learning); ``report`` adds
      everything no timer saw, so there ``other`` = wall - the five categories.

    The env's meter accumulates over the env's life, across ``reset()`` (an RL agent resets
    the env many times within one tune): to meter one tune, take ``copy()`` before it and
    ``since(start)`` after. Not thread-safe; each process of a vector env has its own.
    """

    build: float = 0.0
    run: float = 0.0
    featurize: float = 0.0
    model: float = 0.0
    search: float = 0.0
    other: float = 0.0
    build_cpu: float = 0.0  # summed per-config build seconds (parallel, so not wall time)
    _nested: list = field(default_factory=list, repr=False, compare=False)

    def add(self, category: str, seconds: float) -> None:
        """Charge ``seconds`` to ``category`` (and leave them out of any open timer's)."""
        _check(category)
        setattr(self, category, getattr(self, category) + seconds)
        if self._nested:
            self._nested[-1] += seconds

    @contextmanager
    def time(self, category: str) -> Iterator[None]:
        """Charge the wall time of the block to ``category``, less what nested timers took."""
        _check(category)
        self._nested.append(0.0)
        t0 = perf_counter()
        try:
            yield
        finally:
            elapsed = perf_counter() - t0
            inner = self._nested.pop()
            self.add(category, max(0.0, elapsed - inner))
            if self._nested:  # the enclosing timer excludes all of it, not only our own share
                self._nested[-1] += inner

    def add_measurement(self, build: float, run: float, results: Sequence[Any]) -> None:
        """Charge measurement work: ``build`` and ``run`` wall seconds (the measurer's own
        clocks, ``Measurer.seconds``) and the summed build seconds of ``results``."""
        self.build_cpu += sum(r.build_time for r in results)
        self.add("run", run)
        self.add("build", build)

    def copy(self) -> "Meter":
        return Meter(self.build, self.run, self.featurize, self.model, self.search, self.other,
                     self.build_cpu)

    def since(self, start: "Meter") -> "Meter":
        """The seconds spent after ``start`` (a ``copy()`` of this meter taken earlier)."""
        return Meter(*(getattr(self, k) - getattr(start, k)
                       for k in (*CATEGORIES, "other", "build_cpu")))

    def report(self, wall: float) -> dict[str, float]:
        """``wall``, the five categories, ``other`` (wall minus them, at least 0) and
        ``build_cpu``."""
        parts = {c: getattr(self, c) for c in CATEGORIES}
        other = max(0.0, wall - sum(parts.values()))
        return {"wall": wall, **parts, "other": other, "build_cpu": self.build_cpu}

    def line(self, wall: float) -> str:
        """One human-readable line: seconds and percent of wall per category."""
        rep = self.report(wall)
        parts = ", ".join(f"{c} {rep[c]:.2f}s ({100 * rep[c] / wall if wall > 0 else 0:.0f}%)"
                          for c in (*CATEGORIES, "other"))
        return f"time: {parts} of {wall:.2f}s wall; builds {rep['build_cpu']:.2f}s summed"


def _check(category: str) -> None:
    if category not in CATEGORIES and category != "other":
        raise ValueError(f"unknown time category {category!r}; use one of "
                         f"{', '.join((*CATEGORIES, 'other'))}")


def meter_of(env: Any) -> Meter:
    """The env's meter, or a private one for an env without one (test stand-ins)."""
    meter = getattr(getattr(env, "unwrapped", env), "meter", None)
    return meter if isinstance(meter, Meter) else Meter()
