"""Targets: what a target name means. A ``Target`` is the canonical kind (``cpu``, ``opencl``,
``cuda``), the names that mean it, the schedule template its spaces use, the runtime that
renders, compiles and runs its kernels (imported only when asked for), and the device limits
assumed where no device can be asked. ``device_fingerprint`` names the device records of it are
comparable on.
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from ..errors import TargetUnavailableError, TensorGymError

if TYPE_CHECKING:
    from .runtime import Runtime

# Limits assumed for a GPU when a caller has no device to ask (a typical CUDA device of compute
# capability 7+).
DEFAULT_GPU_LIMITS: dict[str, Any] = {
    "max_threads_per_block": 1024,
    "max_block_dims": (1024, 1024, 64),
    "max_grid_dims": (2**31 - 1, 65535, 65535),
    "max_shared_memory_per_block": 48 * 1024,
    "max_registers_per_thread": 255,
    "max_registers_per_block": 65536,
}


@dataclass(frozen=True)
class Target:
    kind: str  # the canonical name, stored in records
    aliases: tuple[str, ...]  # every name that means this target, ``kind`` first
    template: str  # the schedule template of its spaces: "cpu" or "gpu"
    runtime_path: str  # "module:Class" of its ``Runtime``
    on_host: bool  # its kernels may run on the host's cores (PoCL runs OpenCL there)
    default_limits: Mapping[str, Any] = field(default_factory=dict, compare=False)

    def __str__(self) -> str:
        return self.kind

    def __reduce__(self) -> tuple:
        return (get_target, (self.kind,))  # one object per target, in every process

    def runtime(self, **kwargs: Any) -> "Runtime":
        """A new runtime for this target; raises ``TargetUnavailableError`` if its Python
        package is missing."""
        module, _, cls = self.runtime_path.partition(":")
        try:
            mod = importlib.import_module(module)
        except ImportError as e:
            raise TargetUnavailableError(
                f"target {self.kind!r} needs a package that is not installed ({e}); "
                f"install tensorgym[{self.kind}] or use target 'cpu'") from None
        return getattr(mod, cls)(**kwargs)

    def limits(self, runtime: "Runtime | None" = None) -> dict:
        """The limits configs are checked against: the device's (``runtime.limits()``), or the
        defaults assumed for this kind of target without one."""
        return dict(runtime.limits()) if runtime is not None else dict(self.default_limits)

    def device_fingerprint(self, runtime: "Runtime | None" = None, **runtime_kwargs: Any) -> str:
        """The device label records are keyed by (measurements are only comparable on the same
        one): the device's name and what changes its speed (the CPU's thread count). Uses
        ``runtime``, or a new one made with ``runtime_kwargs``; raises
        ``TargetUnavailableError`` where there is no device."""
        if runtime is None:
            runtime = self.runtime(**runtime_kwargs)
        elif runtime.target != self.kind:
            raise TensorGymError(f"a {runtime.target} runtime is not a {self.kind} device")
        runtime.check_available()
        return runtime.device_name()

    def timer_key(self, runtime_kwargs: Mapping[str, Any]) -> str:
        """The lock a timed run holds: the host's for kernels that may run on its cores, else
        the device's own."""
        return "host" if self.on_host else f"{self.kind}-{runtime_kwargs.get('device_index', 0)}"


CPU = Target("cpu", ("cpu", "llvm"), "cpu", "tensorgym.hardware.cpu:CPURuntime", on_host=True)
OPENCL = Target("opencl", ("opencl",), "gpu", "tensorgym.hardware.opencl:OpenCLRuntime",
                on_host=True, default_limits=DEFAULT_GPU_LIMITS)
CUDA = Target("cuda", ("cuda",), "gpu", "tensorgym.hardware.cuda:CUDARuntime", on_host=False,
              default_limits=DEFAULT_GPU_LIMITS)

ALL_TARGETS: tuple[Target, ...] = (CPU, OPENCL, CUDA)
TARGETS: tuple[str, ...] = tuple(t.kind for t in ALL_TARGETS)
TARGET_ALIASES: dict[str, str] = {alias: t.kind for t in ALL_TARGETS for alias in t.aliases}
_BY_NAME = {alias: t for t in ALL_TARGETS for alias in t.aliases}


def get_target(target: "str | Target") -> Target:
    """The ``Target`` a name (any alias) means; a ``Target`` is returned as it is."""
    if isinstance(target, Target):
        return target
    try:
        return _BY_NAME[target]
    except (KeyError, TypeError):
        raise TensorGymError(f"unknown target {target!r}; use one of "
                             f"{', '.join(sorted(TARGET_ALIASES))}") from None


def canonical_target(target: "str | Target") -> str:
    """The canonical name (``Target.kind``) of a target name or alias."""
    return get_target(target).kind
