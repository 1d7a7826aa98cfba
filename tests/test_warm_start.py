"""Warm start: the seed schedules (valid, distinct, correct against NumPy on real kernels), the
tuner's first batch, pretraining on other workloads' records, and what `tensorgym tune` says."""
import json

import pytest

import tensorgym.envs  # noqa: F401  (registers the envs)
from tensorgym import registry
from tensorgym.agents import TransferModel
from tensorgym.cli import main
from tensorgym.records import Records
from tensorgym.registry import AgentOptionError
from tensorgym.search import tune
from tensorgym.templates import default_config, space_for
from tensorgym.templates.seeds import (CPU_RECIPES, SPARE_REGISTERS, cpu_seed, register_file,
                                       seed_configs)
from tensorgym.workloads import WORKLOADS, get_workload, matmul

from .conftest import SMALL_WORKLOADS
from .test_agent_env import FAST, make_env, measurer  # noqa: F401  (a fixture)



def _tile(config, axis):
    return config.values[f"tile_{axis}"]


@pytest.mark.parametrize("name", sorted(WORKLOADS))
@pytest.mark.parametrize("lanes", [16, 8])
def test_seeds_are_distinct_valid_configs(name, lanes):
    w = get_workload(name)
    space = space_for(w, "cpu")
    seeds = seed_configs(w, "cpu", lanes=lanes)
    assert seeds[0] == default_config(w, "cpu")  # the reference schedule first
    assert 2 <= len(seeds) <= 8 and len({c.index for c in seeds}) == len(seeds)
    assert seeds == seed_configs(w, "cpu", lanes=lanes)  # deterministic
    for c in seeds:
        space.validate(c)


@pytest.mark.parametrize("name", sorted(WORKLOADS))
@pytest.mark.parametrize("lanes", [16, 8])
def test_recipes_vectorize_and_fit_the_registers(name, lanes):
    w = get_workload(name)
    space = space_for(w, "cpu")
    vec_axis = "ow" if w.op == "conv2d" else "j"
    for recipe in CPU_RECIPES:
        c = cpu_seed(w, space, recipe, lanes)
        space.validate(c)
        assert c.values["reorder"] == ("S1", "R0", "R1", "S2") and c.values["cache_write"] == 1
        assert c.values["unroll_max_step"] == recipe.unroll
        vec = _tile(c, vec_axis)[2]
        assert 1 < vec <= 2 * lanes
        block = [_tile(c, a)[2] for a in (("oc", "oh") if w.op == "conv2d" else ("i",))]
        accumulators = -(-vec // lanes) * block[0] * (block[1] if len(block) > 1 else 1)
        assert accumulators <= register_file(lanes) - SPARE_REGISTERS


def test_seeds_cap_and_other_templates():
    w = get_workload("conv2d-C6")
    assert len(seed_configs(w, "cpu", max_seeds=3)) == 3
    assert seed_configs(w, "cpu", max_seeds=1) == [default_config(w, "cpu")]
    assert seed_configs(w, "cuda") == [default_config(w, "cuda")]  # no GPU recipes yet
    with pytest.raises(ValueError, match="max_seeds"):
        seed_configs(w, "cpu", max_seeds=0)
    assert len(CPU_RECIPES) >= 7


@pytest.mark.parametrize("workload", SMALL_WORKLOADS, ids=lambda w: w.key)
def test_seed_kernels_are_correct_against_numpy(workload, measurer):
    """Every seed builds, runs and matches NumPy (a wrong answer is an error record)."""
    env = make_env(workload, measurer, records=False)
    try:
        seeds = seed_configs(workload, "cpu")
        results = env.unwrapped.session.measure(seeds)
    finally:
        env.close()
    assert [r.error_msg for r in results if not r.ok] == []
    assert all(r.gflops > 0 for r in results)


def test_first_batch_holds_the_seeds_then_the_model_takes_over(measurer, tmp_path):
    w = matmul(32, 48, 16)
    env = make_env(w, measurer, tmp_path / "records.db", budget=16)
    batches = []
    agent = registry.make("xgb", **FAST)
    try:
        tune(env, agent, 16, seed=0, callbacks=[lambda a, res: batches.append(res)])
    finally:
        env.close()
    seeds = seed_configs(w, "cpu")
    assert [r.config.index for r in batches[0]][:len(seeds)] == [c.index for c in seeds]
    assert len(batches[0]) == 8 and not set(c.index for c in seeds) & {
        r.config.index for r in batches[1]}
    summary = agent.warm_start_summary
    assert summary.seeds == len(seeds) and summary.records == 0
    assert str(summary) == (f"warm start: {len(seeds)} seed schedules, no records of other "
                            "workloads on this target and device to pretrain on")
    assert not isinstance(agent.model, TransferModel)


def test_warm_start_off_starts_at_random(measurer, tmp_path):
    w = matmul(32, 48, 16)
    env = make_env(w, measurer, tmp_path / "records.db", budget=8)
    agent = registry.make("xgb", warm_start=False, **FAST)
    try:
        history = tune(env, agent, 8, seed=0)
    finally:
        env.close()
    seeds = {c.index for c in seed_configs(w, "cpu")}
    assert len(history) == 8 and len(seeds & {r.config.index for r in history}) <= 1
    assert str(agent.warm_start_summary) == "warm start: off (the first batch is random)"


@pytest.mark.slow
def test_pretrains_on_other_workloads_records_and_says_so(measurer, tmp_path, capsys):
    db = tmp_path / "records.db"
    source = matmul(16, 16, 16)
    env = make_env(source, measurer, db, budget=8)
    try:
        tune(env, registry.make("xgb", **FAST), 8, seed=0)
    finally:
        env.close()
    n_source = len({r.config_json for r in Records(db).query(source.key)})

    target = matmul(32, 48, 16)
    firsts = []
    for _ in range(2):  # deterministic given the seed and the records of other workloads
        env = make_env(target, measurer, db, budget=8)
        agent = registry.make("xgb", **FAST)
        try:
            firsts.append([r.config.index for r in tune(env, agent, 8, seed=3)])
        finally:
            env.close()
        assert isinstance(agent.model, TransferModel)
        assert agent.source_data.counts == {source.key: n_source}
        summary = agent.warm_start_summary
        assert (summary.records, summary.workloads) == (n_source, 1)
        assert str(summary).endswith(f"cost model pretrained on {n_source} records of 1 other "
                                     "workload")
    assert firsts[0] == firsts[1]

    code = main(["tune", target.key, "--agent", "xgb", "--trials", "8", "--db", str(db),
                 "--fresh", "--no-progress", "--opt", "n_chains=16",
                 "--opt", "sa_steps=20", "--opt", "batch_size=8"])
    out = capsys.readouterr().out
    # the CLI times on every core, as the measurer that wrote the source records did
    assert code == 0 and "cost model pretrained on" in out, out
    code = main(["tune", target.key, "--agent", "xgb", "--trials", "8", "--db", str(db),
                 "--fresh", "--json", "--opt", "warm_start=false",
                 "--opt", "n_chains=16", "--opt", "sa_steps=20"])
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert code == 0 and summary["warm_start"]["enabled"] is False
    assert summary["warm_start"]["text"].startswith("warm start: off")


def test_a_shared_pretrain_cache_reuses_the_model_until_the_records_grow(measurer, tmp_path):
    from tensorgym.agents.tuner import PRETRAIN_REGROWTH

    db = tmp_path / "records.db"
    cache: dict = {}

    def run(workload, trials):
        env = make_env(workload, measurer, db, budget=trials)
        agent = registry.make("xgb", pretrain_cache=cache, **FAST)
        try:
            tune(env, agent, trials, seed=0)
        finally:
            env.close()
        return agent

    def pool():
        return len(Records(db).query())

    run(matmul(16, 16, 16), 12)
    first = run(matmul(32, 48, 16), 2)  # pretrains on the first workload's records: kept
    assert isinstance(first.model, TransferModel) and len(cache) == 1
    (fitted_on, kept, _), = cache.values()
    assert pool() < fitted_on * (1 + PRETRAIN_REGROWTH)
    second = run(matmul(16, 32, 16), 2)  # the pool grew less than half: reused as it is
    assert second.model.global_model is kept
    assert second.warm_start_summary.note == "pretrained model reused (pretrain_cache)"
    run(matmul(24, 16, 32), 8)
    assert pool() >= fitted_on * (1 + PRETRAIN_REGROWTH)
    fourth = run(matmul(8, 16, 32), 2)  # grown by half: fitted again, and kept instead
    assert fourth.model.global_model is not kept
    assert next(iter(cache.values()))[1] is fourth.model.global_model


def test_warm_start_options_are_declared():
    names = {o.name: o for o in registry.spec("xgb").options}
    assert names["warm_start"].default is True and names["n_seeds"].default == 8
    with pytest.raises(AgentOptionError, match="warm_start"):
        registry.make("xgb", warm_start="yes")
    with pytest.raises(AgentOptionError, match="n_seeds"):
        registry.make("xgb", n_seeds=0)


def test_leaderboard_runs_do_not_pretrain_unless_asked():
    from tensorgym.leaderboard.run import agent_options

    assert agent_options("xgb", {}) == {"pretrain": False}
    assert agent_options("xgb", {"pretrain": True}) == {"pretrain": True}
    assert agent_options("random", {}) == {}
