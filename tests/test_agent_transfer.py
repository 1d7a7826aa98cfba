"""Transfer learning plumbing (Equation 4): source records -> features -> global model -> tuner."""
import numpy as np
import pytest

from tensorgym import registry
from tensorgym.agents import TransferModel, load_source_data
from tensorgym.search import tune
from .synthetic import SyntheticEnv
from tensorgym.features import featurize
from tensorgym.measure.result import MeasureResult
from tensorgym.records import Records
from tensorgym.task import Task
from tensorgym.templates import space_for
from tensorgym.workloads import conv2d, matmul

SOURCES = [matmul(16, 16, 16), conv2d(1, 4, 9, 9, 8, 3, 2, 1)]
TARGET = matmul(32, 32, 32)


def speed(config):
    """Source 'throughput' rule: vectorizing and a local accumulator help (the records are
    written directly: this tests the plumbing, not the hardware)."""
    return (3.0 if config["vectorize"] == "inner" else 1.0) * \
        (2.0 if config["cache_write"] == 1 else 1.0)


@pytest.fixture(scope="module")
def records():
    db = Records(":memory:")
    rng = np.random.default_rng(0)
    for w, scale in zip(SOURCES, (1.0, 10.0)):
        space = space_for(w, "cpu")
        configs = space.sample_unique(rng, 80)
        db.add_many(Task(w.key, "cpu", "test-device"), [
            MeasureResult(c, (w.flops / (scale * speed(c) * 1e9),), flops=w.flops)
            for c in configs])
        db.add(Task(w.key, "cuda", "gpu"),  # another target
               MeasureResult(configs[0], (1.0,), flops=w.flops))
    db.add(Task(TARGET.key, "cpu", "test-device"),
           MeasureResult(space_for(TARGET, "cpu").get(0), (1.0,), flops=TARGET.flops))
    return db


def test_source_data_is_normalized_per_workload(records):
    data = load_source_data(records, SOURCES, "llvm")
    assert data.X.shape == (160, featurize(TARGET, [space_for(TARGET, "cpu").get(0)]).shape[1])
    assert data.counts == {w.key: 80 for w in SOURCES}
    for g in (0, 1):
        assert data.y[data.groups == g].max() == pytest.approx(1.0)
        assert data.y[data.groups == g].min() == pytest.approx(1 / 6)
    sub = load_source_data(records, SOURCES, "cpu", max_samples=50,
                           rng=np.random.default_rng(1))
    assert len(sub) == 50


def test_the_tuned_workload_is_never_a_source(records):
    with pytest.warns(UserWarning, match="tuned workload"):
        data = load_source_data(records, SOURCES + [TARGET], "cpu", exclude_key=TARGET.key)
    assert TARGET.key not in data.counts


def test_no_usable_records_is_a_clear_error(records):
    with pytest.raises(ValueError, match="no usable source records"):
        load_source_data(records, [matmul(8, 8, 8)], "cpu")


def test_global_model_transfers_to_another_shape(records):
    tuner = registry.make("xgb", records=records, source_workloads=SOURCES)
    env = SyntheticEnv(space_for(TARGET, "cpu"), speed)
    env.workload, env.target = TARGET, "cpu"
    model = tuner.build_model(env, seed=0)
    assert isinstance(model, TransferModel) and not model.local_fitted
    configs = env.space.sample_unique(np.random.default_rng(2), 200)
    pred = model.predict(featurize(TARGET, configs))
    truth = np.array([speed(c) for c in configs])
    means = [pred[truth == v].mean() for v in (1.0, 2.0, 3.0, 6.0)]
    assert means == sorted(means)  # the order learned on the sources holds on the target


def test_transfer_steers_the_first_batch(records):
    space = space_for(TARGET, "cpu")

    def run(**kw):
        env = SyntheticEnv(space, speed)
        env.workload, env.target = TARGET, "cpu"
        env.featurize = lambda configs, mode=None, **kw: featurize(TARGET, configs, mode or "relation")
        return tune(env, registry.make("xgb", batch_size=16, n_chains=16, sa_steps=20, **kw), 16,
                    seed=0)

    cold = run(warm_start=False)  # no seed schedules either: the first batch is random
    warm = run(records=records, source_workloads=SOURCES, warm_start=False)
    # without a model the first batch is random; with the global model it is chosen by it
    assert np.mean([r.gflops for r in warm]) > 1.5 * np.mean([r.gflops for r in cold])
