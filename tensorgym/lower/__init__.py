"""``lower(workload, config)``: a pure function from a schedule to its loop AST."""
from __future__ import annotations

from ..errors import InvalidConfigError
from ..loopast import Program
from ..space import Config
from ..workloads import Workload
from .cpu import lower_cpu
from .gpu import lower_gpu


def lower(workload: Workload, config: Config) -> Program:
    """The loop AST of ``config`` (a config of one of ``workload``'s spaces), by the template
    that built its space; a config of another workload's space raises InvalidConfigError."""
    if config.space_key is not None and config.space_key.workload_key != workload.key:
        raise InvalidConfigError(f"config of space {config.space_key} is not a config of "
                                 f"{workload.label}")
    if config.template == "cpu":
        return lower_cpu(workload, config)
    return lower_gpu(workload, config)
