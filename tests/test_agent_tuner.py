"""The tuner loop on a synthetic objective: search quality, honest budget, determinism, plumbing."""
import numpy as np
import pytest

from tensorgym import registry
from tensorgym.agents import FeatureCache, ModelTuner, TransferModel, XGBoostCostModel
from tensorgym.search import tune
from .synthetic import SyntheticEnv, one_hot
from tensorgym.agents.transfer import SourceData
from tensorgym.space import ConfigSpace, other_knob

SPACE = ConfigSpace("toy/cpu", tuple(other_knob(f"k{i}", list(range(8))) for i in range(6)))
TARGET = np.array([3, 5, 1, 7, 2, 6])
FAST = dict(batch_size=16, n_chains=32, sa_steps=60, sa_early_stop=20,
            model_options={"n_rounds": 40})
FAST_OWN_MODEL = {k: v for k, v in FAST.items() if k != "model_options"}  # for a model instance


def objective(config):
    """A peaked landscape; configs with k0 == 0 'fail to build'."""
    if config.choices[0] == 0:
        return 0.0
    return 100.0 / (1.0 + np.abs(np.array(config.choices) - TARGET).sum())


def test_beats_random_search_with_the_same_budget():
    """Over 8 seeds (one seed is a lottery on this peaked landscape): the tuner's best is on
    average over 2.5 times random search's, and within 1 step of the peak in at least half."""
    bests, random_bests = [], []
    for seed in range(8):
        history = tune(SyntheticEnv(SPACE, objective), registry.make("xgb", **FAST), 96, seed=seed)
        bests.append(max(r.gflops for r in history))
        random_configs = SPACE.sample_unique(np.random.default_rng(seed), 96)
        random_bests.append(max(objective(c) for c in random_configs))
    assert np.mean(bests) > 2.5 * np.mean(random_bests)
    assert sum(b >= 50.0 for b in bests) >= 4


def test_budget_is_honest_and_nothing_is_measured_twice():
    env = SyntheticEnv(SPACE, objective)
    batches = []
    tuner = registry.make("xgb", **FAST)
    history = tune(env, tuner, 40, seed=1, callbacks=[lambda agent, res: batches.append(len(res))])
    assert len(history) == env.trials == 40
    assert batches == [16, 16, 8]
    assert len({r.config.index for r in history}) == 40
    assert tuner.best.gflops == max(r.gflops for r in history)


def test_env_budget_caps_trials_and_prior_history_is_not_remeasured():
    env = SyntheticEnv(SPACE, objective, budget=50)
    prior = env.measure(SPACE.sample_unique(np.random.default_rng(9), 20))
    history = tune(env, registry.make("xgb", **FAST), 100, seed=0)
    assert len(history) == 30 and env.trials == 50
    assert not {r.config.index for r in prior} & {r.config.index for r in history}


def test_small_space_is_exhausted_without_repeats():
    tiny = ConfigSpace("tiny/cpu", (other_knob("a", [1, 2, 3]), other_knob("b", [1, 2])))
    env = SyntheticEnv(tiny, lambda c: 1.0 + sum(c.choices))
    history = tune(env, registry.make("xgb", **FAST), 100, seed=0)
    assert sorted(r.config.index for r in history) == list(range(6))


def test_same_seed_same_trials_other_seed_other_trials():
    runs = [[r.config.index for r in tune(SyntheticEnv(SPACE, objective),
                                          registry.make("xgb", **FAST), 48, seed=s)]
            for s in (0, 0, 1)]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


class RidgeModel:
    """A pluggable model that is not XGBoost: least squares on the features."""

    def __init__(self):
        self.feature_mode = "config"
        self.fits = 0
        self.w = None

    def fit(self, X, y):
        X1 = np.c_[X, np.ones(len(X))]
        self.w = np.linalg.solve(X1.T @ X1 + 1e-3 * np.eye(X1.shape[1]), X1.T @ y)
        self.fits += 1

    def predict(self, X):
        return np.c_[X, np.ones(len(X))] @ self.w


@pytest.mark.parametrize("share, fits", [
    (0.0, 1 + 4),  # the prior's fit, then one after each of the 4 batches (the last one read)
    (0.05, 1 + 2),  # 200 prior rows: refitted once 10 new ones came, i.e. every other batch
    (1.0, 1),  # not before the new rows match the 200 the model knows
])
def test_a_model_fitted_on_many_rows_is_refitted_once_enough_new_ones_came(share, fits):
    """``refit_share``: a tune on a database's earlier results does not refit on every batch
    of a few new rows; a fresh tune still does (the pluggable-model test above)."""
    prior = SyntheticEnv(SPACE, objective).measure(SPACE.sample_unique(
        np.random.default_rng(0), 200))
    tuner = ModelTuner(model=RidgeModel, refit_share=share, **{**FAST_OWN_MODEL,
                                                               "batch_size": 6})
    history = tune(SyntheticEnv(SPACE, objective), tuner, 24, seed=0, prior=prior)
    assert len(history) == 24 and tuner.model.fits == fits
    with pytest.raises(ValueError, match="refit_share"):
        ModelTuner(refit_share=-0.1)


class ModeRecordingEnv(SyntheticEnv):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.modes = set()

    def featurize(self, configs, mode=None):
        self.modes.add(mode)
        return super().featurize(configs, mode)


def test_model_is_pluggable_and_features_come_from_the_env():
    env = ModeRecordingEnv(SPACE, objective)
    tuner = ModelTuner(model=RidgeModel, **FAST_OWN_MODEL)
    history = tune(env, tuner, 48, seed=0)
    assert env.modes == {"config"}
    assert tuner._model.fits == 2  # the last batch waits for a reader of the model: no ask
    assert tuner.model.fits == 3  # came, and the model read is fitted on every batch
    assert max(r.gflops for r in history) > 0


class ThreadsRecordingModel(RidgeModel):
    def __init__(self):
        super().__init__()
        self.fit_threads, self.seen = 2, []

    def fit(self, X, y):
        self.seen.append(self.fit_threads)
        super().fit(X, y)


class FakeHelper:
    """An annealing helper's state as the tuner reads it, set by the test."""

    def __init__(self, starting: bool = False):
        self.starting, self.failed = starting, False

    def close(self):
        pass


def tuner_beside(helper: FakeHelper, env, model) -> ModelTuner:
    """A tuner reset on ``env`` whose annealing helper is ``helper``."""
    tuner = ModelTuner(model=model, **FAST_OWN_MODEL)
    tuner.prepare(env, 32)
    tuner.reset(SPACE, 0)
    tuner._walker = helper
    return tuner


def test_a_fit_while_the_annealing_helper_starts_takes_one_thread():
    """The helper's start-up takes a core: a fit on two threads would wait for it."""
    env = SyntheticEnv(SPACE, objective)
    helper = FakeHelper(starting=True)
    tuner = tuner_beside(helper, env, ThreadsRecordingModel)
    tuner.tell(env.measure(SPACE.sample_unique(np.random.default_rng(0), 8)))
    assert tuner.model.seen == [1] and tuner.model.fit_threads == 2
    helper.starting = False
    tuner.tell(env.measure(SPACE.sample_unique(np.random.default_rng(1), 8)))
    assert tuner.model.seen == [1, 2]
    tuner.close()


class JobsRecordingEnv(SyntheticEnv):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.jobs = []

    def featurize(self, configs, mode=None, **options):
        self.jobs.append(options.get("n_jobs"))
        return super().featurize(configs, mode)


def test_a_walk_beside_the_annealing_helper_featurizes_in_this_process_only():
    """The helper walks on the other core: a batch split over a feature helper would wait."""
    env = JobsRecordingEnv(SPACE, objective)
    helper = FakeHelper()
    tuner = tuner_beside(helper, env, RidgeModel)
    tuner.tell(env.measure(SPACE.sample_unique(np.random.default_rng(0), 8)))
    tuner.model  # the fit's rows: the env's default
    assert env.jobs == [None]
    tuner._score(SPACE.sample_unique(np.random.default_rng(1), 4))
    assert env.jobs == [None, 1]
    helper.failed = True  # every group walks here, one after another: nothing else runs
    tuner._score(SPACE.sample_unique(np.random.default_rng(2), 4))
    assert env.jobs == [None, 1, None]
    tuner.close()


def test_uncertainty_acquisition_runs_the_loop():
    for acq in ("ei", "ucb"):
        env = SyntheticEnv(SPACE, objective)
        tuner = registry.make("xgb", uncertainty=acq, n_bootstrap=3,
                           **{**FAST, "model_options": {"loss": "reg", "n_rounds": 20}})
        assert len(tune(env, tuner, 32, seed=0)) == 32


def test_all_failures_keep_sampling_at_random():
    env = SyntheticEnv(SPACE, lambda c: 0.0)
    history = tune(env, registry.make("xgb", **FAST), 32, seed=0)
    assert len(history) == 32 and not any(r.ok for r in history)


def test_transfer_model_adds_local_to_global():
    rng = np.random.default_rng(0)
    src = SPACE.sample_unique(rng, 300)
    data = SourceData(one_hot(SPACE, src), np.array([objective(c) for c in src]) / 100,
                      np.zeros(300, np.int64))
    model = TransferModel(XGBoostCostModel(n_rounds=40), XGBoostCostModel(n_rounds=40))
    model.fit_global(data)
    X = one_hot(SPACE, SPACE.sample_unique(rng, 50))
    assert np.array_equal(model.predict(X), model.global_model.predict(X))
    local = SPACE.sample_unique(rng, 40)
    model.fit(one_hot(SPACE, local), np.array([objective(c) for c in local]) / 100)
    assert np.allclose(model.predict(X),
                       model.global_model.predict(X) + model.local_model.predict(X))
    assert not np.allclose(model.predict(X), model.global_model.predict(X))


def test_bad_options():
    with pytest.raises(ValueError):
        registry.make("nope")
    with pytest.raises(ValueError):
        registry.make("xgb", plan_ratio=0.5)
    with pytest.raises(ValueError):
        registry.make("xgb", source_workloads=["conv2d-C1"])  # no records database
    with pytest.raises(ValueError):
        registry.make("xgb", model="no-such-model")
    with pytest.raises(ValueError):
        tune(SyntheticEnv(SPACE, objective), registry.make("xgb", **FAST), -1)


def test_feature_cache_featurizes_each_config_once():
    calls = []

    def featurize(configs, mode):
        calls.append(len(configs))
        return one_hot(SPACE, configs)

    cache = FeatureCache(featurize, "config")
    a, b = SPACE.get(5), SPACE.get(9)
    X = cache([a, b, a])
    assert np.array_equal(X, one_hot(SPACE, [a, b, a])) and calls == [2]
    cache([b, a])
    assert calls == [2]
    per_program = FeatureCache(lambda cs, mode: [{"index": c.index} for c in cs], "ast")
    assert per_program([a, b]) == [{"index": 5}, {"index": 9}]
    with pytest.raises(ValueError):
        FeatureCache(lambda cs, mode: np.zeros((1, 3)), "config")([a, b])


def test_a_carried_tune_resumes_its_walk_and_featurizes_only_new_configs():
    """Tunes of one task that share ``carry`` (tune-model's batches): the next one's first walk
    resumes the last one's chains (``sa_resume_steps``), and configs featurized before are not
    featurized again. A tune without it walks ``sa_steps`` from random points."""
    env = SyntheticEnv(SPACE, objective)
    opts = dict(FAST, sa_steps=60, sa_resume_steps=5, sa_early_stop=60)
    carry: dict = {}
    first = tune(env, registry.make("xgb", carry=carry, **opts), 32, seed=0)
    (slot,) = carry.values()
    assert len(slot["points"]) == opts["n_chains"] and slot["features"]["rows"]
    featurized = []
    real = env.featurize

    def counting(configs, *a, **k):
        featurized.extend(c.index for c in configs)
        return real(configs, *a, **k)

    env.featurize = counting
    seen = set(slot["features"]["rows"])
    tuner = registry.make("xgb", carry=carry, **opts)
    steps = []
    tune(env, tuner, 16, seed=1, prior=first,
         callbacks=[lambda agent, res: steps.append(agent._annealer.steps_taken)])
    assert steps == [5] and not seen & set(featurized)
    fresh = registry.make("xgb", **opts)
    steps.clear()
    tune(SyntheticEnv(SPACE, objective), fresh, 32, seed=1,
         callbacks=[lambda agent, res: steps.append(agent._annealer.steps_taken)])
    assert steps == [0, 60]  # a random first batch, then a walk from random points


def test_feature_cache_overflow_keeps_every_requested_row():
    import numpy as np

    from tensorgym.agents.tuner import FeatureCache
    from tensorgym.templates import space_for
    from tensorgym.workloads import matmul

    space = space_for(matmul(16, 16, 16), "cpu")
    cache = FeatureCache(lambda cs, mode: np.array([[c.index] for c in cs], float), "relation",
                         max_entries=5)
    first = space.sample(np.random.default_rng(0), 4)
    cache(first)
    both = first[:2] + space.sample(np.random.default_rng(1), 3)  # overflows: cache is cleared
    assert [row[0] for row in cache(both)] == [c.index for c in both]


def test_the_annealing_helper_changes_no_trial_and_is_gone_when_the_tune_ends():
    """On a TensorSched env (replayed from the bundled dataset, so every measurement is the
    same) a helper process walks the second group of chains: the trials are those of a tune
    without it, and the tune ends with the helper stopped."""
    from pathlib import Path

    import gymnasium as gym

    import tensorgym  # noqa: F401  (registers the envs)
    from .proc_tree import survivors

    dataset = Path(__file__).resolve().parents[1] / "data" / "reference.parquet"

    def run(helper: bool) -> tuple[list[int], set[int]]:
        env = gym.make("TensorSched-conv2d-C6-cpu", measure="replay", dataset=str(dataset),
                       on_miss="surrogate", records=False)
        agent = registry.make("xgb", sa_helper=helper, batch_size=16)
        pids: set[int] = set()

        def seen(strategy, results):
            walker = strategy._walker
            if walker is not None and walker.child.alive:
                pids.add(walker.child.proc.pid)
        try:
            history = tune(env, agent, 48, seed=0, callbacks=[seen])
        finally:
            env.close()
        assert agent._walker is None
        return [r.config.index for r in history], pids

    with_helper, pids = run(True)
    without, none = run(False)
    assert with_helper == without and len(set(with_helper)) == 48
    assert pids and not none
    assert not survivors(pids, within=5.0)


def test_a_model_class_of_the_users_main_is_scored_here_without_a_helper():
    """A helper could not import a cost model class defined in the user's script: the tuner
    walks both groups itself, with no warning."""
    import warnings
    from pathlib import Path

    import gymnasium as gym

    import tensorgym  # noqa: F401  (registers the envs)

    class MainModel(XGBoostCostModel):
        pass

    MainModel.__module__ = "__main__"
    dataset = Path(__file__).resolve().parents[1] / "data" / "reference.parquet"
    env = gym.make("TensorSched-conv2d-C6-cpu", measure="replay", dataset=str(dataset),
                   on_miss="surrogate", records=False)
    agent = registry.make("xgb", model=lambda: MainModel(n_rounds=20), batch_size=8)
    walkers = []
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            history = tune(env, agent, 24, seed=0,
                           callbacks=[lambda s, r: walkers.append(s._walker)])
    finally:
        env.close()
    assert len(history) == 24 and walkers == [None, None, None]
