"""Parallel simulated annealing over a known synthetic model."""
import functools
import os
import pickle
import time

import numpy as np
import pytest

from tensorgym.agents.annealing import ParallelAnnealer, WalkHelper, _WalkServer
from tensorgym.agents.tuner import ModelScore
from tensorgym.features import Featurizer
from tensorgym.processes.host import DeviceLock
from tensorgym.space import ConfigSpace, other_knob
from tensorgym.templates import space_for
from tensorgym.workloads import get_workload

SPACE = ConfigSpace("sa/cpu", tuple(other_knob(f"k{i}", list(range(6))) for i in range(5)))
TARGET = np.array([4, 1, 5, 0, 3])


def score(configs):
    """A smooth landscape with one maximum (0 at TARGET) -- the 'model' being optimized."""
    ch = np.array([c.choices for c in configs])
    return -np.abs(ch - TARGET).sum(axis=1).astype(float)


def test_finds_the_optimum_of_a_known_model():
    sa = ParallelAnnealer(SPACE, n_chains=16, n_steps=200, early_stop=200, seed=0)
    top = sa.find_maximums(score, k=5)
    assert top[0][0].choices == tuple(TARGET) and top[0][1] == 0.0
    assert [s for _, s in top] == sorted((s for _, s in top), reverse=True)
    assert len({c.index for c, _ in top}) == 5


def test_excluded_configs_are_never_returned():
    best = SPACE.from_choices(tuple(TARGET))
    sa = ParallelAnnealer(SPACE, n_chains=16, n_steps=200, early_stop=200, seed=0)
    top = sa.find_maximums(score, k=8, exclude={best.index})
    assert best.index not in {c.index for c, _ in top}
    assert top[0][1] == -1.0  # the next best: one knob one step off


def test_chains_persist_across_calls_and_seed_determines_the_walk():
    a = ParallelAnnealer(SPACE, n_chains=8, n_steps=30, seed=3)
    b = ParallelAnnealer(SPACE, n_chains=8, n_steps=30, seed=3)
    ra, rb = a.find_maximums(score, 4), b.find_maximums(score, 4)
    assert [c.index for c, _ in ra] == [c.index for c, _ in rb]
    state = list(a.points)
    seen = []
    a.find_maximums(lambda cs: (seen.append(list(cs)), score(cs))[1], 4)
    assert seen[0] == state  # the second call starts where the first stopped
    c = ParallelAnnealer(SPACE, n_chains=8, n_steps=30, seed=4)
    c.find_maximums(score, 4)
    assert [p.index for p in c.points] != [p.index for p in b.points]


def test_early_stop_and_tiny_space():
    tiny = ConfigSpace("t/cpu", (other_knob("a", [1, 2]), other_knob("b", [1, 2])))
    sa = ParallelAnnealer(tiny, n_chains=16, n_steps=1000, early_stop=5, seed=0)
    top = sa.find_maximums(lambda cs: np.array([float(sum(c.choices)) for c in cs]), k=10)
    assert len(top) == 4 and top[0][0].choices == (1, 1)
    assert sa.steps_taken <= 6


def test_bad_arguments():
    with pytest.raises(ValueError):
        ParallelAnnealer(SPACE, n_chains=0)
    with pytest.raises(ValueError):
        ParallelAnnealer(SPACE).find_maximums(score, k=0)


def test_a_resumed_walk_takes_resume_steps_and_still_finds_the_optimum():
    """The first call walks from random points for ``n_steps``; later calls resume the chains
    where they stopped and take at most ``resume_steps``, so the top they found is kept."""
    sa = ParallelAnnealer(SPACE, n_chains=16, n_steps=200, early_stop=200, seed=0, resume_steps=5)
    first = sa.find_maximums(score, k=5)
    assert sa.steps_taken == 200 and first[0][1] == 0.0
    again = sa.find_maximums(score, k=5, exclude={first[0][0].index})
    assert sa.steps_taken == 5
    assert again[0][1] == -1.0  # chains sit around the optimum: its neighbours come at once
    with pytest.raises(ValueError, match="resume_steps"):
        ParallelAnnealer(SPACE, resume_steps=-1)


class ExitsInHelper:
    """``score``, except that in any process but the one that made it, it ends that process."""

    def __init__(self) -> None:
        self.pid = os.getpid()

    def __call__(self, configs):
        if os.getpid() != self.pid:
            os._exit(3)
        return score(configs)


def _walks(groups: int, helper=None, scorer=score, calls: int = 2):
    sa = ParallelAnnealer(SPACE, n_chains=16, n_steps=60, early_stop=60, seed=5, groups=groups,
                          resume_steps=10)
    out = [[(c.index, s) for c, s in sa.find_maximums(
        score, 6, others=helper.others(scorer) if helper else None)] for _ in range(calls)]
    return out, [p.index for p in sa.points]


def test_groups_of_chains_walk_apart_and_find_the_optimum():
    sa = ParallelAnnealer(SPACE, n_chains=16, n_steps=200, early_stop=200, seed=0, groups=2)
    top = sa.find_maximums(score, k=5)
    assert top[0][0].choices == tuple(TARGET) and len({c.index for c, _ in top}) == 5
    assert [s for _, s in top] == sorted((s for _, s in top), reverse=True)
    assert _walks(2) == _walks(2) != _walks(1)
    with pytest.raises(ValueError, match="groups"):
        ParallelAnnealer(SPACE, n_chains=4, groups=5)


def test_a_walk_helper_walks_a_group_with_the_same_result_as_here():
    helper = WalkHelper()
    helper.start()
    try:
        assert _walks(2, helper) == _walks(2)
        assert helper.child.alive and helper.child.calls == 2 and not helper.failed
    finally:
        helper.close()
    assert not helper.child.alive


class _RowSum:
    """A cost model that scores a feature row by its sum."""

    def predict(self, X):
        return np.asarray(X, np.float64).sum(axis=1)


def test_a_walk_helper_scores_with_one_featurizer_across_walks():
    """A ``ModelScore`` reaches the helper as a copy with an empty featurizer; the helper's
    own, which keeps its rows from walk to walk, takes its place."""
    w = get_workload("matmul:64,32,16")
    space = space_for(w, "cpu")
    server = _WalkServer()
    annealer = ParallelAnnealer(space, n_chains=8, n_steps=3, seed=0)
    with Featurizer() as mine:
        for _ in range(2):
            score = pickle.loads(pickle.dumps(ModelScore(w, "relation", _RowSum(), space, mine)))
            assert score.featurizer is not mine and not score.featurizer.rows["relation"].data
            server.walk(annealer.walks(4)[0], score)
            assert score.featurizer is server.featurizer
        assert server.featurizer.rows["relation"].data and not mine.rows["relation"].data


def test_a_walk_helper_starts_under_the_build_lock(tmp_path):
    """Its start (imports and a warm-up: a core's work) holds the host's build lock shared, as a
    build does, so a kernel is timed (the lock held exclusively) only once the helper serves."""
    helper = WalkHelper(warm=functools.partial(time.sleep, 1.0))
    helper.child.start_lock = DeviceLock("host", tmp_path)
    helper.start()
    try:
        assert helper.child.starting and helper.starting
        with DeviceLock("host", tmp_path).exclusive():  # what a timed run takes
            assert helper.child.ready() and not helper.starting
        assert _walks(2, helper) == _walks(2)
    finally:
        helper.close()


def test_a_helper_that_hangs_while_starting_holds_the_build_lock_only_so_long(tmp_path):
    """A timed run waits for a starting helper ``start_lock_limit`` seconds at most (one that
    hangs must not hold off timing for good); the helper starts on meanwhile."""
    helper = WalkHelper(warm=functools.partial(time.sleep, 30.0))
    helper.child.start_lock = DeviceLock("host", tmp_path)
    helper.child.start_lock_limit = 0.5
    helper.start()
    try:
        with DeviceLock("host", tmp_path).exclusive():
            assert not helper.child.ready() and helper.child.alive
    finally:
        helper.close()


def test_a_walk_helper_that_dies_in_a_walk_is_reported_and_the_walk_done_here():
    helper = WalkHelper()
    try:
        with pytest.warns(RuntimeWarning, match="annealing helper process failed"):
            got = _walks(2, helper, ExitsInHelper(), calls=1)
        assert got == _walks(2, calls=1)
        assert helper.failed and not helper.child.alive
        assert _walks(2, helper, calls=1) == got  # it is not started again
        assert not helper.child.alive
    finally:
        helper.close()
