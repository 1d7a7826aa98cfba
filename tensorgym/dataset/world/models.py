"""The model families a world model's heads are made of, behind one small interface: ``fit(X, y,
groups)``, ``predict(X)``, ``save(directory, stem)``, ``load(directory, info)``. Every family
trains on one thread, deterministically given its seed.

Time families (compared by ``tensorgym dataset evaluate``):

- ``xgb``: XGBoost regression (squared error) of the target;
- ``lgbm``: LightGBM regression (L2) of the target;
- ``mlp``: a PyTorch multilayer perceptron (3 hidden ReLU layers of 256, Adam, MSE on
  standardised inputs and target), on the CPU;
- ``xgb-rank``: XGBoost ``rank:pairwise`` grouped by task (a score, not a time: evaluated for
  ranking only, never a world model's time head);
- ``lgbm-rank``: LightGBM ``lambdarank`` grouped by task, on relevance grades of the within-task
  rank (the same: ranking only).

``constant`` answers one value (a target with a single value in training, e.g. no failure).
xgboost, lightgbm and torch are imported when a family is used.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import numpy as np

from ...errors import TensorGymError

REGRESSORS = ("xgb", "lgbm", "mlp")
RANKERS = ("xgb-rank", "lgbm-rank")
FAMILIES = REGRESSORS + RANKERS

XGB_PARAMS = {"tree_method": "hist", "max_depth": 8, "eta": 0.1, "subsample": 0.8,
              "colsample_bytree": 0.8, "min_child_weight": 2, "nthread": 1}
XGB_ROUNDS = 200
LGBM_PARAMS = {"learning_rate": 0.05, "num_leaves": 63, "min_data_in_leaf": 10,
               "feature_fraction": 0.8, "bagging_fraction": 0.8, "bagging_freq": 1,
               "num_threads": 1, "deterministic": True, "force_row_wise": True, "verbose": -1}
LGBM_ROUNDS = 400
RANK_GRADES = 16  # lgbm-rank: relevance grades of the within-task rank


def _import(name: str) -> Any:
    from importlib import import_module

    try:
        return import_module(name)
    except ImportError:
        extra = {"xgboost": "agents", "lightgbm": "dataset", "torch": "treegru"}[name]
        raise TensorGymError(f"this world model needs {name}: pip install "
                             f"'tensorgym[{extra}]'") from None


class Model:
    """A fitted head: ``predict(X)`` -> (n,) float64. ``kind`` names its family."""

    kind = ""

    def fit(self, X: np.ndarray, y: np.ndarray, groups: Optional[np.ndarray] = None) -> "Model":
        raise NotImplementedError

    def predict(self, X: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def save(self, directory: Path, stem: str) -> dict[str, Any]:
        """Write the model's files as ``directory/stem.*``; the manifest entry that loads it."""
        raise NotImplementedError


class Constant(Model):
    kind = "constant"

    def __init__(self, value: float = 0.0) -> None:
        self.value = float(value)

    def fit(self, X, y, groups=None):
        self.value = float(np.mean(y)) if len(y) else 0.0
        return self

    def predict(self, X):
        return np.full(len(X), self.value)

    def save(self, directory, stem):
        return {"kind": self.kind, "value": self.value}


class XGB(Model):
    """XGBoost: ``objective`` ``reg:squarederror``, ``binary:logistic`` (labels in [0, 1]) or
    ``rank:pairwise`` (``groups``: the task of each row, rows of a task contiguous)."""

    kind = "xgb"

    def __init__(self, objective: str = "reg:squarederror", seed: int = 0,
                 rounds: int = XGB_ROUNDS, booster: Any = None, **params: Any) -> None:
        self.objective, self.seed, self.rounds = objective, seed, rounds
        self.params = params
        self.booster = booster
        self._forest: Any = None

    def fit(self, X, y, groups=None):
        xgb = _import("xgboost")
        params = {**XGB_PARAMS, **self.params, "objective": self.objective, "seed": self.seed}
        if self.objective.startswith("rank:"):
            params.update(lambdarank_pair_method="mean", lambdarank_num_pair_per_sample=8)
            # relevance: higher is better, so the negated target (a log time)
            d = xgb.DMatrix(X, label=-np.asarray(y), qid=groups)
        else:
            d = xgb.DMatrix(X, label=y)
        self.booster = xgb.train(params, d, num_boost_round=self.rounds)
        self._forest = None
        return self

    def predict(self, X):
        # the compiled evaluator (forest.py): XGBoost's margins bit for bit, without its
        # per-call cost of ~0.5 ms, which a replay env's single miss pays per step
        if self._forest is None:
            from .forest import Forest

            self._forest = Forest(self.booster)
        out = self._forest.predict(np.asarray(X, np.float32))
        return -out if self.objective.startswith("rank:") else out

    def save(self, directory, stem):
        file = f"{stem}.xgb.json"
        self.booster.save_model(str(directory / file))
        return {"kind": self.kind, "file": file, "objective": self.objective}

    @classmethod
    def load(cls, directory: Path, info: dict) -> "XGB":
        xgb = _import("xgboost")
        booster = xgb.Booster()
        booster.load_model(str(directory / info["file"]))
        booster.set_param({"nthread": 1})
        return cls(info["objective"], booster=booster)


class LGBM(Model):
    """LightGBM: ``objective`` ``regression``, ``cross_entropy`` (labels in [0, 1]) or
    ``lambdarank`` (``groups`` contiguous; the labels become ``RANK_GRADES`` grades of the
    within-task rank, the fastest highest)."""

    kind = "lgbm"

    def __init__(self, objective: str = "regression", seed: int = 0, rounds: int = LGBM_ROUNDS,
                 booster: Any = None) -> None:
        self.objective, self.seed, self.rounds = objective, seed, rounds
        self.booster = booster

    def fit(self, X, y, groups=None):
        lgb = _import("lightgbm")
        params = {**LGBM_PARAMS, "objective": self.objective, "seed": self.seed}
        y = np.asarray(y, np.float64)
        if self.objective == "lambdarank":
            label, sizes = _grades(y, np.asarray(groups))
            d = lgb.Dataset(X, label=label, group=sizes, free_raw_data=True)
            params["label_gain"] = list(range(RANK_GRADES))
        else:
            d = lgb.Dataset(X, label=y, free_raw_data=True)
        self.booster = lgb.train(params, d, num_boost_round=self.rounds)
        return self

    def predict(self, X):
        out = np.asarray(self.booster.predict(np.asarray(X, np.float32), num_threads=1),
                         np.float64)
        return -out if self.objective == "lambdarank" else out

    def save(self, directory, stem):
        file = f"{stem}.lgbm.txt"
        self.booster.save_model(str(directory / file))
        return {"kind": self.kind, "file": file, "objective": self.objective}

    @classmethod
    def load(cls, directory: Path, info: dict) -> "LGBM":
        lgb = _import("lightgbm")
        return cls(info["objective"], booster=lgb.Booster(model_file=str(directory / info["file"])))


def _grades(y: np.ndarray, groups: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """Relevance grades 0..RANK_GRADES-1 of each row within its group (the smallest ``y``
    highest) and the groups' sizes, for rows whose groups are contiguous."""
    label = np.zeros(len(y), np.int32)
    sizes = []
    starts = np.flatnonzero(np.r_[True, groups[1:] != groups[:-1]])
    for a, b in zip(starts, np.r_[starts[1:], len(y)]):
        order = np.argsort(np.argsort(y[a:b], kind="stable"), kind="stable")  # 0: fastest
        label[a:b] = (RANK_GRADES - 1) - (order * RANK_GRADES // max(b - a, 1))
        sizes.append(int(b - a))
    return label, sizes


class MLP(Model):
    """A multilayer perceptron on standardised inputs and target (PyTorch, CPU, one thread)."""

    kind = "mlp"
    HIDDEN = 256
    LAYERS = 3
    EPOCHS = 40  # passes over the data, in STEPS_MIN..STEPS steps of BATCH rows
    STEPS = 3000
    STEPS_MIN = 400
    BATCH = 512
    LR = 1e-3

    def __init__(self, seed: int = 0, steps: Optional[int] = None) -> None:
        self.seed, self.steps = seed, steps
        self.net: Any = None
        self.x_mean = self.x_std = None
        self.y_mean, self.y_std = 0.0, 1.0

    def _net(self, d: int) -> Any:
        torch = _import("torch")
        layers: list[Any] = []
        for i in range(self.LAYERS):
            layers += [torch.nn.Linear(d if i == 0 else self.HIDDEN, self.HIDDEN),
                       torch.nn.ReLU()]
        layers.append(torch.nn.Linear(self.HIDDEN, 1))
        return torch.nn.Sequential(*layers)

    def fit(self, X, y, groups=None):
        torch = _import("torch")
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            X = np.asarray(X, np.float32)
            y = np.asarray(y, np.float64)
            self.x_mean = X.mean(0)
            std = X.std(0)
            self.x_std = np.where(std > 1e-6, std, 1.0).astype(np.float32)
            self.y_mean, self.y_std = float(y.mean()), float(y.std() or 1.0)
            gen = torch.Generator().manual_seed(self.seed)
            torch.manual_seed(self.seed)
            self.net = self._net(X.shape[1])
            xt = torch.from_numpy((X - self.x_mean) / self.x_std)
            yt = torch.from_numpy(((y - self.y_mean) / self.y_std).astype(np.float32))
            opt = torch.optim.Adam(self.net.parameters(), lr=self.LR, weight_decay=1e-5)
            n = len(xt)
            steps = self.steps or int(np.clip(self.EPOCHS * n // self.BATCH, self.STEPS_MIN,
                                              self.STEPS))
            sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
            for _ in range(steps):
                idx = torch.randint(0, n, (min(self.BATCH, n),), generator=gen)
                loss = torch.nn.functional.mse_loss(self.net(xt[idx]).squeeze(1), yt[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
                sched.step()
            self.net.eval()
        finally:
            torch.set_num_threads(threads)
        return self

    def predict(self, X):
        torch = _import("torch")
        with torch.no_grad():
            x = torch.from_numpy((np.asarray(X, np.float32) - self.x_mean) / self.x_std)
            out = self.net(x).squeeze(1).numpy().astype(np.float64)
        return out * self.y_std + self.y_mean

    def save(self, directory, stem):
        torch = _import("torch")
        file = f"{stem}.mlp.pt"
        torch.save(self.net.state_dict(), directory / file)
        return {"kind": self.kind, "file": file, "inputs": len(self.x_mean),
                "x_mean": self.x_mean.tolist(), "x_std": self.x_std.tolist(),
                "y_mean": self.y_mean, "y_std": self.y_std}

    @classmethod
    def load(cls, directory: Path, info: dict) -> "MLP":
        torch = _import("torch")
        m = cls()
        m.net = m._net(int(info["inputs"]))
        m.net.load_state_dict(torch.load(directory / info["file"], weights_only=True))
        m.net.eval()
        m.x_mean = np.asarray(info["x_mean"], np.float32)
        m.x_std = np.asarray(info["x_std"], np.float32)
        m.y_mean, m.y_std = float(info["y_mean"]), float(info["y_std"])
        return m


def make(family: str, seed: int = 0) -> Model:
    """An unfitted time model of ``family`` (``FAMILIES``)."""
    if family == "xgb":
        return XGB("reg:squarederror", seed)
    if family == "lgbm":
        return LGBM("regression", seed)
    if family == "mlp":
        return MLP(seed)
    if family == "xgb-rank":
        return XGB("rank:pairwise", seed)
    if family == "lgbm-rank":
        return LGBM("lambdarank", seed)
    raise TensorGymError(f"unknown model family {family!r}; use one of {', '.join(FAMILIES)}")


def load(directory: Path, info: dict) -> Model:
    """The head a manifest entry (``Model.save``'s) describes."""
    kind = info.get("kind")
    if kind == "constant":
        return Constant(info["value"])
    loaders = {"xgb": XGB.load, "lgbm": LGBM.load, "mlp": MLP.load}
    if kind not in loaders:
        raise TensorGymError(f"unknown model kind {kind!r} in the manifest")
    return loaders[kind](directory, info)


__all__ = ["Constant", "FAMILIES", "LGBM", "MLP", "Model", "RANKERS", "REGRESSORS", "XGB",
           "load", "make"]
