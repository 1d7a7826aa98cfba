"""The interface every backend implements, in tinygrad's four roles: render (loop AST -> source),
compile (source -> picklable binary), load (binary -> Kernel), and the kernel's own buffers.

The measurement worker only talks to this interface, so CPU, OpenCL and CUDA share one runner.
"""
from __future__ import annotations

import ctypes
import mmap
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..loopast import Program
from .device import Device
from .target import Target, get_target


def checked_inputs(program: Program, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """``inputs`` (the workload's arrays) as contiguous float32 arrays in the layouts the kernel
    takes, checked against the program's input buffers. An input with a packed layout
    (``program.input_layouts``) is packed here unless it already has the packed shape
    (``program.pack_inputs``), ahead of the timed runs, as inference compilers pre-pack
    weights; :func:`packing_seconds` times that step on its own."""
    ins = program.args[:-1]
    if len(inputs) != len(ins):
        raise ValueError(f"{program.name} takes {len(ins)} inputs, got {len(inputs)}")
    out = []
    for i, (arr, b) in enumerate(zip(inputs, ins)):
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        layout = program.layout_of(i)
        if layout is not None and arr.shape != b.shape:  # not packed yet
            if len(arr.shape) + 1 != len(b.shape) or layout.packed_shape(arr.shape) != b.shape:
                raise ValueError(f"input {b.name} is packed to {b.shape} by {layout}; "
                                 f"got an array of shape {arr.shape}")
            arr = layout.apply(arr)
        if arr.shape != b.shape:
            raise ValueError(f"input {b.name} has shape {b.shape}, got {arr.shape}")
        out.append(arr)
    return out


def packing_seconds(program: Program, inputs: Sequence[np.ndarray], repeat: int = 5) -> float:
    """The best of ``repeat`` timings of packing ``inputs`` into the program's input layouts
    (0.0 when none is packed): the ahead-of-time cost that the kernel's own time leaves out."""
    import time

    if not any(layout is not None for layout in program.input_layouts):
        return 0.0
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        program.pack_inputs(inputs)
        best = min(best, time.perf_counter() - t0)
    return best


# Every buffer a kernel gets (inputs, output, workspaces) sits between canary regions of GUARD
# floats; the kernel must leave them, and its inputs, exactly as they were.
GUARD = 16384
CANARY = 0x7FBADBAD  # a signalling-NaN bit pattern: no arithmetic produces it


def canary_damage(name: str, before: np.ndarray, after: np.ndarray) -> list[str]:
    """What a kernel overwrote in the canary regions read back from before and after buffer
    ``name`` (float32 arrays); empty when both are intact."""
    out = []
    hit = np.flatnonzero(before.view(np.uint32) != CANARY)
    if hit.size:
        out.append(f"{hit.size} float(s) written up to {before.size - hit[0]} before the start of "
                   f"{name}")
    hit = np.flatnonzero(after.view(np.uint32) != CANARY)
    if hit.size:
        out.append(f"{hit.size} float(s) written up to {hit[-1] + 1} past the end of {name}")
    return out


PAGE_FLOATS = mmap.PAGESIZE // 4


def page_floats(n: int) -> int:
    """``n`` floats rounded up to whole pages."""
    return -(-n // PAGE_FLOATS) * PAGE_FLOATS


def guarded_image(data: "np.ndarray | None", size: int) -> np.ndarray:
    """The host image of one buffer: GUARD floats of canary, then ``data`` (NaN-filled when None,
    so an element the kernel forgets to write fails the check), then canary to at least GUARD
    floats and a whole number of pages."""
    image = np.full(page_floats(size + 2 * GUARD), CANARY, np.uint32).view(np.float32)
    image[GUARD:GUARD + size] = np.nan if data is None else data.reshape(-1)
    return image


_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                       ctypes.c_long]
_libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_NO_ACCESS = 1 << 20  # bytes of PROT_NONE on each side
_PROT_NONE = 0


def _os_check(rc: int, what: str) -> None:
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, f"{what}: {os.strerror(e)}")


class HostMapping:
    """``floats`` (whole pages) of read-write host memory in a mapping of their own, between
    PROT_NONE guards: a kernel that runs past a canary into them faults (and its worker dies)
    instead of corrupting memory that something else owns."""

    def __init__(self, floats: int) -> None:
        if floats % PAGE_FLOATS:
            raise ValueError(f"{floats} floats is not a whole number of pages")
        self._length = 2 * _NO_ACCESS + 4 * floats
        addr = _libc.mmap(None, self._length, _PROT_NONE,
                          mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS, -1, 0)
        if addr is None or addr == ctypes.c_void_p(-1).value:
            _os_check(-1, f"mmap of {self._length} bytes")
        self._addr = addr
        self.ptr = addr + _NO_ACCESS
        try:
            _os_check(_libc.mprotect(self.ptr, 4 * floats, mmap.PROT_READ | mmap.PROT_WRITE),
                      "mprotect")
            if floats >= 1 << 20:  # huge pages for large arrays, as NumPy does: same timings
                _libc.madvise(self.ptr, 4 * floats, getattr(mmap, "MADV_HUGEPAGE", 0))
        except BaseException:
            self.free()
            raise
        self.array = np.ctypeslib.as_array((ctypes.c_float * floats).from_address(self.ptr))

    def make_read_only(self) -> None:
        _os_check(_libc.mprotect(self.ptr, self.array.nbytes, mmap.PROT_READ), "mprotect")

    def free(self) -> None:
        if getattr(self, "_addr", None) is not None:
            self.array = None
            addr, self._addr = self._addr, None
            _os_check(_libc.munmap(addr, self._length), "munmap")

    __del__ = free


class Kernel(ABC):
    """A loaded kernel bound to one device."""

    @abstractmethod
    def alloc(self, inputs: Sequence[np.ndarray]) -> Any:
        """Upload ``inputs``; allocate the output and workspaces NaN-filled. Every buffer sits
        between canary regions (see :meth:`check_guards`). Returns the buffers handle."""

    @abstractmethod
    def time(self, bufs: Any, number: int) -> float:
        """Run ``number`` times back to back; mean seconds per run."""

    @abstractmethod
    def read_output(self, bufs: Any) -> np.ndarray:
        """The output buffer, as a host array of the output's shape."""

    @abstractmethod
    def check_guards(self, bufs: Any) -> list[str]:
        """What the kernel wrote where it must not (a canary around any buffer, an input), one
        line each; empty when it kept to its output and workspaces."""

    @abstractmethod
    def release(self, bufs: Any) -> None:
        """Free the buffers of :meth:`alloc` (the handle is unusable afterwards)."""

    def close(self) -> None:  # noqa: B027  (nothing to free on some runtimes)
        """Free what :meth:`Runtime.load` acquired (module, program, events)."""

    def flush_cache(self) -> None:  # noqa: B027  (optional)
        """Evict the last-level cache between samples, where the runtime can."""


@dataclass
class DeviceBuffers:
    """The buffers of a :class:`DeviceKernel`: ``allocs`` hold a :func:`guarded_image` each,
    ``args`` are the views at GUARD floats that the kernel is passed."""

    allocs: list = field(default_factory=list)
    args: list = field(default_factory=list)
    inputs: list = field(default_factory=list)  # the host inputs, to check them unchanged


class DeviceKernel(Kernel):
    """The buffer contract for runtimes with their own memory (OpenCL, CUDA): each buffer is one
    allocation holding :func:`guarded_image`, the kernel is passed a view at its data. Subclasses
    only move bytes."""

    program: Program

    @abstractmethod
    def _upload(self, image: np.ndarray, size: int, read_only: bool) -> tuple[Any, Any]:
        """Allocate a buffer holding ``image``; (the allocation, the view of ``size`` floats at
        GUARD that the kernel gets)."""

    @abstractmethod
    def _download(self, alloc: Any, start: int, out: np.ndarray) -> None:
        """Copy ``out.size`` floats from float offset ``start`` of ``alloc`` into ``out``."""

    @abstractmethod
    def _free(self, alloc: Any, view: Any) -> None:
        """Free one buffer of :meth:`_upload`."""

    def alloc(self, inputs: Sequence[np.ndarray]) -> DeviceBuffers:
        bufs = DeviceBuffers(inputs=checked_inputs(self.program, inputs))
        data = bufs.inputs + [None] * len(self.program.buffers)
        try:
            for i, b in enumerate(self.program.buffers):
                alloc, view = self._upload(guarded_image(data[i], b.size), b.size,
                                           i < len(bufs.inputs))
                bufs.allocs.append(alloc)
                bufs.args.append(view)
        except BaseException:
            self.release(bufs)
            raise
        return bufs

    def read_output(self, bufs: DeviceBuffers) -> np.ndarray:
        out = np.empty(self.program.args[-1].shape, np.float32)
        self._download(bufs.allocs[len(bufs.inputs)], GUARD, out.reshape(-1))
        return out

    def check_guards(self, bufs: DeviceBuffers) -> list[str]:
        problems = []
        for i, (b, alloc) in enumerate(zip(self.program.buffers, bufs.allocs)):
            before = np.empty(GUARD, np.float32)
            after = np.empty(page_floats(b.size + 2 * GUARD) - GUARD - b.size, np.float32)
            self._download(alloc, 0, before)
            self._download(alloc, GUARD + b.size, after)
            problems += canary_damage(b.name, before, after)
            if i < len(bufs.inputs):
                now = np.empty(b.size, np.float32)
                self._download(alloc, GUARD, now)
                if not np.array_equal(now.view(np.uint32),
                                      bufs.inputs[i].reshape(-1).view(np.uint32)):
                    problems.append(f"input {b.name} written")
        return problems

    def release(self, bufs: DeviceBuffers) -> None:
        errors = []
        for alloc, view in zip(bufs.allocs, bufs.args):
            try:
                self._free(alloc, view)
            except Exception as e:  # noqa: BLE001 - free the rest, then report
                errors.append(e)
        bufs.allocs.clear()
        bufs.args.clear()
        if errors:
            raise errors[0]


class Runtime(ABC):
    target: str = ""

    @abstractmethod
    def check_available(self) -> None:
        """Raise TargetUnavailableError (saying what to use instead) if there is no device."""

    @abstractmethod
    def device_info(self) -> Device:
        """The device kernels run on: records are only comparable on the same one."""

    def device_name(self) -> str:
        """The device's fingerprint, ``str(device_info())``: what records are keyed by."""
        return str(self.device_info())

    def limits(self) -> dict:
        """Device limits templates check before compiling (threads/block, shared memory, ...)."""
        return {}

    @abstractmethod
    def render(self, program: Program) -> str:
        """The kernel's source text (LLVM IR, OpenCL C or CUDA C)."""

    @abstractmethod
    def compile(self, source: str, program: Program) -> Any:
        """A picklable binary (object code, PTX, or the source for runtimes that JIT it)."""

    def compile_info(self, program: Program, source: str) -> dict:
        """How :meth:`compile` builds ``source`` (e.g. ``{"opt_level": 3}``), for the record; the
        same for a binary that comes from a cache. Empty where there is nothing to choose."""
        return {}

    @abstractmethod
    def load(self, binary: Any, program: Program) -> Kernel:
        """Load the binary on the device (called inside the measurement worker)."""


def get_runtime(target: "str | Target", **kwargs: Any) -> Runtime:
    """The runtime for a target (any alias); raises TargetUnavailableError if its Python
    package is missing."""
    return get_target(target).runtime(**kwargs)
