"""The CUDA emitter: every config of the OpenCL correctness test, rendered as CUDA C and
compiled to PTX by nvcc (no GPU needed). The kernels go into two .cu files compiled side by side."""
import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from tensorgym.codegen.cuda import render_cuda
from tensorgym.errors import TargetUnavailableError
from tensorgym.hardware.cuda import CUDARuntime, find_nvcc
from tensorgym.lower.gpu import lower_gpu
from tensorgym.templates.gpu import DEFAULT_GPU_LIMITS

from .gpu_builds import ptx_entries
from .test_gpu_opencl import CONFIGS

NVCC = find_nvcc()
ARCH = "sm_80"


@pytest.mark.nvcc
@pytest.mark.skipif(NVCC is None, reason="nvcc not found (install the CUDA toolkit)")
def test_every_config_compiles_to_ptx(tmp_path):
    sources = []
    for i, (workload, config) in enumerate(CONFIGS):
        program = dataclasses.replace(lower_gpu(workload, config, DEFAULT_GPU_LIMITS), name=f"k{i}")
        sources.append(render_cuda(program))
    entries = ptx_entries(NVCC, ARCH, sources, tmp_path)
    assert entries == {f"k{i}" for i in range(len(CONFIGS))}


def test_cuda_runtime_without_device_says_what_to_use():
    runtime = CUDARuntime()
    try:
        runtime.check_available()
    except TargetUnavailableError as e:
        assert "no CUDA device was found" in str(e) and "cpu" in str(e)
    else:
        pytest.skip("a CUDA device is present")


@pytest.mark.nvcc
@pytest.mark.skipif(NVCC is None, reason="nvcc not found (install the CUDA toolkit)")
def test_runtime_compiles_a_cubin_and_labels_compile_errors():
    from tensorgym.hardware.cuda import CUDACompileError

    runtime = CUDARuntime(arch=ARCH)  # an explicit arch: no device needed to compile
    workload, config = CONFIGS[-1]
    program = lower_gpu(workload, config, DEFAULT_GPU_LIMITS)
    source = runtime.render(program)
    assert runtime.compile(source, program)[:4] == b"\x7fELF"
    with pytest.raises(CUDACompileError):
        runtime.compile(source.replace("__syncthreads()", "no_such_function()", 1), program)


def test_gpu_check_without_a_device_stops_at_once_and_says_what_to_use(tmp_path):
    try:
        CUDARuntime().check_available()
        pytest.skip("a CUDA device is present")
    except TargetUnavailableError:
        pass
    script = Path(__file__).parents[1] / "scripts" / "gpu_check.py"
    out = tmp_path / "gpu_check.json"
    proc = subprocess.run([sys.executable, str(script), "--out", str(out)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2 and not out.exists()
    assert "no CUDA device was found" in proc.stderr and "available targets here: cpu" in proc.stderr
