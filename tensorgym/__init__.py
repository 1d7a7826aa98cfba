"""tensorgym: learning to optimize tensor programs, as Gymnasium environments with real
measurements. ``import tensorgym`` registers the ``TensorSched-*`` environments."""
from __future__ import annotations

from typing import Any

from . import envs  # noqa: F401  (registers the environments)
from .errors import (ErrorCode, InvalidConfigError, InvalidWorkloadError, RecordsError, StepError,
                     TargetUnavailableError, TensorGymError, WorkloadTooLargeError)
from .space import Config, ConfigSpace
from .workloads import WORKLOADS, Workload, conv2d, get_workload, matmul

__version__ = "0.1.0"


def make_env(workload: "str | Workload", target: str, **kwargs: Any) -> Any:
    """The tuning env for any workload (registered name, shape key or ``Workload``) and target:
    ``gym.make("TensorSched-v0", workload=..., target=..., **kwargs)``."""
    import gymnasium as gym

    return gym.make("TensorSched-v0", workload=get_workload(workload), target=target, **kwargs)


__all__ = ["Config", "ConfigSpace", "ErrorCode", "InvalidConfigError", "InvalidWorkloadError",
           "RecordsError", "StepError", "TargetUnavailableError", "TensorGymError",
           "WorkloadTooLargeError", "WORKLOADS", "Workload", "conv2d", "get_workload", "make_env",
           "matmul"]
