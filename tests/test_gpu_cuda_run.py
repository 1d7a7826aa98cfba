"""CUDA kernels run on a real NVIDIA device: the OpenCL test's configs against NumPy, the
measurer's contract, and the headline env. Skipped where no CUDA device is present (CI has none;
``scripts/gpu_check.py`` is the fuller check on a GPU machine)."""
import math

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

from tensorgym.errors import ErrorCode, TargetUnavailableError
from tensorgym.measure import MeasureOptions, LocalMeasurer
from tensorgym.hardware.runtime import get_runtime
from tensorgym.lower.gpu import lower_gpu
from tensorgym.templates.gpu import sample_valid_configs

from .test_gpu_opencl import CONFIGS

pytestmark = pytest.mark.cuda


@pytest.fixture(scope="module")
def runtime():
    rt = get_runtime("cuda")
    try:
        rt.check_available()
    except TargetUnavailableError as e:
        pytest.skip(f"no CUDA device: {e}")
    return rt


@pytest.mark.parametrize("i", range(len(CONFIGS)),
                         ids=[f"{w.op}{w.params}-{c.index}" for w, c in CONFIGS])
def test_random_config_matches_numpy(runtime, i):
    workload, config = CONFIGS[i]
    program = lower_gpu(workload, config, runtime.limits())
    kernel = runtime.load(runtime.compile(runtime.render(program), program), program)
    inputs = workload.random_inputs(seed=i)
    bufs = kernel.alloc(inputs)
    try:
        assert np.isnan(kernel.read_output(bufs)).all()
        assert kernel.time(bufs, 1) > 0
        np.testing.assert_allclose(kernel.read_output(bufs), workload.reference(inputs),
                                   rtol=1e-4, atol=1e-6 * workload.reduction_length)
        assert kernel.check_guards(bufs) == []
    finally:
        kernel.release(bufs)
        kernel.close()


def test_measurer_builds_in_builders_and_times_in_its_worker(runtime):
    workload = CONFIGS[0][0]
    configs = [c for w, c in CONFIGS if w is workload][:6]
    m = LocalMeasurer("cuda", MeasureOptions(repeat=3, min_repeat_ms=1.0))
    try:
        results = m.measure(workload, configs)
        assert m.device.startswith("cuda:")
    finally:
        m.close()
    assert [r.error for r in results] == [ErrorCode.NO_ERROR] * len(configs), \
        [r.error_msg for r in results]
    assert all(len(r.costs) >= 3 and r.gflops > 0 for r in results)


def test_headline_env_steps_with_measured_rewards(runtime):
    env = gym.make("TensorSched-conv2d-C6-cuda", records=False, budget=4)
    try:
        check_env(env.unwrapped, skip_render_check=True)
        env.reset(seed=0)
        u = env.unwrapped
        configs = sample_valid_configs(u.workload, 3, np.random.default_rng(0), runtime.limits())
        steps = [env.step(np.array(config.choices)) for config in configs]
        infos = [info for *_, info in steps]
        assert all(math.isfinite(reward) for _, reward, *_ in steps)
        assert [i["error"] for i in infos] == ["NO_ERROR"] * 3, [i["error_msg"] for i in infos]
        assert all(math.isfinite(i["gflops"]) and i["gflops"] > 0 for i in infos)
    finally:
        env.close()


@pytest.mark.parametrize("cuda_graph", [True, False])
def test_vendor_timer_times_cudnn_and_cublas_in_fp32(runtime, cuda_graph):
    from tensorgym.leaderboard.vendor import VendorTimer
    from tensorgym.workloads import conv2d, matmul

    for w in (conv2d(1, 32, 14, 14, 32, 3, 1, 1), matmul(256, 256, 256)):
        timer = VendorTimer(w, "cuda", min_seconds=0.002, cuda_graph=cuda_graph)
        assert not timer.skipped, timer.skipped
        assert ("CUDA graph" in timer.library) == cuda_graph and timer.cuda_graph == cuda_graph
        samples = timer.sample(3)
        assert len(samples) == 3 and all(0 < s < float("inf") for s in samples)
