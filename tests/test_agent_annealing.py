"""Parallel simulated annealing over a known synthetic model."""
import numpy as np
import pytest

from tensorgym.agents.annealing import ParallelAnnealer
from tensorgym.space import ConfigSpace, other_knob

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
