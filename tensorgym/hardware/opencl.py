"""The OpenCL runtime (pyopencl): any OpenCL device, including PoCL on a CPU.

``compile`` builds the program for the chosen device and returns its binary, so build errors
surface in the compile step (raised as :class:`OpenCLBuildError`, a COMPILE_DEVICE error); ``load``
rebuilds from that binary, which is fast. PoCL specialises and optimises a kernel for its
work-group size only at the first launch (then caches it on disk), so ``compile`` also launches one
work-group on scratch buffers: that compile time lands in the build step, not in the timed run.
Kernels are timed with OpenCL profiling events.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ..errors import TargetUnavailableError, TensorGymError
from ..loopast import Program
from .runtime import Kernel, Runtime, checked_inputs


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

    def __init__(self, device_index: int = 0, build_options: tuple[str, ...] = ()):
        self.device_index = device_index
        self.build_options = tuple(build_options)  # e.g. ("-cl-opt-disable",) for fast tests
        self._device = None
        self._context = None

    @property
    def device(self):
        if self._device is None:
            self.check_available()
        return self._device

    @property
    def context(self):
        if self._context is None:
            self._context = _pyopencl().Context([self.device])
        return self._context

    def check_available(self) -> None:
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

    def device_name(self) -> str:
        d = self.device
        return f"opencl:{d.platform.name.strip()}/{d.name.strip()}/{d.version.strip()}"

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
        bufs = [cl.Buffer(self.context, cl.mem_flags.READ_WRITE, size=4 * b.size)
                for b in program.buffers]
        try:
            getattr(built, _kernel_name(program))(queue, block, block, *bufs)
            queue.finish()
        except cl.Error as e:
            raise OpenCLBuildError(f"OpenCL could not launch {program.name}: {e}") from None

    def load(self, binary: Any, program: Program) -> "OpenCLKernel":
        cl = _pyopencl()
        if isinstance(binary, str):  # the source: build it here
            binary = self.compile(binary, program)
        built = cl.Program(self.context, [self.device], [binary]).build(
            options=list(self.build_options))
        return OpenCLKernel(self, getattr(built, _kernel_name(program)), program)


def _kernel_name(program: Program) -> str:
    from ..codegen.cstyle import c_identifier  # noqa: PLC0415

    return c_identifier(program.name)


class OpenCLKernel(Kernel):
    def __init__(self, runtime: OpenCLRuntime, kernel, program: Program):
        cl = _pyopencl()
        self.cl = cl
        self.program = program
        self.kernel = kernel
        self.queue = cl.CommandQueue(runtime.context,
                                     properties=cl.command_queue_properties.PROFILING_ENABLE)
        block = tuple(program.launch.get("block", (1, 1, 1)))
        grid = tuple(program.launch.get("grid", (1, 1, 1)))
        self.local_size = block
        self.global_size = tuple(g * b for g, b in zip(grid, block))

    def alloc(self, inputs: Sequence[np.ndarray]) -> list:
        cl, ctx = self.cl, self.queue.context
        mf = cl.mem_flags
        bufs = [cl.Buffer(ctx, mf.READ_ONLY | mf.COPY_HOST_PTR, hostbuf=arr)
                for arr in checked_inputs(self.program, inputs)]
        for b in (self.program.args[-1], *self.program.workspaces):
            bufs.append(cl.Buffer(ctx, mf.READ_WRITE, size=4 * b.size))
        return bufs

    def time(self, bufs: list, number: int) -> float:
        events = [self.kernel(self.queue, self.global_size, self.local_size, *bufs)
                  for _ in range(number)]
        self.queue.finish()
        return sum(e.profile.end - e.profile.start for e in events) * 1e-9 / number

    def read_output(self, bufs: list) -> np.ndarray:
        out = np.empty(self.program.args[-1].shape, np.float32)
        self.cl.enqueue_copy(self.queue, out, bufs[len(self.program.args) - 1])
        return out

    def free(self, bufs: list) -> None:
        """Release the buffers of :meth:`alloc`."""
        for b in bufs:
            b.release()

    def close(self) -> None:
        self.queue.finish()
