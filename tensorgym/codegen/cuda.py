"""The CUDA C dialect of the C-style walker."""
from __future__ import annotations

import math

from ..loopast import Program
from .cstyle import CStyleRenderer, Dialect

CUDA = Dialect(
    name="cuda",
    kernel_prefix='extern "C" __global__ void{launch}',
    launch_attribute=lambda b: f" __launch_bounds__({math.prod(b)})",
    global_qualifier="",
    # float4 accesses need 16-byte alignment; the lowering keeps vector offsets multiples of the width.
    shared_qualifier="__shared__ __align__(16) ",
    restrict="__restrict__ ",
    barrier="__syncthreads();",
    work_items={f"{k}.{d}": f"(int){k}.{d}" for k in ("blockIdx", "threadIdx") for d in "xyz"},
    vector_copy=lambda w, dst, src: f"*(float{w}*){dst} = *(const float{w}*){src};",
    vector_load=lambda w, ptr: f"*(const float{w}*){ptr}",
    functions={"erf": "erff"},
)


def render_cuda(program: Program) -> str:
    return CStyleRenderer(CUDA).render(program)
