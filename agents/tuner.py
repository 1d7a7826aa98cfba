"""The paper's tuner (Algorithm 1): cost model + parallel simulated annealing + diversity-aware
epsilon-greedy batch selection, with optional bootstrap uncertainty and transfer learning.

It works on a ``TuningSession`` (``tensorgym.search.tune`` hands it one): its ``space``,
``featurize`` and ``measure`` (every trial goes through ``measure``, so the trial count is
honest), which makes it work on every task, target and measurer.

Warm start (``warm_start=True``, the default): the first batch is not random. It holds the
template's seed schedules (``tensorgym.templates.seeds``: the reference schedule and hand-derived
micro-kernels), and where the records database holds measurements of *other* workloads on the
same target and device, the cost model is pretrained on them (transfer learning, Equation 4) so
the rest of the first batch is chosen by the model. ``warm_start_summary`` says what was used.
"""
from __future__ import annotations

import contextlib
import copy
import functools
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from tensorgym.errors import InvalidConfigError, TensorGymError
from tensorgym.features import Featurizer, featurize
from tensorgym.measure.result import MeasureResult
from tensorgym.meter import Meter
from tensorgym.registry import Option, make_model
from tensorgym.search import SearchStrategy
from tensorgym.session import TuningSession
from tensorgym.space import Config, ConfigSpace
from tensorgym.templates.seeds import seed_configs

from .annealing import ParallelAnnealer, WalkHelper
from .cost_model import BootstrapEnsemble, CostModel, XGBoostCostModel
from .selection import select_batch
from .transfer import SourceData, TransferModel, load_source_data

#: a model kept in ``pretrain_cache`` is fitted again once its pool of records grew this much
PRETRAIN_REGROWTH = 0.5
#: source rows a warm start pretrains on at most (``max_source_samples`` overrides it): featurizing
#: and fitting them stays within a second or two
WARM_START_MAX_ROWS = 5000


@dataclass
class WarmStart:
    """What a tuner's warm start used: ``seeds`` schedules in the first batch (``seeds_outside``
    left out because the env's space cannot express them); ``records`` source rows of
    ``workloads`` other workloads pretrained the cost model (``skipped``: records whose configs no
    longer fit their space); ``note`` why there was no pretraining, where there was none."""

    enabled: bool = True
    seeds: int = 0
    seeds_outside: int = 0
    records: int = 0
    workloads: int = 0
    skipped: int = 0
    note: str = ""

    def __str__(self) -> str:
        if not self.enabled:
            return "warm start: off (the first batch is random)"
        text = f"warm start: {self.seeds} seed schedule{'s' * (self.seeds != 1)}"
        if self.seeds_outside:
            text += f" ({self.seeds_outside} outside this space left out)"
        if self.records:
            text += (f", cost model pretrained on {self.records:,} records of {self.workloads} "
                     f"other workload{'s' * (self.workloads != 1)}")
        elif self.note:
            text += f", {self.note}"
        if self.skipped:
            text += f" ({self.skipped:,} records of older spaces skipped)"
        return text


class FeatureCache:
    """``session.featurize`` memoized by config index (annealing revisits configs).

    Fixed-length modes give a matrix (one row per config); a mode such as ``ast`` that gives one
    object per program (for tree models) is returned as a list."""

    def __init__(self, featurize: Callable, mode: str, max_entries: int = 50_000,
                 shared: "dict | None" = None) -> None:
        self.featurize = featurize
        self.mode = mode
        self.max_entries = max_entries
        # ``shared``: where the rows live, so that another cache of the same workload, space and
        # mode (the next batch's tuner: ``ModelTuner``'s ``carry``) finds them
        self._state = shared if shared is not None else {}
        self._state.setdefault("rows", {})
        self._state.setdefault("matrix", None)

    @property
    def rows(self) -> dict:
        return self._state["rows"]

    @property
    def matrix(self) -> "bool | None":
        return self._state["matrix"]

    @matrix.setter
    def matrix(self, value: bool) -> None:
        self._state["matrix"] = value

    def __call__(self, configs: Sequence[Config], **options) -> "np.ndarray | list":
        """Rows of ``configs``; ``options`` go to ``featurize`` with the configs not seen yet."""
        missing = list({c.index: c for c in configs if c.index not in self.rows}.values())
        if len(self.rows) + len(missing) > self.max_entries:
            self.rows.clear()  # a crude bound on memory; re-featurizing is only slower
            missing = list({c.index: c for c in configs}.values())
        if missing:
            feats = self.featurize(missing, self.mode, **options)
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


class ModelTuner(SearchStrategy):
    """Model-based tuner, a search strategy (``tensorgym.search``). Options (paper names in
    brackets; declared for the registry in ``OPTIONS``):

    - ``model``: a registered name (``"xgb"`` rank loss, ``"xgb-reg"``), a model instance (used
      as an unfitted template and copied) or a zero-argument factory; ``model_options`` go to
      the named model's constructor (e.g. ``loss="reg"``).
    - ``batch_size`` [b] (default: an eighth of the budget, 8 to 64, so that short sessions
      still update the model several times; TVM used 64), ``plan_ratio`` [lambda: select
      from the top lambda*b candidates], ``alpha`` (diversity weight of Equation 3),
      ``epsilon`` (random share of each batch).
    - ``n_chains``, ``sa_steps``, ``sa_resume_steps``, ``sa_early_stop``: the parallel simulated
      annealing (steps of the first batch, of each later one, and the early stop);
      ``sa_groups``: the chains walk in that many independent groups, and with ``sa_helper``
      (the default) on a TensorSched env a helper process walks the second group while this one
      walks the first (the same proposals as without it; ``close`` stops it). The defaults,
      256 chains for 50 steps then 13 per batch, make as many proposals as 128 chains for
      100 then 25 in half the featurizing calls, and a call of 128 configs costs ~1.5 calls
      of 64: search took ~0.35 s less of a 256-trial C6 tune, and surrogate tunes found
      bests as good (``benchmarks/bench_search_settings.py``).
    - ``uncertainty``: None, or ``"ei"`` / ``"ucb"`` / ``"mean"`` over a bootstrap ensemble of
      ``n_bootstrap`` models.
    - ``records`` (a ``tensorgym.records.Records``) with ``source_workloads``: transfer learning
      (Equation 4); ``max_source_samples`` caps the source rows.
    - ``warm_start`` (default True): the first batch starts with up to ``n_seeds`` seed
      schedules (``tensorgym.templates.seeds``), and without ``source_workloads`` the cost model
      is pretrained on every other workload that ``records`` (default: the session's database) holds
      for this target and device.
      for seeds and pretraining (``pretrain=False``: seeds only); ``warm_start_summary``
      reports what was used.
    - ``pretrain_cache`` (a dict one job shares between its tuners, e.g. ``tune-model``'s
      batches): the warm start's pretrained model is kept there and reused by the next tune of
      the same target, device and features while the records it could pretrain on have grown
      by less than ``PRETRAIN_REGROWTH`` (50%); a reused model may have seen the task's own
      records (it was fitted for another task), which only tells it more.
    - ``carry`` (a dict one job shares between the tuners of a task's successive tunes, e.g.
      ``tune-model``'s batches): the annealing chains' points and the features of the configs
      seen are kept there per workload, space and feature mode, so that the next tune of the
      same task resumes its walk (``sa_resume_steps``) instead of walking ``sa_steps`` from
      random points, and featurizes only configs not seen before.
      The annealing helper process is kept there too, for the job's later tunes: the job ends
      it (``close`` on each of the dict's values that has one, as ``tune-model`` does).
    - ``refit_share`` (default 0.05): the model is refitted once the results told since its
      last fit are at least that share of the rows it was fitted on (0: after every batch). A
      fresh tune with the default batch size (an eighth of the budget, so at least 5% of any
      row count it reaches) refits after every batch all the same; one with small batches set
      by hand (8 in a 512-trial tune) refits every few batches past 160 rows; a tune on 1,000
      earlier results refits every ~4 batches of 12 instead of after each. Surrogate tunes
      (``bench_search_settings.py --prior``) found bests as good in ~35% less tuner time.
    """

    name = "xgb"

    def __init__(self, model: "str | CostModel | Callable[[], CostModel]" = "xgb",
                 model_options: dict | None = None, batch_size: "int | None" = None,
                 plan_ratio: float = 2.0, alpha: float = 0.1, epsilon: float = 0.05,
                 n_chains: int = 256, sa_steps: int = 50, sa_resume_steps: int = 13,
                 sa_early_stop: int = 30, sa_groups: int = 2, sa_helper: bool = True,
                 uncertainty: str | None = None, n_bootstrap: int = 5, records=None,
                 source_workloads: Sequence = (), max_source_samples: int | None = None,
                 device: str | None = None, warm_start: bool = True, n_seeds: int = 8,
                 pretrain: bool = True, refit_share: float = 0.05,
                 pretrain_cache: "dict | None" = None, pretrained: "str | None" = None,
                 carry: "dict | None" = None) -> None:
        if (batch_size is not None and batch_size < 1) or plan_ratio < 1.0 or alpha < 0 or not 0 <= epsilon <= 1:
            raise ValueError("need batch_size >= 1, plan_ratio >= 1, alpha >= 0, 0 <= epsilon <= 1")
        if source_workloads and records is None:
            raise ValueError("transfer learning needs a records database (records=...)")
        if n_seeds < 1:
            raise ValueError(f"n_seeds must be >= 1, got {n_seeds}")
        if refit_share < 0:
            raise ValueError("refit_share must be >= 0")
        self.refit_share = refit_share
        self.model_spec = model
        self.model_options = dict(model_options or {})
        self.batch_size = batch_size
        self.plan_ratio = plan_ratio
        self.alpha = alpha
        self.epsilon = epsilon
        self.n_chains = n_chains
        self.sa_steps = sa_steps
        self.sa_resume_steps = sa_resume_steps
        self.sa_early_stop = sa_early_stop
        if not 1 <= sa_groups <= n_chains:
            raise ValueError(f"sa_groups must be 1 to n_chains ({n_chains}), got {sa_groups}")
        self.sa_groups = sa_groups
        self.sa_helper = sa_helper
        self._walker: "WalkHelper | None" = None
        self.uncertainty = uncertainty
        self.n_bootstrap = n_bootstrap
        self.records = records
        self.source_workloads = list(source_workloads)
        self.max_source_samples = max_source_samples
        self.device = device
        self.warm_start = warm_start
        self.n_seeds = n_seeds
        self.pretrain = pretrain
        self.pretrain_cache = pretrain_cache
        self.carry = carry
        self._carried: "dict | None" = None  # this task's share of ``carry`` (set by reset)
        self.pretrained = pretrained
        self.new_model()  # fail fast on a bad model spec
        # state of the current search (since reset), for callbacks and inspection: the model,
        # every result told (prior ones first) and the transfer source data
        self.model = None
        self.history: list[MeasureResult] = []
        self.source_data = None
        self.warm_start_summary: "WarmStart | None" = None

    def new_model(self) -> CostModel:
        spec = self.model_spec
        if isinstance(spec, str):
            return make_model(spec, **self.model_options)
        if hasattr(spec, "predict") and not isinstance(spec, type):
            return copy.deepcopy(spec)
        if callable(spec):
            return spec()
        raise TypeError(f"model must be a name, a cost model or a factory, got {spec!r}")

    @property
    def training(self) -> dict:
        """What the cost model learned before any tune: the pretrained file's ``about``
        (dataset, split, rows, ...), ``{}`` without one. Records pretraining (``pretrain``)
        comes from the session's own database, not from training, so it is not listed."""
        if self.pretrained is None:
            return {}
        from .pretrained import pretrained_model

        path = None if self.pretrained == "shipped" else self.pretrained
        return dict(getattr(pretrained_model(path), "about", {}))

    def build_model(self, session: TuningSession, seed: int) -> CostModel:
        """A fresh cost model; with transfer learning or a warm start's pretraining, fitted on
        the source records (``warm_start_summary`` starts over here)."""
        self.warm_start_summary = WarmStart(enabled=self.warm_start)
        if self.uncertainty is not None:
            model = BootstrapEnsemble(self.new_model, self.n_bootstrap, self.uncertainty,
                                      seed=seed)
        else:
            model = self.new_model()
        rng = np.random.default_rng(seed)
        if self.pretrained is not None:
            from .pretrained import pretrained_model

            path = None if self.pretrained == "shipped" else self.pretrained
            global_model = pretrained_model(path, session.target)
            if global_model.feature_mode != model.feature_mode:
                raise TensorGymError(f"the pretrained model uses {global_model.feature_mode} "
                                     f"features, this tuner's model {model.feature_mode}")
            about = getattr(global_model, "about", {})
            self.warm_start_summary.records = int(about.get("rows", 0))
            self.warm_start_summary.workloads = int(about.get("tasks", 0))
            return TransferModel(global_model, model)
        if self.source_workloads:
            global_model = self.new_model()
            self.source_data = load_source_data(
                self.records, self.source_workloads, session.target, global_model.feature_mode,
                exclude_key=session.workload.key, device=self.device,
                max_samples=self.max_source_samples, rng=rng)
            self.warm_start_summary.records = len(self.source_data)
            self.warm_start_summary.workloads = len(self.source_data.counts)
        elif self.warm_start and not self.pretrain:
            self.warm_start_summary.note = "no pretraining (pretrain=False)"
            return model
        elif self.warm_start:
            global_model = self.new_model()
            reused = self._cached_pretraining(session, global_model.feature_mode)
            if reused is not None:
                return TransferModel(reused, model)
            self.source_data = self._pretraining_data(session, global_model.feature_mode, rng)
            if self.source_data is None:
                return model
        else:
            return model
        model = TransferModel(global_model, model)
        model.fit_global(self.source_data)
        if self.warm_start and not self.source_workloads and self.pretrain_cache is not None:
            self.pretrain_cache[self._cache_key(session, model.feature_mode)] = (
                self._pretrain_pool(session), global_model, self.warm_start_summary)
        return model

    def _cache_key(self, session: TuningSession, mode: str) -> tuple:
        return session.target, self.device or session.device, mode

    def _pretrain_pool(self, session: TuningSession) -> int:
        """Records a warm start could pretrain on now (every one of the target and device)."""
        records = self.records if self.records is not None else session.records
        if records is None:
            return 0
        return len(records.query(target=session.target, device=self.device or session.device))

    def _cached_pretraining(self, session: TuningSession, mode: str) -> "CostModel | None":
        """The shared pretrained model, while its pool of records has not grown too much."""
        if self.pretrain_cache is None:
            return None
        hit = self.pretrain_cache.get(self._cache_key(session, mode))
        if hit is None:
            return None
        pool, model, summary = hit
        if self._pretrain_pool(session) >= pool * (1 + PRETRAIN_REGROWTH):
            return None
        self.warm_start_summary.records = summary.records
        self.warm_start_summary.workloads = summary.workloads
        self.warm_start_summary.note = "pretrained model reused (pretrain_cache)"
        return model

    def _pretraining_data(self, session: TuningSession, mode: str,
                          rng: np.random.Generator) -> "SourceData | None":
        """The records of every other workload on the session's target and device, for a warm
        start (None, with ``warm_start_summary.note`` saying why, where there are none)."""
        summary = self.warm_start_summary
        workload, target = session.workload, session.target
        records = self.records if self.records is not None else session.records
        if workload is None or target is None:
            summary.note = "no pretraining (the session names no workload and target)"
            return None
        if records is None:
            summary.note = "no pretraining (no records database)"
            return None
        device = self.device or session.device
        keys = sorted({r.workload_key for r in records.query(target=target, device=device)}
                      - {workload.key})
        if not keys:
            summary.note = "no records of other workloads on this target and device to pretrain on"
            return None
        try:
            data = load_source_data(records, keys, target, mode, device=device,
                                    max_samples=self.max_source_samples or WARM_START_MAX_ROWS,
                                    rng=rng)
        except ValueError as e:  # records of other workloads, none usable
            summary.note = f"no pretraining ({e})"
            return None
        summary.records, summary.workloads = len(data), len(data.counts)
        summary.skipped = data.skipped
        return data

    def _batch(self, n_trials: int) -> int:
        if self.batch_size is not None:
            return self.batch_size
        return int(min(64, max(8, n_trials // 8)))

    # ---------------------------------------------------------------- the search protocol
    # batch_size None: the loop asks for the whole budget left and ask() picks the batch

    def prepare(self, session: TuningSession, n_trials: int) -> None:
        """The session gives the features, the target and workload (transfer learning) and the
        meter; ``n_trials`` sizes the batches when ``batch_size`` is None."""
        self._session, self._meter, self._budget = session, session.meter, n_trials

    def reset(self, space: ConfigSpace, seed: int) -> None:
        """A fresh model (built and, with transfer learning, fitted on the source records) and
        annealer. Time goes to the session's meter: ``model`` (building, fitting and predicting);
        featurizing is metered by the session, the rest by the loop as ``search``."""
        u = getattr(self, "_session", None)
        if u is None:
            raise TensorGymError("ModelTuner needs a session: call prepare(session, n_trials) "
                                 "before reset, or use tensorgym.search.tune")
        self._rng = rng = np.random.default_rng(seed)
        with self._meter.time("model"):
            self.model = self.build_model(u, seed)
        self._seeds = self._seed_configs(u, space) if self.warm_start else []
        self._space = space
        loop_names = bool(getattr(self.model, "reads_loop_names", False))
        featurize = functools.partial(u.featurize, loop_names=True) if loop_names else u.featurize
        self._carried = None if self.carry is None else self.carry.setdefault(
            (space.key or space.name, self.model.feature_mode, loop_names), {})
        self._features = FeatureCache(
            featurize, self.model.feature_mode,
            shared=None if self._carried is None else self._carried.setdefault("features", {}))
        self._annealer = ParallelAnnealer(space, self.n_chains, self.sa_steps,
                                          self.sa_early_stop, seed=rng.spawn(1)[0],
                                          resume_steps=self.sa_resume_steps,
                                          groups=self.sa_groups)
        if self._carried is not None and len(self._carried.get("points", ())) == self.n_chains:
            self._annealer.resume(self._carried["points"])
        modules = _model_modules(self.model)
        if self._walks_elsewhere(u, modules):
            if self._walker is None:
                self._walker = None if self.carry is None else self.carry.get("walker")
            if self._walker is None:
                self._walker = WalkHelper(
                    modules,
                    functools.partial(_warm_features, u.workload, space, self.model.feature_mode))
                if self.carry is not None:  # the job's later tunes walk on it too
                    self.carry["walker"] = self._walker
            self._walker.start()  # it starts while the first batch is measured
        else:
            self.close()
        self._measured: set[int] = set()
        self._data: tuple[list[Config], list[float]] = ([], [])
        self._fitted_rows = 0  # rows of the model's last fit
        self._model_ready = isinstance(self.model, TransferModel)
        self.history = []

    def _seed_configs(self, session: TuningSession, space: ConfigSpace) -> list[Config]:
        """The template's seed schedules that ``space`` can express, in their order."""
        workload, target = session.workload, session.target
        if workload is None or target is None:  # a synthetic stand-in
            return []
        out = []
        for config in seed_configs(workload, target, max_seeds=self.n_seeds):
            try:
                out.append(space.from_values(config.values))
            except InvalidConfigError:  # e.g. a space with a restricted split policy
                self.warm_start_summary.seeds_outside += 1
        self.warm_start_summary.seeds = len(out)
        return out

    def ask(self, n: int) -> list[Config]:
        b = min(self._batch(self._budget), n)
        seeds = [c for c in self._seeds if c.index not in self._measured][:b]
        taken = self._measured | {c.index for c in seeds}
        self._seeds = [c for c in self._seeds if c.index not in taken]
        b -= len(seeds)
        if b == 0:
            return seeds
        if not self._model_ready:  # nothing to learn from yet: Algorithm 1 starts at random
            return seeds + self._space.sample_unique(self._rng, b, exclude=taken)
        k = max(b, int(round(self.plan_ratio * b)))
        others = None
        if self._walker is not None:
            u = self._session
            others = self._walker.others(ModelScore(u.workload, self.model.feature_mode,
                                                    self.model, self._space, u.featurizer))
        candidates = self._annealer.find_maximums(self._score, k, exclude=taken, others=others)
        if self._carried is not None:
            self._carried["points"] = self._annealer.points
        return seeds + select_batch(candidates, self._space, b, self.alpha, self.epsilon,
                                    self._rng, taken)

    def tell(self, results: Sequence[MeasureResult]) -> None:
        """Results (prior ones, then each measured batch) train the model and are never
        proposed again; ``history`` keeps them all since ``reset``. The model is refitted when
        it is next used (the next ``ask``, or reading ``model``): after a tune's last batch no
        fit is made that nothing reads, and every model read is the one an eager fit after
        each ``tell`` would give."""
        configs, gflops = self._data
        for r in results:
            self._measured.add(r.config.index)
            configs.append(r.config)
            gflops.append(r.gflops)
        self.history += results
        if max(gflops, default=0.0) > 0 and \
                len(gflops) - self._fitted_rows >= self.refit_share * self._fitted_rows:
            self._refit = True
            self._model_ready = True

    @property
    def model(self) -> "CostModel | None":
        """The cost model, fitted on every result told so far (``None`` before ``reset``)."""
        if self._refit:
            self._refit = False
            configs, gflops = self._data
            # a tune's first fit can come while the annealing helper still starts (at once, on
            # prior results): its imports take a core, and a fit on two threads then waits for
            # the one that shares it (0.61-0.66 s on 384 C6 rows, 0.20-0.23 s on one thread)
            starting = self._walker is not None and self._walker.starting
            with _fit_threads(self._model, 1 if starting else None):
                self._fit(self._model, self._features, configs, gflops, self._meter)
            self._fitted_rows = len(gflops)
        return self._model

    @model.setter
    def model(self, model: "CostModel | None") -> None:
        self._model = model
        self._refit = False  # results told since the model's last fit

    def _walks_elsewhere(self, session: TuningSession, modules: tuple[str, ...]) -> bool:
        """Whether a helper process can walk annealing groups: its scores (``ModelScore``)
        featurize the session's workload as the session does, a fixed-length feature mode is
        cheap to send and to compute there, and the helper can import the model's classes
        (``modules``: none may be the user's ``__main__``)."""
        return (self.sa_helper and self.sa_groups > 1 and session.workload is not None
                and self.model.feature_mode in ("relation", "context", "config")
                and "__main__" not in modules)

    def close(self) -> None:
        """Stop the annealing helper process (a later ``reset`` starts it again); one kept in
        ``carry`` is left to the job, which closes it when it ends."""
        if self._walker is not None:
            if self.carry is None or self.carry.get("walker") is not self._walker:
                self._walker.close()
            self._walker = None

    def _score(self, configs: Sequence[Config]) -> np.ndarray:
        # while the helper walks the other group on the other core, a batch split over a
        # feature helper process (the env's default for batches of 96 or more) would wait
        # for that core: 128-config batches took 10.7 ms instead of ~7.5
        helped = self._walker is not None and not self._walker.failed
        X = self._features(configs, n_jobs=1) if helped else self._features(configs)
        with self._meter.time("model"):
            return self.model.predict(X)

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


@dataclass
class ModelScore:
    """A cost model's scores of configs of ``workload``, featurized where it is called: what an
    annealing helper process scores its walks with (picklable, unlike the tuner's env).

    ``featurizer`` computes and caches the rows (None: a featurizer of each call alone). A copy
    sent to a helper carries an empty one (``Featurizer`` pickles so), which the helper replaces
    with its own, kept across its walks (``annealing._WalkServer``); here it is the env's."""

    workload: Any
    mode: str
    model: Any
    space: ConfigSpace
    featurizer: "Featurizer | None" = field(default=None, repr=False, compare=False)

    def __call__(self, configs: Sequence[Config]) -> np.ndarray:
        if self.featurizer is None:
            X = featurize(self.workload, configs, self.mode, space=self.space)
        else:
            X = self.featurizer.featurize(self.workload, configs, self.mode, space=self.space)
        return self.model.predict(X)


@contextlib.contextmanager
def _fit_threads(model: Any, threads: "int | None") -> Iterator[None]:
    """``model`` (a transfer model: its local one) fits on ``threads`` threads meanwhile, where
    it has a ``fit_threads`` setting (None: as it is)."""
    model = getattr(model, "local_model", model)
    old = getattr(model, "fit_threads", None)
    if threads is None or old is None:
        yield
        return
    model.fit_threads = threads
    try:
        yield
    finally:
        model.fit_threads = old


def _warm_features(workload: Any, space: ConfigSpace, mode: str) -> None:
    """Featurize a few configs, so that a helper's first walk finds the feature code warm."""
    featurize(workload, space.sample(np.random.default_rng(0), 64), mode, space=space)


def _model_modules(model: Any) -> tuple[str, ...]:
    """Modules a helper imports as it starts, so that its first walk does not: the model's."""
    parts = [m for m in (model, *getattr(model, "models", ()), getattr(model, "global_model", None),
                         getattr(model, "local_model", None)) if m is not None]
    modules = {type(m).__module__ for m in parts} | {__name__}  # ModelScore's
    if any(isinstance(m, XGBoostCostModel) for m in parts):
        modules.add("xgboost")
    return tuple(sorted(modules))


#: ModelTuner's options as the registry declares them (``tensorgym list agents --options``)
OPTIONS = (
    Option("model", object, "xgb", "a cost model name (registry.COST_MODELS), a model or a "
           "factory"),
    Option("model_options", dict, None, "keyword arguments of the named model"),
    Option("batch_size", int, None, "configs per batch [b] (None: budget/8, 8 to 64)"),
    Option("plan_ratio", float, 2.0, "select each batch from the top plan_ratio*b [lambda]"),
    Option("alpha", float, 0.1, "diversity weight of Equation 3"),
    Option("epsilon", float, 0.05, "random share of each batch"),
    Option("n_chains", int, 256, "simulated annealing chains"),
    Option("sa_steps", int, 50, "annealing steps of the first batch (chains from random "
           "points)"),
    Option("sa_resume_steps", int, 13, "annealing steps of each later batch (chains resume "
           "where the last batch left them)"),
    Option("sa_early_stop", int, 30, "stop annealing after this many steps without change"),
    Option("sa_groups", int, 2, "annealing chains walk in this many independent groups"),
    Option("sa_helper", bool, True, "a helper process walks the second group (TensorSched "
           "envs; the same proposals, sooner)"),
    Option("uncertainty", str, None, "acquisition over a bootstrap ensemble",
           ("ei", "ucb", "mean")),
    Option("n_bootstrap", int, 5, "models in the bootstrap ensemble"),
    Option("records", object, None, "Records (or a path) of the transfer sources"),
    Option("source_workloads", (list, tuple), (), "workloads to transfer from"),
    Option("max_source_samples", int, None, "cap on the source rows"),
    Option("device", str, None, "device of the source records (None: any)"),
    Option("warm_start", bool, True, "seed schedules in the first batch, and a cost model "
           "pretrained on recorded measurements of other workloads when there are some"),
    Option("n_seeds", int, 8, "seed schedules at most (the reference one included)"),
    Option("pretrain", bool, True, "with warm_start: pretrain on other workloads' records "
           "(leaderboards turn it off: a run must not depend on the database's history)"),
    Option("pretrained", str, None, "a pretrained global cost model file (agents/pretrained.py; "
           "'shipped': the one shipped for the target, which xgb-pretrained uses)"),
    Option("pretrain_cache", dict, None, "a dict shared by one job's tuners, where a warm "
           "start's pretrained model is kept and reused (tune-model's batches)"),
    Option("carry", dict, None, "a dict shared by the tuners of a task's successive tunes "
           "(tune-model's batches), where the annealing chains, the configs' features and the "
           "annealing helper are kept: the next tune resumes the walk"),
    Option("refit_share", float, 0.05, "refit the model once the results told since its last "
           "fit are at least this share of the rows it was fitted on (0: after every batch)"),
)
