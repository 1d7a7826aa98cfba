"""Lower a workload under a CPU-template config (see ``templates/cpu.py``) to a loop AST."""
from __future__ import annotations

import math
from typing import Sequence

from .. import loopast as A
from .. import te
from ..space import Config
from ..workloads import Workload
from ..templates.cpu import PACKABLE
from .common import (Loop, axis_index, block_index, buffer_of, convert, epilogue_value, make_loader,
                     nest, tile_axis)

MAX_VECTOR_LANES = 64


def lower_cpu(workload: Workload, config: Config) -> A.Program:
    out = workload.output
    op = out.op
    v = config.values
    producers = [t for t in te.input_tensors(out) if isinstance(t.op, te.ComputeOp)]
    inline = producers if v.get("inline_pad", 1) else []
    buffers = {t: buffer_of(t) for t in [*workload.inputs, out, *producers]}

    groups: dict[str, list[Loop]] = {g: [] for g in ("S0", "S1", "S2", "R0", "R1")}
    tiles = {}
    for ax in (*op.axes, *op.reduce_axes):
        levels = 2 if ax.reduce else 3
        factors = v.get(f"tile_{ax.name}", (1,) * (levels - 1) + (ax.extent,))
        loops, strides = tile_axis(ax, factors)
        tiles[ax] = (loops, strides)
        for lp in loops:
            groups[("R" if ax.reduce else "S") + str(lp.level)].append(lp)
    # the vector axis's register-tile loop goes innermost in its group (a stable sort)
    groups["S2"].sort(key=lambda lp: lp.axis.name == v.get("vector_axis"))
    order = groups["S0"] + [lp for g in v["reorder"] for lp in groups[g]]

    # Fuse the leading outer loops into one parallel loop; their vars become div/mod of it.
    n_par = min(v["parallel"], len(groups["S0"]))
    value: dict[A.LoopVar, A.Expr] = {}
    fused = order[:n_par]
    par_var = A.LoopVar("fused") if n_par else None
    for lp, e in zip(fused, _unfused(par_var, [lp.extent for lp in fused])):
        value[lp.var] = e
    rest = order[n_par:]

    def index_of(ax: te.IterVar) -> A.Expr:
        loops, strides = tiles[ax]
        return axis_index(loops, strides, value)

    axes = {ax: index_of(ax) for ax in (*op.axes, *op.reduce_axes)}
    layouts, remap = _packing(workload, v, buffers, tiles, value, axes)
    load = make_loader(buffers, inline, remap)
    out_buf = buffers[out]
    out_idx = tuple(axes[ax] for ax in op.axes)
    body_value = convert(op.body.body, axes, load)

    first_red = next((i for i, lp in enumerate(rest) if lp.axis.reduce), len(rest))
    outer, block = rest[:first_red], rest[first_red:]
    inner_spatial = [lp for lp in block if not lp.axis.reduce]
    unroll = v.get("unroll_max_step", 0)
    vectorize = v.get("vectorize", "none") == "inner"

    if v.get("cache_write", 0):
        acc = A.Buffer("acc", tuple(lp.extent for lp in inner_spatial) or (1,), "local")
        acc_idx = tuple(lp.var for lp in inner_spatial) or (A.IntImm(0),)
        target, target_idx = acc, acc_idx
    else:
        acc = None
        target, target_idx = out_buf, out_idx

    update = A.Store(target, target_idx,
                     A.BinOp("+", A.Load(target, target_idx), A.BinOp("*", *_factors(body_value))))
    # The accumulator's zeroing and write-back run once per tile: unrolled, they changed no
    # measured run time (20 C6 kernels, median 0.99x) but were most of a 512-step kernel's
    # source and up to 8x its build time. Only the reduction nest is unrolled then.
    init = nest(_annotate(inner_spatial, vectorize, 0 if acc is not None else unroll),
                A.Store(target, target_idx, A.FloatImm(0.0)))
    main = nest(_annotate(block, vectorize, unroll), update)
    block_stmt = A.seq(init, main)
    if acc is not None:
        result = epilogue_value(workload, A.Load(acc, acc_idx), out_idx, load)
        writeback = nest(_annotate(_writeback_order(op, inner_spatial, v), vectorize, 0),
                         A.Store(out_buf, out_idx, result))
        block_stmt = A.Allocate(acc, A.seq(block_stmt, writeback))
    elif workload.epilogue:  # the tile's outputs are final here: the epilogue runs in place
        result = epilogue_value(workload, A.Load(out_buf, out_idx), out_idx, load)
        finish = nest(_annotate(inner_spatial, vectorize, 0), A.Store(out_buf, out_idx, result))
        block_stmt = A.seq(block_stmt, finish)
    stmt = nest([(lp.var, lp.extent, "serial") for lp in outer], block_stmt)
    if par_var is not None:
        stmt = A.For(par_var, math.prod(lp.extent for lp in fused), "parallel", stmt)

    stages = [_lower_elementwise(t, buffers, load, v["parallel"] > 0, vectorize)
              if not v.get("pad_vector", 0) else
              _lower_copy_rows(t, buffers, load, v["parallel"] > 0, vectorize)
              for t in producers if t not in inline]
    return A.Program(f"{workload.op}_kernel", tuple(buffers[t] for t in (*workload.inputs, out)),
                     tuple(buffers[t] for t in producers if t not in inline),
                     A.seq(*stages, stmt), input_layouts=layouts)


def _packing(workload: Workload, v: dict, buffers: dict, tiles: dict, value: dict, axes: dict):
    """The input layouts of the program (``templates/cpu.PACKABLE``) and the index remapping of
    the packed input; replaces its buffer in ``buffers`` by one of the packed shape."""
    if workload.op not in PACKABLE or not v.get(PACKABLE[workload.op][2], 0):
        return (), {}
    name, axis_name, _ = PACKABLE[workload.op]
    t = next(t for t in workload.inputs if t.name == name)
    ax = next(ax for ax in workload.output.op.axes if ax.name == axis_name)
    loops, strides = tiles[ax]
    block = v.get(f"tile_{ax.name}", (ax.extent,))[-1]
    dim = _direct_dim(workload, t, ax)
    layout = A.PackedLayout(dim, block)
    buffers[t] = A.Buffer(t.name, layout.packed_shape(t.shape))
    outer, inner = block_index(loops, strides, value, block)

    def remap(idx: tuple) -> tuple:
        assert idx[dim] is axes[ax], (t, idx)
        return (outer, *idx[:dim], *idx[dim + 1:], inner)

    return tuple(layout if x is t else None for x in workload.inputs), {t: remap}


def _direct_dim(workload: Workload, t: te.Tensor, ax: te.IterVar) -> int:
    """The dimension of ``t`` that the reduction body indexes by ``ax`` itself."""
    body = workload.output.op.body.body
    for load in (body.a, body.b):
        if isinstance(load, te.TensorLoad) and load.tensor is t:
            return next(d for d, i in enumerate(load.indices) if i is ax)
    raise AssertionError(f"{t.name} is not read directly by {ax.name}")


def _writeback_order(op: te.ComputeOp, inner_spatial: list[Loop], v: dict) -> list[Loop]:
    """The accumulator's write-back loops: the register tile's order, or (``contiguous_writeback``)
    with the output's innermost axis moved innermost (a stable sort), so that its stores are
    contiguous whichever axis the tile's vectors hold."""
    if not v.get("contiguous_writeback", 0):
        return inner_spatial
    last = op.axes[-1]
    return sorted(inner_spatial, key=lambda lp: lp.axis is last)


def _unfused(var: A.LoopVar, extents: list[int]) -> list[A.Expr]:
    """The index of each loop fused into ``var`` (outermost first): div/mod of it."""
    out = []
    for i, extent in enumerate(extents):
        inner = math.prod(extents[i + 1:])
        e: A.Expr = A.BinOp("//", var, A.IntImm(inner)) if inner > 1 else var
        out.append(A.BinOp("%", e, A.IntImm(extent)) if i > 0 else e)
    return out


def _factors(e: A.Expr) -> tuple[A.Expr, A.Expr]:
    """The reduction body is a product of two loads (conv2d, matmul)."""
    assert isinstance(e, A.BinOp) and e.op == "*", e
    return e.a, e.b


def _annotate(loops: Sequence[Loop], vectorize: bool, unroll_max: int):
    """(var, extent, kind) for a nest: vectorize the innermost loop when it is spatial, then
    unroll inner loops while the product of their extents stays within ``unroll_max``."""
    kinds = ["serial"] * len(loops)
    i = len(loops) - 1
    if vectorize and loops and not loops[-1].axis.reduce and loops[-1].extent <= MAX_VECTOR_LANES:
        kinds[-1] = "vectorized"
        i -= 1
    steps = 1
    while unroll_max and i >= 0:
        steps *= loops[i].extent
        if steps > unroll_max:
            break
        kinds[i] = "unrolled"
        i -= 1
    return [(lp.var, lp.extent, k) for lp, k in zip(loops, kinds)]


def _lower_elementwise(t: te.Tensor, buffers, load, parallel: bool, vectorize: bool) -> A.Stmt:
    """A materialised producer stage (the padding of conv2d): one loop per axis."""
    loops = [Loop(A.LoopVar(ax.name), ax.extent, ax, 0) for ax in t.op.axes if ax.extent > 1]
    axes = {ax: next((lp.var for lp in loops if lp.axis is ax), A.IntImm(0)) for ax in t.op.axes}
    store = A.Store(buffers[t], tuple(axes[ax] for ax in t.op.axes), convert(t.op.body, axes, load))
    kinds = _annotate(loops, vectorize, 0)
    if parallel and kinds:
        kinds[0] = (kinds[0][0], kinds[0][1], "parallel" if len(kinds) > 1 else kinds[0][2])
    return nest(kinds, store)


def row_lanes(extent: int) -> int:
    """The vector width of ``_lower_copy_rows``'s row loop: the largest divisor of the row's
    extent that is at most ``MAX_VECTOR_LANES`` (230, C1's padded row: 46)."""
    return max(d for d in range(1, MAX_VECTOR_LANES + 1) if extent % d == 0)


def _lower_copy_rows(t: te.Tensor, buffers, load, parallel: bool, vectorize: bool) -> A.Stmt:
    """A materialised producer stage (``pad_vector``) as rows: the leading axes fused into one
    parallel loop (C1's 3 x 230 rows split evenly, where parallelising the 3 channels left one
    thread twice the work), the innermost axis vectorized in chunks of ``row_lanes`` (its
    padding a masked load) instead of a scalar loop once past ``MAX_VECTOR_LANES``."""
    axes = [ax for ax in t.op.axes if ax.extent > 1]
    index: dict[te.IterVar, A.Expr] = {ax: A.IntImm(0) for ax in t.op.axes}
    loops: list[tuple] = []
    *lead, row = axes or [None]
    if lead and parallel:
        fused = A.LoopVar(f"{t.name}.fused")
        loops.append((fused, math.prod(ax.extent for ax in lead), "parallel"))
        index.update(zip(lead, _unfused(fused, [ax.extent for ax in lead])))
    else:
        for ax in lead:
            var = A.LoopVar(f"{t.name}.{ax.name}")
            loops.append((var, ax.extent, "serial"))
            index[ax] = var
    if row is not None:
        lanes = row_lanes(row.extent) if vectorize else 1
        outer, inner = A.LoopVar(f"{t.name}.{row.name}.0"), A.LoopVar(f"{t.name}.{row.name}.1")
        if row.extent > lanes:
            loops.append((outer, row.extent // lanes, "serial"))
        if lanes > 1:
            loops.append((inner, lanes, "vectorized"))
        index[row] = A.add(A.mul(outer, lanes) if row.extent > lanes else A.IntImm(0),
                           inner if lanes > 1 else A.IntImm(0))
    store = A.Store(buffers[t], tuple(index[ax] for ax in t.op.axes),
                    convert(t.op.body, index, load))
    return nest(loops, store)
