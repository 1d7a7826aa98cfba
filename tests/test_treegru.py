"""The TreeGRU cost model (paper Figure 3c/3d): level-by-level batching, batched = one-by-one
prediction, renaming invariance, learning a known ranking, persistence, the tuner plumbing."""

import inspect

import numpy as np
import pytest
import torch

from tensorgym import loopast as A
from tensorgym import registry
from tensorgym.agents import TREEGRU_OPTIONS, ModelTuner, TransferModel
from tensorgym.agents.ast_batch import collate, node_heights
from tensorgym.agents.transfer import load_source_data
from tensorgym.agents.treegru import TreeGRUCostModel, pairwise_rank_loss
from tensorgym.errors import ErrorCode
from tensorgym.features import featurize
from tensorgym.features.ast import NODE_TYPES, ast_arrays
from tensorgym.measure.result import MeasureResult
from tensorgym.lower import lower
from tensorgym.records import Records
from tensorgym.registry import make_model
from tensorgym.search import tune
from tensorgym.task import Task
from tensorgym.templates import space_for
from tensorgym.workloads import conv2d, matmul
from .renaming import Renamer
from .synthetic import SyntheticEnv

MM = matmul(64, 64, 64)
CONV = conv2d(1, 8, 10, 10, 16, 3, 1, 1)
SMALL = dict(hidden=16, n_slots=4, n_epochs=2, min_steps=4, batch_size=32)


def _configs(workload, n, seed=0):
    return space_for(workload, "cpu").sample_unique(np.random.default_rng(seed), n)


def synthetic_gflops(config) -> float:
    """A known 'speed' the AST can express: long unit-stride inner j loops, vectorized, with a
    moderate inner i tile; 0 (failure) when nothing is parallel."""
    v = config.values
    if v["parallel"] == 0:
        return 0.0
    return (1.0 + np.log2(v["tile_j"][-1]) + 2.0 * (v["vectorize"] == "inner")
            - 0.5 * abs(np.log2(v["tile_i"][-1]) - 3.0))


def kendall_tau(a: np.ndarray, b: np.ndarray) -> float:
    da = np.sign(a[:, None] - a[None, :])
    db = np.sign(b[:, None] - b[None, :])
    mask = np.triu(np.ones_like(da, bool), 1) & (da != 0) & (db != 0)
    return float((da * db)[mask].mean())


# ---------------------------------------------------------------- batching


def test_collate_orders_nodes_bottom_up():
    trees = featurize(MM, _configs(MM, 3), "ast") + featurize(CONV, _configs(CONV, 2), "ast")
    b = collate(trees)
    assert b.n_trees == 5 and b.n_nodes == sum(len(t["node_type"]) for t in trees)
    assert len(b.edge_child) == b.n_nodes - b.n_trees  # every node but the roots has a parent
    assert b.level_ptr[0] == 0 and b.level_ptr[-1] == b.n_nodes
    for k in range(b.n_levels):
        lo, hi = b.level_ptr[k], b.level_ptr[k + 1]
        e0, e1 = b.edge_ptr[k], b.edge_ptr[k + 1]
        assert (b.edge_child[e0:e1] < lo).all()  # children are computed at lower levels
        parents = lo + b.edge_parent[e0:e1]
        assert ((parents >= lo) & (parents < hi)).all()
        if k > 0:  # every node above the leaves has a child
            assert set(parents.tolist()) == set(range(lo, hi))
    np.testing.assert_array_equal(b.tree[b.root], np.arange(5))
    for i, t in enumerate(trees):
        rows = np.flatnonzero(b.tree == i)
        assert sorted(b.node_type[rows]) == sorted(t["node_type"])
        assert (b.node_type[b.loop_rows] == NODE_TYPES.index("For")).all()
    assert len(b.loop_rows) == sum(t["context"].shape[0] for t in trees)


def test_node_heights_of_a_chain_and_a_fork():
    #   0 -> 1 -> 2 ; 0 -> 3     and a second tree 4 -> 5
    parent = np.array([-1, 0, 1, 0, -1, 4])
    np.testing.assert_array_equal(node_heights(parent), [2, 1, 0, 0, 1, 0])


@pytest.mark.parametrize("variant", ["context", "vanilla"])
def test_batched_prediction_equals_one_by_one(variant):
    trees = (featurize(MM, _configs(MM, 24, seed=1), "ast")
             + featurize(CONV, _configs(CONV, 8), "ast"))
    model = TreeGRUCostModel(variant=variant, **SMALL)
    model.fit(trees, np.linspace(0, 1, len(trees)))
    batched = model.predict(trees)
    assert batched.shape == (len(trees),) and batched.dtype == np.float64
    single = np.array([model.predict([t])[0] for t in trees])
    np.testing.assert_allclose(batched, single, rtol=1e-5, atol=1e-5)
    model.predict_batch = 5  # chunked prediction agrees too
    np.testing.assert_allclose(model.predict(trees), batched, rtol=1e-5, atol=1e-5)
    assert model.predict([]).shape == (0,)


def test_pairwise_rank_loss_matches_equation_2():
    s = torch.tensor([0.3, -1.0, 2.0, 0.5])
    y = torch.tensor([1.0, 0.0, 0.5, 0.5])
    g = torch.tensor([0, 0, 0, 1])
    pairs = [(0, 1), (0, 2), (2, 1)]  # y_i > y_j within group 0; index 3 is alone in group 1
    expected = np.mean([np.log1p(np.exp(-(s[i] - s[j]).item())) for i, j in pairs])
    assert pairwise_rank_loss(s, y, g).item() == pytest.approx(expected, rel=1e-6)
    assert pairwise_rank_loss(s, torch.ones(4)).item() == 0.0  # all ties: nothing to learn


# ---------------------------------------------------------------- invariance


def test_context_model_is_invariant_to_renaming_but_vanilla_uses_names():
    configs = _configs(MM, 12, seed=2)
    programs = [lower(MM, c) for c in configs]
    renamed = [Renamer().program(p) for p in programs]
    assert str(renamed[0]) != str(programs[0])
    y = np.arange(len(configs), dtype=float)
    context = TreeGRUCostModel(variant="context", **SMALL)
    context.fit([ast_arrays(p) for p in programs], y)
    np.testing.assert_array_equal(context.predict([ast_arrays(p) for p in programs]),
                                  context.predict([ast_arrays(p) for p in renamed]))

    named = featurize(MM, configs, "ast", loop_names=True)
    for t in named:  # a name for every loop, none for other statements
        is_loop = t["node_type"] == NODE_TYPES.index("For")
        assert all(t["loop_var"][is_loop]) and not any(t["loop_var"][~is_loop])
    vanilla = TreeGRUCostModel(variant="vanilla", **SMALL)
    vanilla.fit(named, y)
    assert vanilla.names  # learned one embedding per loop variable name
    renamed_named = [dict(ast_arrays(p), loop_var=np.array(
        ["" if n == "" else f"x{k}" for k, n in enumerate(t["loop_var"])]))
        for p, t in zip(renamed, named)]
    assert not np.allclose(vanilla.predict(named), vanilla.predict(renamed_named))


# ---------------------------------------------------------------- learning and persistence


@pytest.mark.parametrize("variant,loss", [("context", "rank"), ("context", "reg"),
                                          ("vanilla", "rank")])
def test_learns_to_rank_a_known_cost(variant, loss):
    configs = _configs(MM, 360, seed=3)
    trees = featurize(MM, configs, "ast", loop_names=variant == "vanilla")
    y = np.array([synthetic_gflops(c) for c in configs])
    y = y / y.max()
    model = TreeGRUCostModel(variant=variant, loss=loss, hidden=32, n_slots=4, n_epochs=25,
                             batch_size=64, seed=0)
    model.fit(trees[:240], y[:240])
    tau = kendall_tau(model.predict(trees[240:]), y[240:])
    assert tau > 0.5, f"held-out Kendall tau {tau:.2f}"


def test_seeded_training_is_deterministic_and_state_dict_round_trips(tmp_path):
    configs = _configs(CONV, 40, seed=4)
    trees = featurize(CONV, configs, "ast")
    y = np.random.default_rng(0).random(len(trees))
    a, b = TreeGRUCostModel(seed=7, **SMALL), TreeGRUCostModel(seed=7, **SMALL)
    threads = torch.get_num_threads()
    a.fit(trees, y)
    assert torch.get_num_threads() == threads  # the model's thread setting is scoped
    b.fit(trees, y)
    np.testing.assert_array_equal(a.predict(trees), b.predict(trees))
    torch.save(a.state_dict(), tmp_path / "treegru.pt")
    c = TreeGRUCostModel(variant="vanilla")  # load_state_dict restores the architecture
    c.load_state_dict(torch.load(tmp_path / "treegru.pt"))
    assert c.variant == "context"
    np.testing.assert_array_equal(c.predict(trees), a.predict(trees))
    other = TreeGRUCostModel(seed=8, **SMALL)
    other.fit(trees, y)
    assert not np.array_equal(other.predict(trees), a.predict(trees))


def test_bad_input_gets_clear_errors():
    model = TreeGRUCostModel(**SMALL)
    trees = featurize(MM, _configs(MM, 4), "ast")
    with pytest.raises(RuntimeError, match="before fit"):
        model.predict(trees)
    with pytest.raises(TypeError, match="feature_mode"):
        model.fit(np.zeros((4, 10), np.float32), np.zeros(4))
    with pytest.raises(ValueError, match="finite targets"):
        model.fit(trees, np.zeros(3))
    with pytest.raises(ValueError, match="zero trees"):
        model.fit([], np.zeros(0))
    with pytest.raises(ValueError, match="variant"):
        TreeGRUCostModel(variant="lstm")
    with pytest.raises(ValueError, match="loss"):
        make_model("treegru", loss="hinge")


def test_the_registry_declares_the_treegru_options_of_its_constructor():
    params = inspect.signature(TreeGRUCostModel).parameters
    assert {o.name: o.default for o in TREEGRU_OPTIONS} == {n: p.default
                                                             for n, p in params.items()}
    assert make_model("treegru-vanilla", **SMALL).variant == "vanilla"
    assert make_model("treegru-reg", num_threads=None, **SMALL).loss == "reg"


# ---------------------------------------------------------------- the tuner


class AstSyntheticEnv(SyntheticEnv):
    """The synthetic objective, but with the real featurizer, so the tuner feeds the TreeGRU
    real loop-AST trees (no compilation or measurement)."""

    def __init__(self, workload, objective, budget=None):
        super().__init__(space_for(workload, "cpu"), objective, budget)
        self.workload = workload
        self.target = "cpu"

    def featurize(self, configs, mode=None):
        return featurize(self.workload, configs, mode or "relation")


FAST_TUNER = dict(batch_size=16, n_chains=16, sa_steps=20, sa_early_stop=5,
                  model_options=dict(SMALL))


def test_tuner_runs_with_the_treegru_by_name():
    env = AstSyntheticEnv(MM, lambda c: 10.0 * synthetic_gflops(c), budget=48)
    agent = registry.make("treegru", **FAST_TUNER)
    history = tune(env, agent, 48, seed=0)
    assert len(history) == 48 == env.trials
    assert len({r.config.index for r in history}) == 48  # never re-measures
    assert isinstance(agent.model, TreeGRUCostModel) and agent.model.fitted
    same = ModelTuner(model="treegru-vanilla", **FAST_TUNER)
    assert same.new_model().variant == "vanilla"


def test_transfer_model_with_treegru_global_and_local(tmp_path):
    records = Records(tmp_path / "records.db")
    source = matmul(32, 64, 48)
    configs = _configs(source, 60, seed=5)
    results = []
    for c in configs:
        g = 10.0 * synthetic_gflops(c)
        results.append(MeasureResult(c, (1e6 / (g * 1e9),), flops=10**6) if g > 0 else
                       MeasureResult(c, (), ErrorCode.RUNTIME_DEVICE, "synthetic", flops=10**6))
    records.add_many(Task(source.key, "cpu", "test"), results)
    data = load_source_data(records, [source], "cpu", mode="ast", device="test", max_samples=50)
    assert isinstance(data.X, list) and len(data.X) == len(data.y) == 50

    env = AstSyntheticEnv(MM, lambda c: 10.0 * synthetic_gflops(c), budget=32)
    agent = registry.make("treegru", records=records, source_workloads=[source], device="test",
                       **FAST_TUNER)
    history = tune(env, agent, 32, seed=0)
    assert len(history) == 32
    assert isinstance(agent.model, TransferModel)
    assert agent.model.global_model.fitted and agent.model.local_fitted


def test_the_vanilla_tuner_receives_loop_names_through_the_env():
    import gymnasium as gym

    env = gym.make("TensorSched-v0", workload=matmul(16, 16, 16), target="cpu", records=False,
                   budget=32)
    agent = registry.make("treegru-vanilla", **FAST_TUNER)
    tune(env, agent, 32, seed=0)
    assert agent.model.variant == "vanilla" and agent.model.fitted
    assert agent.model.names  # an embedding per loop variable name the env's trees carried
    env.close()
