"""tensorgym: learning to optimize tensor programs, as Gymnasium environments with real
measurements. ``import tensorgym`` registers the ``TensorSched-*`` environments."""
from __future__ import annotations

from .envs import make_env  # registers the environments
from .errors import (ErrorCode, InvalidConfigError, InvalidWorkloadError, RecordsError, StepError,
                     TargetUnavailableError, TensorGymError, WorkloadTooLargeError)
from .space import Config, ConfigSpace
from .workloads import WORKLOADS, Workload, batch_matmul, conv2d, dense, get_workload, matmul

__version__ = "0.1.0"


__all__ = ["Config", "ConfigSpace", "ErrorCode", "InvalidConfigError", "InvalidWorkloadError",
           "RecordsError", "StepError", "TargetUnavailableError", "TensorGymError",
           "WorkloadTooLargeError", "WORKLOADS", "Workload", "batch_matmul", "conv2d", "dense",
           "get_workload", "make_env", "matmul"]
