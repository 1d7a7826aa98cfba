"""The compiled tree evaluator (dataset/world/forest.py) against XGBoost itself."""
from __future__ import annotations

import numpy as np
import pytest

xgb = pytest.importorskip("xgboost")

from tensorgym.dataset.world.forest import Forest  # noqa: E402
from tensorgym.errors import TensorGymError  # noqa: E402


def _data(n=3000, d=12, nan=0.03, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.random((n, d)).astype(np.float32)
    y = 3 * X[:, 0] + np.sin(5 * X[:, 1]) + X[:, 2] * X[:, 3] + rng.normal(0, 0.1, n)
    X[rng.random(X.shape) < nan] = np.nan  # missing values take each split's default side
    return X, y


def _booster(objective, X, y, rounds=60, depth=7, round_trip=False):
    kw = {}
    if objective.startswith("rank:"):
        kw["qid"] = np.repeat(np.arange(len(y) // 100 + 1), 100)[:len(y)]
    if objective == "binary:logistic":
        y = (y > np.median(y)).astype(float)
    b = xgb.train({"objective": objective, "max_depth": depth, "eta": 0.1, "nthread": 1,
                   "tree_method": "hist", "seed": 0}, xgb.DMatrix(X, label=y, **kw), rounds)
    return xgb.Booster(model_file=b.save_raw("json")) if round_trip else b


@pytest.mark.parametrize("objective", ["reg:squarederror", "binary:logistic", "rank:pairwise"])
@pytest.mark.parametrize("round_trip", [False, True])
def test_margins_equal_xgboost_bit_for_bit(objective, round_trip):
    X, y = _data()
    b = _booster(objective, X, y, round_trip=round_trip)
    f = Forest(b)
    want = b.predict(xgb.DMatrix(X), output_margin=True)
    np.testing.assert_array_equal(f.margin(X), want)
    np.testing.assert_allclose(f.predict(X), b.inplace_predict(X), rtol=1e-6, atol=1e-7)


def test_single_rows_equal_the_batch():
    """A single env asks one row at a time, the vector env a batch (of more rows than a block):
    the same rows must get the same answers."""
    X, y = _data(n=300)
    f = Forest(_booster("reg:squarederror", X, y, rounds=40))
    batch = f.predict(X)
    one = np.array([f.predict(X[i:i + 1])[0] for i in range(len(X))])
    np.testing.assert_array_equal(one, batch)
    np.testing.assert_array_equal(f.predict(X[:0]), np.zeros(0))


def test_uneven_trees_and_a_single_leaf():
    """Trees of different depths (a leaf is its own child), and a constant label: one leaf."""
    X, y = _data(n=400, nan=0.0)
    b = _booster("reg:squarederror", X, y, rounds=30, depth=3)
    np.testing.assert_array_equal(Forest(b).margin(X),
                                  b.predict(xgb.DMatrix(X), output_margin=True))
    const = xgb.train({"objective": "reg:squarederror", "nthread": 1},
                      xgb.DMatrix(X, label=np.full(len(X), 2.5)), 3)
    f = Forest(const)
    assert (f.depths == 0).all()
    np.testing.assert_array_equal(f.margin(X), const.predict(xgb.DMatrix(X), output_margin=True))


def test_bad_rows_and_boosters_are_refused():
    X, y = _data(n=200)
    f = Forest(_booster("reg:squarederror", X, y, rounds=5))
    with pytest.raises(TensorGymError, match="features"):
        f.predict(X[:, :5])
    multi = xgb.train({"objective": "multi:softprob", "num_class": 3, "nthread": 1},
                      xgb.DMatrix(X, label=np.arange(len(X)) % 3), 2)
    with pytest.raises(TensorGymError):
        Forest(multi)
