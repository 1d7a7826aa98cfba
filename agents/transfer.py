"""Transfer learning across workloads (paper section 4, Equation 4): f = f_global + f_local.

The global model is trained on the records of *other* workloads (other shapes and other operator
types: the relation features are invariant to the loop nest, so a conv2d record can inform a
matmul), featurized by ``tensorgym.features.featurize``. The local model is trained on the
current workload's measurements on top of the global model's scores.
"""
from __future__ import annotations

import inspect
import warnings
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from tensorgym.errors import InvalidConfigError
from tensorgym.features import featurize
from tensorgym.templates import canonical_target, space_for
from tensorgym.workloads import get_workload

from .cost_model import CostModel


@dataclass
class SourceData:
    """Feature rows of source records, their normalized throughput and workload group ids."""

    X: np.ndarray
    y: np.ndarray
    groups: np.ndarray
    counts: dict[str, int] = field(default_factory=dict)  # workload key -> rows used
    skipped: int = 0  # records whose config no longer fits the workload's space

    def __len__(self) -> int:
        return len(self.y)


def load_source_data(records, sources: Sequence, target: str, mode: str = "relation",
                     exclude_key: str | None = None, device: str | None = None,
                     max_samples: int | None = None,
                     rng: np.random.Generator | None = None) -> SourceData:
    """Featurize the records of ``sources`` (names, keys or Workloads) for ``target``.

    Throughput is normalized per workload (gflops / that workload's best; failures 0), so
    workloads of different speeds share one scale. ``exclude_key`` (the tuned workload) is left
    out: the global model must come from other workloads. ``max_samples`` keeps a random subset.
    Records of a cold first run only (``Record.cold_only``) are no measurements: left out.
    """
    target = canonical_target(target)
    rng = rng or np.random.default_rng(0)
    Xs, ys, gs, counts, skipped = [], [], [], {}, 0
    for group, spec in enumerate(sources):
        workload = get_workload(spec)
        if workload.key == exclude_key:
            warnings.warn(f"source {workload.label} is the tuned workload itself; left out",
                          stacklevel=2)
            continue
        space = space_for(workload, target)
        best: dict[int, tuple[object, float]] = {}  # config index -> (config, best gflops)
        for rec in records.query(workload_key=workload.key, target=target, device=device):
            if rec.cold_only:  # no measurement of the kernel (Record.cold_only)
                continue
            try:
                config = space.from_json(rec.config_json)
            except InvalidConfigError:
                skipped += 1
                continue
            g = float(rec.gflops) if rec.gflops and np.isfinite(rec.gflops) else 0.0
            if config.index not in best or g > best[config.index][1]:
                best[config.index] = (config, g)
        if not best:
            continue
        configs = [c for c, _ in best.values()]
        gflops = np.array([g for _, g in best.values()])
        if gflops.max() <= 0:
            continue  # nothing ran: no order to learn from
        feats = featurize(workload, configs, mode)
        Xs.append(feats if mode == "ast" else np.asarray(feats, np.float32))
        ys.append(gflops / gflops.max())
        gs.append(np.full(len(configs), group, np.int64))
        counts[workload.key] = len(configs)
    if not Xs:
        raise ValueError("no usable source records: measure some other workloads first "
                         f"(sources {list(map(str, sources))}, target {target})")
    if mode == "ast":  # trees: a list of dicts, any size (tree models)
        X = [t for trees in Xs for t in trees]
        data = SourceData(X, np.concatenate(ys), np.concatenate(gs), counts, skipped)
        if max_samples is not None and len(data) > max_samples:
            keep = np.sort(rng.choice(len(data), size=max_samples, replace=False))
            data = SourceData([X[i] for i in keep], data.y[keep], data.groups[keep], counts,
                              skipped)
        return data
    widths = {x.shape[1] for x in Xs}
    if len(widths) > 1:
        raise ValueError(f"feature mode {mode!r} gives different lengths across workloads "
                         f"({sorted(widths)}); use an invariant mode such as 'relation'")
    data = SourceData(np.concatenate(Xs), np.concatenate(ys), np.concatenate(gs), counts, skipped)
    if max_samples is not None and len(data) > max_samples:
        keep = np.sort(rng.choice(len(data), size=max_samples, replace=False))
        data = SourceData(data.X[keep], data.y[keep], data.groups[keep], counts, skipped)
    return data


def _accepts(fn, name: str) -> bool:
    try:
        return name in inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False


class TransferModel:
    """Equation 4. ``global_model`` is fitted once (``fit_global``) on source data; ``fit``
    trains the local model. When the local model takes a ``base_margin`` (XGBoost), it is
    trained as a correction on top of the global scores; otherwise it is fitted on its own and
    the scores are summed."""

    def __init__(self, global_model: CostModel, local_model: CostModel) -> None:
        if global_model.feature_mode != local_model.feature_mode:
            raise ValueError("global and local models must use the same feature mode")
        self.global_model = global_model
        self.local_model = local_model
        self.feature_mode = local_model.feature_mode
        self.local_fitted = False
        self._margin = _accepts(local_model.fit, "base_margin")

    def fit_global(self, data: SourceData) -> None:
        if _accepts(self.global_model.fit, "groups"):
            self.global_model.fit(data.X, data.y, groups=data.groups)
        else:
            self.global_model.fit(data.X, data.y)

    def fit(self, X: np.ndarray, y: np.ndarray) -> None:
        if self._margin:
            self.local_model.fit(X, y, base_margin=self.global_model.predict(X))
        else:
            self.local_model.fit(X, y)
        self.local_fitted = True

    def predict(self, X: np.ndarray) -> np.ndarray:
        scores = self.global_model.predict(X)
        if self.local_fitted:
            scores = scores + self.local_model.predict(X)
        return scores
