"""Error codes for measurements and the exceptions raised by tensorgym.

The codes follow AutoTVM's ``MeasureErrorNo`` taxonomy so records from both are comparable.
"""
from __future__ import annotations

import enum


class ErrorCode(enum.IntEnum):
    NO_ERROR = 0
    INSTANTIATION_ERROR = 1  # the config is invalid for this workload/target (checked before build)
    COMPILE_HOST = 2
    COMPILE_DEVICE = 3
    RUNTIME_DEVICE = 4  # crash, illegal address, launch failure, worker died
    WRONG_ANSWER = 5
    BUILD_TIMEOUT = 6
    RUN_TIMEOUT = 7
    UNKNOWN_ERROR = 8


class TensorGymError(Exception):
    """Base class of tensorgym's exceptions."""


class InvalidConfigError(TensorGymError, ValueError):
    """A config (or action) that does not belong to the space, or violates the target's limits."""


class UnknownWorkloadError(TensorGymError, KeyError):
    """A workload name that is not registered and cannot be parsed as a shape."""

    def __str__(self) -> str:  # KeyError quotes its message; keep it readable
        return str(self.args[0]) if self.args else ""


class TargetUnavailableError(TensorGymError, RuntimeError):
    """The target's runtime or device is not present on this machine."""
