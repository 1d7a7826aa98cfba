"""Schedule templates: (workload, target) -> ConfigSpace. Knobs only; lowering reads them.

A target's ``Target.template`` names its template (``cpu``, or ``gpu`` for both GPU targets);
every space a template builds carries a ``SpaceKey`` (workload, template, options), and so does
each of its configs.
"""
from __future__ import annotations

from typing import Any, Mapping

from ..errors import InvalidConfigError
from ..hardware.target import TARGET_ALIASES, TARGETS, Target, canonical_target, get_target
from ..space import Config, ConfigSpace, SpaceKey
from ..workloads import Workload
from .cpu import cpu_space, default_cpu_values
from .gpu import check_gpu_config, default_gpu_values, gpu_space

__all__ = ["TARGETS", "TARGET_ALIASES", "canonical_target", "space_for", "space_of",
           "check_config", "default_config"]


def space_for(workload: Workload, target: "str | Target", **options: Any) -> ConfigSpace:
    return _space(workload, get_target(target).template, options)


def space_of(workload: Workload, key: SpaceKey) -> ConfigSpace:
    """The space ``key`` identifies (``config.space_key``), for ``workload``."""
    if key.workload_key != workload.key:
        raise InvalidConfigError(f"space {key} is not a space of {workload.label}")
    return _space(workload, key.template, dict(key.options))


def _space(workload: Workload, template: str, options: Mapping[str, Any]) -> ConfigSpace:
    if template == "cpu":
        return cpu_space(workload, **options)
    return gpu_space(workload, **options)


def check_config(workload: Workload, config: Config, limits: Mapping) -> None:
    """Raise InvalidConfigError if ``config`` breaks the target's limits (GPU threads, shared
    memory). CPU configs are valid by construction."""
    if config.template != "gpu":
        return
    check_gpu_config(workload, config, limits)


def default_config(workload: Workload, target: "str | Target") -> Config:
    """The plain hand-written schedule that rewards and speedups are measured against."""
    template = get_target(target).template
    space = _space(workload, template, {})
    if template == "cpu":
        return space.from_values(default_cpu_values(workload))
    return space.from_values(default_gpu_values(workload))
