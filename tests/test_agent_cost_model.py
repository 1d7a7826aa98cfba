"""XGBoost cost models (rank and regression losses), the bootstrap ensemble and its acquisitions."""
import inspect
import math

import numpy as np
import pytest

from tensorgym import registry
from tensorgym.agents.cost_model import (XGB_OPTIONS, BootstrapEnsemble, XGBoostCostModel,
                                         expected_improvement)
from tensorgym.errors import TensorGymError
from tensorgym.registry import COST_MODEL, AgentOptionError, make_model


def kendall_tau(a, b):
    a, b = np.asarray(a), np.asarray(b)
    da = np.sign(a[:, None] - a[None, :])
    db = np.sign(b[:, None] - b[None, :])
    iu = np.triu_indices(len(a), 1)
    return float((da[iu] * db[iu]).sum() / len(iu[0]))


def throughput_data(seed, n):
    """Normalized 'throughput' with a nonlinear dependence on a few features, like real configs."""
    rng = np.random.default_rng(seed)
    X = rng.random((n, 12)).astype(np.float32)
    y = np.sin(3 * X[:, 0]) + X[:, 1] ** 2 - 0.5 * X[:, 2] + 0.3 * (X[:, 3] > 0.5)
    y = (y - y.min()) / (y.max() - y.min())
    return X, y


@pytest.mark.parametrize("loss", ["rank", "reg"])
def test_model_orders_held_out_configs(loss):
    X, y = throughput_data(0, 500)
    model = XGBoostCostModel(loss=loss, n_rounds=100)
    model.fit(X[:350], y[:350])
    assert kendall_tau(model.predict(X[350:]), y[350:]) > 0.6


def test_rank_loss_learns_the_whole_order_not_only_the_top():
    # a single query group of many items: XGBoost's default 'topk' pairs would leave most of
    # the order unlearned; check the order among the slower half too
    X, y = throughput_data(1, 500)
    model = XGBoostCostModel(loss="rank", n_rounds=100)
    model.fit(X[:350], y[:350])
    pred, truth = model.predict(X[350:]), y[350:]
    slow = truth < np.median(truth)
    assert kendall_tau(pred[slow], truth[slow]) > 0.4


def test_rank_groups_compare_only_within_a_workload():
    X, y = throughput_data(2, 300)
    groups = np.repeat([0, 1, 2], 100)
    # scale each group's targets differently: ranking within groups must be unaffected
    y_scaled = y * np.array([1.0, 0.1, 10.0])[groups]
    a = XGBoostCostModel(n_rounds=50)
    a.fit(X, y_scaled, groups=groups)
    assert kendall_tau(a.predict(X[:100]), y[:100]) > 0.6


def test_base_margin_adds_to_the_prediction():
    X, y = throughput_data(3, 200)
    base = XGBoostCostModel(loss="reg", n_rounds=30)
    base.fit(X, y)
    margin = base.predict(X)
    top = XGBoostCostModel(loss="reg", n_rounds=30)
    top.fit(X, y, base_margin=margin)
    combined = margin + top.predict(X)
    assert np.allclose(top.predict(X, base_margin=margin), combined, atol=1e-5)
    assert np.mean((combined - y) ** 2) <= np.mean((margin - y) ** 2) + 1e-9


def test_deterministic_given_seed():
    X, y = throughput_data(4, 200)
    preds = []
    for _ in range(2):
        m = XGBoostCostModel(n_rounds=30, subsample=0.8, seed=7)
        m.fit(X, y)
        preds.append(m.predict(X))
    assert np.array_equal(preds[0], preds[1])


@pytest.mark.parametrize("loss", ["rank", "reg"])
def test_constant_columns_change_nothing(loss):
    """Columns constant over the training rows (half of a C6 tune's relation features) are left
    out of the fit; the model and its predictions, also where held-out rows vary in those
    columns, are those of a fit without them."""
    X, y = throughput_data(5, 300)
    rng = np.random.default_rng(0)
    wide = np.insert(X, [0, 4, 12], 2.5, axis=1)  # three constant columns among the others
    held_out = np.insert(X[:50], [0, 4, 12], rng.random((50, 3), np.float32), axis=1)
    narrow = XGBoostCostModel(loss=loss, n_rounds=50)
    padded = XGBoostCostModel(loss=loss, n_rounds=50)
    narrow.fit(X[50:], y[50:])
    padded.fit(wide[50:], y[50:])
    assert np.array_equal(padded.predict(held_out), narrow.predict(X[:50]))
    with pytest.raises(ValueError, match="trained on 15 features"):
        padded.predict(X)


@pytest.mark.parametrize("loss", ["rank", "reg"])
def test_repeated_columns_change_nothing(loss):
    """A column equal to an earlier one over the training rows is left out of the fit: the
    model is the one XGBoost fits on all the columns (on a tie it splits on the earlier column),
    also where held-out rows tell the two apart."""
    import xgboost as xgb

    X, y = throughput_data(6, 300)
    rng = np.random.default_rng(1)
    wide = np.insert(X, [3, 7, 12], X[:, [0, 1, 5]], axis=1)  # copies after their originals
    held_out = wide[:50].copy()
    held_out[:, [3, 8, 14]] = rng.random((50, 3), np.float32)  # the copies differ here
    model = XGBoostCostModel(loss=loss, n_rounds=50)
    model.fit(wide[50:], y[50:])
    assert len(model._columns) == X.shape[1]
    train = xgb.DMatrix(wide[50:], label=y[50:])
    if loss == "rank":
        train.set_info(qid=np.zeros(250, np.int64))
    full = xgb.train(model.params, train, num_boost_round=50)
    expected = np.asarray(full.inplace_predict(held_out, predict_type="margin"), np.float64)
    assert np.array_equal(model.predict(held_out), expected)


@pytest.mark.parametrize("loss", ["rank", "reg"])
def test_a_fit_on_two_threads_is_the_fit_on_one(loss):
    """Fits run on ``fit_threads`` (2) and predictions on ``nthread`` (1): the trees, and so the
    predictions, are those of a fit on one thread, bit for bit."""
    X, y = throughput_data(7, 300)
    one, two = XGBoostCostModel(loss=loss, fit_threads=1), XGBoostCostModel(loss=loss)
    two.fit_threads = 2  # even where this process may use one core
    one.fit(X[50:], y[50:])
    two.fit(X[50:], y[50:])
    assert np.array_equal(one.predict(X[:50]), two.predict(X[:50]))
    assert two._booster.save_config() == one._booster.save_config()  # nthread 1 after the fit


def test_errors():
    m = XGBoostCostModel()
    with pytest.raises(RuntimeError):
        m.predict(np.zeros((2, 3)))
    with pytest.raises(ValueError):
        m.fit(np.zeros((3, 2)), np.zeros(4))
    with pytest.raises(ValueError):
        m.fit(np.zeros(3), np.zeros(3))
    with pytest.raises(ValueError):
        m.fit(np.zeros((2, 2)), np.array([0.0, np.nan]))
    m.fit(np.random.default_rng(0).random((8, 3)), np.arange(8.0))
    with pytest.raises(ValueError):
        m.predict(np.zeros((2, 4)))
    with pytest.raises(ValueError):
        XGBoostCostModel(loss="hinge")
    with pytest.raises(ValueError):
        make_model("no-such-model")


def test_registry_builds_models_by_name():
    assert make_model("xgb").loss == "rank"
    assert make_model("xgb-reg").loss == "reg"
    assert make_model("xgb-reg", loss="rank").loss == "rank"  # a preset is a default
    assert make_model("xgb", feature_mode="context").feature_mode == "context"
    registry.register("tiny-xgb", lambda **kw: XGBoostCostModel(n_rounds=5, **kw),
                      kind=COST_MODEL)
    try:
        assert make_model("tiny-xgb").n_rounds == 5
        assert "tiny-xgb" in registry.COST_MODELS and "tiny-xgb" not in registry.AGENTS
    finally:
        registry.unregister("tiny-xgb", COST_MODEL)
    assert "tiny-xgb" not in registry.names(COST_MODEL)


def test_cost_models_are_entries_of_the_one_registry_with_declared_options():
    assert {"xgb", "xgb-rank", "xgb-reg"} <= set(registry.names(COST_MODEL))
    with pytest.raises(AgentOptionError, match="bad options for cost model 'xgb': unknown option "
                                               "'n_trees'"):
        make_model("xgb", n_trees=5)
    with pytest.raises(AgentOptionError, match="cost model 'xgb'.*n_rounds must be int"):
        make_model("xgb", n_rounds="5")
    with pytest.raises(registry.UnknownAgentError, match="unknown cost model 'gbt'"):
        make_model("gbt")
    with pytest.raises(TensorGymError, match="kinds"):
        registry.names("optimizer")
    params = inspect.signature(XGBoostCostModel).parameters
    assert {o.name: o.default for o in XGB_OPTIONS} == {n: p.default for n, p in params.items()}


def test_expected_improvement_matches_numeric_integral():
    mu, sigma, best = 0.3, 0.2, 0.4
    ys = np.linspace(mu - 10 * sigma, mu + 10 * sigma, 200001)
    pdf = np.exp(-0.5 * ((ys - mu) / sigma) ** 2) / (sigma * math.sqrt(2 * math.pi))
    numeric = np.sum(np.maximum(ys - best, 0) * pdf) * (ys[1] - ys[0])
    assert expected_improvement(np.array([mu]), np.array([sigma]), best)[0] == \
        pytest.approx(numeric, rel=1e-4)
    assert expected_improvement(np.array([0.5]), np.array([0.0]), 0.4)[0] == pytest.approx(0.1)


@pytest.mark.parametrize("acq", ["mean", "ucb", "ei"])
def test_bootstrap_ensemble(acq):
    X, y = throughput_data(5, 300)
    ens = BootstrapEnsemble(lambda: XGBoostCostModel(loss="reg", n_rounds=30), n_models=5,
                            acquisition=acq, seed=0)
    ens.fit(X[:200], y[:200])
    mu, sigma = ens.predict_mean_std(X[200:])
    assert np.all(sigma >= 0) and np.any(sigma > 0)  # the members differ
    assert kendall_tau(mu, y[200:]) > 0.5
    score = ens.predict(X[200:])
    if acq == "mean":
        assert np.allclose(score, mu)
    elif acq == "ucb":
        assert np.allclose(score, mu + sigma)
    else:
        assert np.all(score >= 0)
    with pytest.raises(ValueError):
        BootstrapEnsemble(XGBoostCostModel, acquisition="pi")
