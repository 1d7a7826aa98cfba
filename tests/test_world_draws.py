"""Drawn world-model answers (tensorgym.dataset.world.draws, replay's on_miss="draw"): each
config's draw is fixed and uniform over configs, the factors follow the held-out residuals'
quantiles, and replay answers misses with them (marked as the world model's).

Data: the bundled reference dataset (real measurements of ResNet-18's C1-C12 and matmul-1024)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from tensorgym.dataset import Dataset, ReplayMeasurer
from tensorgym.dataset.world import draws
from tensorgym.dataset.world.model import WorldModel
from tensorgym.dataset.world.samples import task_samples
from tensorgym.envs.replay_vector import ReplayVectorEnv
from tensorgym.errors import TensorGymError
from tensorgym.templates import space_for
from tensorgym.workloads import get_workload

from .test_world_model import C6, REFERENCE, needs_reference


C6_SPACE = space_for(get_workload(C6), "cpu")
NAMES = [k.name for k in C6_SPACE.knobs]


def _neighbours(choices: np.ndarray, d: int, rng: np.random.Generator) -> np.ndarray:
    """Each config with d knobs (of more than one option) moved to another option."""
    sizes = np.array([k.size for k in C6_SPACE.knobs])
    out = choices.copy()
    for row in out:
        for k in rng.choice(np.flatnonzero(sizes > 1), d, replace=False):
            row[k] = (row[k] + rng.integers(1, sizes[k])) % sizes[k]
    return out


def test_knob_choices_decode_indices_as_the_space_does():
    idx = np.random.default_rng(0).integers(0, C6_SPACE.size, 50)
    np.testing.assert_array_equal(draws.knob_choices(C6_SPACE, idx),
                                  [C6_SPACE.get(int(i)).choices for i in idx])


@pytest.mark.parametrize("rho", [0.0, 0.4])
def test_draws_are_fixed_per_config_uniform_and_correlated_as_rho_says(rho):
    rng = np.random.default_rng(1)
    ch = draws.knob_choices(C6_SPACE, rng.integers(0, C6_SPACE.size, 20_000))
    u = draws.config_uniforms(C6, NAMES, ch, rho)
    assert ((u > 0) & (u < 1)).all()
    np.testing.assert_array_equal(u[[5, 3]], draws.config_uniforms(C6, NAMES, ch[[5, 3]], rho))
    for q in (0.1, 0.25, 0.5, 0.75, 0.9):
        assert abs(np.quantile(u, q) - q) < 0.02
    z = draws.field_normals(C6, NAMES, ch, rho)
    for d in (1, 2, 3):
        near = draws.field_normals(C6, NAMES, _neighbours(ch, d, rng), rho)
        assert np.corrcoef(z, near)[0, 1] == pytest.approx(rho ** d, abs=0.05)
    for other in (draws.field_normals("matmul:1024,1024,1024", NAMES, ch, rho),
                  draws.field_normals(C6, NAMES, ch, rho, seed=1)):
        assert abs(np.corrcoef(z, other)[0, 1]) < 0.05


def test_fit_rho_recovers_the_correlation_of_pairs():
    rng = np.random.default_rng(2)
    ch = draws.knob_choices(C6_SPACE, rng.integers(0, C6_SPACE.size, 4000))
    z = draws.field_normals(C6, NAMES, ch, 0.5)
    pairs = [{d: np.stack([z, draws.field_normals(C6, NAMES, _neighbours(ch, d, rng), 0.5)], 1)
              for d in range(1, draws.MAX_DISTANCE + 1)}]
    rho, by_distance = draws.fit_rho(pairs)
    assert rho == pytest.approx(0.5, abs=0.05) and by_distance["1"][1] == 4000
    assert draws.fit_rho([{d: np.zeros((0, 2)) for d in (1, 2)}]) == (0.0, {})


def test_draw_factors_follow_the_quantiles():
    residuals = np.random.default_rng(0).normal(0.1, 0.4, 5000)
    q = draws.residual_quantiles(residuals)
    assert len(q) == draws.QUANTILES and q == sorted(q)
    t = draws.TAIL
    f = draws.draw_factors(q, np.array([0.0, t, 0.5, 1 - t, 1.0]))
    lo, mid, hi = np.quantile(residuals, [t, 0.5, 1 - t])
    np.testing.assert_allclose(np.log(f), [lo, lo, mid, hi, hi])  # no draw past the tails
    with pytest.raises(TensorGymError, match="needs 50"):
        draws.residual_quantiles(residuals[:49])


def test_band_factors_read_each_configs_band():
    flat = list(np.linspace(-1.0, 1.0, draws.QUANTILES))
    u = np.array([0.5, 0.5, 0.5])
    np.testing.assert_allclose(draws.band_factors({draws.MANIFEST_KEY: flat}, u,
                                                  np.array([0.0, 0.5, 1.0])), 1.0, atol=1e-12)
    bands = [list(np.full(draws.QUANTILES, float(b))) for b in range(4)]
    m = {draws.MANIFEST_KEY: bands, draws.BANDS_KEY: [0.0, 0.01, 0.05, 0.25, 1.0]}
    got = draws.band_factors(m, np.full(5, 0.3), np.array([0.0, 0.02, 0.1, 0.5, 1.0]))
    np.testing.assert_allclose(np.log(got), [0, 1, 2, 3, 3])


@pytest.fixture(scope="module")
def calibrated():
    tasks = task_samples(Dataset.load(REFERENCE))
    return WorldModel.fit(tasks, seed=0).calibrate(tasks, seed=0)


@needs_reference
def test_a_calibrated_model_draws_each_configs_fixed_share_of_its_error(calibrated, tmp_path):
    w = get_workload(C6)
    idx = np.random.default_rng(1).integers(0, space_for(w, "cpu").size, 4000)
    m = calibrated.manifest
    assert len(m[draws.MANIFEST_KEY]) == len(draws.RANK_EDGES) - 1 == len(m[draws.BANDS_KEY]) - 1
    assert all(len(q) == draws.QUANTILES for q in m[draws.MANIFEST_KEY])
    assert sum(m["residual_band_configs"]) == m["residual_configs"]
    assert m["residual_configs"] >= draws.MIN_RESIDUALS and m["residual_holdout"] == 0.2
    point = calibrated.predict_indices(w, "cpu", idx)
    drawn = calibrated.draw_indices(w, "cpu", idx)
    factor = drawn.seconds / point.seconds
    assert 0 <= m[draws.RHO_KEY] < 0.95 and "residual_correlation" in m
    u = draws.config_uniforms(w.key, NAMES, draws.knob_choices(C6_SPACE, idx), m[draws.RHO_KEY])
    rank = draws.predicted_ranks(calibrated, w, "cpu", point.seconds)
    assert ((rank >= 0) & (rank <= 1)).all() and rank.min() < 0.25 < rank.max()
    np.testing.assert_allclose(factor, draws.band_factors(m, u, rank), rtol=1e-12)
    np.testing.assert_array_equal(drawn.p_fail, point.p_fail)
    # over many configs the factors spread as the held-out residuals did
    medians = [q[draws.QUANTILES // 2] for q in m[draws.MANIFEST_KEY]]
    assert min(medians) - 0.1 <= np.median(np.log(factor)) <= max(medians) + 0.1
    calibrated.save(tmp_path / "m")
    back = WorldModel.load(tmp_path / "m")
    np.testing.assert_allclose(back.draw_indices(w, "cpu", idx).seconds, drawn.seconds,
                               rtol=1e-6)
    assert json.loads((tmp_path / "m" / "manifest.json").read_text())[draws.MANIFEST_KEY] == \
        m[draws.MANIFEST_KEY]


@needs_reference
def test_an_uncalibrated_model_refuses_to_draw():
    tasks = task_samples(Dataset.load(REFERENCE))[:2]
    wm = WorldModel.fit(tasks, seed=0)
    with pytest.raises(TensorGymError, match="calibrate"):
        wm.draw_indices(tasks[0].workload, "cpu", np.array([0, 1]))
    with pytest.raises(TensorGymError, match="needs 50"):  # 2 tasks: too few held out
        WorldModel.fit(tasks[:1], seed=0).calibrate(tasks[:1])


@needs_reference
def test_replay_answers_misses_with_the_draws(calibrated):
    w = get_workload(C6)
    space = space_for(w, "cpu")
    data = Dataset.load(REFERENCE)
    recorded = {space.from_json(r.config_json).index for r in data.records
                if r.workload_key == w.key}
    idx = [i for i in np.random.default_rng(2).integers(0, space.size, 64).tolist()
           if i not in recorded][:32]
    configs = [space.get(i) for i in idx]
    replay = ReplayMeasurer(data, "cpu", on_miss="draw", world=calibrated)
    point = ReplayMeasurer(data, "cpu", on_miss="surrogate", world=calibrated)
    try:
        a = replay.measure(w, configs)
        b = replay.measure(w, configs[::-1])[::-1]  # asked again, in another order: the same
        p = point.measure(w, configs)
        expect = calibrated.draw_indices(w, "cpu", np.array(idx))
        for ra, rb, rp, s, f in zip(a, b, p, expect.seconds, expect.p_fail):
            assert ra.source == "surrogate"
            assert ra.extra["surrogate"] == "world-draw" and rp.extra["surrogate"] == "world"
            assert ra.costs == rb.costs
            if f <= 0.5:
                assert ra.costs == (pytest.approx(s),)
        vec = ReplayVectorEnv(w, data, num_envs=4, on_miss="draw", world=calibrated)
        try:
            seconds, failed = vec.replay.predict_miss_indices(vec.task, np.array(idx))
            np.testing.assert_allclose(seconds, expect.seconds)
        finally:
            vec.close()
    finally:
        replay.close()
        point.close()


@needs_reference
def test_fit_world_calibrate_writes_what_replay_draws_with(tmp_path):
    from .cli_run import cli

    rc, out, err = cli(["dataset", "fit-world", str(REFERENCE), "--out", str(tmp_path / "m"),
                        "--all", "--calibrate"])
    assert rc == 0, err
    manifest = json.loads((tmp_path / "m" / "manifest.json").read_text())
    assert len(manifest[draws.MANIFEST_KEY]) == len(draws.RANK_EDGES) - 1
    assert draws.RHO_KEY in manifest and manifest[draws.BANDS_KEY] == list(draws.RANK_EDGES)
    w = get_workload(C6)
    replay = ReplayMeasurer(Dataset.load(REFERENCE), "cpu", on_miss="draw", world=tmp_path / "m")
    try:
        (r,) = replay.measure(w, [C6_SPACE.get(12345)])
        assert r.extra["surrogate"] in ("world-draw", "check")
    finally:
        replay.close()
    rc, out, err = cli(["dataset", "fit-world", str(REFERENCE), "--out", str(tmp_path / "u"),
                        "--all"])
    assert rc == 0, err
    plain = ReplayMeasurer(Dataset.load(REFERENCE), "cpu", on_miss="draw", world=tmp_path / "u")
    try:
        with pytest.raises(TensorGymError, match="calibrate"):
            plain.measure(w, [C6_SPACE.get(12345)])
    finally:
        plain.close()


@needs_reference
def test_a_world_seed_is_a_fixed_world_of_its_own(calibrated):
    """``world_seed`` picks the field: the same seed answers alike (in the replay, the vector
    env and a pickled copy), another seed draws other answers from the same quantiles."""
    import pickle

    w = get_workload(C6)
    data = Dataset.load(REFERENCE)
    recorded = {C6_SPACE.from_json(r.config_json).index for r in data.records
                if r.workload_key == w.key}
    idx = np.array([i for i in np.random.default_rng(3).integers(0, C6_SPACE.size, 400).tolist()
                    if i not in recorded][:256])
    seeded = {s: ReplayMeasurer(data, "cpu", on_miss="draw", world=calibrated, world_seed=s)
              for s in (0, 1)}
    try:
        task = seeded[0].task(w)
        (s0, _), (s1, _) = (seeded[s].predict_miss_indices(task, idx) for s in (0, 1))
        np.testing.assert_allclose(s0, calibrated.draw_indices(w, "cpu", idx, 0).seconds)
        np.testing.assert_allclose(s1, calibrated.draw_indices(w, "cpu", idx, 1).seconds)
        assert np.mean(np.isclose(s0, s1)) < 0.1  # another world
        point = calibrated.predict_indices(w, "cpu", idx, spread=False).seconds
        assert np.corrcoef(np.log(s0 / point), np.log(s1 / point))[0, 1] < 0.3
        copy = pickle.loads(pickle.dumps(seeded[1]))
        try:
            np.testing.assert_allclose(copy.predict_miss_indices(copy.task(w), idx)[0], s1)
        finally:
            copy.close()
        assert seeded[1].describe()["world_seed"] == 1
        vec = ReplayVectorEnv(w, data, num_envs=2, on_miss="draw", world=calibrated,
                              world_seed=1)
        try:
            np.testing.assert_allclose(vec.replay.predict_miss_indices(vec.task, idx)[0], s1)
        finally:
            vec.close()
    finally:
        for r in seeded.values():
            r.close()
    with pytest.raises(TensorGymError, match="world_seed"):
        ReplayMeasurer(data, "cpu", on_miss="draw", world=calibrated, world_seed=-1)
    with pytest.raises(TensorGymError, match="world_seed"):
        ReplayVectorEnv(w, data, num_envs=2, on_miss="surrogate", world=calibrated, world_seed=1)


def test_world_seed_needs_drawn_answers():
    from tensorgym.leaderboard.replay_track import check_world_seed, world_seed_option
    from tensorgym.session import check_measure

    with pytest.raises(TensorGymError, match="world_seed"):
        check_measure("replay", dataset="x", on_miss="surrogate", world_seed=2)
    with pytest.raises(TensorGymError, match="world_seed"):
        check_world_seed(3, "surrogate")
    with pytest.raises(TensorGymError, match="world_seed"):
        check_world_seed("agent", "draw")
    check_world_seed("seed", "draw")
    assert [world_seed_option("seed", "draw", s) for s in (0, 1, 2)] == \
        [{"world_seed": 0}, {"world_seed": 1}, {"world_seed": 2}]
    assert world_seed_option(5, "draw", 1) == {"world_seed": 5}
    assert world_seed_option("seed", "surrogate", 1) == {}


def test_the_cli_refuses_a_world_seed_without_drawn_answers():
    from .cli_run import cli

    rc, out, err = cli(["leaderboard", "run", "tiny-cpu", "--agents", "random", "--out", "x.json",
                        "--world-seed", "seed"])
    assert rc != 0 and "--world-seed" in err
