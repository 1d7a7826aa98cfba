"""Schedule templates: (workload, target) -> ConfigSpace. Knobs only; lowering reads them."""
from __future__ import annotations

from ..space import ConfigSpace
from ..workloads import Workload
from .cpu import cpu_space

TARGET_ALIASES = {"llvm": "cpu", "cpu": "cpu", "opencl": "opencl", "cuda": "cuda"}
TARGETS = ("cpu", "opencl", "cuda")


def canonical_target(target: str) -> str:
    from ..errors import TensorGymError

    try:
        return TARGET_ALIASES[target]
    except KeyError:
        raise TensorGymError(f"unknown target {target!r}; use one of "
                             f"{', '.join(sorted(TARGET_ALIASES))}") from None


def space_for(workload: Workload, target: str, **options) -> ConfigSpace:
    target = canonical_target(target)
    if target == "cpu":
        return cpu_space(workload, **options)
    from .gpu import gpu_space  # noqa: PLC0415  (GPU template lives beside the CPU one)

    return gpu_space(workload, target, **options)


def check_config(workload: Workload, config, limits: dict) -> None:
    """Raise InvalidConfigError if ``config`` breaks the target's limits (GPU threads, shared
    memory). CPU configs are valid by construction."""
    if config.space_name.endswith("/cpu"):
        return
    from .gpu import check_gpu_config  # noqa: PLC0415

    check_gpu_config(workload, config, limits)


def default_config(workload: Workload, target: str):
    """The plain hand-written schedule that rewards and speedups are measured against."""
    target = canonical_target(target)
    space = space_for(workload, target)
    if target == "cpu":
        from .cpu import default_cpu_values

        return space.from_values(default_cpu_values(workload))
    from .gpu import default_gpu_values  # noqa: PLC0415

    return space.from_values(default_gpu_values(workload))
