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
