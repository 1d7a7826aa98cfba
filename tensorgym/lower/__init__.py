"""``lower(workload, config)``: a pure function from a schedule to its loop AST."""
from __future__ import annotations

from ..loopast import Program
from ..space import Config
from ..workloads import Workload
from .cpu import lower_cpu


def lower(workload: Workload, config: Config) -> Program:
    target = config.space_name.split("/")[-1]
    if target == "cpu":
        return lower_cpu(workload, config)
    from .gpu import lower_gpu  # noqa: PLC0415

    return lower_gpu(workload, config)
