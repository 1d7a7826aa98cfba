"""The paper's tuner (Algorithm 1): cost model + parallel simulated annealing + diversity-aware
epsilon-greedy batch selection, with optional bootstrap uncertainty and transfer learning.

It talks to an environment only through ``env.unwrapped``: ``space``, ``featurize`` and
``measure`` (every trial goes through ``measure``, so the trial count is honest), which makes it
work on every TensorSched-* env and target.
"""
from __future__ import annotations

import copy
from typing import Callable, Iterable, Sequence

import numpy as np

from tensorgym.hardware.result import MeasureResult
from tensorgym.meter import Meter, meter_of
from tensorgym.space import Config

from .annealing import ParallelAnnealer
from .cost_model import BootstrapEnsemble, CostModel, make_model
from .selection import select_batch
from .transfer import TransferModel, load_source_data

Callback = Callable[["ModelTuner", list[MeasureResult]], None]


class FeatureCache:
    """``env.unwrapped.featurize`` memoized by config index (annealing revisits configs).

    Fixed-length modes give a matrix (one row per config); a mode such as ``ast`` that gives one
    object per program (for tree models) is returned as a list."""

    def __init__(self, featurize: Callable, mode: str, max_entries: int = 50_000) -> None:
        self.featurize = featurize
        self.mode = mode
        self.max_entries = max_entries
        self.rows: dict[int, object] = {}
        self.matrix: bool | None = None

    def __call__(self, configs: Sequence[Config]) -> "np.ndarray | list":
        missing = list({c.index: c for c in configs if c.index not in self.rows}.values())
        if len(self.rows) + len(missing) > self.max_entries:
            self.rows.clear()  # a crude bound on memory; re-featurizing is only slower
            missing = list({c.index: c for c in configs}.values())
        if missing:
            feats = self.featurize(missing, self.mode)
            if isinstance(feats, np.ndarray):
                if feats.ndim != 2 or feats.shape[0] != len(missing):
                    raise ValueError(f"featurize returned shape {feats.shape} for {len(missing)} "
                                     f"configs in mode {self.mode!r}; need one row per config")
                feats = feats.astype(np.float32, copy=False)
                self.matrix = True
            else:
                feats = list(feats)
                if len(feats) != len(missing):
                    raise ValueError(f"featurize returned {len(feats)} items for "
                                     f"{len(missing)} configs")
                self.matrix = False
            self.rows.update(zip((c.index for c in missing), feats))
        items = [self.rows[c.index] for c in configs]
        return np.stack(items) if self.matrix else items


class ModelTuner:
    """Model-based tuner. Options (paper names in brackets):

    - ``model``: a registered name (``"xgb"`` rank loss, ``"xgb-reg"``), a model instance (used
      as an unfitted template and copied) or a zero-argument factory; ``model_options`` go to
      the named model's constructor (e.g. ``loss="reg"``).
    - ``batch_size`` [b] (default: an eighth of the budget, 8 to 64, so that short sessions
      still update the model several times; TVM used 64), ``plan_ratio`` [lambda: select from the top lambda*b candidates],
      ``alpha`` (diversity weight of Equation 3), ``epsilon`` (random share of each batch).
    - ``n_chains``, ``sa_steps``, ``sa_early_stop``: the parallel simulated annealing.
    - ``uncertainty``: None, or ``"ei"`` / ``"ucb"`` / ``"mean"`` over a bootstrap ensemble of
      ``n_bootstrap`` models.
    - ``records`` (a ``tensorgym.records.Records``) with ``source_workloads``: transfer learning
      (Equation 4); ``max_source_samples`` caps the source rows.
    """

    name = "xgb"

    def __init__(self, model: "str | CostModel | Callable[[], CostModel]" = "xgb",
                 model_options: dict | None = None, batch_size: "int | None" = None,
                 plan_ratio: float = 2.0, alpha: float = 0.1, epsilon: float = 0.05,
                 n_chains: int = 128, sa_steps: int = 100, sa_early_stop: int = 30,
                 uncertainty: str | None = None, n_bootstrap: int = 5, records=None,
                 source_workloads: Sequence = (), max_source_samples: int | None = None,
                 device: str | None = None) -> None:
        if (batch_size is not None and batch_size < 1) or plan_ratio < 1.0 or alpha < 0 or not 0 <= epsilon <= 1:
            raise ValueError("need batch_size >= 1, plan_ratio >= 1, alpha >= 0, 0 <= epsilon <= 1")
        if source_workloads and records is None:
            raise ValueError("transfer learning needs a records database (records=...)")
        self.model_spec = model
        self.model_options = dict(model_options or {})
        self.batch_size = batch_size
        self.plan_ratio = plan_ratio
        self.alpha = alpha
        self.epsilon = epsilon
        self.n_chains = n_chains
        self.sa_steps = sa_steps
        self.sa_early_stop = sa_early_stop
        self.uncertainty = uncertainty
        self.n_bootstrap = n_bootstrap
        self.records = records
        self.source_workloads = list(source_workloads)
        self.max_source_samples = max_source_samples
        self.device = device
        self.new_model()  # fail fast on a bad model spec
        # state of the last tune() call, for callbacks and inspection
        self.model = None
        self.history: list[MeasureResult] = []
        self.source_data = None

    def new_model(self) -> CostModel:
        spec = self.model_spec
        if isinstance(spec, str):
            return make_model(spec, **self.model_options)
        if hasattr(spec, "predict") and not isinstance(spec, type):
            return copy.deepcopy(spec)
        if callable(spec):
            return spec()
        raise TypeError(f"model must be a name, a cost model or a factory, got {spec!r}")

    def build_model(self, env_u, seed: int) -> CostModel:
        if self.uncertainty is not None:
            model = BootstrapEnsemble(self.new_model, self.n_bootstrap, self.uncertainty,
                                      seed=seed)
        else:
            model = self.new_model()
        if self.source_workloads:
            global_model = self.new_model()
            self.source_data = load_source_data(
                self.records, self.source_workloads, env_u.target, global_model.feature_mode,
                exclude_key=env_u.workload.key, device=self.device,
                max_samples=self.max_source_samples, rng=np.random.default_rng(seed))
            model = TransferModel(global_model, model)
            model.fit_global(self.source_data)
        return model

    def _batch(self, n_trials: int) -> int:
        if self.batch_size is not None:
            return self.batch_size
        return int(min(64, max(8, n_trials // 8)))

    def tune(self, env, n_trials: int, seed: int = 0, callbacks: Iterable[Callback] = (),
             prior: Sequence[MeasureResult] = ()) -> list[MeasureResult]:
        """Measure up to ``n_trials`` new configs. ``prior``: results of this task measured
        before (e.g. ``Records.results``): they train the model and are never measured again,
        like the env's own history. Time goes to ``env.unwrapped.meter``: ``model`` (building,
        fitting and predicting), ``search`` (annealing, selection, sampling); featurizing is
        metered by the env."""
        if n_trials < 0:
            raise ValueError("n_trials must be >= 0")
        u = env.unwrapped
        space = u.space
        rng = np.random.default_rng(seed)
        budget = getattr(u, "budget", None)
        if budget is not None:
            n_trials = min(n_trials, max(0, budget - getattr(u, "trials", 0)))
        meter = meter_of(env)
        with meter.time("model"):
            self.model = model = self.build_model(u, seed)
        features = FeatureCache(u.featurize, model.feature_mode)
        annealer = ParallelAnnealer(space, self.n_chains, self.sa_steps, self.sa_early_stop,
                                    seed=rng.spawn(1)[0])
        # measurements the env already holds train the model and are never re-measured
        known = [r for r in [*prior, *(getattr(u, "history", None) or [])]
                 if r.config.space_name == space.name]
        measured = {r.config.index for r in known}
        data_configs = [r.config for r in known]
        data_gflops = [r.gflops for r in known]
        model_ready = isinstance(model, TransferModel)
        if max(data_gflops, default=0.0) > 0:
            self._fit(model, features, data_configs, data_gflops, meter)
            model_ready = True

        def score(configs: Sequence[Config]) -> np.ndarray:
            X = features(configs)
            with meter.time("model"):
                return model.predict(X)

        self.history = []
        while len(self.history) < n_trials and len(measured) < space.size:
            b = min(self._batch(n_trials), n_trials - len(self.history))
            with meter.time("search"):  # less the featurize and model time of score()
                if model_ready:
                    k = max(b, int(round(self.plan_ratio * b)))
                    candidates = annealer.find_maximums(score, k, exclude=measured)
                    batch = select_batch(candidates, space, b, self.alpha, self.epsilon, rng,
                                         measured)
                else:  # nothing to learn from yet: Algorithm 1 starts from random samples
                    batch = space.sample_unique(rng, b, exclude=measured)
            if not batch:
                break
            results = list(u.measure(batch))
            self.history += results
            for r in results:
                measured.add(r.config.index)
                data_configs.append(r.config)
                data_gflops.append(r.gflops)
            if max(data_gflops, default=0.0) > 0:
                self._fit(model, features, data_configs, data_gflops, meter)
                model_ready = True
            for cb in callbacks:
                cb(self, results)
        return self.history

    @staticmethod
    def _fit(model: CostModel, features: FeatureCache, configs: list[Config],
             gflops: list[float], meter: Meter) -> None:
        y = np.asarray(gflops, np.float64)
        with meter.time("model"):  # less the env's featurize time inside
            model.fit(features(configs), y / y.max())

    @property
    def best(self) -> MeasureResult | None:
        ok = [r for r in self.history if r.ok]
        return max(ok, key=lambda r: r.gflops) if ok else None


XGBTuner = ModelTuner
