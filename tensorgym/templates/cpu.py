"""The CPU template: multi-level tiling of every axis, loop reorder, vectorize, unroll, parallel
outer loops, a local accumulator, and inlining of the padding stage.

Spatial axes are split in three levels (S0 outer / S1 middle / S2 register tile) and reduction
axes in two (R0 / R1). S0 always comes first (its leading loops are fused and parallelised);
the ``reorder`` knob orders the other groups.

Vendor-class micro-kernels (oneDNN's, TVM's x86 conv2d) put output channels in the vector lanes:
``vector_axis`` (conv2d) chooses which axis's register-tile loop is innermost, so ``vectorize``
makes it the vector loop (``ow``: a row of outputs, whose strided inputs are gathers; ``oc``:
a block of output channels, each input a broadcast, the accumulator an ow x oc-block tile of
registers with ``cache_write``). With output channels in the lanes, the accumulator's write-back
to the NCHW output is a scatter, a store per output (on C1 most of the kernel's time);
``contiguous_writeback`` runs that write-back with the output's innermost axis (``ow``) as its
vector loop instead: strided reads of the small accumulator, contiguous stores to the output.
``pad_vector`` materialises conv2d's padding as rows: the leading axes fused into the parallel
loop, the row vectorized in chunks (else a scalar loop, parallel over the input's channels:
3 on C1). ``pack_weight`` / ``pack_b`` pre-pack that operand once, ahead
of time, so the register tile's block of the vector axis is contiguous: conv2d's OIHW weight
becomes ``[O/b][I][H][W][b]``, matmul's ``B[K][N]`` becomes panels ``[N/b][K][b]``, where ``b``
is the axis's register-tile factor (``loopast.PackedLayout``; the kernel still takes and
returns the workload's arrays, every runtime packs them before the timed runs).
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


# op -> (input packed by the ``pack_*`` knob, the output axis whose register tile is its block,
# the knob's name)
PACKABLE = {"conv2d": ("weight", "oc", "pack_weight"), "matmul": ("B", "j", "pack_b"),
            "dense": ("W", "j", "pack_w"), "batch_matmul": ("B", "j", "pack_b")}


def _extent(workload: Workload, axis: str) -> int:
    return next(ax.extent for ax in workload.output.op.axes if ax.name == axis)


def vector_axes(workload: Workload) -> tuple[str, ...]:
    """The options of the ``vector_axis`` knob (the first is the template's classic choice, the
    innermost output axis); empty where the workload gets no such knob."""
    if workload.op != "conv2d":
        return ()
    extents = {ax.name: ax.extent for ax in workload.output.op.axes}
    if extents["ow"] == 1 or extents["oc"] == 1:
        return ()
    return ("ow", "oc")


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
    if vector_axes(workload):
        knobs.append(other_knob("vector_axis", list(vector_axes(workload)), added=True))
    if workload.op in PACKABLE and _extent(workload, PACKABLE[workload.op][1]) > 1:
        knobs.append(other_knob(PACKABLE[workload.op][2], [0, 1], added=True))
    if vector_axes(workload):
        knobs.append(other_knob("contiguous_writeback", [0, 1], added=True))
    if workload.op == "conv2d" and workload.params[7] > 0:
        knobs.append(other_knob("pad_vector", [0, 1], added=True))
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


def _largest_divisor(n: int, at_most: int) -> int:
    return max(d for d in range(1, max(1, at_most) + 1) if n % d == 0)


#: bytes of A's rows a parallel tile of a GEMM may keep in the core's L2 (512 KiB on Zen 3 and
#: Rocket Lake, 1-2 MiB on Zen 4 and Emerald Rapids)
GEMM_ROWS_BYTES = 512 * 1024


def _gemm_values(base: dict, workload: Workload, axes: dict, lanes: int,
                 budget: int) -> list[dict]:
    """matmul / dense / batch_matmul: a ``rows`` x ``block`` register tile of accumulators over a
    packed B panel, with the rows of A in the middle (S1) tile: each parallel iteration takes one
    B panel and sweeps every row of its block of A over it, so the panel is read from L2 once per
    row tile instead of all of B streaming from memory once per row tile (i in the outer, fused
    tile: 0.5-0.7x MKL on matmul-1024 and BERT's dense layers, 1.0-1.2x with i in the middle).
    A's rows are blocked (``GEMM_ROWS_BYTES``) where all of them would not stay in L2."""
    m, n, k = axes["i"], axes["j"], axes["rk"]
    accumulators = min(16, budget)  # more leave no room for loads on 32 registers (C6: spills)
    out = []
    for vectors in (4, 2):
        block = _largest_divisor(n, vectors * lanes)
        rows = _largest_divisor(m, accumulators * lanes // max(block, lanes))
        tiles = m // rows
        cached = next(d for d in range(1, tiles + 1)
                      if tiles % d == 0 and ((m // d) * k * 4 <= GEMM_ROWS_BYTES or d == tiles))
        for outer in sorted({1, cached}):
            depth = _largest_divisor(k, 256)
            out.append(dict(base, parallel=2, unroll_max_step=64,
                            **{PACKABLE[workload.op][2]: 1},
                            tile_i=(outer, tiles // outer, rows), tile_j=(n // block, 1, block),
                            tile_rk=(k // depth, depth)))
    unique = []
    for v in out:
        if v not in unique:
            unique.append(v)
    return unique


def micro_kernel_values(workload: Workload, lanes: int, registers: int = 32) -> list[dict]:
    """Hand-derived vendor-class schedules (knob values) for a machine with ``lanes`` float32
    lanes and ``registers`` vector registers (AVX-512: 16 and 32, AVX2: 8 and 16): the vector
    axis's register tile a multiple of ``lanes``, an accumulator tile that fits the registers,
    the packed operand, outer blocks fused into the parallel loop. Empty for ops without them."""
    base = default_cpu_values(workload)
    base.update(reorder=CPU_ORDERS[0], vectorize="inner", cache_write=1)
    space = cpu_space(workload)
    budget = registers - 4  # accumulators; the rest hold the vector operand and addresses
    axes = {ax.name: ax.extent for ax in (*workload.output.op.axes,
                                          *workload.output.op.reduce_axes)}
    out = []
    # a depthwise output channel reads one input channel: no input load to share across the
    # lanes, every one a gather (7-15 ms on MobileNetV2's first layer, where ow in the lanes
    # takes 0.1): its seeds are the recipes' (templates/seeds.py)
    depthwise = workload.op == "conv2d" and workload.groups == workload.params[1]
    if workload.op == "conv2d" and vector_axes(workload) and not depthwise:
        oc, oh, ow = axes["oc"], axes["oh"], axes["ow"]
        for block in (2 * lanes, lanes):
            if oc % block or block > 64:
                continue
            width = _largest_divisor(ow, budget * lanes // block)
            if width < min(ow, 4):  # too few accumulators to hide the FMA latency
                continue
            # the padding materialised: inlined, every broadcast input is a masked load
            for unroll in (16, 64):
                v = dict(base, vector_axis="oc", pack_weight=1, parallel=2, inline_pad=0,
                         contiguous_writeback=1, pad_vector=1,
                         unroll_max_step=unroll, tile_oc=(oc // block, 1, block),
                         tile_oh=(oh, 1, 1), tile_ow=(1, ow // width, width))
                for r in ("rc", "ry", "rx"):
                    if f"tile_{r}" in v:
                        v[f"tile_{r}"] = (axes[r], 1) if r == "rc" else (1, axes[r])
                out.append(v)
    elif workload.op in ("matmul", "dense", "batch_matmul"):
        out += _gemm_values(base, workload, axes, lanes, budget)
    names = {kn.name for kn in space.knobs}
    return [{name: value for name, value in v.items() if name in names} for v in out]
