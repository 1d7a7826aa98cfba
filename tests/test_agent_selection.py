"""Diversity-aware selection (Equation 3) against brute force, and the epsilon-greedy batch."""
import itertools
import math

import numpy as np
import pytest

from tensorgym.agents.selection import (diversity_objective, normalized_quality, select_batch,
                                        submodular_select)
from tensorgym.space import ConfigSpace, other_knob

SPACE = ConfigSpace("tiny/cpu", (other_knob("a", [0, 1, 2]), other_knob("b", [0, 1, 2]),
                                 other_knob("c", [0, 1])))


def random_instance(rng, n):
    idx = rng.choice(SPACE.size, size=n, replace=False)
    return [SPACE.get(i) for i in idx], rng.random(n)


@pytest.mark.parametrize("alpha", [0.0, 0.3, 1.0, 5.0])
def test_greedy_is_near_optimal_and_takes_best_marginal_gain(alpha):
    rng = np.random.default_rng(1)
    for _ in range(30):
        configs, q = random_instance(rng, 7)
        for b in (1, 2, 3, 4):
            picks = submodular_select(configs, q, b, alpha)
            assert len(picks) == len(set(picks)) == b
            value = diversity_objective([configs[i] for i in picks], q[picks], alpha)
            best = max(diversity_objective([configs[i] for i in s], q[list(s)], alpha)
                       for s in itertools.combinations(range(7), b))
            assert value >= (1 - 1 / math.e) * best - 1e-9
            assert value <= best + 1e-9
            # every step is the best marginal gain (the greedy algorithm, exactly)
            for step in range(b):
                before = [configs[i] for i in picks[:step]]
                base = diversity_objective(before, q[picks[:step]], alpha)
                gains = [diversity_objective(before + [configs[j]], q[picks[:step] + [j]], alpha)
                         - base for j in range(7) if j not in picks[:step]]
                chosen = diversity_objective(before + [configs[picks[step]]],
                                             q[picks[:step + 1]], alpha) - base
                assert chosen == pytest.approx(max(gains))


def test_alpha_zero_is_top_b_and_large_alpha_prefers_new_knob_values():
    configs = [SPACE.from_choices(c) for c in [(0, 0, 0), (0, 0, 1), (0, 1, 0), (2, 2, 1)]]
    q = np.array([1.0, 0.9, 0.8, 0.1])
    assert submodular_select(configs, q, 2, alpha=0.0) == [0, 1]
    # (2, 2, 1) shares no value with (0, 0, 0): three new values beat 0.8 of quality
    assert submodular_select(configs, q, 2, alpha=1.0) == [0, 3]


def test_both_terms_count():
    configs = [SPACE.from_choices(c) for c in [(0, 0, 0), (1, 1, 1)]]
    assert diversity_objective(configs, [0.5, 0.25], alpha=2.0) == pytest.approx(0.75 + 2.0 * 6)


def test_normalized_quality():
    assert normalized_quality([3.0, 1.0, 2.0]).tolist() == [1.0, 0.0, 0.5]
    assert normalized_quality([2.0, 2.0]).tolist() == [1.0, 1.0]


def test_select_batch_mixes_model_picks_and_random_picks():
    rng = np.random.default_rng(0)
    space = ConfigSpace("mid/cpu", tuple(other_knob(f"k{i}", list(range(10))) for i in range(4)))
    candidates = [(space.get(i), float(-i)) for i in range(40)]
    measured = {0, 1}
    n_random_total = 0
    for _ in range(200):
        batch = select_batch(candidates, space, 8, alpha=0.1, epsilon=0.25, rng=rng,
                             exclude=measured)
        assert len(batch) == 8 and len({c.index for c in batch}) == 8
        assert not {c.index for c in batch} & measured
        n_random_total += sum(c.index >= 40 for c in batch)
    # 2 random picks per batch (rarely a random pick lands among the candidates)
    assert 390 <= n_random_total <= 400
    only_model = select_batch(candidates, space, 8, 0.1, 0.0, rng, measured)
    assert all(2 <= c.index < 40 for c in only_model)
    only_random = select_batch(candidates, space, 8, 0.1, 1.0, rng, measured)
    assert len(only_random) == 8


def test_select_batch_fills_from_random_when_candidates_run_out():
    rng = np.random.default_rng(0)
    batch = select_batch([(SPACE.get(3), 1.0)], SPACE, 5, 0.1, 0.0, rng, exclude={3})
    assert len(batch) == 5 and 3 not in {c.index for c in batch}


def test_bad_arguments():
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError):
        select_batch([], SPACE, 4, 0.1, 1.5, rng, set())
    with pytest.raises(ValueError):
        submodular_select([SPACE.get(0)], [1.0, 2.0], 1, 0.1)
    with pytest.raises(ValueError):
        submodular_select([SPACE.get(0)], [1.0], 1, -1.0)
