"""The CPU template's loop nest for a batch of configs: ``lower/cpu.py`` with arrays for numbers.

One nest holds a whole batch, and every knob is a per-config array: the loop order
(``reorder``) in which tile loop sits at each place of the nest, tile factors (and so the packed
block), the fused parallel loop, vectorize and unroll in loop kinds, ``cache_write``,
``inline_pad`` and packing (``pack_weight`` / ``pack_b`` / ``pack_w``: a plain and a packed copy
of the operand, each where the other is not) in which statements, accesses and buffers exist
(``cache_write`` also in whether the epilogue runs in the write-back or in place), and where
the register block starts (the first reduction loop that exists) in which of two copies of a
loop exists, and the ``vector_axis`` (whose register-tile loop goes innermost) in which axis's
loop sits at each place of the register-tile group. One nest is what makes the annealer's
batches cheap: an analysis costs a few milliseconds of NumPy calls, and grows slowly with the
batch.
"""
from __future__ import annotations

import math
from functools import lru_cache
from typing import NamedTuple, Sequence

import numpy as np

from .. import te
from ..lower.cpu import MAX_VECTOR_LANES, row_lanes
from ..space import Config
from ..templates.cpu import PACKABLE
from ..templates.gpu import operands
from ..workloads import Workload
from .nest import (KIND, Buf, Div, Mod, Nest, Stmt, Unsupported, Var, _prefix, access, buffer,
                   epilogue_reads, inlined_source, merge, nest, tile_factors)

TILE_GROUPS = ("S1", "S2", "R0", "R1")  # the groups the ``reorder`` knob orders


def cpu_groups(workload: Workload, configs: Sequence[Config]) -> list[tuple[np.ndarray, Nest]]:
    """(indices into ``configs``, their nest): one nest for the whole batch, every loop order
    among ``configs`` included (see ``_CpuNest``)."""
    op = workload.output.op
    spatial = [ax for ax in op.axes if ax.extent > 1]
    reduce = [ax for ax in op.reduce_axes if ax.extent > 1]
    values = [c.values for c in configs]
    factors = {ax: tile_factors(values, ax, 2 if ax.reduce else 3) for ax in spatial + reduce}
    knobs = {"vectorize": np.array([v.get("vectorize", "none") == "inner" for v in values]),
             "unroll": np.array([v.get("unroll_max_step", 0) for v in values], np.int64),
             "parallel": np.array([v["parallel"] for v in values], np.int64),
             "cache_write": np.array([bool(v.get("cache_write", 0)) for v in values]),
             "inline": np.array([bool(v.get("inline_pad", 1)) for v in values])}
    pack_knob = PACKABLE[workload.op][2] if workload.op in PACKABLE else None
    knobs["packed"] = np.array([bool(pack_knob and v.get(pack_knob, 0)) for v in values])
    for name in ("contiguous_writeback", "pad_vector"):
        knobs[name] = np.array([bool(v.get(name, 0)) for v in values])
    names = {ax.name for ax in spatial}
    vector_axes = np.array([v.get("vector_axis") for v in values], object)
    for name in set(vector_axes.tolist()) - names - {None}:
        raise Unsupported(f"vector_axis {name!r} is no tiled axis of {workload.label}")
    orders: dict[tuple, int] = {}
    order_id = np.array([orders.setdefault(tuple(v["reorder"]), len(orders)) for v in values])
    for order in orders:
        if sorted(order) != sorted(TILE_GROUPS):
            raise Unsupported(f"reorder {order} is not an order of {TILE_GROUPS}")
    cpu = _CpuNest(workload, list(orders), order_id, spatial, reduce, factors, knobs,
                   vector_axes)
    return [(np.arange(len(configs)), cpu.build())]


def _places_of(lid: np.ndarray) -> dict[int, list[int]]:
    """Per loop, the places (rows of ``lid``: the loop of each config at each place) where
    some config has it, in order."""
    there = np.zeros((int(lid.max(initial=0)) + 1, len(lid)), bool)
    there[lid, np.arange(len(lid))[:, None]] = True
    out: dict[int, list[int]] = {}
    for loop, place in zip(*(a.tolist() for a in np.nonzero(there))):
        out.setdefault(loop, []).append(place)
    return out


def _on(mask: np.ndarray) -> "np.ndarray | bool":
    """``mask`` as an ``on`` field: True where it holds for all configs."""
    return True if mask.all() else mask


class _Part(NamedTuple):
    """A run of places of the nest: place i is named ``{prefix}{i}``, and ``lid[i]`` is, per
    config, the loop it has there (an index into ``_CpuNest.loops``; ``_CpuNest.absent``: none,
    a loop of extent 1, which lowering leaves out)."""

    prefix: str
    lid: np.ndarray  # (places, n)

    def var(self, i: int) -> str:
        return f"{self.prefix}{i}"


class _Layout(NamedTuple):
    """Where each loop order puts the tile loops: per order (rows) and position (columns) of the
    parts outside and inside the register block, a loop (``lid``: (axis, level) index, or
    ``absent``), or the i-th loop of the register-tile group (``s2`` = i, else -1) whose axis
    the config's vector axis decides; ``side`` 0 where the loop is always there, 1 outside the
    block where the first reduction group has no loop, 2 inside it where it has one."""

    outer: tuple  # (lid, s2, side), each (orders, places)
    block: tuple
    first_reduce: np.ndarray  # (orders,) the tiling level of the order's first reduction group
    inner: np.ndarray  # (orders, dims): the block position of the d-th spatial slot, -1: none


@lru_cache(maxsize=64)
def _layout(orders: tuple, n_spatial: int, n_reduce: int) -> _Layout:
    absent = 3 * n_spatial + 2 * n_reduce

    def slots(group: str) -> list[tuple]:  # (lid, s2)
        level = int(group[1])
        if group == "S2":
            return [(absent, i) for i in range(n_spatial)]
        if group[0] == "S":
            return [(3 * i + level, -1) for i in range(n_spatial)]
        return [(3 * n_spatial + 2 * j + level, -1) for j in range(n_reduce)]

    outers, blocks, first_reduce = [], [], []
    for order in orders:
        # lowering's register block starts at the first reduction loop that exists: the tile
        # groups between the two reduction groups are outside it when the first has no loop,
        # so their loops get two places, each where the other is not
        r1, r2 = (order.index(g) for g in order if g[0] == "R")
        floating = [s for g in order[r1 + 1:r2] for s in slots(g)]
        outers.append([(*s, 0) for g in ("S0", *order[:r1]) for s in slots(g)]
                      + [(*s, 1) for s in floating])
        blocks.append([(*s, 0) for s in slots(order[r1])] + [(*s, 2) for s in floating]
                      + [(*s, 0) for g in order[r2:] for s in slots(g)])
        first_reduce.append(int(order[r1][1]))

    def table(rows: list[list[tuple]]) -> tuple:
        width = max(len(r) for r in rows)
        out = np.full((3, len(rows), width), -1, np.int64)
        out[0] = absent
        out[2] = 0
        for o, r in enumerate(rows):
            out[:, o, :len(r)] = np.array(r, np.int64).reshape(-1, 3).T
        return tuple(out)

    spatial_at = [[j for j, (lid, s2, _) in enumerate(r) if s2 >= 0 or lid < 3 * n_spatial]
                  for r in blocks]
    inner = np.full((len(orders), max(map(len, spatial_at))), -1, np.int64)
    for o, js in enumerate(spatial_at):
        inner[o, :len(js)] = js
    return _Layout(table(outers), table(blocks), np.array(first_reduce), inner)


class _CpuNest:
    """The nest of a batch of configs of any loop orders. Each order puts the tile loops in
    its own sequence, outside the register block (``outer``) and inside it (``block``); the
    nest has a *place* per position of those sequences, and at each place every config has the
    loop its order puts there, or none (extent 1, which lowering leaves out). A config so sees
    exactly its own order's loops, in its order; one analysis serves the whole batch, since the
    analysis's cost is mostly fixed per nest and barely grows with the batch. Loops are
    (axis, level) indices (``loops``), places per-config arrays of them (``_Part``), so that
    building the nest costs a few NumPy calls per part, not per loop."""

    def __init__(self, workload: Workload, orders: list[tuple], order_id: np.ndarray,
                 spatial: list, reduce: list, factors: dict, knobs: dict,
                 vector_axes: np.ndarray) -> None:
        self.w, self.spatial = workload, spatial
        self.f, self.knobs = factors, knobs
        self.n = n = len(knobs["parallel"])
        cols = np.arange(n)
        # the leading outer loops that exist are fused into one parallel loop
        present = [factors[ax][:, 0] > 1 for ax in spatial]
        rank = np.cumsum([np.zeros(n, np.int64)] + present, axis=0)[:-1]
        self.n_par = np.minimum(knobs["parallel"], np.sum(present, axis=0))
        self.fused = [p & (r < self.n_par) for p, r in zip(present, rank)]
        self.first = [fu & (r == 0) for fu, r in zip(self.fused, rank)]
        kept = [np.where(fu, factors[ax][:, 0], 1) for fu, ax in zip(self.fused, spatial)]
        self.fused_ext = np.prod(kept, axis=0) if kept else np.ones(n, np.int64)
        self.fused_inner = [np.prod(kept[i + 1:], axis=0) if kept[i + 1:] else np.ones(n, np.int64)
                            for i in range(len(kept))]
        # loops: (axis, level), spatial axes' three levels, then reduction axes' two
        self.loops = [(ax, lv) for ax in spatial for lv in range(3)] + \
                     [(ax, lv) for ax in reduce for lv in range(2)]
        self.absent = len(self.loops)
        self.loop_id = {(id(ax), lv): i for i, (ax, lv) in enumerate(self.loops)}
        ext = np.ones((len(self.loops) + 1, n), np.int64)
        for i, (ax, lv) in enumerate(self.loops):
            ext[i] = self.f[ax][:, lv]
        for i in range(len(spatial)):  # a fused loop is no loop of its own
            ext[3 * i] = np.where(self.fused[i], 1, ext[3 * i])
        self.ext_of = ext
        self.is_spatial = np.arange(len(self.loops) + 1) < 3 * len(spatial)
        layout = _layout(tuple(orders), len(spatial), len(reduce))
        # the vector axis's register-tile loop goes innermost in its group, the others keep
        # their order: s2_lid[i] is, per config, the loop that group has i-th
        is_vector = np.array([vector_axes == ax.name for ax in spatial]).reshape(-1, n)
        ahead = np.cumsum(is_vector, axis=0) - is_vector
        position = np.where(is_vector, len(spatial) - 1, np.arange(len(spatial))[:, None] - ahead)
        s2_lid = 3 * np.argsort(position, axis=0, kind="stable") + 2
        level = layout.first_reduce[order_id]
        from_r1 = (np.array([factors[ax][cols, level] for ax in reduce]) > 1).any(axis=0) \
            if reduce else np.zeros(n, bool)

        def part(prefix: str, spec: tuple) -> _Part:
            lid, s2, side = (a[order_id].T for a in spec)  # (places, n) each
            lid = np.where(s2 >= 0, s2_lid[np.maximum(s2, 0), cols], lid)
            there = (side == 0) | ((side == 1) & ~from_r1) | ((side == 2) & from_r1)
            return _Part(prefix, np.where(there, lid, self.absent))

        self.outer, self.block = part("o", layout.outer), part("b", layout.block)
        # the register tile's spatial loops, in block order: the accumulator's dimensions and
        # the loops of its zeroing and write-back nests; inner_at: their places in the block
        self.inner_at = layout.inner[order_id].T  # (dims, n), -1: none
        inner = np.full(self.inner_at.shape, self.absent)
        where = self.inner_at >= 0
        inner[where] = self.block.lid[self.inner_at[where], np.nonzero(where)[1]]
        self.inner = _Part("i", inner)
        # the accumulator's write-back nest: the same loops, or (``contiguous_writeback``) with
        # the output's innermost axis moved innermost, a stable sort (``lower/cpu``); wb_perm[d]:
        # the inner place whose loop is the write-back's d-th
        last = workload.output.op.axes[-1]
        moved = np.zeros(inner.shape, bool)
        if last in spatial:
            k = spatial.index(last)
            moved = (inner // 3 == k) & (inner < 3 * len(spatial))
        moved &= knobs["contiguous_writeback"] & knobs["cache_write"]
        self.wb_perm = np.argsort(moved, axis=0, kind="stable")
        self.wb = _Part("w", np.take_along_axis(inner, self.wb_perm, axis=0))
        parts = (self.outer, self.block, self.inner, self.wb)
        self.exts = {p.prefix: self.ext_of[p.lid, cols] for p in parts}
        self.places_of = {p.prefix: _places_of(p.lid) for p in parts}
        self.index = {ax: self._axis_index(ax) for ax in spatial + reduce}

    def ext(self, part: _Part, on: "np.ndarray | bool" = True) -> np.ndarray:
        """(places, n): the extents of ``part``'s loops (1 where ``on`` is not)."""
        e = self.exts[part.prefix]
        return e if on is True else np.where(on, e, 1)

    def axis_index(self, ax, c: int = 1) -> tuple[dict, list]:
        """``c`` times the index of axis ``ax``: sum over its loops of loop * level stride."""
        if ax not in self.index:
            return {}, []
        affine, opaque = self.index[ax]
        if c == 1:
            return affine, opaque
        return {v: c * k for v, k in affine.items()}, [(c * k, e, on) for k, e, on in opaque]

    def block_index(self, ax) -> tuple[tuple[dict, list], tuple[dict, list]]:
        """``lower/common.block_index``: the index of ``ax`` split at its register tile, as
        (which block, the offset in it)."""
        return self._axis_index(ax, levels=range(2)), self._axis_index(ax, levels=(2,))

    def _axis_index(self, ax, levels=None) -> tuple[dict, list]:
        f = self.f[ax]
        levels = range(f.shape[1]) if levels is None else levels
        block = f[:, -1] if 2 not in levels and f.shape[1] == 3 else 1
        coeffs = {level: np.prod(f[:, level + 1:], axis=1) // block for level in levels}
        table = np.zeros((len(self.loops) + 1, self.n), np.int64)  # coefficient per loop
        for level, coeff in coeffs.items():
            table[self.loop_id[id(ax), level]] = coeff
        affine, opaque = {}, []
        cols = np.arange(self.n)
        mine = [self.loop_id[id(ax), level] for level in coeffs]
        for part in (self.outer, self.block, self.inner, self.wb):
            places_of = self.places_of[part.prefix]
            places = sorted({i for loop in mine for i in places_of.get(loop, ())})
            if places:
                rows = table[part.lid, cols]
                for i in places:
                    affine[part.var(i)] = rows[i]
        if not ax.reduce and 0 in coeffs:
            i = self.spatial.index(ax)
            fused, coeff = self.fused[i], coeffs[0]
            affine["fused"] = coeff * (fused & (self.n_par == 1))  # the fused loop itself
            part_ = Mod(Div(Var("fused"), self.fused_inner[i]), f[:, 0], on=~self.first[i])
            opaque.append((coeff, part_, fused & (self.n_par >= 2)))
        return affine, opaque

    def annotate(self, part: _Part, unroll: "np.ndarray | None" = None,
                 on: "np.ndarray | bool" = True) -> list[tuple]:
        """``lower/cpu._annotate``: vectorize the innermost loop if spatial, then unroll inner
        loops while the product of their extents stays within ``unroll`` (per config; default
        ``unroll_max_step``); ``on``: where the loops are at all."""
        if not len(part.lid):
            return []
        n = self.n
        exts = self.ext(part, on)
        present = exts > 1
        last = len(exts) - 1 - np.argmax(present[::-1], axis=0)  # the innermost that exists
        spatial = self.is_spatial[part.lid]
        cols = np.arange(n)
        vec = (self.knobs["vectorize"] & present.any(axis=0) & spatial[last, cols]
               & (exts[last, cols] <= MAX_VECTOR_LANES))
        vec = vec & (np.arange(len(exts))[:, None] == last)
        # the steps of the loops from the innermost out only grow: unrolling stops at the first
        # loop past the budget
        steps = _prefix(np.where(present & ~vec, exts, 1)[::-1], np.multiply)[::-1]
        unroll = self.knobs["unroll"] if unroll is None else unroll
        unrolled = present & ~vec & (steps <= unroll) & (unroll > 0)
        kinds = np.where(vec, KIND["vectorized"], np.where(unrolled, KIND["unrolled"],
                                                           KIND["serial"]))
        return [(part.var(i), e, k) for i, (e, k) in enumerate(zip(exts, kinds))]

    def build(self) -> Nest:
        w, n, knobs = self.w, self.n, self.knobs
        cache_write, inline = knobs["cache_write"], knobs["inline"]
        out_t = w.output
        producers = [t for t in te.input_tensors(out_t) if isinstance(t.op, te.ComputeOp)]
        bufs = {t: buffer(t, n) for t in [*w.inputs, out_t]}
        bufs.update({t: buffer(t, n, on=~inline) for t in producers})  # materialised copies

        out_buf = bufs[out_t]
        out_idx = [self.axis_index(ax) for ax in out_t.op.axes]
        # the accumulator holds the register tile's spatial loops in block order, row-major; as
        # one dimension it is cheaper to analyse and the same: its loops run innermost first, so
        # the running ones are always its last dimensions
        exts = list(self.ext(self.inner))
        strides = _prefix(np.stack([np.ones(n, np.int64)] + exts[:0:-1]), np.multiply)[::-1]
        acc = Buf("acc", (strides[0] * exts[0] if exts else np.ones(n, np.int64))[:, None],
                  "local", cache_write)
        acc_terms: dict = {}
        for d, at in enumerate(self.inner_at):  # its place in the inner nests, and in the block
            acc_terms[self.inner.var(d)] = strides[d]
            for j in np.unique(at[at >= 0]):
                var = self.block.var(j)
                acc_terms[var] = acc_terms.get(var, 0) + np.where(at == j, strides[d], 0)
        wb_strides = np.take_along_axis(np.asarray(strides).reshape(-1, n), self.wb_perm, axis=0) \
            if exts else []
        for d in range(len(wb_strides)):
            acc_terms[self.wb.var(d)] = wb_strides[d]
        acc_idx = [(acc_terms, [])]
        ops = operands(w)
        packed = knobs["packed"]
        packed_t = None  # the operand packed in some configs: a packed copy of it where it is
        if packed.any():
            name, axis_name, _ = PACKABLE[w.op]
            packed_t = next(t for t in w.inputs if t.name == name)
            pack_ax = next((ax for ax in self.spatial if ax.name == axis_name), None)
            if pack_ax is None:
                raise Unsupported(f"{name} packed along {axis_name}, which is not tiled")
            block = self.f[pack_ax][:, 2]
            shape = np.array(packed_t.shape, np.int64)
            dim = next(d for d, a in enumerate(next(o for o in ops if o.tensor is packed_t).index)
                       if a.coefs == ((pack_ax, 1),))
            rest = np.broadcast_to(np.delete(shape, dim), (n, len(shape) - 1))
            bufs[packed_t] = buffer(packed_t, n, on=_on(~packed))
            packed_buf = Buf(packed_t.name, np.column_stack(
                [shape[dim] // block, rest, block]).astype(np.int64), on=_on(packed))
        operand_reads = []
        for o in ops:
            dims = [merge([self.axis_index(ax, c) for ax, c in a.coefs]) for a in o.index]
            if o.tensor is packed_t:  # the plain layout, then the packed one, each where it is
                outer, inner = self.block_index(pack_ax)
                packed_dims = [outer, *dims[:dim], *dims[dim + 1:], inner]
                operand_reads += [access(bufs[o.tensor], dims, reads=1, on=_on(~packed)),
                                  access(packed_buf, packed_dims, reads=1, on=_on(packed))]
            elif o.tensor in producers:  # read inlined from its source, or the materialised copy
                operand_reads += [access(bufs[inlined_source(o.tensor)], dims, reads=1, on=inline),
                                  access(bufs[o.tensor], dims, reads=1, on=~inline)]
            else:
                operand_reads.append(access(bufs[o.tensor], dims, reads=1))

        flops, reads = epilogue_reads(w)
        in_place = ~cache_write & bool(w.epilogue)
        # with no register-tile loop, the zeroing and the epilogue's pass in place run in the
        # same loops: lowering's analysis sees their stores to the output as one access
        shared = in_place & ~(self.ext(self.inner) > 1).any(axis=0)
        init = Stmt([access(acc, acc_idx, writes=1, on=cache_write),
                     access(out_buf, out_idx, writes=1, on=~cache_write & ~shared)])
        update = Stmt([access(acc, acc_idx, reads=1, writes=1, on=cache_write),
                       access(out_buf, out_idx, reads=1, writes=1, on=~cache_write),
                       *operand_reads], flops=2)
        # the write-back of the accumulator through the epilogue, or without an accumulator the
        # epilogue's pass over the tile in place, which reads the output for the value
        value_loads = next(k for t, _, k in reads if t is None)
        finish = cache_write | in_place
        loads = [access(acc, acc_idx, reads=k, on=cache_write) if t is None
                 else access(bufs[w.inputs[t]], [out_idx[d] for d in dims], reads=k)
                 for t, dims, k in reads]
        writeback = Stmt([access(out_buf, out_idx, writes=1, on=cache_write),
                          access(out_buf, out_idx, reads=value_loads, writes=1,
                                 on=in_place & ~shared),
                          access(out_buf, out_idx, reads=value_loads, writes=2, on=shared),
                          *loads], flops, on=_on(finish))
        # lowering never unrolls the accumulator's zeroing and write-back nests
        block_body = (nest(self.annotate(self.inner,
                                         np.where(cache_write, 0, self.knobs["unroll"])), [init])
                      + nest(self.annotate(self.block), [update])
                      + nest(self.annotate(self.wb, np.zeros(n, np.int64), on=_on(finish)),
                             [writeback]))
        body = nest([("fused", self.fused_ext, KIND["parallel"])]
                    + [(self.outer.var(i), e, KIND["serial"])
                       for i, e in enumerate(self.ext(self.outer))], block_body)
        stages = [loop for t in producers for loop in self.copy_stage(t, bufs, ~inline)]
        args = [b for t in (*w.inputs, out_t)
                for b in ([bufs[t], packed_buf] if t is packed_t else [bufs[t]])]
        return Nest(n, args, [bufs[t] for t in producers], [acc], stages + body)

    def copy_stage(self, t: te.Tensor, bufs: dict, on: np.ndarray) -> list:
        """``lower/cpu._lower_elementwise`` for a materialised padding stage (where ``on``), or
        where ``pad_vector`` is, ``lower/cpu._lower_copy_rows``: both styles' loops in one nest,
        each of extent 1 where its style is not the config's."""
        n, knobs = self.n, self.knobs
        axes = [ax for ax in t.op.axes if ax.extent > 1]
        if not axes:
            return nest([], [Stmt([access(bufs[t], [({}, [])] * len(t.shape), writes=1),
                                   access(bufs[inlined_source(t)], [({}, [])] * len(t.shape),
                                          reads=1)], on=on)])
        rows = knobs["pad_vector"]
        parallel = knobs["parallel"] > 0
        *lead, row = axes
        fused = rows & parallel & bool(lead)
        loops, index = [], {ax: ({}, []) for ax in t.op.axes}
        fused_var = f"{t.name}.fused"
        loops.append((fused_var, np.where(on & fused, math.prod(ax.extent for ax in lead), 1),
                      np.full(n, KIND["parallel"])))
        for j, ax in enumerate(lead):
            var = f"{t.name}.{ax.name}"
            kind = np.where(parallel & ~rows, KIND["parallel"], KIND["serial"]) if j == 0 \
                else np.full(n, KIND["serial"])
            loops.append((var, np.where(on & ~fused, ax.extent, 1), kind))
            inner = math.prod(a.extent for a in lead[j + 1:])
            if len(lead) == 1:
                index[ax] = ({var: np.where(fused, 0, 1), fused_var: fused.astype(np.int64)}, [])
            else:
                part = Mod(Div(Var(fused_var), inner), ax.extent, on=j > 0)
                index[ax] = ({var: np.where(fused, 0, 1)}, [(1, part, fused)])
        lanes = row_lanes(row.extent)
        vec = knobs["vectorize"]
        split = rows & vec & (lanes > 1)  # the row in chunks of ``lanes``, the inner vectorized
        plain_vec = ~rows & vec & (row.extent <= MAX_VECTOR_LANES)
        plain_kind = np.where(plain_vec, KIND["vectorized"], KIND["serial"])
        outer_var, inner_var = f"{t.name}.{row.name}", f"{t.name}.{row.name}.1"
        loops.append((outer_var, np.where(on, np.where(split, row.extent // lanes, row.extent), 1),
                      plain_kind))
        loops.append((inner_var, np.where(on & split, lanes, 1), np.full(n, KIND["vectorized"])))
        index[row] = ({outer_var: np.where(split, lanes, 1), inner_var: np.ones(n, np.int64)}, [])
        idx = [index[ax] for ax in t.op.axes]
        copy = Stmt([access(bufs[t], idx, writes=1), access(bufs[inlined_source(t)], idx, reads=1)],
                    on=on)
        return nest(loops, [copy])
