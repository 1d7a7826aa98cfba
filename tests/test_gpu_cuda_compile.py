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


def _gpu_check():
    import importlib.util

    path = Path(__file__).parents[1] / "scripts" / "gpu_check.py"
    spec = importlib.util.spec_from_file_location("gpu_check", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gpu_check_scores_issue_37s_targets_from_its_tunes():
    g = _gpu_check()
    assert set(g.DEFAULT_WORKLOADS) >= {*g.RESNET18, "matmul-1024", *g.NEW_OPERATORS}
    row = {"set": "conv2d-C6", "configs": 2, "correct": 2, "wrong": 0, "codes": {}, "seconds": 1}
    out = {"correctness": [row, row],
           "tune": [{"workload": w, "vs_vendor": 1.0 + 0.1 * (i % 3)}
                    for i, w in enumerate(g.RESNET18)]
           + [{"workload": "conv2d-C1", "vs_vendor": None}]  # a retried failure counts once
           + [{"workload": "matmul-1024", "vs_vendor": 0.85}]}
    s = g.targets(out)
    # the last tune of a workload holds: C1's failed rerun leaves 11 layers compared, and a
    # Must over C1-C12 cannot be met by 11 of them
    assert s["layers_compared"] == 11 and s["resnet18_worst"] == pytest.approx(1.0)
    assert s["must"] == {"zero wrong answers": True, "C1-C12 geomean >= 1.0x cuDNN": False,
                         "every layer >= 0.8x cuDNN": False, "matmul-1024 >= 0.9x cuBLAS": False}
    out["tune"].pop(-2)
    s = g.targets(out)
    assert s["resnet18_geomean"] == pytest.approx((1.0 * 1.1 * 1.2) ** (1 / 3))
    assert s["must"]["C1-C12 geomean >= 1.0x cuDNN"] and s["must"]["every layer >= 0.8x cuDNN"]
    assert not s["must"]["matmul-1024 >= 0.9x cuBLAS"]
    assert "matmul-1024 >= 0.9x cuBLAS: NOT met" in g.table({"correctness": [row], "targets": s})
