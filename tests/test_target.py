"""Targets: names and aliases, the template and runtime each means, the device fingerprint."""
import ast
import pickle
from pathlib import Path

import pytest

from tensorgym.errors import TargetUnavailableError, TensorGymError
from tensorgym.hardware.runtime import get_runtime
from tensorgym.hardware.target import (CPU, CUDA, DEFAULT_GPU_LIMITS, OPENCL, TARGET_ALIASES,
                                       TARGETS, Target, canonical_target, get_target)
from tensorgym.templates import space_for
from tensorgym.workloads import matmul

HARDWARE = Path(__file__).resolve().parent.parent / "tensorgym" / "hardware"


def test_aliases_name_one_target():
    assert get_target("llvm") is get_target("cpu") is CPU
    assert canonical_target("llvm") == "cpu" and str(CPU) == "cpu"
    assert TARGETS == ("cpu", "opencl", "cuda")
    assert TARGET_ALIASES == {"cpu": "cpu", "llvm": "cpu", "opencl": "opencl", "cuda": "cuda"}
    for t in (CPU, OPENCL, CUDA):
        assert t.aliases[0] == t.kind and all(get_target(a) is t for a in t.aliases)
    assert get_target(CUDA) is CUDA
    with pytest.raises(TensorGymError, match="unknown target 'tpu'.*cpu, cuda, llvm, opencl"):
        get_target("tpu")
    with pytest.raises(TensorGymError, match="unknown target"):
        get_target(None)


def test_target_says_template_limits_and_timer():
    assert (CPU.template, OPENCL.template, CUDA.template) == ("cpu", "gpu", "gpu")
    w = matmul(16, 16, 16)
    assert space_for(w, "opencl") == space_for(w, CUDA)  # one GPU template, one space
    assert space_for(w, "llvm").key.template == "cpu"
    assert CPU.limits() == {} and CUDA.limits() == DEFAULT_GPU_LIMITS
    assert CUDA.limits() is not DEFAULT_GPU_LIMITS  # a copy: callers cannot change the defaults
    assert CPU.timer_key({}) == OPENCL.timer_key({}) == "host"  # PoCL runs on the host's cores
    assert CUDA.timer_key({"device_index": 1}) == "cuda-1"


def test_a_target_pickles_as_itself():
    assert pickle.loads(pickle.dumps(CUDA)) is CUDA
    assert hash(CPU) == hash(pickle.loads(pickle.dumps(CPU)))


def test_device_fingerprint_names_the_device_and_its_threads():
    one = CPU.device_fingerprint(num_threads=1)
    two = CPU.device_fingerprint(get_runtime("llvm", num_threads=2))
    assert one.startswith("cpu/") and one.endswith("/1t") and two.endswith("/2t")
    assert one[:-2] == two[:-2]  # the same machine, another thread count
    with pytest.raises(TensorGymError, match="not a cuda device"):
        CUDA.device_fingerprint(get_runtime("cpu"))


def test_a_missing_runtime_package_is_target_unavailable():
    ghost = Target("ghost", ("ghost",), "gpu", "tensorgym.hardware.no_such_module:Runtime",
                   on_host=False)
    with pytest.raises(TargetUnavailableError, match="install tensorgym\\[ghost\\]"):
        ghost.runtime()


def test_hardware_does_not_import_templates_at_module_level():
    """Target identity lives in hardware/; the measurer reaches templates only lazily."""
    offenders = []
    for path in HARDWARE.glob("*.py"):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ImportFrom) and "templates" in (node.module or ""):
                offenders.append(f"{path.name}: {node.module}")
    assert not offenders, offenders
