"""The interface every backend implements, in tinygrad's four roles: render (loop AST -> source),
compile (source -> picklable binary), load (binary -> Kernel), and the kernel's own buffers.

The measurement worker only talks to this interface, so CPU, OpenCL and CUDA share one runner.
"""
from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from typing import Any, Sequence

import numpy as np

from ..errors import TargetUnavailableError
from ..loopast import Program


def checked_inputs(program: Program, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """``inputs`` as contiguous float32 arrays, checked against the program's input buffers."""
    ins = program.args[:-1]
    if len(inputs) != len(ins):
        raise ValueError(f"{program.name} takes {len(ins)} inputs, got {len(inputs)}")
    out = []
    for arr, b in zip(inputs, ins):
        arr = np.ascontiguousarray(arr, dtype=np.float32)
        if arr.shape != b.shape:
            raise ValueError(f"input {b.name} has shape {b.shape}, got {arr.shape}")
        out.append(arr)
    return out


class Kernel(ABC):
    """A loaded kernel bound to one device."""

    @abstractmethod
    def alloc(self, inputs: Sequence[np.ndarray]) -> Any:
        """Upload ``inputs``; allocate the output and workspaces. Returns the buffers handle."""

    @abstractmethod
    def time(self, bufs: Any, number: int) -> float:
        """Run ``number`` times back to back; mean seconds per run."""

    @abstractmethod
    def read_output(self, bufs: Any) -> np.ndarray:
        """The output buffer, as a host array of the output's shape."""

    def flush_cache(self) -> None:  # noqa: B027  (optional)
        """Evict the last-level cache between samples, where the runtime can."""


class Runtime(ABC):
    target: str = ""

    @abstractmethod
    def check_available(self) -> None:
        """Raise TargetUnavailableError (saying what to use instead) if there is no device."""

    @abstractmethod
    def device_name(self) -> str:
        """A fingerprint of the device: records are only comparable on the same one."""

    def limits(self) -> dict:
        """Device limits templates check before compiling (threads/block, shared memory, ...)."""
        return {}

    @abstractmethod
    def render(self, program: Program) -> str:
        """The kernel's source text (LLVM IR, OpenCL C or CUDA C)."""

    @abstractmethod
    def compile(self, source: str, program: Program) -> Any:
        """A picklable binary (object code, PTX, or the source for runtimes that JIT it)."""

    @abstractmethod
    def load(self, binary: Any, program: Program) -> Kernel:
        """Load the binary on the device (called inside the measurement worker)."""


_RUNTIMES = {
    "cpu": "tensorgym.hardware.cpu:CPURuntime",
    "opencl": "tensorgym.hardware.opencl:OpenCLRuntime",
    "cuda": "tensorgym.hardware.cuda:CUDARuntime",
}


def get_runtime(target: str, **kwargs: Any) -> Runtime:
    """The runtime for a canonical target name; raises TargetUnavailableError if its Python
    package is missing."""
    from ..templates import canonical_target

    target = canonical_target(target)
    module, _, cls = _RUNTIMES[target].partition(":")
    try:
        mod = importlib.import_module(module)
    except ImportError as e:
        raise TargetUnavailableError(
            f"target {target!r} needs a package that is not installed ({e}); "
            f"install tensorgym[{target}] or use target 'cpu'") from None
    return getattr(mod, cls)(**kwargs)
