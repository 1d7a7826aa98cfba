"""The shared GPU lowering proved correct on a real OpenCL device (PoCL on this CPU is enough):
random valid configs of conv2d and matmul, run through pyopencl and compared with NumPy."""
import numpy as np
import pytest

from tensorgym.lower.gpu import lower_gpu
from tensorgym.templates import space_for
from tensorgym.templates.gpu import DEFAULT_GPU_LIMITS, sample_valid_configs
from tensorgym.workloads import batch_matmul, conv2d, matmul

from .gpu_builds import opencl_runtimes

pytestmark = pytest.mark.opencl

# (workload, configs): 50 random configs, plus 6 fixed ones below. CUDA-like limits so the same configs suit nvcc too.
# Beside the three main shapes: a batch of 2 (four bound axes, fused into blockIdx.z), odd
# matmul extents, and a 1x1 conv without padding (vector loads of the input).
CASES = [(conv2d(1, 8, 10, 10, 16, 3, 1, 1), 14), (conv2d(1, 4, 9, 9, 8, 3, 2, 1), 12),
         (matmul(32, 48, 16), 14), (conv2d(2, 4, 6, 6, 8, 3, 1, 1), 4), (matmul(17, 9, 13), 4),
         (conv2d(1, 6, 8, 8, 4, 1, 1, 0), 2)]
# Most configs build without optimisation (PoCL's optimiser dominates the test's time); every
# tenth one is built with full optimisation, as a tuner would.
OPTIMISE_EVERY = 10


def gpu_cases(seed: int = 0):
    out = []
    for w, n in CASES:
        out += [(w, c) for c in sample_valid_configs(w, n, np.random.default_rng(seed),
                                                     DEFAULT_GPU_LIMITS)]
    return out


@pytest.fixture(scope="module")
def runtimes():
    return opencl_runtimes()


def fused_axis_cases():
    """Batch 2: four output axes bound to three block (then thread) dimensions."""
    w = conv2d(2, 4, 6, 6, 8, 3, 1, 1)
    space = space_for(w, "opencl")
    base = {"tile_rc": (2, 2), "tile_ry": (1, 3), "tile_rx": (3, 1), "auto_unroll_max_step": 16,
            "unroll_explicit": 0}
    blocks = {"tile_n": (2, 1, 1, 1), "tile_oc": (2, 1, 2, 2), "tile_oh": (3, 1, 2, 1),
              "tile_ow": (2, 1, 3, 1)}
    threads = {"tile_n": (1, 1, 2, 1), "tile_oc": (2, 2, 2, 1), "tile_oh": (1, 2, 3, 1),
               "tile_ow": (3, 1, 2, 1)}
    return [(w, space.from_values({**base, **blocks})), (w, space.from_values({**base, **threads}))]


def staged_cases():
    """Double-buffered, padded shared tiles: a conv whose three outer reduction loops fuse into
    one step loop (its padded input loaded in the prologue too), a matmul with float4 loads
    into padded rows, unrolled in the AST, and a matmul and a batch_matmul reading B's rows as
    float4 / float2 vectors (vec_shared)."""
    conv = conv2d(1, 8, 10, 10, 16, 3, 1, 1)
    mm = matmul(32, 48, 16)
    bmm = batch_matmul(2, 8, 12, 16)
    return [
        (conv, space_for(conv, "opencl").from_values(
            {"tile_oc": (2, 2, 4, 1), "tile_oh": (2, 1, 5, 1), "tile_ow": (1, 2, 5, 1),
             "tile_rc": (4, 2), "tile_ry": (3, 1), "tile_rx": (3, 1),
             "auto_unroll_max_step": 16, "unroll_explicit": 0, "double_buffer": 1,
             "smem_pad": 1})),
        (mm, space_for(mm, "opencl").from_values(
            {"tile_i": (2, 1, 4, 4), "tile_j": (1, 2, 8, 3), "tile_rk": (2, 2, 4),
             "auto_unroll_max_step": 64, "unroll_explicit": 1, "vec_load": 4,
             "double_buffer": 1, "smem_pad": 1})),
        (mm, space_for(mm, "opencl").from_values(
            {"tile_i": (2, 1, 4, 4), "tile_j": (1, 2, 6, 4), "tile_rk": (2, 2, 4),
             "auto_unroll_max_step": 16, "unroll_explicit": 0, "vec_load": 4,
             "double_buffer": 1, "smem_pad": 1, "vec_shared": 1})),
        (bmm, space_for(bmm, "opencl").from_values(
            {"tile_b": (1, 1, 2, 1), "tile_i": (2, 2, 2, 1), "tile_j": (1, 2, 4, 2),
             "tile_rk": (3, 2, 2), "auto_unroll_max_step": 0, "unroll_explicit": 1,
             "vec_load": 2, "double_buffer": 1, "smem_pad": 1, "vec_shared": 1})),
    ]


CONFIGS = gpu_cases() + fused_axis_cases() + staged_cases()


@pytest.mark.parametrize("i", range(len(CONFIGS)),
                         ids=[f"{w.op}{w.params}-{c.index}" for w, c in CONFIGS])
def test_random_config_matches_numpy(runtimes, i):
    workload, config = CONFIGS[i]
    runtime = runtimes[i % OPTIMISE_EVERY == 0]
    program = lower_gpu(workload, config, DEFAULT_GPU_LIMITS)
    kernel = runtime.load(runtime.compile(runtime.render(program), program), program)
    inputs = workload.random_inputs(seed=i)
    bufs = kernel.alloc(inputs)
    seconds = kernel.time(bufs, 1)
    out = kernel.read_output(bufs)
    assert seconds > 0
    np.testing.assert_allclose(out, workload.reference(inputs), rtol=1e-4,
                               atol=1e-6 * workload.reduction_length)


def test_build_error_is_a_labelled_compile_error(runtimes):
    from tensorgym.hardware.opencl import OpenCLBuildError

    workload, config = CONFIGS[0]
    program = lower_gpu(workload, config, DEFAULT_GPU_LIMITS)
    broken = runtimes[0].render(program).replace("barrier(", "no_such_function(", 1)
    with pytest.raises(OpenCLBuildError, match="OpenCL build failed"):
        runtimes[0].compile(broken, program)


def test_device_limits_are_reported(runtimes):
    limits = runtimes[0].limits()
    assert limits["max_threads_per_block"] >= 1
    assert len(limits["max_block_dims"]) == 3 and limits["max_shared_memory_per_block"] > 0
    assert runtimes[0].device_name().startswith("opencl:")


def test_measurer_on_opencl_checks_limits_then_measures(runtimes):
    from tensorgym.errors import ErrorCode
    from tensorgym.measure import MeasureOptions, LocalMeasurer
    from tensorgym.templates import default_config, space_for

    workload = matmul(64, 128, 16)
    too_many_threads = space_for(workload, "opencl").from_values(
        {"tile_i": (1, 1, 64, 1), "tile_j": (1, 1, 128, 1), "tile_rk": (1, 1, 16),
         "auto_unroll_max_step": 0, "unroll_explicit": 0, "vec_load": 1})
    measurer = LocalMeasurer("opencl", MeasureOptions(n_parallel=1, repeat=2, min_repeat_ms=1))
    try:
        limit = measurer.runtime.limits()["max_threads_per_block"]
        good, bad = measurer.measure(workload, [default_config(workload, "opencl"), too_many_threads])
    finally:
        measurer.close()
    assert good.ok and good.gflops > 0, good.error_msg
    if 64 * 128 > limit:
        assert bad.error == ErrorCode.INSTANTIATION_ERROR and "threads per block" in bad.error_msg
