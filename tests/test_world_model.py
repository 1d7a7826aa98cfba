"""The world model (tensorgym.dataset.world, issue 33): the vectorised config encoding is
encode_config's bit for bit, the metrics match hand computations, the targets are the records',
a model fits, predicts, saves and loads the same, and the commands print what they should.

Data: the bundled reference dataset (real measurements of ResNet-18's C1-C12 and matmul-1024);
the metric tests use made-up numbers in pure functions only."""
from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np
import pytest

from tensorgym.dataset import Dataset
from tensorgym.dataset.world import metrics
from tensorgym.dataset.world.descriptor import DESCRIPTOR_NAMES, N_DESCRIPTOR, describe, kind
from tensorgym.features.descriptor import DESCRIPTOR_LENGTH, workload_descriptor
from tensorgym.dataset.world.encode import ConfigEncoder, EncoderCache, encode_indices
from tensorgym.dataset.world.model import WorldModel
from tensorgym.dataset.world.samples import holdout_mask, split_samples, task_samples
from tensorgym.errors import InvalidConfigError, TensorGymError
from tensorgym.features.config_encoding import encode_config
from tensorgym.measure.result import spread
from tensorgym.templates import space_for
from tensorgym.workloads import batch_matmul, conv2d, dense, get_workload, matmul

from .cli_run import cli

REFERENCE = Path(__file__).resolve().parent.parent / "data" / "reference.parquet"
needs_reference = pytest.mark.skipif(not REFERENCE.exists(), reason="no data/reference.parquet")
C3 = "conv2d:1,64,56,56,64,1,1,0"
C6 = "conv2d:1,128,28,28,128,3,1,1"
MM = "matmul:1024,1024,1024"


# ---------------------------------------------------------------- the encoding

SPACES = [
    (get_workload("conv2d-C6"), "cpu"),
    (get_workload("conv2d-C1"), "cpu"),
    (conv2d(1, 32, 112, 112, 32, 3, 1, 1, groups=32, epilogue=("bias", "relu6")), "cpu"),
    (conv2d(1, 128, 56, 56, 128, 3, 1, 1, groups=32), "cuda"),
    (dense(128, 768, 3072, epilogue="bias+gelu"), "cpu"),
    (batch_matmul(12, 128, 64, 128), "opencl"),
    (matmul(1, 1, 1), "cpu"),  # every split knob gone: a space of few knobs
]


@pytest.mark.parametrize("workload,target", SPACES, ids=lambda x: getattr(x, "key", x))
def test_encode_indices_is_encode_config_bit_for_bit(workload, target):
    space = space_for(workload, target)
    rng = np.random.default_rng(7)
    indices = np.concatenate([[0, space.size - 1], rng.integers(0, space.size, 300)])
    got = encode_indices(space, indices)
    want = np.stack([encode_config(space, space.get(int(i))) for i in indices])
    assert got.dtype == want.dtype == np.float32 and got.shape == want.shape
    assert got.tobytes() == want.tobytes()


def test_encoder_tables_are_built_once_per_space_and_indices_are_checked():
    space = space_for(get_workload("conv2d-C6"), "cpu")
    cache = EncoderCache()
    assert cache.get(space) is cache.get(space_for(get_workload("conv2d-C6"), "cpu"))
    assert cache.get(space) is not cache.get(space_for(get_workload("conv2d-C6"), "cuda"))
    enc = ConfigEncoder(space)
    from tensorgym.features.config_encoding import N_CONFIG

    assert enc(np.zeros(0, np.int64)).shape == (0, N_CONFIG)
    for bad in (np.array([-1]), np.array([space.size]), np.array([0.5])):
        with pytest.raises(InvalidConfigError):
            enc(bad)


def test_encoding_is_fast():
    space = space_for(get_workload("conv2d-C6"), "cpu")
    enc = ConfigEncoder(space)
    idx = np.random.default_rng(0).integers(0, space.size, 1024)
    import time

    t0 = time.perf_counter()
    for _ in range(50):
        enc(idx)
    rate = 50 * 1024 / (time.perf_counter() - t0)
    assert rate > 3e5, rate  # ~1e7 rows/s on one idle core; a loaded CI machine is slower


# ---------------------------------------------------------------- the descriptor

def test_descriptor_columns():
    dw = conv2d(1, 32, 112, 112, 32, 3, 1, 1, groups=32, epilogue=("bias", "relu6"))
    gr = conv2d(1, 128, 56, 56, 128, 3, 1, 1, groups=32)
    assert (kind(dw), kind(gr), kind(get_workload("conv2d-C6"))) == \
        ("depthwise_conv2d", "grouped_conv2d", "conv2d")
    row = dict(zip(DESCRIPTOR_NAMES, describe(dw, "llvm")))
    assert len(DESCRIPTOR_NAMES) == N_DESCRIPTOR == len(describe(dw, "cpu"))
    # the env's descriptor first, then the model's own columns
    assert np.array_equal(describe(dw, "cpu")[:DESCRIPTOR_LENGTH],
                          workload_descriptor(dw, "cpu"))
    assert row["op_depthwise_conv2d"] == 1 and row["op_conv2d"] == 0 and row["target_cpu"] == 1
    assert row["epilogue_bias"] == row["epilogue_relu6"] == 1 and row["epilogue_relu"] == 0
    assert row["log2_groups"] == 5 and row["log2_size8"] == np.float32(np.log2(33))
    assert row["log2_flops"] == np.float32(np.log2(1 + dw.flops))
    assert row["log2_outputs"] == np.float32(np.log2(1 + dw.output.size))
    d = dict(zip(DESCRIPTOR_NAMES, describe(dense(128, 768, 3072), "cuda")))
    assert d["op_dense"] == d["target_cuda"] == 1 and d["log2_size3"] == 0
    with pytest.raises(TensorGymError):
        describe(dw, "tpu")


# ---------------------------------------------------------------- the metrics (by hand)

def test_metrics_by_hand():
    true = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    pred = np.array([10.0, 30.0, 20.0, 50.0, 40.0])  # swaps (2,3) and (4,5)
    # Spearman: rank differences 0,1,1,1,1 -> 1 - 6 * 4 / (5 * (25 - 1)) = 0.8
    assert metrics.spearman(pred, true) == pytest.approx(0.8)
    # 10 pairs, 2 discordant
    assert metrics.pairwise_accuracy(pred, true) == pytest.approx(0.8)
    # the predicted best (10) is the true best (1)
    assert metrics.top_k_recall(pred, true, 1) == 1.0
    # true top 2 {0, 1}, predicted top 2 {0, 2}
    assert metrics.top_k_recall(pred, true, 2) == 0.5
    # k past n: every config
    assert metrics.top_k_recall(pred, true, 5) == metrics.top_k_recall(pred, true, 9) == 1.0
    worse = np.array([30.0, 10.0, 20.0, 50.0, 40.0])  # predicted best: the one of time 2
    assert metrics.top_k_recall(worse, true, 1) == 0.0
    assert metrics.top_k_score(worse, true, 1) == pytest.approx(1 / 2)
    assert metrics.top_k_score(worse, true, 2) == pytest.approx(1 / 2)  # times 2 and 3
    assert metrics.top_k_score(worse, true, 3) == 1.0
    # a pair the prediction ties counts one half; a pair of equal times counts not at all
    assert metrics.pairwise_accuracy(np.array([1.0, 1.0, 2.0, 3.0, 4.0]), true) == \
        pytest.approx(9.5 / 10)
    assert metrics.pairwise_accuracy(np.array([1.0, 2.0, 3.0]), np.array([1.0, 1.0, 2.0])) == \
        pytest.approx(2 / 2)
    m = metrics.task_metrics(pred, true)
    assert m == {"spearman": pytest.approx(0.8), "pairwise": pytest.approx(0.8),
                 "top1_recall": 1.0, "top5_recall": 1.0, "top1_score": 1.0, "top5_score": 1.0}
    # per task, then averaged over tasks; a task of one timed config is left out
    avg = metrics.evaluate_tasks([pred, worse, np.array([1.0, 2.0])],
                                 [true, true, np.array([1.0, np.nan])])
    assert avg["tasks"] == 2
    assert avg["top1_recall"] == 0.5 and avg["top1_score"] == pytest.approx(0.75)
    assert avg["spearman"] == pytest.approx((0.8 + metrics.spearman(worse, true)) / 2)


def test_ranks_and_spearman_agree_with_scipy():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(1)
    a = rng.integers(0, 6, 40).astype(float)  # ties
    b = a + rng.normal(0, 2, 40)
    np.testing.assert_allclose(metrics.ranks(a), stats.rankdata(a))
    assert metrics.spearman(b, a) == pytest.approx(stats.spearmanr(b, a)[0])
    assert metrics.spearman(np.ones(5), np.arange(5.0)) == 0.0


# ---------------------------------------------------------------- targets and split

@pytest.fixture(scope="module")
def reference():
    return Dataset.load(REFERENCE)


@pytest.fixture(scope="module")
def small(reference, tmp_path_factory):
    """Three tasks of the reference dataset (real records), as a Parquet file."""
    keep = {C3, C6, MM}
    path = tmp_path_factory.mktemp("world") / "small.parquet"
    Dataset([r for r in reference.records if r.workload_key in keep]).export(path)
    return path


@needs_reference
def test_task_samples_hold_the_records_targets(reference):
    tasks = task_samples(reference, test_keys=[MM])
    assert len(tasks) == 13 and [s.split for s in tasks].count("test") == 1
    s = next(s for s in tasks if s.task.workload == C6)
    recs = reference.task_records(s.task)
    space = space_for(get_workload(C6), "cpu")
    for i, index in enumerate(s.indices):
        rs = [r for r in recs if space.from_json(r.config_json).index == index]
        ok = [r for r in rs if r.ok]
        assert s.fail[i] == 1 - len(ok) / len(rs)
        if ok:
            assert s.seconds[i] == statistics.median(r.median for r in ok)
            cvs = [spread(r.costs) for r in ok if len(r.costs) >= 3]
            assert s.noise[i] == statistics.median(cvs) if cvs else np.isnan(s.noise[i])
        else:
            assert np.isnan(s.seconds[i])
    assert np.isnan(s.seconds).sum() == 1  # C6 has one failed record


@needs_reference
def test_holdout_is_seeded_and_per_task(reference):
    tasks = task_samples(reference, test_keys=[MM])
    s = next(s for s in tasks if s.task.workload == C6)
    m = holdout_mask(s, 0)
    assert m.sum() == round(0.2 * len(s)) and (m == holdout_mask(s, 0)).all()
    assert not (m == holdout_mask(s, 1)).all()
    fit, held, test = split_samples(tasks, 0)
    assert [t.task.workload for t in test] == [MM] and len(fit) == len(held) == 12
    alone = split_samples([s], 0)[1][0]  # the same configs whatever other tasks there are
    assert set(alone.indices) == set(next(h for h in held if h.task == s.task).indices)
    assert sum(len(f) + len(h) for f, h in zip(fit, held)) == \
        sum(len(t) for t in tasks if t.split == "train")


# ---------------------------------------------------------------- fit, predict, save, load

@needs_reference
@pytest.mark.parametrize("family,features", [("xgb", "knobs"), ("lgbm", "knobs"),
                                             ("mlp", "knobs"), ("xgb", "config")])
def test_fit_predict_save_load(family, features, small, tmp_path):
    data = Dataset.load(small)
    tasks = task_samples(data, test_keys=[MM])
    fit, _, _ = split_samples(tasks, 0)
    wm = WorldModel.fit(fit, family, features, seed=0)
    w = get_workload(C6)
    space = space_for(w, "cpu")
    idx = np.random.default_rng(3).integers(0, space.size, 257)
    p = wm.predict_indices(w, "cpu", idx)
    assert len(p) == 257 and (p.seconds > 0).all() and np.isfinite(p.seconds).all()
    assert ((p.p_fail >= 0) & (p.p_fail <= 1)).all() and (p.spread > 0).all()
    by_config = wm.predict_configs(C6, "cpu", [space.get(int(i)) for i in idx])
    np.testing.assert_array_equal(by_config.seconds, p.seconds)
    wm.save(tmp_path / "m", seed=0)
    back = WorldModel.load(tmp_path / "m")
    q = back.predict_indices(w, "cpu", idx)
    for a, b in ((p.seconds, q.seconds), (p.p_fail, q.p_fail), (p.spread, q.spread)):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    manifest = json.loads((tmp_path / "m" / "manifest.json").read_text())
    assert manifest["family"] == family and manifest["features"] == features
    again = WorldModel.fit(fit, family, features, seed=0).predict_indices(w, "cpu", idx)
    np.testing.assert_array_equal(again.seconds, p.seconds)  # deterministic given the seed
    # it learns: held-out configs of a train task rank better than chance
    held = split_samples(tasks, 0)[1][0]
    ok = np.isfinite(held.seconds)
    pred = wm.predict_indices(held.workload, "cpu", held.indices[ok]).seconds
    assert metrics.spearman(pred, held.seconds[ok]) > 0.2  # of ~20 configs: well above chance


def test_bad_family_and_model_dir(tmp_path):
    with pytest.raises(TensorGymError, match="regression"):
        WorldModel.fit([], "xgb-rank")
    with pytest.raises(TensorGymError, match="no world model"):
        WorldModel.load(tmp_path)


# ---------------------------------------------------------------- the commands

@needs_reference
def test_evaluate_and_fit_world_commands(small, tmp_path):
    rc, out, err = cli(["dataset", "evaluate", str(small), "--models", "xgb,lgbm,xgb-rank",
                        "--test-task", MM])
    assert rc == 0, err
    lines = out.splitlines()
    assert "2 train tasks" in lines[0] and "1 test tasks" in lines[0]
    assert lines[1].split()[:4] == ["model", "features", "side", "tasks"]
    rows = [ln.split() for ln in lines[2:8]]
    assert [(r[0], r[2]) for r in rows] == [(m, s) for m in ("xgb", "lgbm", "xgb-rank")
                                            for s in ("held-out", "test")]
    rc, out, err = cli(["dataset", "evaluate", str(small), "--models", "lgbm", "--json",
                        "--test-task", MM])
    doc = json.loads(out)
    (ev,) = doc["evaluations"]
    assert ev["model"] == "lgbm" and ev["test"]["tasks"] == 1 and ev["heldout"]["tasks"] == 2
    assert set(metrics.NAMES) <= set(ev["test"]) and doc["test_tasks"] == 1
    assert -1 <= ev["test"]["spearman"] <= 1 and 0 <= ev["heldout"]["pairwise"] <= 1

    model = tmp_path / "wm"
    rc, out, err = cli(["dataset", "fit-world", str(small), "--out", str(model), "--model",
                        "lgbm", "--test-task", MM, "--seed", "3"])
    assert rc == 0, err
    manifest = json.loads((model / "manifest.json").read_text())
    assert manifest["dataset"]["digest"] == Dataset.load(small).digest
    assert manifest["seed"] == 3 and manifest["trained_on"] == "train"
    assert manifest["metrics"]["test"]["tasks"] == 1
    rc, out2, err = cli(["dataset", "evaluate", str(small), "--model", str(model), "--json",
                         "--test-task", MM, "--seed", "3"])
    assert rc == 0, err
    (ev,) = json.loads(out2)["evaluations"]
    assert ev["test"] == pytest.approx(manifest["metrics"]["test"])
    assert ev["heldout"] == pytest.approx(manifest["metrics"]["heldout"])


@needs_reference
def test_command_errors(small, tmp_path):
    rc, out, err = cli(["dataset", "evaluate", str(tmp_path / "none.db")])
    assert rc == 1 and "no dataset at" in err
    rc, out, err = cli(["dataset", "evaluate", str(small), "--model", str(tmp_path)])
    assert rc == 1 and "no world model" in err
    rc, out, err = cli(["dataset", "evaluate", str(small), "--models", "xgb,forest"])
    assert rc == 1 and "forest" in err
    # the bundled tasks are no corpus test task: said, and only held-out configs are scored
    rc, out, err = cli(["dataset", "evaluate", str(small), "--models", "lgbm"])
    assert rc == 0 and "no test task" in err
    sides = [ln.split()[2] for ln in out.splitlines()[2:] if ln.startswith("lgbm")]
    assert sides == ["held-out"]
    empty = tmp_path / "empty.db"
    Dataset([]).to_records(empty)
    rc, out, err = cli(["dataset", "fit-world", str(empty), "--out", str(tmp_path / "m")])
    assert rc == 1 and "no records" in err


@needs_reference
def test_relation_features_option(reference):
    from tensorgym.features import featurize

    keep = {C3, MM}
    data = Dataset([r for r in reference.records if r.workload_key in keep][::4])
    tasks = task_samples(data, test_keys=[MM])
    wm = WorldModel.fit(tasks, "lgbm", features="relation", seed=0)
    try:
        w = get_workload(C3)
        space = space_for(w, "cpu")
        idx = np.arange(5) * 1000
        X = wm.inputs(w, "cpu", idx)
        want = featurize(w, [space.get(int(i)) for i in idx], "relation")
        assert X.shape == (5, N_DESCRIPTOR + want.shape[1])
        np.testing.assert_array_equal(X[:, N_DESCRIPTOR:], want)
        np.testing.assert_array_equal(X[:, :N_DESCRIPTOR], np.tile(describe(w, "cpu"), (5, 1)))
        assert (wm.predict_indices(w, "cpu", idx).seconds > 0).all()
    finally:
        wm.close()


@pytest.mark.parametrize("workload,target", SPACES[:6], ids=lambda x: getattr(x, "key", x))
def test_knob_features_are_the_knobs_by_name_and_their_level_sums(workload, target):
    from tensorgym.dataset.world.encode import (ALIASES, KNOB_NAMES, KNOB_WIDTH, N_KNOB_FEATURES,
                                                KnobEncoder)

    space = space_for(workload, target)
    reduce_axes = tuple(ax.name for ax in workload.output.op.reduce_axes)
    enc = KnobEncoder(space, reduce_axes)
    idx = np.random.default_rng(5).integers(0, space.size, 50)
    got = enc(idx)
    base = len(KNOB_NAMES) * KNOB_WIDTH
    for row, i in zip(got, idx):
        config = space.get(int(i))
        flat = encode_config(space, config)
        want = np.zeros(N_KNOB_FEATURES, np.float64)
        for k, knob in enumerate(space.knobs):
            at = KNOB_NAMES.index(ALIASES.get(knob.name, knob.name)) * KNOB_WIDTH
            want[at:at + KNOB_WIDTH] = flat[k * KNOB_WIDTH:(k + 1) * KNOB_WIDTH]
            if knob.kind == "split":
                factors = config.values[knob.name]
                reduce = knob.name[5:] in reduce_axes
                at, levels = (base + 4, 3) if reduce else (base, 4)
                for j, f in enumerate(reversed(factors[-levels:])):
                    want[at + j] += np.log2(f)
        np.testing.assert_allclose(row, want, rtol=1e-6, atol=1e-6)


def test_two_knobs_at_one_place_of_the_knob_features_are_refused():
    """The GPU template's shared-memory knobs share places with CPU-only knobs (``ALIASES``);
    a space holding both of a pair would encode two knobs as one."""
    from tensorgym.dataset.world.encode import KnobEncoder
    from tensorgym.space import ConfigSpace, other_knob

    space = ConfigSpace("both", (other_knob("cache_write", (0, 1)),
                                 other_knob("double_buffer", (0, 1))))
    with pytest.raises(ValueError, match="share the knob features' place 'cache_write'"):
        KnobEncoder(space)


@needs_reference
def test_fit_world_auto_keeps_the_family_that_ranks_held_out_configs_best(reference, tmp_path):
    tiny = tmp_path / "tiny.jsonl"
    Dataset([r for r in reference.records if r.workload_key in (C3, MM)][::3]).export(tiny)
    rc, out, err = cli(["dataset", "fit-world", str(tiny), "--out", str(tmp_path / "m"),
                        "--model", "auto", "--features", "knobs", "--json"])
    assert rc == 0, err
    manifest = json.loads((tmp_path / "m" / "manifest.json").read_text())
    compared = manifest["compared"]
    assert [e["model"] for e in compared] == ["xgb", "lgbm", "mlp"]
    best = max(compared, key=lambda e: (e["heldout"]["pairwise"], e["heldout"]["spearman"]))
    assert manifest["family"] == best["model"] == json.loads(out)["family"]
    assert manifest["features"] == "knobs"


@needs_reference
def test_a_dataset_of_test_tasks_only_has_nothing_to_fit_on(small, tmp_path):
    every = ["--test-task", C3, "--test-task", C6, "--test-task", MM]
    rc, out, err = cli(["dataset", "evaluate", str(small), "--models", "lgbm", *every])
    assert rc == 1 and "no train task" in err
    rc, out, err = cli(["dataset", "fit-world", str(small), "--out", str(tmp_path / "m"), *every])
    assert rc == 1 and "no train task" in err and not (tmp_path / "m").exists()
