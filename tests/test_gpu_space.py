"""The GPU template's space, its limit check, and the structure of the shared GPU lowering
(no device needed)."""
import math

import numpy as np
import pytest

from tensorgym import loopast as A
from tensorgym.codegen.cuda import render_cuda
from tensorgym.codegen.opencl import render_opencl
from tensorgym.errors import InvalidConfigError
from tensorgym.lower import lower
from tensorgym.lower.gpu import lower_gpu
from tensorgym.templates import space_for
from tensorgym.templates.gpu import (DEFAULT_GPU_LIMITS, check_gpu_config, gpu_plan,
                                     sample_valid_configs)
from tensorgym.workloads import conv2d, get_workload, matmul

C6 = get_workload("conv2d-C6")
SMALL = [conv2d(1, 8, 10, 10, 16, 3, 1, 1), conv2d(1, 4, 9, 9, 8, 3, 2, 1), matmul(32, 48, 16)]


def n_splits(n: int, levels: int) -> int:
    """Ordered factorizations of n into ``levels`` factors, from its prime exponents."""
    count, p, rest = 1, 2, n
    while rest > 1:
        e = 0
        while rest % p == 0:
            rest //= p
            e += 1
        count *= math.comb(e + levels - 1, levels - 1)
        p += 1
    return count


def test_c6_space_size_and_knobs():
    space = space_for(C6, "cuda")
    assert space.name == "conv2d/gpu"
    assert [k.name for k in space.knobs] == ["tile_oc", "tile_oh", "tile_ow", "tile_rc", "tile_ry",
                                             "tile_rx", "auto_unroll_max_step", "unroll_explicit",
                                             "double_buffer", "smem_pad"]
    expected = (n_splits(128, 4) * n_splits(28, 4) ** 2 * n_splits(128, 2) * n_splits(3, 2) ** 2
                * 4 * 2 * 2 * 2)
    assert space.size == expected == 120 * 40 * 40 * 8 * 2 * 2 * 4 * 2 * 2 * 2


def test_one_space_for_both_gpu_targets():
    for w in [C6, get_workload("matmul-1024")]:
        assert space_for(w, "opencl") == space_for(w, "cuda")


def test_matmul_space_has_three_level_reduction_and_vector_loads():
    space = space_for(matmul(32, 48, 16), "opencl")
    assert all(len(o) == 3 for o in space.knob("tile_rk").options)
    assert space.knob("vec_load").options == (1, 2, 4)
    assert "vec_load" not in {k.name for k in space_for(C6, "cuda").knobs}  # padded input


@pytest.mark.parametrize("w", [C6, *SMALL])
def test_index_config_json_round_trip(w):
    space = space_for(w, "opencl")
    rng = np.random.default_rng(0)
    for idx in rng.integers(0, space.size, 20):
        c = space.get(int(idx))
        assert c.index == idx
        assert space.from_choices(c.choices).index == idx
        assert space.from_json(c.to_json()).index == idx


def c6_values(**over):
    v = {"tile_oc": (4, 2, 8, 2), "tile_oh": (7, 1, 4, 1), "tile_ow": (2, 1, 7, 2),
         "tile_rc": (16, 8), "tile_ry": (1, 3), "tile_rx": (3, 1),
         "auto_unroll_max_step": 64, "unroll_explicit": 0}
    v.update(over)
    return space_for(C6, "cuda").from_values(v)


def test_valid_c6_config_plan():
    plan = check_gpu_config(C6, c6_values(), DEFAULT_GPU_LIMITS)
    assert plan.threads_per_block == 8 * 4 * 7
    assert plan.launch == {"grid": (2, 7, 4), "block": (7, 4, 8)}
    # pad tile: 8 channels x (4-1)+(3-1)+1 rows x (14-1)+1 columns; weight: 32 x 8 x 3 x 1
    assert plan.shared_shapes == ((1, 8, 6, 14), (32, 8, 3, 1))
    assert plan.accumulator_size == 2 * 2 * 2


@pytest.mark.parametrize("over, message", [
    ({"tile_oc": (1, 1, 128, 1), "tile_oh": (1, 1, 28, 1)}, "threads per block"),
    ({"tile_rc": (1, 128), "tile_oc": (1, 2, 8, 8)}, "shared memory"),
    ({"tile_oc": (1, 1, 1, 128), "tile_ow": (1, 4, 7, 1)}, "registers per thread"),
])
def test_invalid_configs_are_rejected_before_building(over, message):
    config = c6_values(**over)
    with pytest.raises(InvalidConfigError, match=message):
        check_gpu_config(C6, config, DEFAULT_GPU_LIMITS)
    with pytest.raises(InvalidConfigError, match=message):
        lower_gpu(C6, config, DEFAULT_GPU_LIMITS)
    lower(C6, config)  # lowering itself does not know the device: the measurer checks first


def test_block_dimension_limit_and_missing_limits():
    config = c6_values(tile_oc=(1, 1, 128, 1), tile_oh=(14, 1, 2, 1), tile_ow=(14, 1, 2, 1))
    with pytest.raises(InvalidConfigError, match="block dim z = 128 > 64"):
        check_gpu_config(C6, config, DEFAULT_GPU_LIMITS)
    check_gpu_config(C6, config, {})  # no limits known: nothing to check


def test_cpu_config_is_not_a_gpu_config():
    cpu_config = space_for(C6, "cpu").get(0)
    with pytest.raises(InvalidConfigError, match="not a GPU config"):
        gpu_plan(C6, cpu_config)


def test_lowering_structure():
    program = lower_gpu(C6, c6_values())
    nodes = list(A.walk(program.body))
    kinds = {n.kind for n in nodes if isinstance(n, A.For)}
    assert {"blockIdx.y", "blockIdx.z", "threadIdx.x", "threadIdx.y", "threadIdx.z",
            "vthread"} <= kinds
    scopes = {n.buffer.name: n.buffer.scope for n in nodes if isinstance(n, A.Allocate)}
    assert scopes == {"acc": "local", "pad_shared": "shared", "weight_shared": "shared"}
    assert sum(isinstance(n, A.Barrier) for n in nodes) == 2
    assert [b.name for b in program.args] == ["data", "weight", "conv"]
    bound = {n.kind: n.extent for n in nodes if isinstance(n, A.For) and "Idx" in n.kind}
    for key, prefix in (("grid", "blockIdx"), ("block", "threadIdx")):
        for dim, size in zip("xyz", program.launch[key]):
            assert bound.get(f"{prefix}.{dim}", 1) == size


def test_explicit_unroll_removes_the_loops_it_unrolls():
    pragma = lower_gpu(C6, c6_values(unroll_explicit=0, auto_unroll_max_step=512))
    explicit = lower_gpu(C6, c6_values(unroll_explicit=1, auto_unroll_max_step=512))
    assert any(isinstance(n, A.For) and n.kind == "unrolled" for n in A.walk(pragma.body))
    assert not any(isinstance(n, A.For) and n.kind in ("unrolled", "vthread")
                   for n in A.walk(explicit.body))
    stores = [n for n in A.walk(explicit.body) if isinstance(n, A.Store) and n.buffer.name == "conv"]
    assert len(stores) == 8  # the whole register tile written back one store at a time


def test_both_dialects_render_the_same_program():
    program = lower_gpu(C6, c6_values())
    cl, cu = render_opencl(program), render_cuda(program)
    assert "__kernel" in cl and "barrier(CLK_LOCAL_MEM_FENCE);" in cl and "__local float" in cl
    assert "get_group_id(2)" in cl and "reqd_work_group_size(7, 4, 8)" in cl
    assert '__global__' in cu and "__syncthreads();" in cu and "__shared__" in cu
    assert "__launch_bounds__(224)" in cu and "blockIdx.z" in cu
    assert cl.count("barrier(") == cu.count("__syncthreads()") == 2


def test_vector_loads_only_where_aligned():
    w = matmul(32, 48, 16)
    space = space_for(w, "opencl")
    base = {"tile_i": (2, 1, 4, 4), "tile_j": (1, 2, 8, 3), "tile_rk": (2, 2, 4),
            "auto_unroll_max_step": 0, "unroll_explicit": 0, "vec_load": 4}
    plan = gpu_plan(w, space.from_values(base))
    assert plan.vector_widths == (4, 4)  # A tile 16x8 from rk offsets of 8; B tile 8x48
    plan = gpu_plan(w, space.from_values({**base, "tile_rk": (8, 1, 2)}))
    assert plan.vector_widths == (1, 4)  # A's rows start at multiples of 2: no float4
    src = render_opencl(lower_gpu(w, space.from_values(base)))
    assert src.count("vload4") == 2


def test_sample_valid_configs_is_deterministic():
    a = sample_valid_configs(C6, 10, np.random.default_rng(3))
    b = sample_valid_configs(C6, 10, np.random.default_rng(3))
    assert [c.index for c in a] == [c.index for c in b] and len({c.index for c in a}) == 10


@pytest.mark.parametrize("name", ["conv2d-C1", "conv2d-C6", "conv2d-C12", "matmul-1024"])
def test_default_config_is_valid(name):
    from tensorgym.templates import default_config

    w = get_workload(name)
    config = default_config(w, "cuda")
    plan = check_gpu_config(w, config, DEFAULT_GPU_LIMITS)
    assert 1 < plan.threads_per_block <= 128 and plan.accumulator_size == 1


def test_gpu_configs_featurize_in_every_fixed_length_mode():
    from tensorgym.features import featurize

    configs = space_for(C6, "opencl").sample(np.random.default_rng(0), 3)
    for mode in ("relation", "context", "config"):
        x = featurize(C6, configs, mode=mode)
        assert x.shape[0] == 3 and np.isfinite(x).all()
    # double-buffered, padded, vector-read shared tiles featurize too
    w = matmul(32, 48, 16)
    staged = [space_for(w, "opencl").from_values(
        {"tile_i": (2, 1, 4, 4), "tile_j": (1, 2, 6, 4), "tile_rk": (2, 2, 4),
         "auto_unroll_max_step": 16, "unroll_explicit": u, "vec_load": 4, "double_buffer": 1,
         "smem_pad": 1, "vec_shared": 1}) for u in (0, 1)]
    for mode in ("relation", "context", "config"):
        x = featurize(w, staged, mode=mode)
        assert x.shape[0] == 2 and np.isfinite(x).all()


def test_double_buffer_keeps_two_copies_and_one_barrier_per_step():
    single = lower_gpu(C6, c6_values())
    double = lower_gpu(C6, c6_values(double_buffer=1))
    plan = gpu_plan(C6, c6_values(double_buffer=1))
    assert plan.stages == 2 and plan.reduce_steps > 1
    sizes = {b.name: b.size for b in (n.buffer for n in A.walk(double.body)
                                      if isinstance(n, A.Allocate))}
    plain = {b.name: b.size for b in (n.buffer for n in A.walk(single.body)
                                      if isinstance(n, A.Allocate))}
    assert sizes["pad_shared"] == 2 * plain["pad_shared"]
    assert plan.shared_bytes == 2 * gpu_plan(C6, c6_values()).shared_bytes
    # the prologue's barrier and one per step, against two per step
    assert sum(isinstance(n, A.Barrier) for n in A.walk(double.body)) == 2
    steps = [n for n in A.walk(double.body) if isinstance(n, A.For) and n.var.name == "ko"]
    assert len(steps) == 1 and steps[0].extent == plan.reduce_steps
    cu = render_cuda(double)
    assert "% 2" in cu and cu.count("__syncthreads()") == 2


def test_double_buffer_without_a_reduction_to_step_is_one_copy():
    w = matmul(32, 48, 16)
    space = space_for(w, "opencl")
    one_step = {"tile_i": (2, 1, 4, 4), "tile_j": (1, 2, 8, 3), "tile_rk": (1, 4, 4),
                "auto_unroll_max_step": 0, "unroll_explicit": 0, "vec_load": 1}
    plan = gpu_plan(w, space.from_values({**one_step, "double_buffer": 1}))
    assert plan.reduce_steps == 1 and plan.stages == 1


def test_smem_pad_pads_rows_and_keeps_vector_stores_aligned():
    w = matmul(32, 48, 16)
    space = space_for(w, "opencl")
    base = {"tile_i": (2, 1, 4, 4), "tile_j": (1, 2, 8, 3), "tile_rk": (2, 2, 4),
            "auto_unroll_max_step": 0, "unroll_explicit": 0}
    scalar = gpu_plan(w, space.from_values({**base, "vec_load": 1, "smem_pad": 1}))
    vector = gpu_plan(w, space.from_values({**base, "vec_load": 4, "smem_pad": 1}))
    assert scalar.pads == (1, 1) and vector.pads == (4, 4)
    assert scalar.shared_buffer_shape(0) == (16, 9) and vector.shared_buffer_shape(1) == (8, 52)
    assert gpu_plan(w, space.from_values({**base, "vec_load": 4})).pads == (0, 0)


def test_vec_shared_reads_the_row_operand_as_aligned_vectors():
    w = matmul(32, 48, 16)
    space = space_for(w, "opencl")
    base = {"tile_i": (2, 1, 4, 4), "tile_j": (1, 2, 6, 4), "tile_rk": (2, 2, 4),
            "auto_unroll_max_step": 16, "unroll_explicit": 0, "vec_load": 4, "vec_shared": 1}
    plan = gpu_plan(w, space.from_values(base))
    assert plan.shared_vector is not None and plan.shared_vector[0] == 1  # B, along j
    assert plan.shared_vector[2] == 4
    cl = render_opencl(lower_gpu(w, space.from_values(base)))
    cu = render_cuda(lower_gpu(w, space.from_values(base)))
    assert cl.count("vload4(0, (B_shared") == cu.count("float4 B_shared_v") == 1
    # an inner factor of 3 along j, or a padded row that is no multiple of the width: scalar
    assert gpu_plan(w, space.from_values({**base, "tile_j": (1, 2, 8, 3)})).shared_vector is None
    assert gpu_plan(w, space.from_values({**base, "vec_load": 1, "smem_pad": 1})).shared_vector \
        is None  # rows of 48 + 1
    # explicit unrolling copies the arithmetic in the AST: scalar reads there
    assert gpu_plan(w, space.from_values({**base, "unroll_explicit": 1})).shared_vector is None
    # the conv's input rows are indexed by ow * stride + rx: never vectors; no knob
    assert "vec_shared" not in {k.name for k in space_for(C6, "cuda").knobs}
