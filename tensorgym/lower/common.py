"""Lowering pieces shared by the CPU and GPU schedules: tensor expressions to loop-AST
expressions, and the tiled loops of one axis."""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from .. import loopast as A
from .. import te
from ..workloads import Workload


def buffer_of(t: te.Tensor, scope: str = "global") -> A.Buffer:
    return A.Buffer(t.name, t.shape, scope)


_INDEX_OPS = {"+", "-", "*", "//", "%", "<", ">=", "&&", "min", "max"}


def convert(e: te.Expr, axes: Mapping[te.IterVar, A.Expr],
            load: Callable[[te.Tensor, tuple[A.Expr, ...]], A.Expr]) -> A.Expr:
    """Translate a tensor expression; ``load(tensor, indices)`` decides how each tensor is read
    (a buffer load, or the producer's body inlined)."""
    if isinstance(e, te.Const):
        return A.IntImm(int(e.value)) if e.dtype == "int" else A.FloatImm(float(e.value))
    if isinstance(e, te.IterVar):
        return axes[e]
    if isinstance(e, te.Binary):
        a, b = convert(e.a, axes, load), convert(e.b, axes, load)
        if e.op == "+":
            return A.add(a, b)
        if e.op == "*":
            return A.mul(a, b)
        if e.op == "-" and isinstance(b, A.IntImm) and b.value == 0:
            return a
        assert e.op in _INDEX_OPS, e.op
        return A.BinOp(e.op, a, b)
    if isinstance(e, te.Select):
        return A.Select(convert(e.cond, axes, load), convert(e.true_value, axes, load),
                        convert(e.false_value, axes, load))
    if isinstance(e, te.TensorLoad):
        return load(e.tensor, tuple(convert(i, axes, load) for i in e.indices))
    if isinstance(e, te.Call):
        return A.Call(e.func, tuple(convert(a, axes, load) for a in e.args))
    raise TypeError(f"cannot lower {type(e).__name__} here")


def make_loader(buffers: Mapping[te.Tensor, A.Buffer], inline: Sequence[te.Tensor] = (),
                remap: "Mapping[te.Tensor, Callable[[tuple[A.Expr, ...]], tuple[A.Expr, ...]]]"
                = {}):
    """A ``load`` for :func:`convert`: inline the tensors in ``inline``, read the others;
    ``remap[t]`` turns the workload's index of ``t`` into its buffer's (a packed layout)."""

    def load(t: te.Tensor, idx: tuple[A.Expr, ...]) -> A.Expr:
        if t in inline:
            sub = dict(zip(t.op.axes, idx))
            return convert(t.op.body, sub, load)
        if t in remap:
            idx = remap[t](idx)
        return A.Load(buffers[t], idx)

    return load


def epilogue_value(workload: Workload, value: A.Expr, out_idx: tuple[A.Expr, ...],
                   load: Callable[[te.Tensor, tuple[A.Expr, ...]], A.Expr]) -> A.Expr:
    """What the kernel stores at ``output[out_idx]``: ``value`` (the reduction's result there)
    through the workload's epilogue (``Workload.epilogue_body``), or ``value`` itself."""
    body = workload.epilogue_body
    if body is None:
        return value
    out = workload.output

    def load_or_value(t: te.Tensor, idx: tuple[A.Expr, ...]) -> A.Expr:
        return value if t is out else load(t, idx)

    return convert(body, dict(zip(out.op.axes, out_idx)), load_or_value)


@dataclass
class Loop:
    """One loop of a tiled axis before it is placed in the nest."""

    var: A.LoopVar
    extent: int
    axis: te.IterVar
    level: int


def tile_axis(axis: te.IterVar, factors: Sequence[int]) -> tuple[list[Loop], list[int]]:
    """Loops for ``axis`` split by ``factors`` (outer first); extent-1 loops are dropped.
    Returns the kept loops and the stride of every level (for the index)."""
    assert math.prod(factors) == axis.extent, (axis, factors)
    strides = [math.prod(factors[i + 1:]) for i in range(len(factors))]
    loops = [Loop(A.LoopVar(f"{axis.name}.{lvl}" if len(factors) > 1 else axis.name), f, axis, lvl)
             for lvl, f in enumerate(factors) if f > 1]
    return loops, strides


def axis_index(loops: Sequence[Loop], strides: Sequence[int],
               value: Mapping[A.LoopVar, A.Expr]) -> A.Expr:
    """sum(level_var * stride) over the kept loops of one axis."""
    out: A.Expr = A.IntImm(0)
    for lp in loops:
        out = A.add(out, A.mul(value.get(lp.var, lp.var), strides[lp.level]))
    return out


def block_index(loops: Sequence[Loop], strides: Sequence[int], value: Mapping[A.LoopVar, A.Expr],
                block: int) -> tuple[A.Expr, A.Expr]:
    """The index of one tiled axis split at its last tiling level, whose factor is ``block``:
    (which block, the offset in it), i.e. (index // block, index % block) without a division."""
    outer: A.Expr = A.IntImm(0)
    inner: A.Expr = A.IntImm(0)
    for lp in loops:
        v = value.get(lp.var, lp.var)
        if strides[lp.level] >= block:
            outer = A.add(outer, A.mul(v, strides[lp.level] // block))
        else:
            inner = A.add(inner, A.mul(v, strides[lp.level]))
    return outer, inner


def nest(loops: Sequence[tuple[A.LoopVar, int, str]], body: A.Stmt) -> A.Stmt:
    for var, extent, kind in reversed(loops):
        body = A.For(var, extent, kind, body)
    return body
