"""Statistical cost models over feature matrices (paper section 3.1 / 3.2).

A cost model maps a feature matrix to scores, higher = faster. Models never featurize programs
themselves: the tuner hands them ``env.unwrapped.session.featurize(configs, model.feature_mode)``.
Targets are normalized throughput (gflops / max gflops of the same workload; failures get 0).
The XGBoost models register here in ``tensorgym.registry`` as cost models (``COST_MODEL``:
xgb, xgb-rank, xgb-reg), their options declared (``XGB_OPTIONS``); ``registry.make_model``
builds them by name.
"""
from __future__ import annotations

import copy
import math
from dataclasses import replace
from typing import Callable, Protocol, Sequence, runtime_checkable

import numpy as np

from tensorgym import registry
from tensorgym.processes.host import available_cpus
from tensorgym.registry import COST_MODEL, Option

LOSSES = ("rank", "reg")
_erf = np.vectorize(math.erf, otypes=[np.float64])


@runtime_checkable
class CostModel(Protocol):
    feature_mode: str

    def fit(self, X: np.ndarray, y: np.ndarray) -> None: ...

    def predict(self, X: np.ndarray) -> np.ndarray: ...


def _check_xy(X: np.ndarray, y: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    X = np.asarray(X, dtype=np.float32)
    if X.ndim != 2:
        raise ValueError(f"features must be a 2-D matrix, got shape {X.shape}")
    if y is not None:
        y = np.asarray(y, dtype=np.float64)
        if y.shape != (X.shape[0],):
            raise ValueError(f"{X.shape[0]} feature rows but targets of shape {y.shape}")
        if not np.all(np.isfinite(y)):
            raise ValueError("targets contain NaN or inf")
    return X, y


def _informative_columns(X: np.ndarray) -> np.ndarray:
    """The columns a fit needs, in order: a column constant over the training rows splits
    nothing, and one equal to an earlier column over those rows splits them as that one does,
    with the same gain, and XGBoost takes the earlier column on a tie. Without them the trees
    are the same. Half the relation columns of a C6 tune are constant, and of the others
    ~40% repeat another (the relation features' neighbouring thresholds): a fit on the rest
    is ~15% faster."""
    varies = np.flatnonzero((X != X[:1]).any(axis=0))
    if not len(varies):
        return np.arange(X.shape[1])
    _, first = np.unique(X[:, varies].T, axis=0, return_index=True)
    return varies[np.sort(first)]


class XGBoostCostModel:
    """Gradient boosted trees (XGBoost) with the rank loss of Equation 2 or squared error.

    ``loss="rank"`` uses XGBoost's ``rank:pairwise`` (logistic loss on score differences of pairs,
    i.e. Equation 2). Since XGBoost 2.0 the default pair construction is ``topk``, which only
    compares pairs involving the top few items of a query group and leaves the rest of the order
    unlearned; we use ``mean`` pair sampling (``pairs_per_sample`` random partners per row) so
    the whole order is learned. One query group per workload (``groups``), a single group if None.
    """

    def __init__(self, loss: str = "rank", feature_mode: str = "relation", n_rounds: int = 200,
                 max_depth: int = 3, eta: float = 0.1, min_child_weight: float = 1.0,
                 subsample: float = 1.0, pairs_per_sample: int = 16, seed: int = 0,
                 nthread: int = 1, fit_threads: int = 2) -> None:
        if loss not in LOSSES:
            raise ValueError(f"unknown loss {loss!r}; use one of {LOSSES}")
        if n_rounds < 1:
            raise ValueError("n_rounds must be >= 1")
        self.loss = loss
        self.feature_mode = feature_mode
        self.n_rounds = n_rounds
        self.seed = seed
        # ``nthread`` predicts (1: the annealer's many small predictions ran as a parallel region
        # each, whose OpenMP threads spin on after it on the core that the other walk needs:
        # 128-trial matmul tunes took 0.151 s per trial with 2, 0.128 with 1); ``fit_threads``
        # fits (at most the cores this process may use): 2 fit a 256-row C6 model in 104 ms
        # instead of 142, with the same trees (the same predictions, to the bit), and a fit runs
        # while nothing else does
        self.fit_threads = max(1, min(fit_threads, available_cpus()))
        self.params = {
            "max_depth": max_depth, "eta": eta, "min_child_weight": min_child_weight,
            "subsample": subsample, "seed": seed, "nthread": nthread, "verbosity": 0,
            "tree_method": "hist",
        }
        if loss == "rank":
            self.params.update(objective="rank:pairwise", lambdarank_pair_method="mean",
                               lambdarank_num_pair_per_sample=pairs_per_sample)
        else:
            self.params.update(objective="reg:squarederror")
        self._booster = None
        self.n_features: int | None = None

    @property
    def fitted(self) -> bool:
        return self._booster is not None

    def fit(self, X: np.ndarray, y: np.ndarray, groups: Sequence[int] | None = None,
            base_margin: np.ndarray | None = None) -> None:
        """Train from scratch. ``base_margin`` (one value per row) makes the trees fit on top of
        another model's scores, which is how the transfer model adds its local part."""
        import xgboost as xgb  # noqa: PLC0415  (heavy import, only when a model is trained)

        X, y = _check_xy(X, y)
        if X.shape[0] == 0:
            raise ValueError("cannot fit a cost model on zero rows")
        groups_arr = np.zeros(len(y), np.int64) if groups is None else np.asarray(groups, np.int64)
        if groups_arr.shape != y.shape:
            raise ValueError("groups must give one group id per row")
        order = np.argsort(groups_arr, kind="stable")  # XGBoost wants rows sorted by query id
        self._columns = _informative_columns(X)
        dtrain = xgb.DMatrix(X[order][:, self._columns], label=y[order],
                             nthread=self.fit_threads)
        if self.loss == "rank":
            dtrain.set_info(qid=groups_arr[order])
        params = dict(self.params, nthread=self.fit_threads)
        if base_margin is not None:
            dtrain.set_base_margin(np.asarray(base_margin, np.float64)[order])
            params["base_score"] = 0.0  # the margin replaces the intercept
        self._booster = xgb.train(params, dtrain, num_boost_round=self.n_rounds)
        self._booster.set_param({"nthread": self.params["nthread"]})
        self._with_margin = base_margin is not None
        self.n_features = X.shape[1]

    def predict(self, X: np.ndarray, base_margin: np.ndarray | None = None) -> np.ndarray:
        if self._booster is None:
            raise RuntimeError("predict() before fit()")
        X, _ = _check_xy(X)
        if X.shape[1] != self.n_features:
            raise ValueError(f"model was trained on {self.n_features} features, got {X.shape[1]}")
        # inplace_predict skips building a DMatrix, which dominates the cost of the many small
        # predictions simulated annealing makes
        margin = None if base_margin is None else np.asarray(base_margin, np.float32)
        out = self._booster.inplace_predict(X[:, self._columns], predict_type="margin",
                                            base_margin=margin)
        return np.asarray(out, np.float64)


ACQUISITIONS = ("mean", "ei", "ucb")


class BootstrapEnsemble:
    """``n_models`` copies of a base model, each fitted on a bootstrap resample of the data; the
    spread of their predictions is the uncertainty (paper section 3.3, Figure 7).

    ``acquisition``: ``mean``; ``ucb`` = mean + kappa * std; ``ei`` = expected improvement over
    the best target seen in ``fit`` (higher is better, Gaussian approximation).
    """

    def __init__(self, base: Callable[[], CostModel] | CostModel, n_models: int = 5,
                 acquisition: str = "ei", kappa: float = 1.0, xi: float = 0.0,
                 seed: int = 0) -> None:
        if acquisition not in ACQUISITIONS:
            raise ValueError(f"unknown acquisition {acquisition!r}; use one of {ACQUISITIONS}")
        if n_models < 2:
            raise ValueError("a bootstrap ensemble needs at least 2 models")
        factory = base if isinstance(base, type) or not hasattr(base, "predict") else None
        self.models = [factory() if factory else copy.deepcopy(base) for _ in range(n_models)]
        for i, m in enumerate(self.models):
            if hasattr(m, "params") and "seed" in getattr(m, "params"):
                m.params["seed"] = seed + i  # decorrelate the members' own randomness
        self.feature_mode = self.models[0].feature_mode
        self.acquisition = acquisition
        self.kappa = kappa
        self.xi = xi
        self.rng = np.random.default_rng(seed)
        self.best_y = 0.0

    def fit(self, X: np.ndarray, y: np.ndarray) -> None:
        X, y = _check_xy(X, y)
        n = len(y)
        for m in self.models:
            idx = self.rng.integers(0, n, size=n)
            m.fit(X[idx], y[idx])
        self.best_y = float(y.max())

    def predict_mean_std(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        preds = np.stack([m.predict(X) for m in self.models])
        return preds.mean(axis=0), preds.std(axis=0)

    def predict(self, X: np.ndarray) -> np.ndarray:
        mu, sigma = self.predict_mean_std(X)
        if self.acquisition == "mean":
            return mu
        if self.acquisition == "ucb":
            return mu + self.kappa * sigma
        return expected_improvement(mu, sigma, self.best_y + self.xi)


def expected_improvement(mu: np.ndarray, sigma: np.ndarray, best: float) -> np.ndarray:
    """E[max(Y - best, 0)] for Y ~ N(mu, sigma^2); sigma = 0 gives max(mu - best, 0)."""
    mu = np.asarray(mu, np.float64)
    sigma = np.maximum(np.asarray(sigma, np.float64), 1e-12)
    z = (mu - best) / sigma
    cdf = 0.5 * (1.0 + _erf(z / math.sqrt(2.0)))
    pdf = np.exp(-0.5 * z * z) / np.sqrt(2.0 * np.pi)
    return np.maximum((mu - best) * cdf + sigma * pdf, 0.0)  # clip round-off below zero


#: ``XGBoostCostModel``'s keyword arguments, declared for the registry (a test holds them to the
#: constructor's signature)
XGB_OPTIONS = (
    Option("loss", str, "rank", "rank (Equation 2) or reg (squared error)"),
    Option("feature_mode", str, "relation", "the feature mode the model reads"),
    Option("n_rounds", int, 200, "boosting rounds"),
    Option("max_depth", int, 3, "tree depth"),
    Option("eta", float, 0.1, "learning rate"),
    Option("min_child_weight", float, 1.0, "XGBoost's min_child_weight"),
    Option("subsample", float, 1.0, "row share per tree"),
    Option("pairs_per_sample", int, 16, "random partners per row (rank loss)"),
    Option("seed", int, 0, "XGBoost's seed"),
    Option("nthread", int, 1, "threads of a prediction"),
    Option("fit_threads", int, 2, "threads of a fit (at most the cores this process may use)"),
)


def _xgb(preset: dict) -> Callable[..., CostModel]:
    def build(**options) -> CostModel:
        return XGBoostCostModel(**{**preset, **options})

    return build


for _name, _preset, _help in (("xgb", {}, "XGBoost, rank loss (the paper's GBT)"),
                              ("xgb-rank", {"loss": "rank"}, "xgb (the rank loss, named)"),
                              ("xgb-reg", {"loss": "reg"}, "XGBoost, squared error")):
    registry.register(_name, _xgb(_preset), tuple(replace(o, default=_preset.get(o.name, o.default))
                                                  for o in XGB_OPTIONS), _help, kind=COST_MODEL)
