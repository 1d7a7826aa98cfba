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
    UNKNOWN_ERROR = 8  # e.g. a bug of lowering ("lowering bug: <traceback>"), not of the config


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


class RecordsError(TensorGymError, RuntimeError):
    """The records database cannot be opened, read or written. ``path`` is the database;
    ``saved_to`` is the side file that holds a batch that could not be written (or None)."""

    def __init__(self, message: str, path: str = "", saved_to: "str | None" = None) -> None:
        super().__init__(message)
        self.path = path
        self.saved_to = saved_to


class InvalidWorkloadError(TensorGymError, ValueError):
    """Workload sizes that are not exact positive integers, not the op's number of them, or a
    shape that cannot be computed (a kernel larger than its padded input)."""


class WorkloadTooLargeError(InvalidWorkloadError):
    """A workload whose tensors (all inputs and the output, in float32) exceed the size limit,
    refused before anything is allocated (``tensorgym.workloads.MAX_TENSOR_BYTES``)."""


class StepError(TensorGymError, RuntimeError):
    """``env.step`` failed for a reason outside the action (the measurement machinery, the
    records database); the original exception is its ``__cause__``."""


class LoweringBugWarning(RuntimeWarning):
    """Lowering a config raised something other than ``InvalidConfigError``: a bug of the
    template or the lowering, reported as ``ErrorCode.UNKNOWN_ERROR`` ("lowering bug: ...")
    rather than as an invalid config. The test suite turns it into an error."""
