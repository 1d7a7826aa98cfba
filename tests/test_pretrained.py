"""xgb-pretrained: a cost model fitted on the train tasks of a dataset, saved, loaded by name
(predictions equal to the bit), used as the tuner's global model, and its errors."""
import json

import numpy as np
import pytest

from tensorgym import registry
from tensorgym.agents.pretrained import load_model, main, save_model, train
from tensorgym.dataset import collect
from tensorgym.errors import TensorGymError
from tensorgym.features import featurize
from tensorgym.measure import MeasureOptions
from tensorgym.search import tune
from tensorgym.templates import space_for
from tensorgym.workloads import get_workload

from .test_agent_env import FAST, make_env, measurer  # noqa: F401  (a fixture)

TRAIN = ["dense:1,512,18+bias", "dense:1,512,1000+bias"]  # dqn's and resnet18's: train tasks


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    path = tmp_path_factory.mktemp("pretrained") / "d.db"
    collect(TRAIN + ["matmul:16,16,16"], n_configs=10, db=str(path), threads=1,
            progress=False,
            options=MeasureOptions(repeat=3, max_repeat=3, min_repeat_ms=1.0, calibrate=False))
    return str(path)


def test_train_save_load_round_trip(dataset, tmp_path):
    out = tmp_path / "m.json"
    about = train(dataset, out)
    assert about["tasks"] == 2 and about["rows"] == 22  # the matmul is no corpus train task
    model = load_model(out)
    w = get_workload("conv2d:1,16,14,14,16,3,1,1")
    X = featurize(w, space_for(w, "cpu").sample(np.random.default_rng(0), 20), "relation")
    assert np.array_equal(model.predict(X), load_model(out).predict(X))
    assert model.about["digest"] and model.about["split"] == "train"
    assert main(["--dataset", dataset, "--out", str(tmp_path / "m2.json")]) == 0


def test_the_tuner_starts_from_it(dataset, tmp_path, measurer):  # noqa: F811
    out = tmp_path / "m.json"
    train(dataset, out)
    env = make_env(get_workload("matmul:8,24,16"), measurer, tmp_path / "r.db", budget=8)
    agent = registry.make("xgb-pretrained", pretrained=str(out), **FAST)
    try:
        results = tune(env, agent, 8, seed=0)
    finally:
        env.close()
    assert len(results) == 8
    assert agent.model.global_model.about["rows"] == 22
    assert agent.warm_start_summary.records == 22


def test_errors(dataset, tmp_path):
    with pytest.raises(TensorGymError, match="no pretrained cost model"):
        load_model(tmp_path / "none.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(TensorGymError, match="damaged"):
        load_model(bad)
    out = tmp_path / "m.json"
    train(dataset, out)
    obj = json.loads(out.read_text())
    obj["feature_length"] += 1
    out.write_text(json.dumps(obj))
    with pytest.raises(TensorGymError, match="train it again"):
        load_model(out)
    with pytest.raises(TensorGymError, match="fitted"):
        save_model(registry.make_model("xgb"), tmp_path / "x.json", {})
    other = tmp_path / "o.db"
    collect(["matmul:16,16,16"], n_configs=2, db=str(other), threads=1, progress=False,
            options=MeasureOptions(repeat=3, max_repeat=3, min_repeat_ms=1.0, calibrate=False))
    with pytest.raises(TensorGymError, match="no train task"):
        train(other, tmp_path / "y.json")
