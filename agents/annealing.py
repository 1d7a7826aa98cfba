"""Parallel simulated annealing over a cost model (paper section 3.3).

A batch of Markov chains walks the config space with the model's score as (negative) energy;
proposals change one knob (``space.random_neighbors``). The chains' states persist across calls,
so after the model is retrained the walk resumes where it was rather than restarting cold, and
a resumed walk needs fewer steps (``resume_steps``) than the first one from random points.

The chains are independent, so they can walk in ``groups`` (each with its own random stream,
temperature scale and early stop) on several processes at once: a :class:`WalkHelper` walks
the other groups while the caller walks the first. Where that helper is missing, the caller
walks them itself, with the same results; only the time differs.
"""
from __future__ import annotations

import heapq
import importlib
import warnings
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from tensorgym.features import Featurizer
from tensorgym.processes.child import Child, ChildDied, ChildError, ChildTimeout
from tensorgym.processes.host import DeviceLock
from tensorgym.space import Config, ConfigSpace

ScoreFn = Callable[[Sequence[Config]], np.ndarray]


@dataclass
class Walk:
    """One group of chains and how far to walk it: picklable, so a helper can walk it."""

    space: ConfigSpace
    points: list[Config]
    rng: np.random.Generator
    k: int
    exclude: "set[int] | frozenset[int]"
    n_steps: int
    early_stop: int
    temperature: tuple[float, float]

    def run(self, score: ScoreFn) -> tuple[list[Config], list[tuple[Config, float]], int,
                                           np.random.Generator]:
        """(the chains' new points, up to ``k`` distinct configs not in ``exclude`` with the
        highest scores seen, best first, the steps taken, the random stream as it is now)."""
        top: list[tuple[float, int, Config]] = []  # min-heap of the k best
        in_top: set[int] = set()
        k, exclude, rng, points = self.k, self.exclude, self.rng, list(self.points)

        def offer(configs: Sequence[Config], scores: np.ndarray) -> bool:
            changed = False
            for c, s in zip(configs, scores):
                if c.index in exclude or c.index in in_top:
                    continue
                if len(top) < k:
                    heapq.heappush(top, (float(s), c.index, c))
                elif s > top[0][0]:
                    in_top.discard(heapq.heapreplace(top, (float(s), c.index, c))[1])
                else:
                    continue
                in_top.add(c.index)
                changed = True
            return changed

        scores = np.asarray(score(points), np.float64)
        offer(points, scores)
        scale = float(np.std(scores)) or 1.0
        t0, t1 = self.temperature
        quiet = steps = 0
        for step in range(self.n_steps):
            t = (t0 + (t1 - t0) * step / max(self.n_steps, 1)) * scale
            proposals = self.space.random_neighbors(points, rng)
            new_scores = np.asarray(score(proposals), np.float64)
            with np.errstate(over="ignore"):
                accept_p = np.exp(np.minimum((new_scores - scores) / (t + 1e-9 * scale), 0.0))
            accept = rng.random(len(proposals)) < accept_p
            points = [q if a else p for p, q, a in zip(points, proposals, accept)]
            scores = np.where(accept, new_scores, scores)
            steps = step + 1
            quiet = 0 if offer(proposals, new_scores) else quiet + 1
            if quiet >= self.early_stop:
                break
        return points, [(c, s) for s, _, c in sorted(top, key=lambda e: (-e[0], e[1]))], steps, rng


class ParallelAnnealer:
    """``n_chains`` chains, at most ``n_steps`` steps in the first call (from random points) and
    ``resume_steps`` (default ``n_steps``) in each later one, stopping early once the top-k has
    not changed for ``early_stop`` steps. The temperature falls linearly from ``temperature[0]``
    to ``temperature[1]``, in units of the score spread of the chains at the start of the call
    (so the walk behaves the same whatever the scale of the model's scores).

    ``groups`` > 1 splits the chains into that many groups of consecutive chains, each a walk of
    its own (own random stream, spread and early stop); ``find_maximums`` merges their tops."""

    def __init__(self, space: ConfigSpace, n_chains: int = 128, n_steps: int = 500,
                 early_stop: int = 50, temperature: tuple[float, float] = (1.0, 0.0),
                 seed: int | np.random.Generator = 0, resume_steps: int | None = None,
                 groups: int = 1) -> None:
        resume_steps = n_steps if resume_steps is None else resume_steps
        if n_chains < 1 or n_steps < 0 or resume_steps < 0 or early_stop < 1:
            raise ValueError("need n_chains >= 1, n_steps >= 0, resume_steps >= 0, early_stop >= 1")
        if not 1 <= groups <= n_chains:
            raise ValueError(f"groups must be 1 to n_chains ({n_chains}), got {groups}")
        self.space = space
        self.n_chains = n_chains
        self.n_steps = n_steps
        self.resume_steps = resume_steps
        self.early_stop = early_stop
        self.temperature = temperature
        self.groups = groups
        self.rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
        self.points: list[Config] = []
        self._rngs: list[np.random.Generator] = []  # one per group
        self.steps_taken = 0  # of the last call (the longest group's), for inspection

    def _init_points(self) -> None:
        self.points = self.space.sample_unique(self.rng, self.n_chains)
        while len(self.points) < self.n_chains:  # tiny spaces: more chains than configs
            self.points += self.space.sample(self.rng, self.n_chains - len(self.points))
        self._rngs = [self.rng] if self.groups == 1 else self.rng.spawn(self.groups)

    def resume(self, points: Sequence[Config]) -> None:
        """Start from ``points``, the chains of an earlier annealer over the same space (the
        last batch of the same task): the first call then walks ``resume_steps``, not
        ``n_steps`` from random points."""
        if len(points) != self.n_chains:
            raise ValueError(f"{len(points)} points for {self.n_chains} chains")
        self.points = list(points)
        self._rngs = [self.rng] if self.groups == 1 else self.rng.spawn(self.groups)

    def walks(self, k: int, exclude: "set[int] | frozenset[int]" = frozenset()) -> list[Walk]:
        """The groups' walks of the next call (chains from random points on the first)."""
        if k < 1:
            raise ValueError("k must be >= 1")
        n_steps = self.resume_steps if self.points else self.n_steps
        if not self.points:
            self._init_points()
        bounds = np.linspace(0, self.n_chains, self.groups + 1).round().astype(int)
        return [Walk(self.space, self.points[a:b], rng, k, exclude, n_steps, self.early_stop,
                     self.temperature) for a, b, rng in zip(bounds, bounds[1:], self._rngs)]

    def find_maximums(self, score: ScoreFn, k: int,
                      exclude: "set[int] | frozenset[int]" = frozenset(),
                      others: "Callable[[list[Walk]], Callable[[], list[tuple]]] | None" = None,
                      ) -> list[tuple[Config, float]]:
        """Run the chains and return up to ``k`` distinct configs not in ``exclude`` (indices)
        with the highest scores seen, best first, with their scores. ``score`` scores the first
        group's walk; ``others(walks)`` starts the other groups' walks and returns a function
        that gives their ``Walk.run`` results once the first is done (``WalkHelper.others``;
        default: they are walked here with ``score``, one after another)."""
        walks = self.walks(k, exclude)
        rest = others(walks[1:]) if others is not None and len(walks) > 1 else None
        results = [walks[0].run(score)]
        results += rest() if rest is not None else [w.run(score) for w in walks[1:]]
        self.points = [p for points, _, _, _ in results for p in points]
        self._rngs = [rng for _, _, _, rng in results]
        self.steps_taken = max(steps for _, _, steps, _ in results)
        best: dict[int, tuple[Config, float]] = {}
        for _, top, _, _ in results:
            for c, s in top:
                best.setdefault(c.index, (c, s))
        return sorted(best.values(), key=lambda cs: (-cs[1], cs[0].index))[:k]


# ---------------------------------------------------------------- walking on a helper process


class _WalkServer:
    """What a walk helper serves: walks, each scored by the picklable ``score`` sent with it. A
    score that featurizes (a ``featurizer`` attribute: ``tuner.ModelScore``) does so with the
    helper's own featurizer, whose row cache lasts across walks as long as the helper."""

    def __init__(self, modules: Sequence[str] = (), warm: "Callable[[], object] | None" = None,
                 ) -> None:
        self.featurizer = Featurizer()  # one process (n_jobs 1): it starts no helpers of its own
        for name in modules:  # imported while the helper starts, not on its first walk
            importlib.import_module(name)
        if warm is not None:
            warm()

    def walk(self, walk: Walk, score: ScoreFn) -> tuple:
        if hasattr(score, "featurizer"):  # a copy of the caller's, with an empty one
            score.featurizer = self.featurizer
        return walk.run(score)


class WalkHelper:
    """A helper process that walks groups of chains (``ParallelAnnealer.find_maximums``'s
    ``others``) while the caller walks its own. ``start`` launches it without waiting: it
    imports ``modules`` and runs ``warm()`` (picklable), ~0.4 s in all, so that its first walk
    is as quick as the caller's. A tuner starts it while its first batch is measured: it starts
    holding the host's build lock (``tensorgym.processes.host.DeviceLock``) shared, as a build
    does, so no kernel is timed on these cores until it serves. Then it walks only while the
    caller does, when the cores are otherwise idle. ``close`` stops it. A helper that fails is
    reported once and not started again: the caller then walks every group itself, with the
    same results."""

    def __init__(self, modules: Sequence[str] = (),
                 warm: "Callable[[], object] | None" = None) -> None:
        self.modules, self.warm = tuple(modules), warm
        self.child = Child(_WalkServer, self.modules, warm, name="annealing helper",
                           start_lock=DeviceLock("host"))
        self.failed = False

    def __getstate__(self) -> dict:  # a copy is a helper not started yet
        return {"modules": self.modules, "warm": self.warm}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["modules"], state["warm"])

    def start(self) -> None:
        if not self.failed and not self.child.alive:
            try:
                self.child.spawn()
            except OSError as e:  # no lock file, no process: walk here
                self._fail(e)

    @property
    def starting(self) -> bool:
        """Whether its process is starting now (and so takes a core)."""
        if self.failed or not self.child.starting:
            return False
        try:
            return not self.child.ready()
        except ChildDied as e:
            self._fail(e)
            return False

    def others(self, score: ScoreFn) -> "Callable[[list[Walk]], Callable[[], list[tuple]]]":
        """``find_maximums``'s ``others``: the first of the walks on the helper (scored by the
        picklable ``score``), any further ones here after the caller's own."""
        def submit(walks: list[Walk]) -> Callable[[], list[tuple]]:
            sent = self._send(walks[0], score)

            def collect() -> list[tuple]:
                out = [self._result(sent, walks[0], score)]
                return out + [w.run(score) for w in walks[1:]]
            return collect
        return submit

    def _send(self, walk: Walk, score: ScoreFn) -> bool:
        if self.failed:
            return False
        try:
            self.child.send("walk", walk, score)  # starts it, or waits for a start in progress
            return True
        except (ChildDied, ChildError, OSError) as e:
            self._fail(e)
            return False

    def _result(self, sent: bool, walk: Walk, score: ScoreFn) -> tuple:
        if sent:
            try:
                return self.child.result()
            except (ChildDied, ChildError, ChildTimeout) as e:
                self._fail(e)
        return walk.run(score)  # the same walk here: the same result, later

    def _fail(self, e: Exception) -> None:
        self.failed = True
        self.child.kill()
        warnings.warn(f"the annealing helper process failed ({e}); annealing in this process",
                      RuntimeWarning, stacklevel=4)

    def close(self) -> None:
        self.child.kill()
        self.child.start_lock.close()
