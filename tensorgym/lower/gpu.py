"""Lower a workload under a GPU-template config (see ``templates/gpu.py``) to a loop AST.

One lowering serves OpenCL and CUDA. The kernel, per thread::

    blockIdx / threadIdx bindings (For loops tagged with the binding)
      acc[vthread x inner tile] = 0                       (scope "local": registers)
      for each outer reduction step:
        cooperative load of both operand tiles into shared memory; barrier
        for middle reduction loops: for vthread, inner loops: [for inner reduction loops:]
          acc += A_sh[..] * B_sh[..]
        barrier
      out[..] = acc[..]

With ``double_buffer`` (``plan.stages == 2``) the outer reduction loops fuse into one step loop
``ko`` and each shared tile has two copies::

      load step 0 into copy 0; barrier
      for ko: [if ko + 1 < steps: load step ko + 1 into copy (ko + 1) % 2]
              compute on copy ko % 2; barrier

Copy (ko + 1) % 2 was last read in step ko - 1, before that step's barrier, so one barrier per
step is enough, and a block's loads of the next tiles can overlap its arithmetic.

All splits are exact (factorizations), so no bounds checks are needed except in the
cooperative load, whose last round may be partial. Indices are never negative (C division).
"""
from __future__ import annotations

import math
from typing import Mapping, Sequence

from .. import loopast as A
from .. import te
from ..space import Config
from ..templates.gpu import GpuPlan, check_gpu_config, gpu_plan, operands
from ..workloads import Workload
from .common import buffer_of, epilogue_value, make_loader, nest

_DIMS = "xyz"


def lower_gpu(workload: Workload, config: Config, limits: "Mapping | None" = None) -> A.Program:
    """The loop AST of ``config``. With ``limits`` (a runtime's ``limits()``), raises
    InvalidConfigError if the config breaks them; without, the caller has checked them."""
    plan = gpu_plan(workload, config) if limits is None else check_gpu_config(workload, config, limits)
    out = workload.output
    producers = [t for t in te.input_tensors(out) if isinstance(t.op, te.ComputeOp)]
    buffers = {t: buffer_of(t) for t in [*workload.inputs, out]}
    load_global = make_loader(buffers, inline=producers)

    # ---- bindings: spatial axis index = ((b * V + v) * T + t) * I + i
    block_vals, block_loops = _bind([(ax, f[0]) for ax, f in plan.spatial], "blockIdx")
    thread_vals, thread_loops = _bind([(ax, f[2]) for ax, f in plan.spatial], "threadIdx")
    vthread = {ax: A.LoopVar(f"{ax.name}.v") for ax, f in plan.spatial if f[1] > 1}
    inner = {ax: A.LoopVar(f"{ax.name}.i") for ax, f in plan.spatial if f[3] > 1}
    red_vars = {ax: [A.LoopVar(f"{ax.name}.{lvl}") if n > 1 else None for lvl, n in enumerate(f)]
                for ax, f in plan.reduce}

    def spatial_local(ax: te.IterVar, f: Sequence[int]) -> A.Expr:
        """Offset of ``ax`` inside the block's tile."""
        e = A.mul(_val(vthread, ax), f[2] * f[3])
        e = A.add(e, A.mul(thread_vals.get(ax, A.IntImm(0)), f[3]))
        return A.add(e, _val(inner, ax))

    local = {ax: spatial_local(ax, f) for ax, f in plan.spatial}
    start = {ax: A.mul(block_vals.get(ax, A.IntImm(0)), plan.tile_extent(ax)) for ax, _ in plan.spatial}
    for ax, f in plan.reduce:
        e: A.Expr = A.IntImm(0)
        for var, n_in in zip(red_vars[ax][1:], _inner_products(f)[1:]):
            e = A.add(e, A.mul(var if var is not None else A.IntImm(0), n_in))
        local[ax] = e
        outer = red_vars[ax][0]
        start[ax] = A.mul(outer if outer is not None else A.IntImm(0), plan.tile_extent(ax))

    # ---- buffers
    acc_axes = [(ax, f) for ax, f in plan.spatial if f[1] * f[3] > 1]
    acc = A.Buffer("acc", tuple(f[1] * f[3] for _, f in acc_axes) or (1,), "local")
    acc_idx = tuple(A.add(A.mul(_val(vthread, ax), f[3]), _val(inner, ax)) for ax, f in acc_axes) \
        or (A.IntImm(0),)
    ops = operands(workload)
    shared = [A.Buffer(f"{o.tensor.name}_shared", plan.shared_buffer_shape(i), "shared")
              for i, o in enumerate(ops)]
    staged = plan.stages > 1
    ko = A.LoopVar("ko")
    stage: tuple[A.Expr, ...] = (A.BinOp("%", ko, A.IntImm(2)),) if staged else ()

    tid = A.IntImm(0)
    for ax, f in plan.spatial:  # row-major over the axes' thread extents
        tid = A.add(A.mul(tid, f[2]), thread_vals.get(ax, A.IntImm(0)))

    def loads(prefix: tuple[A.Expr, ...]) -> A.Stmt:
        return A.seq(*(_cooperative_load(o, sh, shape, start, tid, plan.threads_per_block, width,
                                         load_global, prefix)
                       for o, sh, shape, width in zip(ops, shared, plan.shared_shapes,
                                                      plan.vector_widths)))

    # ---- compute nest
    reg_loops = ([(vthread[ax], f[1], "vthread") for ax, f in plan.spatial if ax in vthread]
                 + [(inner[ax], f[3], "serial") for ax, f in plan.spatial if ax in inner])
    middle = [(red_vars[ax][1], f[1], "serial") for ax, f in plan.reduce
              if len(f) == 3 and red_vars[ax][1] is not None]
    innermost = [(red_vars[ax][-1], f[-1], "serial") for ax, f in plan.reduce
                 if red_vars[ax][-1] is not None]
    if all(len(f) == 2 for _, f in plan.reduce):  # AutoTVM's conv2d order: rci, ryi, rxi, n, f, y, x
        middle, innermost = innermost, []
    a_sh, b_sh = (A.Load(sh, stage + tuple(_shared_index(a, local) for a in o.index))
                  for o, sh in zip(ops, shared))
    update = A.Store(acc, acc_idx, A.BinOp("+", A.Load(acc, acc_idx), A.BinOp("*", a_sh, b_sh)))
    if plan.shared_vector is not None:  # vec_shared: the row axis's inner loop, as one vector
        _, row_axis, width = plan.shared_vector
        lanes = inner[row_axis]
        compute = _unroll(middle + [lp for lp in reg_loops if lp[0] is not lanes] + innermost,
                          A.For(lanes, width, "vectorized", update), plan)
    else:
        compute = _unroll(middle + reg_loops + innermost, update, plan)
    outer_red = [(red_vars[ax][0], f[0], "serial") for ax, f in plan.reduce
                 if red_vars[ax][0] is not None]
    if staged:
        def load_step(k: A.Expr) -> A.Stmt:  # step k's tiles into copy k % 2
            copy = A.IntImm(k.value % 2) if isinstance(k, A.IntImm) else A.BinOp("%", k, A.IntImm(2))
            return substitute(loads((copy,)), _decompose(k, outer_red))

        after = A.add(ko, A.IntImm(1))
        step = A.seq(A.If(A.BinOp("<", after, A.IntImm(plan.reduce_steps)), load_step(after)),
                     compute, A.Barrier())
        main = A.seq(load_step(A.IntImm(0)), A.Barrier(),
                     A.For(ko, plan.reduce_steps, "serial", step))
    else:
        main = nest(outer_red, A.seq(loads(()), A.Barrier(), compute, A.Barrier()))

    init = _unroll(reg_loops, A.Store(acc, acc_idx, A.FloatImm(0.0)), plan)
    out_idx = tuple(A.add(start[ax], local[ax]) for ax in out.op.axes)
    result = epilogue_value(workload, A.Load(acc, acc_idx), out_idx, load_global)
    writeback = _unroll(reg_loops, A.Store(buffers[out], out_idx, result), plan)
    body: A.Stmt = A.seq(init, main, writeback)
    for sh in reversed(shared):
        body = A.Allocate(sh, body)
    body = A.Allocate(acc, body)
    body = nest(block_loops + thread_loops, body)
    return A.Program(f"{workload.op}_kernel", tuple(buffers[t] for t in (*workload.inputs, out)),
                     (), body, plan.launch)


def _val(vars_: Mapping[te.IterVar, A.LoopVar], ax: te.IterVar) -> A.Expr:
    return vars_.get(ax, A.IntImm(0))


def _inner_products(f: Sequence[int]) -> list[int]:
    """Stride of each level of a split: product of the factors inside it."""
    return [math.prod(f[i + 1:]) for i in range(len(f))]


def _bind(extents: Sequence[tuple[te.IterVar, int]], prefix: str):
    """Loops bound to ``prefix``.x/y/z (as in ``GpuPlan.launch_dims``) and each axis's index."""
    axes = [(ax, n) for ax, n in extents if n > 1]
    groups = [axes[-1:], axes[-2:-1], axes[:-2]]
    values: dict[te.IterVar, A.Expr] = {}
    loops = []
    for dim, group in zip(_DIMS, groups):
        if not group:
            continue
        total = math.prod(n for _, n in group)
        var = A.LoopVar(f"{prefix[0]}{dim}" if prefix == "blockIdx" else f"t{dim}")
        loops.append((var, total, f"{prefix}.{dim}"))
        for i, (ax, n) in enumerate(group):  # row-major decomposition of a fused dimension
            inner = math.prod(m for _, m in group[i + 1:])
            e: A.Expr = A.BinOp("//", var, A.IntImm(inner)) if inner > 1 else var
            values[ax] = A.BinOp("%", e, A.IntImm(n)) if i > 0 else e
    return values, loops


def _decompose(k: A.Expr, loops: Sequence[tuple[A.LoopVar, int, str]]) -> dict:
    """Each loop's index at step ``k`` of the loops fused row-major (the first outermost)."""
    out = {}
    for i, (var, extent, _) in enumerate(loops):
        inner = math.prod(n for _, n, _ in loops[i + 1:])
        e: A.Expr = A.BinOp("//", k, A.IntImm(inner)) if inner > 1 else k
        out[var] = A.BinOp("%", e, A.IntImm(extent)) if i > 0 else e
    return out


def _shared_index(a, local: Mapping[te.IterVar, A.Expr]) -> A.Expr:
    e: A.Expr = A.IntImm(0)
    for ax, c in a.coefs:
        e = A.add(e, A.mul(local[ax], c))
    return e


def _cooperative_load(o, sh: A.Buffer, shape: tuple[int, ...], start, tid: A.Expr, nthreads: int,
                      width: int, load_global, prefix: tuple[A.Expr, ...] = ()) -> A.Stmt:
    """Every thread copies elements ``(round * nthreads + tid) * width + lane`` of the tile
    (``shape``: unpadded) into ``sh`` at ``prefix`` (the copy, when double-buffered)."""
    tile = A.Buffer(sh.name, shape)  # the tile's own strides, without the rows' padding
    size = tile.size // width
    rounds = -(-size // nthreads)
    rnd = A.LoopVar(f"{sh.name}.ld")
    lane = A.LoopVar(f"{sh.name}.vec") if width > 1 else None
    slot = A.add(A.mul(rnd, nthreads), tid) if rounds > 1 else tid
    flat = A.mul(slot, width)
    coords = []
    for d, (extent, stride) in enumerate(zip(tile.shape, tile.strides)):
        if extent == 1:
            coords.append(A.IntImm(0))
            continue
        e: A.Expr = A.BinOp("//", flat, A.IntImm(stride)) if stride > 1 else flat
        coords.append(A.BinOp("%", e, A.IntImm(extent)) if d > 0 else e)
    if lane is not None:
        coords[-1] = A.add(coords[-1], lane)
    base = [A.add(A.IntImm(a.const), _shared_index(a, start)) for a in o.index]
    src = load_global(o.tensor, tuple(A.add(b, c) for b, c in zip(base, coords)))
    stmt: A.Stmt = A.Store(sh, prefix + tuple(coords), src)
    if lane is not None:
        stmt = A.For(lane, width, "vectorized", stmt)
    if rounds * nthreads != size:
        stmt = A.If(A.BinOp("<", slot, A.IntImm(size)), stmt)
    return A.For(rnd, rounds, "serial", stmt) if rounds > 1 else stmt


def _unroll(loops: Sequence[tuple[A.LoopVar, int, str]], body: A.Stmt, plan: GpuPlan) -> A.Stmt:
    """Unroll the innermost loops while their total trip count stays within the plan's
    ``unroll_max_step``: in the AST (explicit) or as an ``unrolled`` annotation (a pragma)."""
    loops = [lp for lp in loops if lp[1] > 1]
    steps, split = 1, len(loops)
    while plan.unroll_max_step and split > 0 and steps * loops[split - 1][1] <= plan.unroll_max_step:
        steps *= loops[split - 1][1]
        split -= 1
    inner = loops[split:]
    if plan.unroll_explicit:
        for var, extent, _ in reversed(inner):
            body = A.seq(*(substitute(body, {var: A.IntImm(k)}) for k in range(extent)))
        return nest(loops[:split], body)
    # vthread loops keep their tag (the walker unrolls them anyway).
    return nest(loops[:split] + [(v, e, "unrolled" if k == "serial" else k) for v, e, k in inner],
                body)


def substitute(node: A.Node, mapping: Mapping[A.LoopVar, A.Expr]) -> A.Node:
    """``node`` with loop variables replaced (and constant index arithmetic folded)."""

    def replace(n: A.Node) -> "A.Node | None":
        if isinstance(n, A.LoopVar):
            return mapping.get(n)
        if isinstance(n, A.BinOp):
            return _fold(n)
        if isinstance(n, A.Seq):
            return A.seq(*n.stmts)
        return None

    return A.transform(node, replace)


def _fold(e: A.BinOp) -> "A.Expr | None":
    """``e`` (its operands already substituted) with constant index arithmetic folded."""
    a, b = e.a, e.b
    if e.op == "+":
        return A.add(a, b)
    if e.op == "*" and not (isinstance(a, A.FloatImm) or isinstance(b, A.FloatImm)):
        return A.mul(a, b) if _is_index(a) and _is_index(b) else None
    if isinstance(a, A.IntImm) and isinstance(b, A.IntImm) and e.op in ("//", "%"):
        return A.IntImm(a.value // b.value if e.op == "//" else a.value % b.value)
    return None


def _is_index(e: A.Expr) -> bool:
    """Index expressions contain no loads and no float constants."""
    return not any(isinstance(n, (A.Load, A.FloatImm)) for n in A.walk(e))
