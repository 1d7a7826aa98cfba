"""``WorldModel``: one model of every task of a device, predicting for (workload, target, config)
the run time, the probability that the config fails and the noise of its timing samples.

Inputs: the workload's descriptor (``descriptor.py``), then the schedule's features (``FEATURES``):
``"knobs"`` (``DEFAULT_FEATURES``) the config encoding's numbers placed by knob name, with the
tiles' level sums (``encode.KnobEncoder``), or ``"config"`` the raw config encoding
(``encode.ConfigEncoder``, ``encode_config``'s rows), both vectorised: a whole batch of config
indices at once; or ``"relation"`` the loop-AST "relation" features
(``tensorgym.features.featurize``, ~150 us a config).

Heads (``samples.py`` defines the targets):

- **time**: a regression (``models.REGRESSORS``) of log(seconds / FLOPs) on the configs with a
  successful record; ``Prediction.seconds`` is exp(prediction) x FLOPs;
- **failure**: XGBoost ``binary:logistic`` on the share of a config's records that failed, every
  config; ``Prediction.p_fail``;
- **noise**: XGBoost regression of log(max(cv, 1e-4)) (cv: the coefficient of variation of the
  timing samples), configs with ``MIN_NOISE_SAMPLES`` samples; ``Prediction.spread`` is exp of it.

A saved model is a directory: ``manifest.json`` (``MANIFEST``) and one file per head.
"""
from __future__ import annotations

import json
import os
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

import numpy as np

from ...errors import TensorGymError
from ...space import Config, ConfigSpace
from ...templates import space_for
from ...workloads import Workload, get_workload
from . import draws, models
from .descriptor import N_DESCRIPTOR, describe
from .encode import N_CONFIG, N_KNOB_FEATURES, EncoderCache
from .samples import HOLDOUT, TaskSamples

FEATURE_VERSION = 3  # bump when a descriptor or encoding column changes meaning
FEATURES = ("knobs", "config", "relation")
DEFAULT_FEATURES = "knobs"
DEFAULT_FAMILY = "xgb"
MANIFEST = "manifest.json"
SCHEMA = "tensorgym-world-model"
NOISE_FLOOR = 1e-4
HEAD_ROUNDS = 60  # boosting rounds (of depth HEAD_DEPTH) of the failure and noise heads
HEAD_DEPTH = 5


@dataclass(frozen=True)
class Prediction:
    """Per config: ``seconds`` (predicted median seconds per run), ``p_fail`` (probability
    that it fails to build, run or check) and ``spread`` (predicted coefficient of variation of
    its timing samples)."""

    seconds: np.ndarray
    p_fail: np.ndarray
    spread: np.ndarray

    def __len__(self) -> int:
        return len(self.seconds)


@dataclass
class _Task:
    """What the model keeps of a (workload, target) it was asked about."""

    workload: Workload
    space: ConfigSpace
    descriptor: np.ndarray
    log_flops: float
    reduce_axes: tuple[str, ...]
    rank_reference: Optional[np.ndarray] = None  # sorted predictions of random configs


class WorldModel:
    """Fit with ``WorldModel.fit(tasks, family=..., features=..., seed=...)``, or
    ``WorldModel.load(directory)``; ask with ``predict_indices(workload, target, indices)``."""

    def __init__(self, time: models.Model, fail: models.Model, spread: models.Model,
                 family: str, features: str = DEFAULT_FEATURES,
                 manifest: Optional[dict[str, Any]] = None) -> None:
        if features not in FEATURES:
            raise TensorGymError(f"unknown features {features!r}; use one of "
                                 f"{', '.join(FEATURES)}")
        self.time, self.fail, self.spread = time, fail, spread
        self.family, self.features = family, features
        self.manifest: dict[str, Any] = dict(manifest or {})
        self._tasks: dict[tuple[str, str], _Task] = {}
        self._encoders = EncoderCache()
        self._featurizer: Any = None

    # ---------------------------------------------------------------- inputs

    def _task(self, workload: "Workload | str", target: str) -> _Task:
        key = (workload if isinstance(workload, str) else workload.key, target)
        t = self._tasks.get(key)
        if t is None:
            w = get_workload(workload)
            t = self._tasks[key] = _Task(w, space_for(w, target), describe(w, target),
                                         float(np.log(w.flops)),
                                         tuple(ax.name for ax in w.output.op.reduce_axes))
        return t

    def inputs(self, workload: "Workload | str", target: str, indices: np.ndarray) -> np.ndarray:
        """(n, inputs) float32: the descriptor, then the schedule features, of each config."""
        t = self._task(workload, target)
        indices = np.asarray(indices)
        if self.features == "config":
            X = np.zeros((indices.size, N_DESCRIPTOR + N_CONFIG), np.float32)
            self._encoders.get(t.space)(indices, out=X[:, N_DESCRIPTOR:])
        elif self.features == "knobs":
            X = np.zeros((indices.size, N_DESCRIPTOR + N_KNOB_FEATURES), np.float32)
            self._encoders.knobs(t.space, t.reduce_axes)(indices, out=X[:, N_DESCRIPTOR:])
        else:
            configs = [t.space.get(int(i)) for i in indices.reshape(-1)]
            rows = self._relation(t.workload, configs)
            X = np.zeros((len(configs), N_DESCRIPTOR + rows.shape[1]), np.float32)
            X[:, N_DESCRIPTOR:] = rows
        X[:, :N_DESCRIPTOR] = t.descriptor
        return X

    def _relation(self, workload: Workload, configs: Sequence[Config]) -> np.ndarray:
        from ...features import Featurizer

        if self._featurizer is None:
            self._featurizer = Featurizer()
        if not configs:
            from ...features import feature_length

            return np.zeros((0, feature_length("relation")), np.float32)
        return np.asarray(self._featurizer.featurize(workload, configs, "relation"), np.float32)

    # ---------------------------------------------------------------- prediction

    def predict_indices(self, workload: "Workload | str", target: str,
                        indices: np.ndarray, spread: bool = True) -> Prediction:
        """The prediction for configs ``space_for(workload, target).get(i)`` of ``indices`` (a
        1-D integer array), in one batch: no Python loop over configs (with ``features``
        ``"knobs"`` or ``"config"``). ``spread=False`` skips the noise head (``spread`` NaN):
        replay answers with the time and the failure only."""
        X = self.inputs(workload, target, indices)
        return self._predict(X, self._task(workload, target).log_flops, spread)

    def draw_indices(self, workload: "Workload | str", target: str, indices: np.ndarray,
                     seed: int = 0) -> Prediction:
        """``predict_indices`` with each config's time multiplied by its fixed draw of the
        model's held-out error (``draws.py``); needs a calibrated model (``calibrate``)."""
        quantiles = self.manifest.get(draws.MANIFEST_KEY)
        if not quantiles:
            raise TensorGymError("this world model has no residual quantiles, so it cannot draw "
                                 "answers: calibrate it (WorldModel.calibrate, or "
                                 "`tensorgym dataset fit-world ... --calibrate`)")
        pred = self.predict_indices(workload, target, indices, spread=False)
        t = self._task(workload, target)
        u = draws.config_uniforms(t.workload.key, [k.name for k in t.space.knobs],
                                  draws.knob_choices(t.space, indices),
                                  float(self.manifest.get(draws.RHO_KEY, 0.0)), seed)
        rank = draws.predicted_ranks(self, t.workload, target, pred.seconds)
        return Prediction(pred.seconds * draws.band_factors(self.manifest, u, rank),
                          pred.p_fail, pred.spread)

    def rank_reference(self, workload: "Workload | str", target: str) -> np.ndarray:
        """Sorted predicted seconds of a fixed sample of ``draws.RANK_SAMPLE`` random configs
        of the task (drawn from its workload key), kept per task."""
        t = self._task(workload, target)
        if t.rank_reference is None:
            rng = np.random.default_rng(zlib.crc32(t.workload.key.encode()))
            idx = rng.integers(0, t.space.size, draws.RANK_SAMPLE) if t.space.size < 2 ** 62 \
                else np.array([t.space.sample(rng, 1)[0].index
                               for _ in range(draws.RANK_SAMPLE)], np.int64)
            t.rank_reference = np.sort(self.predict_indices(t.workload, target, idx,
                                                            spread=False).seconds)
        return t.rank_reference

    def calibrate(self, tasks: Sequence[TaskSamples], seed: int = 0,
                  share: float = HOLDOUT) -> "WorldModel":
        """Keep the quantiles of this family's residuals on a held-out ``share`` of each task's
        configs (one more fit, on the rest) in the manifest, for ``draw_indices``."""
        fit = (lambda kept: WorldModel.fit(kept, self.family, self.features, seed))
        self.manifest.update(draws.calibration(tasks, fit, seed, share))
        return self

    def predict_configs(self, workload: "Workload | str", target: str,
                        configs: Sequence[Config]) -> Prediction:
        """``predict_indices`` of configs of the space (``Config.index``)."""
        return self.predict_indices(workload, target,
                                    np.array([c.index for c in configs], np.int64))

    def _predict(self, X: np.ndarray, log_flops: "float | np.ndarray",
                 with_spread: bool = True) -> Prediction:
        seconds = np.exp(self.time.predict(X) + log_flops)
        p_fail = np.clip(self.fail.predict(X), 0.0, 1.0)
        spread = np.exp(self.spread.predict(X)) if with_spread else np.full(len(X), np.nan)
        return Prediction(seconds, p_fail, spread)

    # ---------------------------------------------------------------- fitting

    @classmethod
    def fit(cls, tasks: Sequence[TaskSamples], family: str = DEFAULT_FAMILY,
            features: str = DEFAULT_FEATURES, seed: int = 0) -> "WorldModel":
        """Fit the three heads on ``tasks`` (all their configs: split them first with
        ``samples.split_samples`` to keep a hold-out)."""
        if family not in models.REGRESSORS:
            raise TensorGymError(f"a world model's time head is a regression: one of "
                                 f"{', '.join(models.REGRESSORS)}, not {family!r} (ranking "
                                 "families are compared by `tensorgym dataset evaluate` only)")
        wm = cls(models.Constant(), models.Constant(), models.Constant(), family, features)
        data = wm.training_rows(tasks)
        if not data["time_rows"].any():
            raise TensorGymError("no successful record to fit a world model's time head on")
        X = data["X"]
        t = data["time_rows"]
        wm.time = models.make(family, seed).fit(X[t], data["y_time"][t], data["groups"][t])
        wm.fail = _head(X, data["fail"], "binary:logistic", seed)
        n = data["noise_rows"]
        wm.spread = _head(X[n], data["log_noise"][n], "reg:squarederror", seed) if n.any() \
            else models.Constant(np.log(NOISE_FLOOR))
        return wm

    def training_rows(self, tasks: Sequence[TaskSamples]) -> dict[str, np.ndarray]:
        """The input rows of every config of ``tasks`` (task after task) and their targets:
        ``y_time`` log(seconds / FLOPs) (NaN: no time), ``fail``, ``log_noise``, ``groups`` (the
        task's ordinal), ``time_rows`` and ``noise_rows`` (masks of the rows with a target)."""
        Xs, y, fail, noise, groups, log_flops = [], [], [], [], [], []
        for g, s in enumerate(tasks):
            Xs.append(self.inputs(s.workload, s.task.target, s.indices))
            lf = self._task(s.workload, s.task.target).log_flops
            y.append(np.log(s.seconds) - lf)
            log_flops.append(np.full(len(s), lf))
            fail.append(s.fail)
            noise.append(np.log(np.maximum(s.noise, NOISE_FLOOR)))
            groups.append(np.full(len(s), g, np.int64))
        width = Xs[0].shape[1] if Xs else N_DESCRIPTOR
        cat = (lambda parts, dt=np.float64: np.concatenate(parts) if parts
               else np.zeros(0, dt))
        out = {"X": np.concatenate(Xs) if Xs else np.zeros((0, width), np.float32),
               "y_time": cat(y), "fail": cat(fail), "log_noise": cat(noise),
               "groups": cat(groups, np.int64), "log_flops": cat(log_flops)}
        out["time_rows"] = np.isfinite(out["y_time"])
        out["noise_rows"] = np.isfinite(out["log_noise"])
        return out

    # ---------------------------------------------------------------- files

    def save(self, directory: "str | os.PathLike", **manifest: Any) -> Path:
        """Write the heads and ``manifest.json`` (this model's manifest updated with
        ``manifest``) into ``directory`` (made if missing)."""
        d = Path(directory)
        if d.exists() and not d.is_dir():
            raise TensorGymError(f"{d} is a file, not a model directory")
        d.mkdir(parents=True, exist_ok=True)
        self.manifest.update(manifest)
        heads = {name: head.save(d, name) for name, head in
                 (("time", self.time), ("fail", self.fail), ("spread", self.spread))}
        info = {**self.manifest, "schema": SCHEMA, "feature_version": FEATURE_VERSION,
                "features": self.features, "family": self.family, "heads": heads,
                "versions": _versions()}
        (d / MANIFEST).write_text(json.dumps(info, indent=1, sort_keys=True) + "\n")
        self.manifest = info
        return d

    @classmethod
    def load(cls, directory: "str | os.PathLike") -> "WorldModel":
        d = Path(directory)
        try:
            info = json.loads((d / MANIFEST).read_text())
        except FileNotFoundError:
            raise TensorGymError(f"{d} is no world model: it has no {MANIFEST} (make one with "
                                 "tensorgym dataset fit-world DATASET --out DIR)") from None
        except (OSError, ValueError) as e:
            raise TensorGymError(f"cannot read {d / MANIFEST}: {e}") from None
        if not isinstance(info, dict) or info.get("schema") != SCHEMA:
            raise TensorGymError(f"{d / MANIFEST} is not a {SCHEMA} manifest")
        if info.get("feature_version") != FEATURE_VERSION:
            raise TensorGymError(f"{d} was fitted with feature version "
                                 f"{info.get('feature_version')}; this code has "
                                 f"{FEATURE_VERSION}: fit it again")
        try:
            heads = {k: models.load(d, info["heads"][k]) for k in ("time", "fail", "spread")}
        except (KeyError, OSError, ValueError) as e:
            raise TensorGymError(f"cannot load the world model in {d}: {type(e).__name__}: "
                                 f"{e}") from None
        return cls(heads["time"], heads["fail"], heads["spread"], info["family"],
                   info["features"], info)

    def close(self) -> None:
        if self._featurizer is not None:
            self._featurizer.close()
            self._featurizer = None


def _head(X: np.ndarray, y: np.ndarray, objective: str, seed: int) -> models.Model:
    """The failure or noise head: XGBoost, or a constant where ``y`` has a single value."""
    if len(y) == 0 or np.all(y == y[0]):
        return models.Constant(float(y[0]) if len(y) else 0.0)
    return models.XGB(objective, seed, rounds=HEAD_ROUNDS, max_depth=HEAD_DEPTH).fit(X, y)


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for name in ("xgboost", "lightgbm", "torch", "numpy"):
        try:
            out[name] = version(name)
        except PackageNotFoundError:
            pass
    return out


__all__ = ["DEFAULT_FAMILY", "DEFAULT_FEATURES", "FEATURES", "FEATURE_VERSION", "Prediction", "WorldModel"]
