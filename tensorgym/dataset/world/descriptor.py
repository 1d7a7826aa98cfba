"""The world model's workload row: the workload descriptor every learner sees
(``tensorgym.features.descriptor``: the operator kind, its sizes, FLOPs, bytes, intensity, the
epilogue and the target, each ``log2(1 + x)``), then three columns that help a model of time
(``EXTRA_NAMES``): ``log2(1 + outputs)``, ``log2(1 + reduction length)`` and ``log2(groups)``.
The same for every config of a task, which lets one model learn across tasks."""
from __future__ import annotations

import math

import numpy as np

from ...features.descriptor import (DESCRIPTOR_LENGTH, KINDS, TARGETS, descriptor_names,
                                    operator_kind, workload_descriptor)
from ...workloads import Workload

EXTRA_NAMES = ("log2_outputs", "log2_reduction", "log2_groups")
DESCRIPTOR_NAMES = descriptor_names() + EXTRA_NAMES
N_DESCRIPTOR = DESCRIPTOR_LENGTH + len(EXTRA_NAMES)


def kind(workload: Workload) -> str:
    """The operator kind (``features.descriptor.KINDS``)."""
    return operator_kind(workload)


def describe(workload: Workload, target: str) -> np.ndarray:
    """The (``N_DESCRIPTOR``,) float32 row of ``workload`` on ``target``."""
    extra = (math.log2(1 + workload.output.size), math.log2(1 + workload.reduction_length),
             math.log2(workload.groups))
    return np.concatenate([workload_descriptor(workload, target),
                           np.asarray(extra, np.float32)]).astype(np.float32)


__all__ = ["DESCRIPTOR_NAMES", "EXTRA_NAMES", "KINDS", "N_DESCRIPTOR", "TARGETS", "describe",
           "kind"]
