"""The OpenCL runtime (pyopencl): any OpenCL device, including PoCL on a CPU.

``compile`` builds the program for the chosen device and returns its binary, so build errors
surface in the compile step (raised as :class:`OpenCLBuildError`, a COMPILE_DEVICE error); ``load``
rebuilds from that binary, which is fast. PoCL specialises and optimises a kernel for its
work-group size only at the first launch (then caches it on disk), so ``compile`` also launches one
work-group on scratch buffers: that compile time lands in the build step, not in the timed run.
Kernels are timed with OpenCL profiling events.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..errors import TargetUnavailableError, TensorGymError
from ..loopast import Program
from .device import Device
from .runtime import GUARD, DeviceKernel, HostMapping, Runtime, guarded_image


class OpenCLBuildError(TensorGymError, RuntimeError):
    """The OpenCL compiler rejected a kernel (maps to ErrorCode.COMPILE_DEVICE)."""


def _pyopencl():
    try:
        import pyopencl as cl  # noqa: PLC0415  (optional dependency)
    except ImportError as e:
        raise TargetUnavailableError(
            f"target 'opencl' needs pyopencl ({e}); pip install 'tensorgym[opencl]' "
            "(it brings PoCL, which runs OpenCL on this CPU) or use target 'cpu'") from None
    return cl


def list_devices() -> list:
    """Every OpenCL device, GPUs first."""
    cl = _pyopencl()
    try:
        platforms = cl.get_platforms()
    except cl.Error:  # no ICD loader entries: no platform at all
        return []
    devices = [d for p in platforms for d in p.get_devices()]
    return sorted(devices, key=lambda d: not d.type & cl.device_type.GPU)


class OpenCLRuntime(Runtime):
    target = "opencl"

    # built once by check_available: a driver whose compiler cannot build for this host (PoCL's
    # LLVM 14 knows no CPU newer than it, e.g. Zen 5) is an unavailable target, not a failed config
    PROBE_SOURCE = "__kernel void probe(__global float* a) { a[get_global_id(0)] = 1.0f; }"

    def __init__(self, device_index: int = 0, build_options: tuple[str, ...] = ()):
        self.device_index = device_index
        self.build_options = tuple(build_options)  # e.g. ("-cl-opt-disable",) for fast tests
        self._device = None
        self._context = None
        self._probed = False

    @property
    def device(self):
        if self._device is None:
            self._select_device()
        return self._device

    @property
    def context(self):
        if self._context is None:
            self._context = _pyopencl().Context([self.device])
        return self._context

    def check_available(self) -> None:
        self._select_device()
        if not self._probed:
            self._probe_build()
            self._probed = True

    def _probe_build(self) -> None:
        cl = _pyopencl()
        try:
            cl.Program(self.context, self.PROBE_SOURCE).build(options=list(self.build_options))
        except cl.Error as e:
            d = self.device
            raise TargetUnavailableError(
                f"OpenCL device {d.name.strip()!r} ({d.platform.version.strip()}) cannot build "
                f"even a one-line kernel on this machine: {_first_error(str(e))}. "
                f"{_advice(str(e))}") from None

    def _select_device(self) -> None:
        devices = list_devices()
        if not devices:
            raise TargetUnavailableError(
                "no OpenCL device was found; install an OpenCL driver (e.g. pip install "
                "pocl-binary-distribution for this CPU) or use target 'cpu'")
        if not 0 <= self.device_index < len(devices):
            raise TargetUnavailableError(
                f"OpenCL device {self.device_index} does not exist; there are {len(devices)}: "
                + ", ".join(d.name for d in devices))
        self._device = devices[self.device_index]

    @property
    def host_memory(self) -> bool:
        """A CPU device: buffers live in our own guarded host mappings, which it uses in place."""
        return bool(self.device.type & _pyopencl().device_type.CPU)

    def device_info(self) -> Device:
        d = self.device
        return Device("opencl", d.name.strip(), platform=d.platform.name.strip(),
                      version=d.version.strip())

    def limits(self) -> dict:
        d = self.device
        return {
            "max_threads_per_block": int(d.max_work_group_size),
            "max_block_dims": tuple(int(x) for x in d.max_work_item_sizes),
            "max_shared_memory_per_block": int(d.local_mem_size),
        }

    def render(self, program: Program) -> str:
        from ..codegen.opencl import render_opencl  # noqa: PLC0415

        return render_opencl(program)

    def compile(self, source: str, program: Program) -> bytes:
        cl = _pyopencl()
        try:
            built = cl.Program(self.context, source).build(options=list(self.build_options))
        except cl.Error as e:
            if UNKNOWN_CPU in str(e):
                raise TargetUnavailableError(
                    f"OpenCL cannot build {program.name}: {_first_error(str(e))}. "
                    f"{_advice(str(e))}") from None
            raise OpenCLBuildError(f"OpenCL build failed for {program.name}: {e}") from None
        self._finish_jit(built, program)
        return bytes(built.binaries[0])

    def _finish_jit(self, built, program: Program) -> None:
        """Launch one work-group on scratch buffers: PoCL compiles the kernel for its work-group
        size at the first launch and caches it on disk, so this moves that compile time from
        the timed worker into the build step."""
        cl = _pyopencl()
        block = tuple(program.launch.get("block", (1, 1, 1)))
        queue = cl.CommandQueue(self.context)
        # guarded like the worker's buffers, so a kernel that writes a little out of bounds
        # cannot corrupt this process before the worker catches it
        bufs = [_guarded_buffer(self.context, cl.mem_flags.READ_WRITE, guarded_image(None, b.size),
                                b.size, self.host_memory) for b in program.buffers]
        try:
            getattr(built, _kernel_name(program))(queue, block, block, *(v for _, v in bufs))
            queue.finish()
        except cl.Error as e:
            raise OpenCLBuildError(f"OpenCL could not launch {program.name}: {e}") from None
        finally:
            for alloc, view in bufs:
                _release(alloc, view)

    def load(self, binary: Any, program: Program) -> "OpenCLKernel":
        cl = _pyopencl()
        if isinstance(binary, str):  # the source: build it here
            binary = self.compile(binary, program)
        built = cl.Program(self.context, [self.device], [binary]).build(
            options=list(self.build_options))
        return OpenCLKernel(self, getattr(built, _kernel_name(program)), program)


UNKNOWN_CPU = "unknown target CPU"


def _first_error(log: str) -> str:
    """The compiler's first ``error:`` line (the build log repeats the options and device)."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    return next((line for line in lines if "error:" in line), lines[0] if lines else "no log")


def _advice(log: str) -> str:
    if UNKNOWN_CPU in log:
        import llvmlite.binding as llvm  # noqa: PLC0415

        version = ".".join(map(str, llvm.llvm_version_info))
        return (f"The driver's compiler does not know this CPU (LLVM {version} calls it "
                f"{llvm.get_host_cpu_name()}): it predates "
                "it. Use target 'cpu' (LLVM through llvmlite) here, or an OpenCL driver built "
                "with a newer LLVM")
    return "Use target 'cpu', or check the OpenCL driver's installation"


def _kernel_name(program: Program) -> str:
    from ..codegen.cstyle import c_identifier  # noqa: PLC0415

    return c_identifier(program.name)


def _guarded_buffer(context, flags: int, image: np.ndarray, size: int, host_memory: bool) -> tuple:
    """((buffer, its HostMapping or None), the sub-buffer of ``size`` floats at GUARD that the
    kernel gets) for a :func:`guarded_image`. With ``host_memory`` (a CPU device, which uses the
    mapping in place) a write past the canary faults, as on the cpu target."""
    cl = _pyopencl()
    mem = buf = view = None
    try:
        if host_memory:
            mem = HostMapping(image.size)
            mem.array[:] = image
            buf = cl.Buffer(context, flags | cl.mem_flags.USE_HOST_PTR, hostbuf=mem.array)
        else:
            buf = cl.Buffer(context, flags | cl.mem_flags.COPY_HOST_PTR, hostbuf=image)
        view = buf.get_sub_region(4 * GUARD, 4 * size)
    except BaseException:
        _release((buf, mem), view)
        raise
    return (buf, mem), view


def _release(alloc: tuple, view) -> None:
    buf, mem = alloc
    for obj in (view, buf):
        if obj is not None:
            obj.release()
    if mem is not None:
        mem.free()


class OpenCLKernel(DeviceKernel):
    def __init__(self, runtime: OpenCLRuntime, kernel, program: Program):
        cl = _pyopencl()
        self.cl = cl
        self.program = program
        self.kernel = kernel
        self.host_memory = runtime.host_memory
        self.queue = cl.CommandQueue(runtime.context,
                                     properties=cl.command_queue_properties.PROFILING_ENABLE)
        block = tuple(program.launch.get("block", (1, 1, 1)))
        grid = tuple(program.launch.get("grid", (1, 1, 1)))
        self.local_size = block
        self.global_size = tuple(g * b for g, b in zip(grid, block))

    def _upload(self, image: np.ndarray, size: int, read_only: bool) -> tuple:
        mf = self.cl.mem_flags
        return _guarded_buffer(self.queue.context, mf.READ_ONLY if read_only else mf.READ_WRITE,
                               image, size, self.host_memory)

    def _download(self, alloc: tuple, start: int, out: np.ndarray) -> None:
        self.cl.enqueue_copy(self.queue, out, alloc[0], src_offset=4 * start)

    def _free(self, alloc: tuple, view) -> None:
        _release(alloc, view)

    def time(self, bufs, number: int) -> float:
        events = [self.kernel(self.queue, self.global_size, self.local_size, *bufs.args)
                  for _ in range(number)]
        self.queue.finish()
        return sum(e.profile.end - e.profile.start for e in events) * 1e-9 / number

    def close(self) -> None:
        """Wait for the queue, then drop the kernel, its program and the queue (pyopencl frees
        an object when its last reference goes)."""
        if self.queue is not None:
            self.queue.finish()
        self.kernel = self.queue = None
