"""The tuner on real TensorSched envs: real compilation and measurement, honest trial counts,
transfer from records another real tuning run wrote."""
import gymnasium as gym
import pytest

import tensorgym.envs  # noqa: F401  (registers the envs)
from tensorgym import registry
from tensorgym.agents import TransferModel
from tensorgym.measure import LocalMeasurer, MeasureOptions
from tensorgym.search import tune
from tensorgym.records import Records
from tensorgym.workloads import matmul

FAST = dict(batch_size=8, n_chains=16, sa_steps=20, model_options={"n_rounds": 40})


@pytest.fixture(scope="module")
def measurer():
    m = LocalMeasurer("cpu", MeasureOptions(repeat=2, min_repeat_ms=1))
    yield m
    m.close()


def make_env(workload, measurer, records, budget=64):
    return gym.make("TensorSched-v0", workload=workload, target="cpu", budget=budget,
                    records=records, measurer=measurer)


@pytest.mark.slow
def test_tune_then_transfer_on_real_workloads(measurer, tmp_path):
    db_path = tmp_path / "records.db"
    source = matmul(16, 16, 16)
    env = make_env(source, measurer, db_path)
    seen = []
    history = tune(env, registry.make("xgb", **FAST), 16, seed=0,
                                             callbacks=[lambda a, res: seen.extend(res)])
    u = env.unwrapped
    assert len(history) == u.trials == 16 and seen == history == u.history
    assert len({r.config.index for r in history}) == 16
    assert sum(r.ok for r in history) >= 12 and u.best.gflops == max(r.gflops for r in history)
    assert len(Records(db_path).query(workload_key=source.key, target="cpu")) == 16

    target = matmul(32, 32, 32)
    env2 = make_env(target, measurer, tmp_path / "target.db", budget=12)
    agent = registry.make("xgb", records=Records(db_path), source_workloads=[source], **FAST)
    history2 = tune(env2, agent, 100, seed=0)  # the env's budget caps the trials
    assert len(history2) == env2.unwrapped.trials == 12
    assert isinstance(agent.model, TransferModel) and agent.model.local_fitted
    assert agent.source_data.counts == {source.key: 16}
    assert agent.best is not None and agent.best.gflops > 0
