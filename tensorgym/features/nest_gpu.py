"""The GPU template's kernel for a batch of configs: ``lower/gpu.py`` with arrays for numbers.

Every config has the same tree, so a batch is one group: block and thread bindings, the register
tile's init, the reduction steps (cooperative loads into shared memory, barriers, compute), the
write-back through the epilogue. Tile factors give extents (a factor of 1 is a loop lowering leaves out), the shared
tiles' shapes decide whether a load coordinate is ``//``/``%`` arithmetic or affine, and
``auto_unroll_max_step``/``unroll_explicit`` decide which inner loops are unrolled by pragma
(kind ``unrolled``) or in the AST (``virtual``).

The shared-memory knobs split a batch into groups of one tree each: ``double_buffer`` (where the
reduction has more than one step) loads step 0 before a fused step loop ``ko`` and, inside it,
step ``ko + 1`` into the other copy of each tile, whose indices are ``(ko + 1)``'s row-major
decomposition over the present outer reduction loops; ``vec_shared`` moves the row axis's
register loop innermost as a vectorized loop. ``smem_pad`` only changes the tiles' row length.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..space import Config
from ..templates.gpu import REDUCE_LEVELS, operands, row_axis
from ..workloads import Workload
from .nest import (KIND, Add, Buf, Div, Mod, Mul, Nest, Stmt, Var, _prefix, access, buffer,
                   epilogue_reads, inlined_source, merge, nest, tile_factors)

SPATIAL_LEVELS = 4  # (block, vthread, thread, inner)
NEXT = Add(Var("ko"), Var("#1"))  # ko + 1: a variable no loop binds ranges as a constant


def gpu_groups(workload: Workload, configs: Sequence[Config]) -> list[tuple[np.ndarray, Nest]]:
    """One (config positions, nest) per tree: by double buffering and the vector-read operand."""
    whole = _GpuNest(workload, configs)
    keys = whole.staged * (len(whole.ops) + 1) + (whole.vector_operand + 1)
    if (keys == keys[0]).all():
        return [(np.arange(len(configs)), whole.build())]
    out = []
    for key in np.unique(keys):
        idx = np.flatnonzero(keys == key)
        out.append((idx, _GpuNest(workload, [configs[i] for i in idx]).build()))
    return out


class _GpuNest:
    def __init__(self, workload: Workload, configs: Sequence[Config]) -> None:
        self.w = workload
        op = workload.output.op
        values = [c.values for c in configs]
        self.n = len(values)
        self.spatial = [ax for ax in op.axes if ax.extent > 1]
        self.reduce = [ax for ax in op.reduce_axes if ax.extent > 1]
        self.f = {ax: tile_factors(values, ax, REDUCE_LEVELS[workload.op] if ax.reduce
                                   else SPATIAL_LEVELS) for ax in self.spatial + self.reduce}
        self.unroll = np.array([v["auto_unroll_max_step"] for v in values], np.int64)
        self.explicit = np.array([bool(v["unroll_explicit"]) for v in values])
        self.vec_load = np.array([v.get("vec_load", 1) for v in values], np.int64)
        self.threads = np.prod([self.f[ax][:, 2] for ax in self.spatial], axis=0)
        self.ops = operands(workload)
        self._tiles_and_widths()
        # ``gpu_plan``: two copies of each tile with double_buffer and more than one step
        outer = [self.f[ax][:, 0] for ax in self.reduce]
        self.steps = np.prod(outer, axis=0) if outer else np.ones(self.n, np.int64)

        def knob(name: str) -> np.ndarray:
            return np.array([bool(v.get(name, 0)) for v in values])
        self.staged = knob("double_buffer") & (self.steps > 1)
        pad_on = knob("smem_pad")
        self.pads = [np.where(pad_on & (sh.shape[1] > 1) & (sh[:, -1] > 1), np.maximum(1, w), 0)
                     for sh, w in zip(self.tile_shapes, self.widths)]
        # ``gpu._with_shared_vector``: the first operand whose row axis's inner factor is 2 or 4
        # and divides the padded row (under the unroll pragma only)
        self.vector_operand = np.full(self.n, -1)
        self.row_axes = [row_axis(o, workload.output.op.axes) for o in self.ops]
        want = knob("vec_shared") & ~self.explicit
        for i, ax in enumerate(self.row_axes):
            if ax is None or ax not in self.f:
                continue
            width = self.f[ax][:, 3]
            row = self.tile_shapes[i][:, -1] + self.pads[i]
            ok = want & (self.vector_operand < 0) & ((width == 2) | (width == 4)) \
                & (row % width == 0)
            self.vector_operand[ok] = i

    def _tiles_and_widths(self) -> None:
        """Each operand's shared tile shape (unpadded; (n, dims)) and vector load width."""
        w, n = self.w, self.n
        tiles = {ax: self.tile(ax) for ax in [*w.output.op.axes, *w.output.op.reduce_axes]}
        self.tile_shapes, self.widths = [], []
        for o in self.ops:
            shape = [sum(c * (tiles[ax] - 1) for ax, c in a.coefs) + 1 for a in o.index]
            self.tile_shapes.append(np.stack(shape, axis=1))
            width = np.ones(n, np.int64)
            if o.vector_dim is not None:  # ``gpu._vector_width``: aligned vector loads only
                ok = ((self.vec_load > 1) & (tiles[o.vector_dim] % self.vec_load == 0)
                      & (o.tensor.shape[-1] % self.vec_load == 0))
                width = np.where(ok, self.vec_load, 1)
            self.widths.append(width)

    def tile(self, ax) -> np.ndarray:
        """``GpuPlan.tile_extent``: the extent of ``ax`` a block (or a reduction step) covers."""
        if ax not in self.f:
            return np.ones(self.n, np.int64)
        return self.f[ax][:, 1:].prod(axis=1)

    def local(self, ax, c: int = 1) -> dict:
        """``c`` times an axis's offset inside the tile (``lower_gpu``'s ``local``)."""
        if ax not in self.f:
            return {}
        f = self.f[ax]
        if ax.reduce:
            return {f"{ax.name}.{lv}": c * f[:, lv + 1:].prod(axis=1)
                    for lv in range(1, f.shape[1])}
        return {f"v.{ax.name}": c * f[:, 2] * f[:, 3], f"t.{ax.name}": c * f[:, 3],
                f"i.{ax.name}": c}

    def start(self, ax, c: int = 1) -> dict:
        """``c`` times where the tile of ``ax`` starts."""
        if ax not in self.f:
            return {}
        return {(f"{ax.name}.0" if ax.reduce else f"b.{ax.name}"): c * self.tile(ax)}

    def start_at(self, step: "str | None"):
        """``start`` as (affine terms, opaque parts) where the outer reduction loops are fused
        into ``ko`` (``lower_gpu._decompose``): ``step`` None keeps the loops, ``"first"`` is
        step 0 (their terms fold away), ``"next"`` is step ``ko + 1``: the first present loop
        gets ``(ko + 1) // inner``, each later one ``(... // inner) % extent``, and a sole
        present loop ``(ko + 1)`` itself, which is affine."""
        outer = {ax: self.f[ax][:, 0] for ax in self.reduce}
        present = {ax: e > 1 for ax, e in outer.items()}
        n_present = sum(present.values(), np.zeros(self.n, np.int64))
        before = np.zeros(self.n, bool)
        parts = {}
        for j, ax in enumerate(self.reduce):
            inner = np.prod([outer[a] for a in self.reduce[j + 1:]], axis=0) \
                if j + 1 < len(self.reduce) else np.ones(self.n, np.int64)
            parts[ax] = (Mod(Div(NEXT, inner), outer[ax], before), present[ax] & (n_present > 1),
                         present[ax] & (n_present == 1))
            before = before | present[ax]

        def at(ax, c: int = 1) -> tuple[dict, list]:
            if step is None or not ax.reduce or ax not in self.f:
                return self.start(ax, c), []
            if step == "first":
                return {}, []
            expr, on, sole = parts[ax]
            scale = c * self.tile(ax)
            return {"ko": scale * sole}, [(scale, expr, on)]
        return at

    def unrolled(self, loops: list[tuple]) -> list[tuple]:
        """``lower_gpu._unroll``: the innermost loops whose total trip count stays within
        ``auto_unroll_max_step`` are unrolled, by pragma or (``unroll_explicit``) in the AST."""
        if not loops:
            return []
        exts = np.stack([np.broadcast_to(ext, (self.n,)) for _, ext, _ in loops])
        steps = _prefix(np.where(exts > 1, exts, 1)[::-1], np.multiply)[::-1]  # only grow
        ok = (exts > 1) & (steps <= self.unroll) & (self.unroll > 0)
        out = []
        for (var, ext, kind), unrolled in zip(loops, ok):
            pragma = unrolled & ~self.explicit & (kind == KIND["serial"])
            out.append((var, ext, np.where(pragma, KIND["unrolled"], kind),
                        unrolled & self.explicit))
        return out

    def cooperative_load(self, o, sh: Buf, i: int, global_buf: Buf, prefix: list, start,
                         tag: str = "") -> list:
        """``lower_gpu._cooperative_load``: every thread copies elements
        ``(round * threads + tid) * width + lane`` of operand ``i``'s tile (strides of the
        unpadded tile) into ``sh`` at index ``prefix`` (the copy, when double-buffered);
        ``start(ax, c)``: where the tile starts."""
        tile = Buf(sh.name, self.tile_shapes[i])
        width = self.widths[i]
        rounds = -(-(tile.size // width) // self.threads)
        rnd, lane = f"ld{i}{tag}", f"vec{i}{tag}"
        tid, tid_terms = None, {}
        for ax in self.spatial:  # row-major over the thread extents
            var = f"t.{ax.name}"
            f2 = self.f[ax][:, 2]
            tid = Var(var) if tid is None else Add(Mul(tid, f2), Var(var))
            tid_terms = {v: c * f2 for v, c in tid_terms.items()}
            tid_terms[var] = 1
        flat = Mul(Add(Mul(Var(rnd), self.threads), tid), width)
        flat_terms = {rnd: self.threads * width, **{v: c * width for v, c in tid_terms.items()}}
        coords = []
        strides = tile.strides
        for d in range(tile.shape.shape[1]):
            extent, stride = tile.shape[:, d], strides[:, d]
            part = Div(flat, stride)
            if d > 0:
                coords.append(({}, [(1, Mod(part, extent), extent > 1)]))
            else:  # a one-dimensional tile: the coordinate is ``flat`` itself
                affine = (extent > 1) & (stride == 1)
                coords.append(({v: c * affine for v, c in flat_terms.items()},
                               [(1, part, (extent > 1) & ~affine)]))
        coords[-1] = merge([coords[-1], ({lane: 1}, [])])
        base = [merge([start(ax, c) for ax, c in a.coefs]) for a in o.index]
        copy = Stmt([access(sh, prefix + coords, writes=1),
                     access(global_buf, [merge([b, c]) for b, c in zip(base, coords)], reads=1)])
        return nest([(rnd, rounds, KIND["serial"]), (lane, width, KIND["vectorized"])], [copy])

    def build(self) -> Nest:
        """The tree of this batch, whose configs share double buffering and the vector-read
        operand (``gpu_groups``)."""
        w, n, f, ops = self.w, self.n, self.f, self.ops
        staged, vector = bool(self.staged[0]), int(self.vector_operand[0])
        if (self.staged != staged).any() or (self.vector_operand != vector).any():
            raise ValueError("a GPU nest's configs must share double_buffer and vec_shared's "
                             "effect: split them with gpu_groups")
        out_t = w.output
        bufs = {t: buffer(t, n) for t in [*w.inputs, out_t]}
        shared = []
        for o, tile, pad in zip(ops, self.tile_shapes, self.pads):
            shape = tile.copy()
            shape[:, -1] += pad
            if staged:
                shape = np.concatenate([np.full((n, 1), 2, np.int64), shape], axis=1)
            shared.append(Buf(f"{o.tensor.name}_shared", shape, "shared"))
        acc = Buf("acc", np.stack([f[ax][:, 1] * f[ax][:, 3] for ax in self.spatial], axis=1),
                  "local")
        acc_idx = [({f"v.{ax.name}": f[ax][:, 3], f"i.{ax.name}": 1}, []) for ax in self.spatial]

        sources = [bufs[inlined_source(o.tensor) or o.tensor] for o in ops]

        def loads(prefix: list, step: "str | None", tag: str = "") -> list:
            start = self.start_at(step)
            return [node for i, (o, sh, src) in enumerate(zip(ops, shared, sources))
                    for node in self.cooperative_load(o, sh, i, src, prefix, start, tag)]

        reg = ([(f"v.{ax.name}", f[ax][:, 1], KIND["vthread"]) for ax in self.spatial]
               + [(f"i.{ax.name}", f[ax][:, 3], KIND["serial"]) for ax in self.spatial])
        middle = [(f"{ax.name}.1", f[ax][:, 1], KIND["serial"]) for ax in self.reduce]
        innermost = [(f"{ax.name}.2", f[ax][:, 2], KIND["serial"]) for ax in self.reduce
                     if f[ax].shape[1] == 3]
        stage = [({}, [(1, Mod(Var("ko"), 2), True)])] if staged else []
        operand_idx = [stage + [merge([(self.local(ax, c), []) for ax, c in a.coefs])
                                for a in o.index] for o in ops]
        update = Stmt([access(acc, acc_idx, reads=1, writes=1),
                       *(access(sh, idx, reads=1) for sh, idx in zip(shared, operand_idx))],
                      flops=2)
        if vector >= 0:  # vec_shared: the row axis's register loop, innermost and vectorized
            lanes = self.row_axes[vector]
            kept = [lp for lp in reg if lp[0] != f"i.{lanes.name}"]
            compute = nest(self.unrolled(middle + kept + innermost),
                           nest([(f"i.{lanes.name}", f[lanes][:, 3], KIND["vectorized"])],
                                [update]))
        else:
            compute = nest(self.unrolled(middle + reg + innermost), [update])
        barrier = Stmt([], barrier=True)
        if staged:  # step 0 into copy 0; then per step: step ko + 1 into the other copy
            copy = [({}, [(1, Mod(NEXT, 2), True)])]
            main = [*loads([({}, [])], "first"), barrier,
                    *nest([("ko", self.steps, KIND["serial"])],
                          [*loads(copy, "next", "n"), *compute, barrier])]
        else:
            outer_red = [(f"{ax.name}.0", f[ax][:, 0], KIND["serial"]) for ax in self.reduce]
            main = nest(outer_red, [*loads([], None), barrier, *compute, barrier])
        out_idx = [merge([(self.start(ax), []), (self.local(ax), [])]) for ax in out_t.op.axes]
        flops, reads = epilogue_reads(w)  # the write-back stores through the epilogue
        writeback = Stmt([access(bufs[out_t], out_idx, writes=1),
                          *(access(acc, acc_idx, reads=k) if t is None
                            else access(bufs[w.inputs[t]], [out_idx[d] for d in dims], reads=k)
                            for t, dims, k in reads)], flops)
        body = (nest(self.unrolled(reg), [Stmt([access(acc, acc_idx, writes=1)])])
                + main + nest(self.unrolled(reg), [writeback]))
        bound = self.spatial[::-1]  # the last axis on x, as ``lower_gpu._bind`` does
        bindings = ([(f"b.{ax.name}", f[ax][:, 0], KIND["blockIdx"]) for ax in bound]
                    + [(f"t.{ax.name}", f[ax][:, 2], KIND["threadIdx"]) for ax in bound])
        grid = np.prod([f[ax][:, 0] for ax in self.spatial], axis=0)
        return Nest(n, [bufs[t] for t in (*w.inputs, out_t)], [], [acc, *shared],
                    nest(bindings, body), launch=(grid, self.threads))
