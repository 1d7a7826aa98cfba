"""The OpenCL C dialect of the C-style walker."""
from __future__ import annotations

from ..loopast import Program
from .cstyle import CStyleRenderer, Dialect

OPENCL = Dialect(
    name="opencl",
    kernel_prefix="__kernel{launch} void",
    launch_attribute=lambda b: f" __attribute__((reqd_work_group_size({b[0]}, {b[1]}, {b[2]})))",
    global_qualifier="__global ",
    shared_qualifier="__local ",
    restrict="restrict ",
    barrier="barrier(CLK_LOCAL_MEM_FENCE);",
    work_items={**{f"blockIdx.{d}": f"get_group_id({i})" for i, d in enumerate("xyz")},
                **{f"threadIdx.{d}": f"get_local_id({i})" for i, d in enumerate("xyz")}},
    # vloadn/vstoren need only scalar alignment.
    vector_copy=lambda w, dst, src: f"vstore{w}(vload{w}(0, {src}), 0, {dst});",
    vector_load=lambda w, ptr: f"vload{w}(0, {ptr})",
)


def render_opencl(program: Program) -> str:
    return CStyleRenderer(OPENCL).render(program)
