"""The CPU template: multi-level tiling of every axis, loop reorder, vectorize, unroll, parallel
outer loops, a local accumulator, and inlining of the padding stage.

Spatial axes are split in three levels (S0 outer / S1 middle / S2 register tile) and reduction
axes in two (R0 / R1). S0 always comes first (its leading loops are fused and parallelised);
the ``reorder`` knob orders the other groups.
"""
from __future__ import annotations

import math

from ..space import ConfigSpace, SpaceKey, annotate_knob, other_knob, reorder_knob, split_knob
from ..workloads import Workload

CPU_ORDERS = (
    ("S1", "R0", "R1", "S2"),  # register tile innermost: the classic micro-kernel
    ("S1", "R0", "S2", "R1"),
    ("R0", "S1", "R1", "S2"),
    ("S1", "S2", "R0", "R1"),  # naive order: reduction innermost
)


def cpu_space(workload: Workload, split_policy: str = "all") -> ConfigSpace:
    out = workload.output
    knobs = []
    for ax in out.op.axes:
        if ax.extent > 1:
            knobs.append(split_knob(f"tile_{ax.name}", ax.extent, 3, split_policy))
    for ax in out.op.reduce_axes:
        if ax.extent > 1:
            knobs.append(split_knob(f"tile_{ax.name}", ax.extent, 2, split_policy))
    knobs += [
        reorder_knob("reorder", CPU_ORDERS),
        annotate_knob("vectorize", ["none", "inner"]),
        other_knob("unroll_max_step", [0, 16, 64, 512]),
        other_knob("parallel", [0, 1, 2]),
        other_knob("cache_write", [0, 1]),
    ]
    if workload.op == "conv2d" and workload.params[7] > 0:
        knobs.append(other_knob("inline_pad", [0, 1]))
    options = (("split_policy", split_policy),) if split_policy != "all" else ()
    return ConfigSpace(f"{workload.op}/cpu", tuple(knobs), SpaceKey(workload.key, "cpu", options))


def default_cpu_values(workload: Workload) -> dict:
    """A plain hand-written schedule: the reference that rewards are measured against.

    Outer loops fused and parallel, the reduction untiled, the innermost output axis vectorized
    in a tile of up to 16 lanes; roughly what a compiler does with no tuning.
    """
    space = cpu_space(workload)
    spatial = [k for k in space.knobs if k.kind == "split" and len(k.options[0]) == 3]
    values = {}
    for k in space.knobs:
        if k.kind == "split":
            extent = math.prod(k.options[0])
            if len(k.options[0]) == 2:
                values[k.name] = (extent, 1)
            else:
                inner = max(d for d in range(1, 17) if extent % d == 0) if k is spatial[-1] else 1
                values[k.name] = (extent // inner, 1, inner)
        else:
            values[k.name] = k.options[0]
    values.update(reorder=CPU_ORDERS[0], vectorize="inner", unroll_max_step=0, parallel=1,
                  cache_write=0)
    if "inline_pad" in values:
        values["inline_pad"] = 1
    return values
