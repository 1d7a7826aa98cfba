"""The fast featurizing path (template loop structure evaluated with NumPy, no lowering) gives the
rows of the lowering path bit for bit, and ``featurize`` dispatches to it only where it applies."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import tensorgym.features as features
from tensorgym.features import MAX_LOOPS, Featurizer, _from_summary, featurize
from tensorgym.features.context import CTX, summarize
from tensorgym.features.fast import MIN_BATCH, fast_rows, supports, worthwhile
from tensorgym.features.nest import (KIND, Access, Buf, Div, Loop, Mod, Nest, Stmt, Unsupported,
                                     Var, _rows, analyze)
from tensorgym.features.nest_cpu import cpu_groups
from tensorgym.lower import lower
from tensorgym.templates import space_for
from tensorgym.workloads import conv2d, get_workload, matmul

from .conftest import SMALL_WORKLOADS

MODES = ("relation", "context")


def _assert_fast_equals_lowering(workload, configs) -> None:
    summaries = [summarize(lower(workload, c)) for c in configs]
    for mode in MODES:
        assert supports(workload, configs[0].template, mode)
        expected = np.stack([_from_summary(s, mode) for s in summaries])
        got = fast_rows(workload, configs, mode, MAX_LOOPS)
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got, expected, err_msg=f"{workload.label} {mode}")


@pytest.mark.parametrize("name, target", [("conv2d-C6", "cpu"), ("matmul-1024", "cpu"),
                                          ("conv2d-C6", "cuda"), ("matmul-1024", "cuda")])
def test_fast_rows_equal_lowering_rows_on_500_random_configs(name, target):
    w = get_workload(name)
    configs = space_for(w, target).sample(np.random.default_rng(12), 500)
    _assert_fast_equals_lowering(w, configs)


@pytest.mark.parametrize("target", ["cpu", "opencl"])
@pytest.mark.parametrize("w", SMALL_WORKLOADS, ids=lambda w: w.key)
def test_fast_rows_equal_lowering_rows_on_small_shapes(w, target):
    """Padding, stride 2, odd extents, 1x1 kernels, vector loads."""
    configs = space_for(w, target).sample(np.random.default_rng(3), 150)
    _assert_fast_equals_lowering(w, configs)


# dense, batch_matmul, depthwise and grouped conv2d (a 5-D output and weight), small and large
NEW_OPERATORS = ["dense:7,32,48", "dense:128,768,3072", "batch_matmul:3,16,8,24",
                 "batch_matmul:12,128,64,128", "conv2d:1,16,12,12,16,3,2,1,16",
                 "conv2d:1,32,112,112,32,3,1,1,32", "conv2d:1,16,10,10,32,3,1,1,4",
                 "conv2d:1,128,56,56,128,3,1,1,32"]
GROUPED = ("conv2d:1,16,10,10,32,3,1,1,4", "conv2d:1,128,56,56,128,3,1,1,32")


@pytest.mark.parametrize("target", ["cpu", "opencl"])
@pytest.mark.parametrize("name", NEW_OPERATORS)
def test_fast_rows_equal_lowering_rows_on_the_new_operators(name, target):
    w = get_workload(name)
    if target != "cpu" and name in GROUPED:  # four bound axes (g, oc, oh, ow)
        assert not supports(w, "gpu", "relation")
        return
    configs = space_for(w, target).sample(np.random.default_rng(13), 150)
    _assert_fast_equals_lowering(w, configs)


@pytest.mark.parametrize("name", ["matmul:64,64,64", "batch_matmul:3,16,8,24",
                                  "conv2d:1,8,10,10,16,3,1,1"])
def test_fast_rows_equal_lowering_rows_with_the_shared_memory_knobs(name):
    """Double-buffered tiles (step ``ko + 1``'s loads, decomposed over the outer reduction
    loops), padded rows and vector reads from shared memory: each a tree of its own."""
    from tensorgym.features.nest_gpu import gpu_groups

    w = get_workload(name)
    space = space_for(w, "opencl")
    configs = space.sample(np.random.default_rng(21), 120)
    groups = gpu_groups(w, configs)
    assert len(groups) == (4 if "vec_shared" in {k.name for k in space.knobs} else 2)
    assert sorted(np.concatenate([idx for idx, _ in groups]).tolist()) == list(range(120))
    assert any(c.values["smem_pad"] for c in configs)
    _assert_fast_equals_lowering(w, configs)


EPILOGUES = ("bias", "bias+relu", "bias+relu6", "bias+gelu", "bias+add+relu", "add")


@pytest.mark.parametrize("target", ["cpu", "cuda"])
@pytest.mark.parametrize("epilogue", EPILOGUES)
@pytest.mark.parametrize("name", ["conv2d:1,8,10,10,16,3,1,1", "conv2d:1,16,12,12,16,3,2,1,16",
                                  "dense:7,32,48", "batch_matmul:3,16,8,24", "matmul:17,9,13"])
def test_fast_rows_equal_lowering_rows_with_an_epilogue(name, epilogue, target):
    """The epilogue's loads (bias, residual), arithmetic and store, in the write-back of the
    accumulator or, without one (cache_write=0), in a pass over the tile in place."""
    w = get_workload(f"{name}+{epilogue}")
    configs = space_for(w, target).sample(np.random.default_rng(17), 60)
    if target == "cpu":
        assert {c.values["cache_write"] for c in configs} == {0, 1}
    _assert_fast_equals_lowering(w, configs)


@pytest.mark.parametrize("epilogue", ["bias+gelu", "bias+add+relu"])
def test_fast_rows_equal_lowering_rows_with_an_epilogue_on_a_grouped_conv2d(epilogue):
    """A bias over two output dimensions (the group and its channel)."""
    w = get_workload(f"conv2d:1,16,10,10,32,3,1,1,4+{epilogue}")
    _assert_fast_equals_lowering(w, space_for(w, "cpu").sample(np.random.default_rng(19), 60))


def test_an_in_place_epilogue_in_the_loops_of_the_zeroing():
    """With no register-tile loop (every spatial tile group outside the reduction), the output's
    zeroing and the epilogue's pass in place run in the same loops: one access to the output."""
    w = get_workload("dense:7,32,48+bias+add+relu")
    space = space_for(w, "cpu")
    configs = [space.from_values(dict(c.values, cache_write=0,
                                      reorder=("S1", "S2", "R0", "R1") if i % 2 else
                                      c.values["reorder"]))
               for i, c in enumerate(space.sample(np.random.default_rng(5), 60))]
    _assert_fast_equals_lowering(w, configs)


@pytest.mark.parametrize("name", ["conv2d-C1", "conv2d-C7", "conv2d-C8", "matmul-1024",
                                  "conv2d:1,4,9,9,8,3,2,1", "dense:7,32,48",
                                  "batch_matmul:3,16,8,24", "conv2d:1,16,10,10,32,3,1,1,4"])
def test_fast_rows_equal_lowering_rows_with_the_vendor_class_knobs(name):
    """Output channels in the vector lanes, packed operands (a 5-D weight, B panels) and the
    write-back's order and the padding's rows, in every combination, under random tiles, orders, fused parallel loops and unrolling."""
    w = get_workload(name)
    space = space_for(w, "cpu")
    names = [k for k in ("vector_axis", "pack_weight", "pack_b", "pack_w",
                         "contiguous_writeback", "pad_vector") if k in
             {kn.name for kn in space.knobs}]
    options = [space.knob(k).options for k in names]
    configs = []
    for i, c in enumerate(space.sample(np.random.default_rng(21), 200)):
        pick = {k: opts[(i >> j) % len(opts)] for j, (k, opts) in enumerate(zip(names, options))}
        configs.append(space.from_values(dict(c.values, **pick)))
    _assert_fast_equals_lowering(w, configs)


@pytest.mark.parametrize("name", ["conv2d-C6", "matmul-1024"])
def test_a_configs_row_does_not_depend_on_its_batch(name):
    """One nest holds every loop order, vector axis and packing, each loop, loop copy and
    operand layout where the config has it: a config's row alone (where every such choice is
    the same for the whole nest) equals its row among configs of other choices."""
    w = get_workload(name)
    space = space_for(w, "cpu")
    knobs = [k for k in ("vector_axis", "pack_weight", "pack_b", "contiguous_writeback",
                                 "pad_vector")
             if k in {kn.name for kn in space.knobs}]
    configs = []
    for i, c in enumerate(space.sample(np.random.default_rng(31), 48)):
        pick = {k: space.knob(k).options[(i >> j) % len(space.knob(k).options)]
                for j, k in enumerate(knobs)}
        configs.append(space.from_values(dict(c.values, **pick)))
    assert len({c.values["reorder"] for c in configs}) == 4
    assert len(cpu_groups(w, configs)) == 1
    for mode in MODES:
        alone = np.concatenate([fast_rows(w, [c], mode, MAX_LOOPS) for c in configs])
        np.testing.assert_array_equal(fast_rows(w, configs, mode, MAX_LOOPS), alone)


def test_features_tell_the_vector_axis_and_the_packed_weight_apart():
    w = get_workload("conv2d-C7")
    space = space_for(w, "cpu")
    base = dict(space.sample(np.random.default_rng(2), 1)[0].values, tile_oc=(8, 2, 16),
                tile_ow=(1, 2, 7), vectorize="inner", reorder=("S1", "R0", "R1", "S2"))
    configs = [space.from_values(dict(base, vector_axis=a, pack_weight=p))
               for a in ("ow", "oc") for p in (0, 1)]
    context = featurize(w, configs, "context", fast=False)
    assert len({r.tobytes() for r in context}) == 4  # strides show the packed layout
    relation = featurize(w, configs, "relation", fast=False)
    # footprints and reuse show where the vector loop is (packing moves no footprint, and
    # relation rows have no stride pair: they do not tell a packed weight from a plain one)
    assert not np.array_equal(relation[0], relation[2])


def test_nests_deeper_than_max_loops_are_truncated_alike():
    w = conv2d(4, 8, 8, 8, 8, 3, 1, 1)
    space = space_for(w, "cpu")
    base = dict(tile_n=(1, 2, 2), tile_oc=(2, 2, 2), tile_oh=(2, 2, 2), tile_ow=(2, 2, 2),
                tile_rc=(2, 4), tile_ry=(3, 1), tile_rx=(3, 1), reorder=("R0", "S1", "R1", "S2"),
                vectorize="inner", unroll_max_step=0, parallel=0, cache_write=1, inline_pad=0,
                vector_axis="ow", pack_weight=0)
    configs = [space.from_values(dict(base, parallel=p, unroll_max_step=u))
               for p in (0, 1, 2) for u in (0, 16, 512)]
    assert summarize(lower(w, configs[0])).context.shape[0] > MAX_LOOPS
    _assert_fast_equals_lowering(w, configs)


def test_featurize_takes_the_fast_path_without_lowering(monkeypatch):
    w = get_workload("conv2d-C6")
    configs = (space_for(w, "cpu").sample(np.random.default_rng(4), MIN_BATCH["cpu"])
               + space_for(w, "opencl").sample(np.random.default_rng(5), MIN_BATCH["gpu"]))
    configs += configs[:3]  # repeats in one batch
    for mode in MODES:
        reference = featurize(w, configs, mode, fast=False)  # no rows kept for the next call

        def no_lowering(*args):
            raise AssertionError("the fast path lowered a config")

        with monkeypatch.context() as m:
            m.setattr(features, "rows_by_lowering", no_lowering)
            np.testing.assert_array_equal(featurize(w, configs, mode), reference)


def test_cached_rows_do_not_share_memory_with_the_returned_batch():
    w = get_workload("conv2d-C6")
    configs = space_for(w, "cpu").sample(np.random.default_rng(8), 2 * MIN_BATCH["cpu"])
    with Featurizer() as f:
        first = f.featurize(w, configs)
        expected = first.copy()
        first[:] = -1.0  # a caller normalising its matrix in place
        np.testing.assert_array_equal(f.featurize(w, configs), expected)  # served from the cache


def test_what_the_fast_path_does_not_cover():
    assert not supports(conv2d(2, 8, 10, 10, 16, 3, 1, 1), "gpu", "relation")  # 4 bound axes
    assert not supports(matmul(16, 8, 1), "cpu", "relation")  # no reduction loop
    assert not supports(matmul(1, 1, 16), "gpu", "relation")  # no output axis to tile
    c6 = get_workload("conv2d-C6")
    assert not supports(c6, "cpu", "config") and not supports(c6, "cpu", "ast")
    assert supports(conv2d(2, 8, 10, 10, 16, 3, 1, 1), "cpu", "context")


def test_a_big_batch_with_an_epilogue_takes_the_fast_path(monkeypatch):
    w = get_workload("dense:128,768,3072+bias+gelu")
    assert worthwhile(w, "gpu", "relation", 512)
    configs = space_for(w, "cpu").sample(np.random.default_rng(9), 512)
    assert worthwhile(w, "cpu", "relation", len(configs))
    reference = featurize(w, configs, fast=False)

    def no_lowering(*args):
        raise AssertionError("the fast path lowered a config")

    monkeypatch.setattr(features, "rows_by_lowering", no_lowering)
    np.testing.assert_array_equal(featurize(w, configs), reference)


def test_knob_values_outside_the_nest_model_are_lowered():
    """A loop order the CPU nest does not model (one tile group left out): ``fast_rows`` refuses
    it and ``featurize`` answers with the lowering path's rows."""
    w = get_workload("matmul:64,32,16")
    configs = [dataclasses.replace(c, values={**c.values, "reorder": ("S1", "R0", "S2")})
               for c in space_for(w, "cpu").sample(np.random.default_rng(6), MIN_BATCH["cpu"])]
    with pytest.raises(Unsupported):
        fast_rows(w, configs, "relation", MAX_LOOPS)
    rows = featurize(w, configs, "relation")
    np.testing.assert_array_equal(rows, featurize(w, configs, "relation", fast=False))


def test_a_config_of_another_workloads_space_is_refused():
    c6, c9 = get_workload("conv2d-C6"), get_workload("conv2d-C9")
    stranger = space_for(c9, "cpu").sample(np.random.default_rng(0), 30)
    with pytest.raises(ValueError, match="does not fit"):
        featurize(c6, stranger)


def test_rows_of_numbers_per_config_and_for_all():
    """A nest's numbers are arrays over its configs or one number for all, of any NumPy kind."""
    values = [np.arange(3), 7, np.bool_(True), np.array(2), np.array([True, False, True]),
              np.ones(1, np.int64)]
    np.testing.assert_array_equal(_rows(3, values, np.int64),
                                  [[0, 1, 2], [7, 7, 7], [1, 1, 1], [2, 2, 2], [1, 0, 1],
                                   [1, 1, 1]])


def test_non_affine_parts_of_one_index_dimension_add_up():
    """Two non-affine parts in one dimension (4 * (f // 4) + f % 4, which is f): their spans
    add and their value counts multiply, as the lowering path's index analysis has it."""
    n, ext = 2, np.array([12, 8])
    inp = Buf("inp", np.full((n, 1), 100, np.int64))
    out = Buf("out", np.full((n, 1), 12, np.int64))
    parts = [(4, Div(Var("f"), 4), True), (1, Mod(Var("f"), 4), True)]
    stmt = Stmt([Access(out, [{"f": 1}], writes=1), Access(inp, [{}], [parts], reads=1)])
    s = analyze(Nest(n, [inp, out], [], [], [Loop("f", ext, KIND["parallel"], [stmt])]))
    # each buffer: f's 12 (8) values, 4 bytes each
    footprint = 2 * 4 * ext
    np.testing.assert_array_equal(s.context[CTX["footprint_bytes"], 0],
                                  np.log2(1.0 + footprint).astype(np.float32))
