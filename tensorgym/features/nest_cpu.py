"""The CPU template's loop nest for a batch of configs: ``lower/cpu.py`` with arrays for numbers.

One nest holds a whole batch, and every knob is a per-config array: the loop order
(``reorder``) in which tile loop sits at each place of the nest, tile factors (and so the packed
block), the fused parallel loop, vectorize and unroll in loop kinds, ``cache_write``,
``inline_pad`` and packing (``pack_weight`` / ``pack_b``: a plain and a packed copy of the
operand, each where the other is not) in which statements, accesses and buffers exist, and where
the register block starts (the first reduction loop that exists) in which of two copies of a
loop exists, and the ``vector_axis`` (whose register-tile loop goes innermost) in which axis's
loop sits at each place of the register-tile group. One nest is what makes the annealer's
batches cheap: an analysis costs a few milliseconds of NumPy calls, and grows slowly with the
batch.
"""
from __future__ import annotations

from typing import NamedTuple, Sequence

import numpy as np

from .. import te
from ..lower.cpu import MAX_VECTOR_LANES
from ..space import Config
from ..templates.cpu import PACKABLE
from ..templates.gpu import operands
from ..workloads import Workload
from .nest import (KIND, Buf, Div, Mod, Nest, Stmt, Unsupported, Var, _prefix, access, buffer,
                   inlined_source, merge, nest, tile_factors)

TILE_GROUPS = ("S1", "S2", "R0", "R1")  # the groups the ``reorder`` knob orders


class TileLoop(NamedTuple):
    """The loop of one tiling level of one axis, in one place of the nest."""

    axis: te.IterVar
    level: int
    on: "np.ndarray | bool" = True  # where the loop is in this place


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


def _on(mask: np.ndarray) -> "np.ndarray | bool":
    """``mask`` as an ``on`` field: True where it holds for all configs."""
    return True if mask.all() else mask


def _where(mask: np.ndarray) -> "np.ndarray | bool | None":
    """``mask`` as a loop's ``on``: True where it holds for all configs, None for none."""
    return True if mask.all() else (mask if mask.any() else None)


class _Place(NamedTuple):
    """One place of the nest: the loop each config has there (``loops``' ``on`` masks are
    disjoint; a config whose mask is off everywhere has no loop there, an absent loop of
    extent 1). ``var`` names the place's loop variable."""

    var: str
    loops: tuple


Slot = tuple  # of TileLoops with disjoint ``on``: the loop each config has at one position


def _masked(slots: list[Slot], mask: "np.ndarray | bool") -> list[Slot]:
    return [tuple(lp._replace(on=lp.on & mask) for lp in slot) for slot in slots]


def _places(prefix: str, per_order: list[list[Slot]]) -> list[_Place]:
    """The places of one part of the nest (outside or inside the register block): the i-th
    slot of every loop order's sequence shares the i-th place."""
    width = max((len(slots) for slots in per_order), default=0)
    return [_Place(f"{prefix}{i}", tuple(lp for slots in per_order if i < len(slots)
                                         for lp in slots[i]))
            for i in range(width)]


class _CpuNest:
    """The nest of a batch of configs of any loop orders. Each order puts the tile loops in
    its own sequence, outside the register block (``outer``) and inside it (``block``); the
    nest has a *place* per position of those sequences, and at each place every config has the
    loop its order puts there, or none (extent 1, which lowering leaves out). A config so sees
    exactly its own order's loops, in its order; one analysis serves the whole batch, since the
    analysis's cost is mostly fixed per nest and barely grows with the batch."""

    def __init__(self, workload: Workload, orders: list[tuple], order_id: np.ndarray,
                 spatial: list, reduce: list, factors: dict, knobs: dict,
                 vector_axes: np.ndarray) -> None:
        self.w, self.spatial, self.reduce = workload, spatial, reduce
        self.f, self.knobs = factors, knobs
        self.n = n = len(knobs["parallel"])
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
        groups = {f"S{lv}": [(TileLoop(ax, lv),) for ax in spatial] for lv in range(2)}
        # the vector axis's register-tile loop goes innermost in its group, the others keep
        # their order: the i-th slot holds, per config, the axis its vector axis puts i-th
        is_vector = [vector_axes == ax.name for ax in spatial]
        ahead = np.cumsum([np.zeros(n, np.int64)] + is_vector, axis=0)[:-1]
        position = [np.where(v, len(spatial) - 1, j - a)
                    for j, (v, a) in enumerate(zip(is_vector, ahead))]
        groups["S2"] = [tuple(TileLoop(ax, 2, on) for ax, at in zip(spatial, position)
                              if (on := _where(at == i)) is not None)
                        for i in range(len(spatial))]
        groups.update({f"R{lv}": [(TileLoop(ax, lv),) for ax in reduce] for lv in range(2)})
        outers, blocks = [], []
        for o, order in enumerate(orders):
            mine = order_id == o
            # lowering's register block starts at the first reduction loop that exists: the tile
            # groups between the two reduction groups are outside it when the first has no
            # loop, so their loops get two places, each where the other is not
            r1, r2 = (order.index(g) for g in order if g[0] == "R")
            from_r1 = np.any([factors[ax][:, int(order[r1][1])] > 1 for ax in reduce], axis=0)
            floating = [slot for g in order[r1 + 1:r2] for slot in groups[g]]
            outer = (groups["S0"] + [slot for g in order[:r1] for slot in groups[g]]
                     + _masked(floating, ~from_r1))
            block = (groups[order[r1]] + _masked(floating, from_r1)
                     + [slot for g in order[r2:] for slot in groups[g]])
            outers.append(_masked(outer, mine))
            blocks.append(_masked(block, mine))
        self.outer = _places("o", outers)
        self.block = _places("b", blocks)
        # the register tile's spatial loops, in block order: the accumulator's dimensions and
        # the loops of its zeroing and write-back nests
        inner = [[slot for slot in slots if not slot[0].axis.reduce] for slots in blocks]
        self.inner = _places("i", inner)
        self.acc_at = [{} for _ in self.inner]  # dimension -> {block place: where it is there}
        for o, slots in enumerate(blocks):
            spatial_at = [j for j, slot in enumerate(slots) if not slot[0].axis.reduce]
            for d, j in enumerate(spatial_at):
                var = self.block[j].var
                self.acc_at[d][var] = self.acc_at[d].get(var, False) | (order_id == o)
        places = self.outer + self.block + self.inner
        self.exts = {p.var: self._place_ext(p) for p in places}
        self.loops_of = {ax: [] for ax in spatial + reduce}  # axis -> [(place's var, loop)]
        for p in places:
            for lp in p.loops:
                self.loops_of[lp.axis].append((p.var, lp))
        self.index = {ax: self._axis_index(ax) for ax in spatial + reduce}

    def _loop_ext(self, loop: TileLoop) -> np.ndarray:
        """The extent of ``loop`` where it is (its ``on``)."""
        ax, level = loop.axis, loop.level
        if not ax.reduce and level == 0:  # a fused loop is no loop of its own
            return np.where(self.fused[self.spatial.index(ax)], 1, self.f[ax][:, 0])
        return self.f[ax][:, level]

    def _place_ext(self, place: _Place) -> np.ndarray:
        e = np.ones(self.n, np.int64)
        for lp in place.loops:
            e = np.where(lp.on, self._loop_ext(lp), e)
        return e

    def ext(self, place: _Place, on: "np.ndarray | bool" = True) -> np.ndarray:
        e = self.exts[place.var]
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
        affine, opaque = {}, []
        for var, lp in self.loops_of[ax]:
            if lp.level in coeffs:
                term = np.where(lp.on, coeffs[lp.level], 0)
                affine[var] = affine[var] + term if var in affine else term
        if not ax.reduce and 0 in coeffs:
            i = self.spatial.index(ax)
            fused, coeff = self.fused[i], coeffs[0]
            affine["fused"] = coeff * (fused & (self.n_par == 1))  # the fused loop itself
            part = Mod(Div(Var("fused"), self.fused_inner[i]), f[:, 0], on=~self.first[i])
            opaque.append((coeff, part, fused & (self.n_par >= 2)))
        return affine, opaque

    def _spatial(self, place: _Place) -> np.ndarray:
        """Where the loop at ``place`` is a spatial one."""
        out = np.zeros(self.n, bool)
        for lp in place.loops:
            if not lp.axis.reduce:
                out |= lp.on
        return out

    def annotate(self, places: list[_Place], unroll: "np.ndarray | None" = None,
                 on: "np.ndarray | bool" = True) -> list[tuple]:
        """``lower/cpu._annotate``: vectorize the innermost loop if spatial, then unroll inner
        loops while the product of their extents stays within ``unroll`` (per config; default
        ``unroll_max_step``); ``on``: where the loops are at all."""
        if not places:
            return []
        n = self.n
        exts = np.stack([self.ext(p, on) for p in places])
        present = exts > 1
        last = len(places) - 1 - np.argmax(present[::-1], axis=0)  # the innermost that exists
        spatial = np.stack([self._spatial(p) for p in places])
        cols = np.arange(n)
        vec = (self.knobs["vectorize"] & present.any(axis=0) & spatial[last, cols]
               & (exts[last, cols] <= MAX_VECTOR_LANES))
        vec = vec & (np.arange(len(places))[:, None] == last)
        # the steps of the loops from the innermost out only grow: unrolling stops at the first
        # loop past the budget
        steps = _prefix(np.where(present & ~vec, exts, 1)[::-1], np.multiply)[::-1]
        unroll = self.knobs["unroll"] if unroll is None else unroll
        unrolled = present & ~vec & (steps <= unroll) & (unroll > 0)
        kinds = np.where(vec, KIND["vectorized"], np.where(unrolled, KIND["unrolled"],
                                                           KIND["serial"]))
        return [(p.var, e, k) for p, e, k in zip(places, exts, kinds)]

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
        exts = [self.ext(p) for p in self.inner]
        strides = _prefix(np.stack([np.ones(n, np.int64)] + exts[:0:-1]), np.multiply)[::-1]
        acc = Buf("acc", (strides[0] * exts[0] if exts else np.ones(n, np.int64))[:, None],
                  "local", cache_write)
        acc_terms: dict = {}
        for d, p in enumerate(self.inner):  # its place in the block, and in the inner nests
            acc_terms[p.var] = strides[d]
            for var, at in self.acc_at[d].items():
                acc_terms[var] = acc_terms.get(var, 0) + np.where(at, strides[d], 0)
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

        init = Stmt([access(acc, acc_idx, writes=1, on=cache_write),
                     access(out_buf, out_idx, writes=1, on=~cache_write)])
        update = Stmt([access(acc, acc_idx, reads=1, writes=1, on=cache_write),
                       access(out_buf, out_idx, reads=1, writes=1, on=~cache_write),
                       *operand_reads], flops=2)
        writeback = Stmt([access(out_buf, out_idx, writes=1), access(acc, acc_idx, reads=1)],
                         on=cache_write)
        # lowering never unrolls the accumulator's zeroing and write-back nests
        block_body = (nest(self.annotate(self.inner,
                                         np.where(cache_write, 0, self.knobs["unroll"])), [init])
                      + nest(self.annotate(self.block), [update])
                      + nest(self.annotate(self.inner, np.zeros(n, np.int64), on=cache_write),
                             [writeback]))
        body = nest([("fused", self.fused_ext, KIND["parallel"])]
                    + [(p.var, self.ext(p), KIND["serial"]) for p in self.outer], block_body)
        stages = [loop for t in producers for loop in self.copy_stage(t, bufs, ~inline)]
        args = [b for t in (*w.inputs, out_t)
                for b in ([bufs[t], packed_buf] if t is packed_t else [bufs[t]])]
        return Nest(n, args, [bufs[t] for t in producers], [acc], stages + body)

    def copy_stage(self, t: te.Tensor, bufs: dict, on: np.ndarray) -> list:
        """``lower/cpu._lower_elementwise`` for a materialised padding stage (where ``on``)."""
        n = self.n
        axes = [ax for ax in t.op.axes if ax.extent > 1]
        kinds = [np.full(n, KIND["serial"]) for _ in axes]
        if axes:
            vec = self.knobs["vectorize"] & (axes[-1].extent <= MAX_VECTOR_LANES)
            kinds[-1] = np.where(vec, KIND["vectorized"], kinds[-1])
            if len(axes) > 1:
                kinds[0] = np.where(self.knobs["parallel"] > 0, KIND["parallel"], kinds[0])
        idx = [({f"{t.name}.{ax.name}": 1}, []) if ax.extent > 1 else ({}, [])
               for ax in t.op.axes]
        copy = Stmt([access(bufs[t], idx, writes=1), access(bufs[inlined_source(t)], idx, reads=1)],
                    on=on)
        return nest([(f"{t.name}.{ax.name}", np.where(on, ax.extent, 1), k)
                     for ax, k in zip(axes, kinds)], [copy])

