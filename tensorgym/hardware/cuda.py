"""The CUDA runtime: NVIDIA's cuda-python driver bindings, NVRTC (or nvcc) to compile, CUDA
events to time.

``compile`` returns a cubin for the device's architecture (NVRTC when its library loads, else
``nvcc -cubin``), so compile errors surface there as :class:`CUDACompileError` (COMPILE_DEVICE).
With no CUDA device, :meth:`CUDARuntime.check_available` raises TargetUnavailableError naming
the targets that do work here; nothing falls back silently.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from typing import Any

import numpy as np

from ..errors import TargetUnavailableError, TensorGymError
from ..loopast import Program
from .device import Device
from .runtime import GUARD, DeviceKernel, Runtime


class CUDACompileError(TensorGymError, RuntimeError):
    """NVRTC or nvcc rejected a kernel (maps to ErrorCode.COMPILE_DEVICE)."""


class CUDAError(TensorGymError, RuntimeError):
    """A CUDA driver call failed (launch failure, illegal address, ...)."""


def _bindings():
    try:
        from cuda.bindings import driver  # noqa: PLC0415  (cuda-python >= 12.6)
    except ImportError:
        try:
            from cuda import cuda as driver  # noqa: PLC0415  (older cuda-python)
        except ImportError as e:
            raise TargetUnavailableError(
                f"target 'cuda' needs cuda-python ({e}); pip install 'tensorgym[cuda]'; "
                f"available targets here: {', '.join(other_targets())}") from None
    return driver


def other_targets() -> list[str]:
    """The targets that work on this machine besides CUDA."""
    out = ["cpu"]
    try:
        from .opencl import list_devices  # noqa: PLC0415

        if list_devices():
            out.append("opencl")
    except TensorGymError:
        pass
    return out


def _check(result, what: str):
    """Unpack a cuda-python ``(err, *values)`` tuple, raising on error."""
    err, *values = result if isinstance(result, tuple) else (result,)
    if int(err) != 0:
        driver = _bindings()
        _, msg = driver.cuGetErrorString(err)
        raise CUDAError(f"{what} failed: {err!r} {msg.decode() if msg else ''}")
    return values[0] if len(values) == 1 else tuple(values)


class CUDARuntime(Runtime):
    target = "cuda"

    def __init__(self, device_index: int = 0, arch: "str | None" = None):
        self.device_index = device_index
        self._arch = arch  # e.g. "sm_90"; detected from the device when None
        self._device = None
        self._context = None

    def check_available(self) -> None:
        if self._device is not None:
            return
        driver = _bindings()
        reason = None
        try:
            err, = driver.cuInit(0)
            if int(err) != 0:
                reason = f"cuInit returned {err!r}"
            else:
                count = _check(driver.cuDeviceGetCount(), "cuDeviceGetCount")
                if count <= self.device_index:
                    reason = f"{count} CUDA device(s) visible"
        except (RuntimeError, OSError) as e:  # no driver library at all
            reason = f"{type(e).__name__}: {e}"
        if reason is not None:
            raise TargetUnavailableError(
                f"no CUDA device was found ({reason}); available targets here: "
                f"{', '.join(other_targets())}")
        self._device = _check(driver.cuDeviceGet(self.device_index), "cuDeviceGet")
        self._context = _check(driver.cuDevicePrimaryCtxRetain(self._device), "cuCtxRetain")
        _check(driver.cuCtxSetCurrent(self._context), "cuCtxSetCurrent")

    def _attr(self, name: str) -> int:
        self.check_available()
        driver = _bindings()
        attr = getattr(driver.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}")
        return int(_check(driver.cuDeviceGetAttribute(attr, self._device), name))

    @property
    def arch(self) -> str:
        if self._arch is None:
            self._arch = (f"sm_{self._attr('COMPUTE_CAPABILITY_MAJOR')}"
                          f"{self._attr('COMPUTE_CAPABILITY_MINOR')}")
        return self._arch

    def device_info(self) -> Device:
        self.check_available()
        raw = _check(_bindings().cuDeviceGetName(256, self._device), "cuDeviceGetName")
        name = raw.split(b"\0")[0].decode().strip()
        return Device("cuda", name, self.arch)

    def limits(self) -> dict:
        return {
            "max_threads_per_block": self._attr("MAX_THREADS_PER_BLOCK"),
            "max_block_dims": tuple(self._attr(f"MAX_BLOCK_DIM_{d}") for d in "XYZ"),
            "max_grid_dims": tuple(self._attr(f"MAX_GRID_DIM_{d}") for d in "XYZ"),
            "max_shared_memory_per_block": self._attr("MAX_SHARED_MEMORY_PER_BLOCK"),
            "max_registers_per_block": self._attr("MAX_REGISTERS_PER_BLOCK"),
            "max_registers_per_thread": 255,  # every architecture since Kepler
        }

    def render(self, program: Program) -> str:
        from ..codegen.cuda import render_cuda  # noqa: PLC0415

        return render_cuda(program)

    def compile(self, source: str, program: Program) -> bytes:
        try:
            return nvrtc_compile(source, self.arch)
        except (ImportError, RuntimeError, OSError) as e:
            if isinstance(e, CUDACompileError):
                raise
            return nvcc_compile(source, self.arch, "cubin")

    def load(self, binary: Any, program: Program) -> "CUDAKernel":
        self.check_available()
        driver = _bindings()
        image = np.frombuffer(bytes(binary), np.uint8).copy()
        module = _check(driver.cuModuleLoadData(image.ctypes.data), "cuModuleLoadData")
        from ..codegen.cstyle import c_identifier  # noqa: PLC0415

        try:
            func = _check(driver.cuModuleGetFunction(module, c_identifier(program.name).encode()),
                          "cuModuleGetFunction")
            return CUDAKernel(driver, module, func, program)
        except BaseException:
            driver.cuModuleUnload(module)
            raise


def nvrtc_compile(source: str, arch: str) -> bytes:
    """A cubin via NVRTC; ImportError/OSError/RuntimeError when NVRTC cannot be loaded."""
    from cuda.bindings import nvrtc  # noqa: PLC0415

    def ok(result, what):
        err, *values = result
        if int(err) != 0:
            raise RuntimeError(f"{what}: {err!r}")
        return values[0] if values else None

    prog = ok(nvrtc.nvrtcCreateProgram(source.encode(), b"kernel.cu", 0, [], []), "create")
    opts = [f"--gpu-architecture={arch}".encode()]  # NVRTC optimises by default
    err, = nvrtc.nvrtcCompileProgram(prog, len(opts), opts)
    if int(err) != 0:
        size = ok(nvrtc.nvrtcGetProgramLogSize(prog), "log size")
        log = b" " * size
        nvrtc.nvrtcGetProgramLog(prog, log)
        raise CUDACompileError(f"NVRTC failed: {log.decode(errors='replace')[:2000]}")
    size = ok(nvrtc.nvrtcGetCUBINSize(prog), "cubin size")
    cubin = b" " * size
    ok(nvrtc.nvrtcGetCUBIN(prog, cubin), "cubin")
    nvrtc.nvrtcDestroyProgram(prog)
    return cubin


def find_nvcc() -> "str | None":
    return shutil.which("nvcc") or next(
        (p for p in ("/usr/local/cuda/bin/nvcc",) if os.path.exists(p)), None)


def nvcc_compile(source: str, arch: str, kind: str = "cubin", timeout: float = 120) -> bytes:
    """``nvcc -cubin`` (or ``-ptx``) of ``source`` for ``arch`` (e.g. ``sm_90``)."""
    nvcc = find_nvcc()
    if nvcc is None:
        raise CUDACompileError("neither NVRTC nor nvcc is available to compile CUDA")
    with tempfile.TemporaryDirectory(prefix="tensorgym-cuda-") as tmp:
        src, out = os.path.join(tmp, "kernel.cu"), os.path.join(tmp, f"kernel.{kind}")
        with open(src, "w") as f:
            f.write(source)
        proc = subprocess.run([nvcc, f"-{kind}", f"-arch={arch}", "-O3", src, "-o", out],
                              capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise CUDACompileError(f"nvcc failed: {proc.stderr[-2000:]}")
        with open(out, "rb") as f:
            return f.read()


class CUDAKernel(DeviceKernel):
    def __init__(self, driver, module, func, program: Program):
        self.driver = driver
        self.module = module
        self.func = func
        self.program = program
        self.grid = tuple(program.launch.get("grid", (1, 1, 1)))
        self.block = tuple(program.launch.get("block", (1, 1, 1)))
        self.start = _check(driver.cuEventCreate(0), "cuEventCreate")
        try:
            self.end = _check(driver.cuEventCreate(0), "cuEventCreate")
        except BaseException:
            driver.cuEventDestroy(self.start)
            raise

    def _upload(self, image: np.ndarray, size: int, read_only: bool) -> tuple:
        d = self.driver
        alloc = _check(d.cuMemAlloc(image.nbytes), "cuMemAlloc")
        try:
            _check(d.cuMemcpyHtoD(alloc, image.ctypes.data, image.nbytes), "cuMemcpyHtoD")
        except BaseException:
            d.cuMemFree(alloc)
            raise
        return alloc, d.CUdeviceptr(int(alloc) + 4 * GUARD)

    def _download(self, alloc, start: int, out: np.ndarray) -> None:
        src = self.driver.CUdeviceptr(int(alloc) + 4 * start)
        _check(self.driver.cuMemcpyDtoH(out.ctypes.data, src, out.nbytes), "cuMemcpyDtoH")

    def _free(self, alloc, view) -> None:
        _check(self.driver.cuMemFree(alloc), "cuMemFree")

    def _launch(self, args: list) -> None:
        params = (tuple(args), (None,) * len(args))  # None: the value is a CUdeviceptr
        _check(self.driver.cuLaunchKernel(self.func, *self.grid, *self.block, 0, 0, params, 0),
               "cuLaunchKernel")

    def time(self, bufs, number: int) -> float:
        d = self.driver
        _check(d.cuEventRecord(self.start, 0), "cuEventRecord")
        for _ in range(number):
            self._launch(bufs.args)
        _check(d.cuEventRecord(self.end, 0), "cuEventRecord")
        _check(d.cuEventSynchronize(self.end), "kernel run")
        ms = _check(d.cuEventElapsedTime(self.start, self.end), "cuEventElapsedTime")
        return float(ms) * 1e-3 / number

    def close(self) -> None:
        """Destroy the events and unload the module (every call is made, then failures raise)."""
        if self.module is None:
            return
        d = self.driver
        results = [(d.cuEventDestroy(self.start), "cuEventDestroy"),
                   (d.cuEventDestroy(self.end), "cuEventDestroy"),
                   (d.cuModuleUnload(self.module), "cuModuleUnload")]
        self.module = self.func = None
        for result, what in results:
            _check(result, what)
