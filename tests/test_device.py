"""Devices: one string form (the fingerprint records are keyed by), parsed in one place."""
import importlib.util
import re
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tensorgym.errors import TensorGymError
from tensorgym.hardware.device import CPU_ISAS, Device

ROOT = Path(__file__).resolve().parent.parent

# Fingerprints as the runtimes write them: the reference dataset's, this repository's test
# machines' (CPU with and without isa=, PoCL), and GPUs' as CUDA and their OpenCL drivers name them.
CPU_ZEN4 = "cpu/znver4/AMD EPYC/2t"
CPU_XEON = "cpu/emeraldrapids/Intel(R) Xeon(R) Processor/2t"
CPU_XEON_AVX2 = "cpu/emeraldrapids/avx2/Intel(R) Xeon(R) Processor/16t"
CUDA_H200 = "cuda:NVIDIA H200/sm_90"
POCL = ("opencl:Portable Computing Language/pthread-Intel(R) Xeon(R) Processor/OpenCL 3.0 PoCL "
        "HSTR: pthread-x86_64-unknown-linux-gnu-icelake-client")
FINGERPRINTS = [
    (CPU_ZEN4, Device("cpu", "AMD EPYC", "znver4", threads=2), "cpu/AMD EPYC"),
    (CPU_XEON, Device("cpu", "Intel(R) Xeon(R) Processor", "emeraldrapids", threads=2),
     "cpu/Intel(R) Xeon(R) Processor"),
    (CPU_XEON_AVX2, Device("cpu", "Intel(R) Xeon(R) Processor", "emeraldrapids", "avx2", 16),
     "cpu/Intel(R) Xeon(R) Processor"),
    ("cpu/x86-64/avx512/Intel(R) Xeon(R) Platinum 8480+/112t",
     Device("cpu", "Intel(R) Xeon(R) Platinum 8480+", "x86-64", "avx512", 112),
     "cpu/Intel(R) Xeon(R) Platinum 8480+"),
    ("cpu/fake/Faster CPU/1t", Device("cpu", "Faster CPU", "fake", threads=1), "cpu/Faster CPU"),
    ("cpu/generic/aarch64/4t", Device("cpu", "aarch64", "generic", threads=4), "cpu/aarch64"),
    (CUDA_H200, Device("cuda", "NVIDIA H200", "sm_90"), "cuda/NVIDIA H200"),
    ("cuda:NVIDIA GeForce RTX 3090/sm_86", Device("cuda", "NVIDIA GeForce RTX 3090", "sm_86"),
     "cuda/NVIDIA GeForce RTX 3090"),
    (POCL, Device("opencl", "pthread-Intel(R) Xeon(R) Processor",
                  platform="Portable Computing Language",
                  version="OpenCL 3.0 PoCL HSTR: pthread-x86_64-unknown-linux-gnu-icelake-client"),
     "opencl/pthread-Intel(R) Xeon(R) Processor"),
    ("opencl:NVIDIA CUDA/NVIDIA H200/OpenCL 3.0 CUDA",
     Device("opencl", "NVIDIA H200", platform="NVIDIA CUDA", version="OpenCL 3.0 CUDA"),
     "opencl/NVIDIA H200"),
]


@pytest.mark.parametrize("text, device, kind", FINGERPRINTS, ids=[f[0] for f in FINGERPRINTS])
def test_a_fingerprint_round_trips(text, device, kind):
    parsed = Device.parse(text)
    assert parsed == device and str(parsed) == text and Device.parse(str(device)) == device
    assert parsed.request_kind == kind  # what a Ray request for it names
    assert Device.parse(parsed) is parsed


def test_fields_say_kind_threads_and_isa():
    zen, avx2 = Device.parse(CPU_ZEN4), Device.parse(CPU_XEON_AVX2)
    assert (zen.kind, zen.arch, zen.isa, zen.model, zen.threads) == (
        "cpu", "znver4", "", "AMD EPYC", 2)
    assert (avx2.isa, avx2.threads) == ("avx2", 16)
    gpu = Device.parse(CUDA_H200)
    assert (gpu.kind, gpu.model, gpu.arch, gpu.threads, gpu.isa) == (
        "cuda", "NVIDIA H200", "sm_90", 0, "")
    pocl = Device.parse(POCL)
    assert (pocl.kind, pocl.platform, pocl.threads) == ("opencl", "Portable Computing Language", 0)
    assert pocl.version.startswith("OpenCL 3.0 PoCL")
    one = replace(zen, threads=1)
    assert one != zen and str(one) == "cpu/znver4/AMD EPYC/1t"


def test_the_node_is_neither_in_the_string_nor_in_equality():
    here = Device.parse(CPU_ZEN4)
    there = replace(here, node="a1b2c3")
    assert str(there) == CPU_ZEN4 and there == here and hash(there) == hash(here)
    assert there.node == "a1b2c3" and Device.parse(str(there)).node == ""


def test_the_host_cpu_names_itself_as_a_device():
    from tensorgym.hardware.cpu import ISAS, CPURuntime, host_isa

    assert set(CPU_ISAS) == set(ISAS)  # what parse takes for an isa is what the runtime makes
    rt = CPURuntime(num_threads=3)
    d = rt.device_info()
    assert rt.device_name() == str(d) and Device.parse(str(d)) == d
    assert (d.kind, d.isa, d.threads) == ("cpu", "", 3) and d.arch and d.model
    if host_isa() != "other":
        narrow = CPURuntime(num_threads=1, isa="avx2").device_info()
        assert narrow == replace(d, isa="avx2", threads=1)
        assert str(narrow) == f"cpu/{d.arch}/avx2/{d.model}/1t"


@pytest.mark.skipif(importlib.util.find_spec("pyopencl") is None, reason="pyopencl is missing")
def test_an_opencl_device_names_itself_as_a_device():
    from tensorgym.hardware.opencl import list_devices, OpenCLRuntime

    if not list_devices():
        pytest.skip("no OpenCL device")
    d = OpenCLRuntime().device_info()
    assert d.kind == "opencl" and Device.parse(str(d)) == d and str(d).startswith("opencl:")


@pytest.mark.skipif(importlib.util.find_spec("pyopencl") is None, reason="pyopencl is missing")
def test_an_opencl_driver_that_cannot_build_is_an_unavailable_target(monkeypatch):
    """A driver whose compiler fails on a one-line kernel (PoCL's LLVM 14 on a CPU newer than
    it) makes the target unavailable, with the compiler's error, instead of failing every config."""
    from tensorgym.errors import TargetUnavailableError
    from tensorgym.hardware.opencl import list_devices, OpenCLRuntime

    if not list_devices():
        pytest.skip("no OpenCL device")
    OpenCLRuntime().check_available()  # the real probe builds here
    monkeypatch.setattr(OpenCLRuntime, "PROBE_SOURCE", "__kernel void probe(__global float* a)"
                        " { a[0] = undeclared_name; }")
    with pytest.raises(TargetUnavailableError, match="cannot build even a one-line kernel.*"
                       "undeclared_name.*target 'cpu'"):
        OpenCLRuntime().check_available()


def test_the_reference_dataset_device_parses():
    pytest.importorskip("pyarrow")
    from tensorgym.dataset import Dataset

    (device,) = Dataset.load(ROOT / "data" / "reference.parquet").devices()
    assert device == CPU_ZEN4 and str(Device.parse(device)) == device


@pytest.mark.parametrize("text, why", [
    ("", "none of cpu/, cuda: and opencl:"),
    ("gpu:NVIDIA H200/sm_90", "none of cpu/, cuda: and opencl:"),
    ("cuda/NVIDIA H200", "none of cpu/, cuda: and opencl:"),  # a request kind, not a device
    ("cpu/test/1t", "lacks <arch>/<model>"),
    ("cpu//AMD EPYC/2t", "lacks <arch>/<model>"),
    ("cpu/znver4/AMD EPYC", "thread count"),
    ("cpu/znver4/AMD EPYC/2", "thread count"),
    ("cpu/znver4/AMD EPYC/0t", "thread count"),
    ("cpu/znver4/AMD EPYC/02t", "thread count"),
    ("cpu/znver4/AMD EPYC/2t ", "thread count"),
    ("cuda:NVIDIA H200", "/<arch>"),
    ("cuda:NVIDIA H200/", "/<arch>"),
    ("opencl:NVIDIA CUDA/NVIDIA H200", "<platform>, <name> and <version>"),
    ("opencl:NVIDIA CUDA", "<platform>, <name> and <version>"),
])
def test_a_malformed_device_raises(text, why):
    with pytest.raises(TensorGymError, match=re.escape(f"malformed device {text!r}")) as e:
        Device.parse(text)
    assert why in str(e.value) and "cuda:<name>/<arch>" in str(e.value)


def test_a_device_is_checked_when_made():
    with pytest.raises(TensorGymError, match="a device is a string, got NoneType"):
        Device.parse(None)
    with pytest.raises(TensorGymError, match="unknown device kind 'tpu'"):
        Device("tpu", "v5e")
    with pytest.raises(TensorGymError, match="1 or more threads"):
        Device("cpu", "AMD EPYC", "znver4")
    with pytest.raises(TensorGymError, match="an integer, not '2'"):
        Device("cpu", "AMD EPYC", "znver4", threads="2")
    assert Device("cpu", "AMD EPYC", "znver4", threads=np.int64(2)).threads.__class__ is int
    with pytest.raises(TensorGymError, match="no isa or thread count"):
        Device("cuda", "NVIDIA H200", "sm_90", threads=4)
    with pytest.raises(TensorGymError, match="no OpenCL platform"):
        Device("cuda", "NVIDIA H200", "sm_90", platform="NVIDIA CUDA")
