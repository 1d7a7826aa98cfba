"""Shared by the GPU tests: the PoCL runtimes they build with, and nvcc's PTX build of many
rendered CUDA kernels at once."""
from __future__ import annotations

import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from tensorgym.errors import TargetUnavailableError


def opencl_runtimes():
    """(a runtime that builds without PoCL's optimiser, one that builds with it), or a skip."""
    from tensorgym.hardware.opencl import OpenCLRuntime

    fast = OpenCLRuntime(build_options=("-cl-opt-disable",))
    try:
        fast.check_available()
    except TargetUnavailableError as e:
        pytest.skip(f"no OpenCL device: {e}")
    return fast, OpenCLRuntime()


def ptx_entries(nvcc: str, arch: str, sources: list[str], tmp_path: Path) -> set[str]:
    """Compile ``sources`` to PTX in two .cu files side by side; assert nvcc took both and
    return the kernel names the PTX holds."""
    files = []
    for part in range(2):
        path = tmp_path / f"part{part}.cu"
        path.write_text("\n".join(sources[part::2]))
        files.append(path)

    def build(path: Path) -> subprocess.CompletedProcess:
        return subprocess.run([nvcc, "-ptx", f"-arch={arch}", str(path), "-o", f"{path}.ptx"],
                              capture_output=True, text=True, timeout=600)

    with ThreadPoolExecutor(2) as pool:
        procs = list(pool.map(build, files))
    for p in procs:
        assert p.returncode == 0, p.stderr[-3000:]
    entries: set[str] = set()
    for path in files:
        entries |= set(re.findall(r"\.entry\s+(k\d+)", Path(f"{path}.ptx").read_text()))
    return entries
