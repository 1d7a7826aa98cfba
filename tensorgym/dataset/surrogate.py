"""The replay surrogate: XGBoost regression of a kernel's log time on the features of its
program, fitted on the successful records of one task and cached beside the dataset. Its answers
are estimates, never measurements (``source == "surrogate"``). xgboost is imported only
when a surrogate is fitted or loaded (the ``agents`` extra)."""
from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import TensorGymError
from .cache import CacheDir

FEATURE_MODE = "relation"  # the reference agent's features
PARAMS = {"objective": "reg:squarederror", "max_depth": 6, "eta": 0.1, "subsample": 0.8,
          "colsample_bytree": 0.8, "min_child_weight": 1, "nthread": 1}
ROUNDS = 200
MIN_SAMPLES = 2


def _xgboost() -> Any:
    try:
        import xgboost
    except ImportError:
        raise TensorGymError("on_miss='surrogate' needs xgboost: pip install "
                             "'tensorgym[agents]', or use on_miss='nearest'") from None
    return xgboost


class Surrogate:
    """``predict_seconds(X)``: estimated seconds per run of the programs whose feature rows
    (``FEATURE_MODE``) are ``X``."""

    def __init__(self, booster: Any) -> None:
        self.booster = booster

    @classmethod
    def fit_or_load(cls, cache: CacheDir, name: str, X: np.ndarray, seconds: np.ndarray,
                    seed: int = 0) -> "Surrogate":
        """The model cached as ``name`` (fitted on this dataset with this code), else one fitted
        on (``X``, ``seconds``) now and cached."""
        xgb = _xgboost()
        file = f"{name}-xgb{xgb.__version__}.json"
        found = cache.find(file)
        if found is not None:
            booster = xgb.Booster()
            try:
                booster.load_model(bytearray(found.read_bytes()))
                return cls(booster)
            except (xgb.core.XGBoostError, OSError):
                pass  # damaged: fitted again below
        if len(seconds) < MIN_SAMPLES:
            raise TensorGymError(f"the surrogate needs at least {MIN_SAMPLES} successful records "
                                 f"of the task, the dataset has {len(seconds)}; use "
                                 "on_miss='nearest' or 'error'")
        dtrain = xgb.DMatrix(X, label=np.log(seconds))
        booster = xgb.train({**PARAMS, "seed": seed}, dtrain, num_boost_round=ROUNDS)
        raw = bytes(booster.save_raw("json"))
        try:
            cache.write(file, lambda p: Path(p).write_bytes(raw))
        except OSError as e:
            warnings.warn(f"replay: the surrogate is not cached ({e}); it is fitted again next "
                          "time", stacklevel=2)
        return cls(booster)

    def predict_seconds(self, X: np.ndarray) -> np.ndarray:
        xgb = _xgboost()
        return np.exp(self.booster.predict(xgb.DMatrix(np.asarray(X, np.float32))))
