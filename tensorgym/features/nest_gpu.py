"""The GPU template's kernel for a batch of configs: ``lower/gpu.py`` with arrays for numbers.

Every config has the same tree, so a batch is one group: block and thread bindings, the register
tile's init, the reduction steps (cooperative loads into shared memory, barriers, compute), the
write-back through the epilogue. Tile factors give extents (a factor of 1 is a loop lowering leaves out), the shared
tiles' shapes decide whether a load coordinate is ``//``/``%`` arithmetic or affine, and
``auto_unroll_max_step``/``unroll_explicit`` decide which inner loops are unrolled by pragma
(kind ``unrolled``) or in the AST (``virtual``).
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from ..space import Config
from ..templates.gpu import REDUCE_LEVELS, operands
from ..workloads import Workload
from .nest import (KIND, Add, Buf, Div, Mod, Mul, Nest, Stmt, Var, _prefix, access, buffer,
                   epilogue_reads, inlined_source, merge, nest, tile_factors)

SPATIAL_LEVELS = 4  # (block, vthread, thread, inner)


def gpu_groups(workload: Workload, configs: Sequence[Config]) -> list[tuple[np.ndarray, Nest]]:
    return [(np.arange(len(configs)), _GpuNest(workload, configs).build())]


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

    def cooperative_load(self, o, sh: Buf, global_buf: Buf, width: np.ndarray, i: int) -> list:
        """``lower_gpu._cooperative_load``: every thread copies elements
        ``(round * threads + tid) * width + lane`` of the tile."""
        rounds = -(-(sh.size // width) // self.threads)
        rnd, lane = f"ld{i}", f"vec{i}"
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
        strides = sh.strides
        for d in range(sh.shape.shape[1]):
            extent, stride = sh.shape[:, d], strides[:, d]
            part = Div(flat, stride)
            if d > 0:
                coords.append(({}, [(1, Mod(part, extent), extent > 1)]))
            else:  # a one-dimensional tile: the coordinate is ``flat`` itself
                affine = (extent > 1) & (stride == 1)
                coords.append(({v: c * affine for v, c in flat_terms.items()},
                               [(1, part, (extent > 1) & ~affine)]))
        coords[-1] = merge([coords[-1], ({lane: 1}, [])])
        base = [merge([(self.start(ax, c), []) for ax, c in a.coefs]) for a in o.index]
        copy = Stmt([access(sh, coords, writes=1),
                     access(global_buf, [merge([b, c]) for b, c in zip(base, coords)], reads=1)])
        return nest([(rnd, rounds, KIND["serial"]), (lane, width, KIND["vectorized"])], [copy])

    def build(self) -> Nest:
        w, n, f = self.w, self.n, self.f
        out_t = w.output
        bufs = {t: buffer(t, n) for t in [*w.inputs, out_t]}
        ops = operands(w)
        tiles = {ax: self.tile(ax) for ax in [*out_t.op.axes, *out_t.op.reduce_axes]}
        shared, widths = [], []
        for o in ops:
            shape = [sum(c * (tiles[ax] - 1) for ax, c in a.coefs) + 1 for a in o.index]
            shared.append(Buf(f"{o.tensor.name}_shared", np.stack(shape, axis=1), "shared"))
            width = np.ones(n, np.int64)
            if o.vector_dim is not None:  # ``gpu._vector_width``: aligned vector loads only
                ok = ((self.vec_load > 1) & (tiles[o.vector_dim] % self.vec_load == 0)
                      & (o.tensor.shape[-1] % self.vec_load == 0))
                width = np.where(ok, self.vec_load, 1)
            widths.append(width)
        acc = Buf("acc", np.stack([f[ax][:, 1] * f[ax][:, 3] for ax in self.spatial], axis=1),
                  "local")
        acc_idx = [({f"v.{ax.name}": f[ax][:, 3], f"i.{ax.name}": 1}, []) for ax in self.spatial]

        sources = [bufs[inlined_source(o.tensor) or o.tensor] for o in ops]
        loads = [node for i, (o, sh, src, width) in enumerate(zip(ops, shared, sources, widths))
                 for node in self.cooperative_load(o, sh, src, width, i)]
        reg = ([(f"v.{ax.name}", f[ax][:, 1], KIND["vthread"]) for ax in self.spatial]
               + [(f"i.{ax.name}", f[ax][:, 3], KIND["serial"]) for ax in self.spatial])
        middle = [(f"{ax.name}.1", f[ax][:, 1], KIND["serial"]) for ax in self.reduce]
        innermost = [(f"{ax.name}.2", f[ax][:, 2], KIND["serial"]) for ax in self.reduce
                     if f[ax].shape[1] == 3]
        operand_idx = [[merge([(self.local(ax, c), []) for ax, c in a.coefs]) for a in o.index]
                       for o in ops]
        update = Stmt([access(acc, acc_idx, reads=1, writes=1),
                       *(access(sh, idx, reads=1) for sh, idx in zip(shared, operand_idx))],
                      flops=2)
        compute = nest(self.unrolled(middle + reg + innermost), [update])
        step = [*loads, Stmt([], barrier=True), *compute, Stmt([], barrier=True)]
        outer_red = [(f"{ax.name}.0", f[ax][:, 0], KIND["serial"]) for ax in self.reduce]
        out_idx = [merge([(self.start(ax), []), (self.local(ax), [])]) for ax in out_t.op.axes]
        flops, reads = epilogue_reads(w)  # the write-back stores through the epilogue
        writeback = Stmt([access(bufs[out_t], out_idx, writes=1),
                          *(access(acc, acc_idx, reads=k) if t is None
                            else access(bufs[w.inputs[t]], [out_idx[d] for d in dims], reads=k)
                            for t, dims, k in reads)], flops)
        body = (nest(self.unrolled(reg), [Stmt([access(acc, acc_idx, writes=1)])])
                + nest(outer_red, step) + nest(self.unrolled(reg), [writeback]))
        bound = self.spatial[::-1]  # the last axis on x, as ``lower_gpu._bind`` does
        bindings = ([(f"b.{ax.name}", f[ax][:, 0], KIND["blockIdx"]) for ax in bound]
                    + [(f"t.{ax.name}", f[ax][:, 2], KIND["threadIdx"]) for ax in bound])
        grid = np.prod([f[ax][:, 0] for ax in self.spatial], axis=0)
        return Nest(n, [bufs[t] for t in (*w.inputs, out_t)], [], [acc, *shared],
                    nest(bindings, body), launch=(grid, self.threads))
