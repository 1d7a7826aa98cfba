"""Context features of a whole batch of configs at once, without lowering each one.

A template lowers every config of a *group* to the same tree of loops and statements; what differs
between configs is numbers: loop extents, loop kinds, index coefficients, buffer shapes, and
whether a statement, access or buffer is there at all. A :class:`Nest` holds that tree once,
with every such number a NumPy array over the group's configs, and :func:`analyze` computes
``context.py``'s context vectors and whole-program figures for all of them with NumPy operations
over the whole group. Lowering drops loops of extent 1, so a loop of extent 1 here is *absent* for
that config: it adds no row and no depth, and multiplies nothing. A loop marked ``virtual`` is
unrolled in the AST itself (a copy of its body per step, the loop variable replaced by
constants): it scales how often the body runs, but adds no row, and its variable leaves the
indices, as in lowering's first copy, which is the one the analyzer reads.

This mirrors ``context._Analyzer`` rule for rule; ``tests/test_features_fast.py`` checks that the
two agree exactly. The template builders (``nest_cpu.py``, ``nest_gpu.py``) mirror
``lower/cpu.py`` and ``lower/gpu.py``.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from functools import lru_cache, partial
from typing import Callable, Sequence, Union

import numpy as np

from .. import loopast as A
from .. import te
from ..lower.common import epilogue_value
from ..workloads import Workload
from .context import (_CACHE_SIZES, _RAW_COLUMNS, _RAW_PROGRAM, CTX, KIND_NAMES, N_CONTEXT,
                      N_PROGRAM, PROGRAM_NAMES, SLOT_ROLES)

Num = Union[np.ndarray, int]  # a number per config, or one for all
KIND = {k: i for i, k in enumerate(KIND_NAMES)}
ELEM_BYTES = 4  # every buffer is float32 (``fast.supports`` checks)
_PROGRAM = {n: i for i, n in enumerate(PROGRAM_NAMES)}
_RAW = set(_RAW_COLUMNS.tolist())  # columns kept unscaled (depth, flags)


# ---------------------------------------------------------------- index expressions
# The non-affine parts of indices (``//`` and ``%`` of fused loops, cooperative loads), with
# ``index_analysis.value_range`` and ``dominant_coeff`` evaluated for all configs at once.


@dataclass(eq=False)
class Var:
    key: str


@dataclass(eq=False)
class Add:
    a: object
    b: object


@dataclass(eq=False)
class Mul:
    a: object
    k: Num  # a * IntImm(k)


@dataclass(eq=False)
class Div:
    a: object
    k: Num  # a // IntImm(k) where k > 1; lowering emits no ``// 1``, so there it is ``a``


@dataclass(eq=False)
class Mod:
    a: object
    k: Num
    on: Num = True  # a % IntImm(k) where on, else a


def expr_vars(e) -> set[str]:
    if isinstance(e, Var):
        return {e.key}
    if isinstance(e, Add):
        return expr_vars(e.a) | expr_vars(e.b)
    return expr_vars(e.a)


def value_range(e, active: dict, child=None) -> tuple[Num, Num]:
    """``index_analysis.value_range``: (span, distinct values) while the ``active`` loops run;
    ``child(x)`` evaluates the operands (default: this function)."""
    if isinstance(e, Var):
        n = active.get(e.key, 1)
        return n, n
    child = child or (lambda x: value_range(x, active))
    sa, ca = child(e.a)
    if isinstance(e, Add):
        sb, cb = child(e.b)
        span = sa + sb - 1
        return span, np.minimum(ca * cb, span)
    if isinstance(e, Mul):
        k = np.abs(e.k)
        span = np.where(k != 0, (sa - 1) * k + 1, 1)
        return span, np.minimum(np.where(k != 0, ca, 1), span)
    if isinstance(e, Div):
        span = (sa - 1) // e.k + 1
        return np.where(e.k > 1, span, sa), np.where(e.k > 1, span, ca)
    span = np.minimum(sa, e.k)
    return np.where(e.on, span, sa), np.where(e.on, np.minimum(ca, span), ca)


def dominant_coeff(e, key: str) -> Num:
    """``index_analysis.dominant_coeff``: how much ``e`` moves per step of loop ``key``."""
    if isinstance(e, Var):
        return int(e.key == key)
    a = dominant_coeff(e.a, key)
    if isinstance(e, Add):
        return a + dominant_coeff(e.b, key)
    if isinstance(e, Mul):
        return a * e.k
    a = np.asarray(a)
    if isinstance(e, Div):  # int(a / k): truncation toward zero
        return np.where(e.k > 1, np.where(a >= 0, a // e.k, -((-a) // e.k)), a)
    return np.where(e.on, np.where(a >= 0, a % e.k, -((-a) % e.k)), a)


# ---------------------------------------------------------------- the nest


@dataclass(eq=False)
class Buf:
    name: str
    shape: np.ndarray  # (n, dims) int64; a dimension lowering leaves out is 1 here
    scope: str = "global"
    on: Num = True  # where the program has this buffer (a workspace or an allocation)

    @property
    def size(self) -> np.ndarray:
        return self.shape.prod(axis=1)

    @property
    def strides(self) -> np.ndarray:
        out = np.ones(self.shape.shape, np.int64)
        for d in range(self.shape.shape[1] - 2, -1, -1):
            out[:, d] = out[:, d + 1] * self.shape[:, d + 1]
        return out


@dataclass(eq=False)
class Access:
    """A buffer read and/or written by one statement through one index: ``affine[d]`` maps a
    loop variable to its coefficient in dimension d, ``opaque[d]`` lists (scale, expression, on)
    non-affine parts. ``reads``/``writes`` count the loads and stores of that element; ``on``
    says where the statement has this access at all."""

    buf: Buf
    affine: list[dict]
    opaque: list[list] = field(default_factory=list)
    reads: int = 0
    writes: int = 0
    on: Num = True


@dataclass(eq=False)
class Stmt:
    accesses: list[Access]
    flops: int = 0  # arithmetic operations per execution
    barrier: bool = False
    on: Num = True  # where the program has this statement


@dataclass(eq=False)
class Loop:
    var: str
    ext: Num
    kind: Num
    body: list
    virtual: Num = False


@dataclass(eq=False)
class Nest:
    """One group's tree. ``args`` are the inputs then the output, as in ``Program.args``;
    ``allocs`` the local/shared buffers in the order lowering allocates them; ``launch`` the
    GPU grid and block sizes (products), None on the CPU."""

    n: int
    args: list[Buf]
    workspaces: list[Buf]
    allocs: list[Buf]
    body: list
    launch: "tuple[Num, Num] | None" = None


def nest(loops: list[tuple], body: list) -> list:
    """``(var, ext, kind[, virtual])`` loops, outermost first, around ``body``."""
    for lp in reversed(loops):
        body = [Loop(*lp[:3], body, *lp[3:])]
    return body


# ---------------------------------------------------------------- for template builders


class Unsupported(ValueError):
    """Configs the fast path does not model; ``featurize`` lowers them instead."""


def buffer(t: te.Tensor, n: int, on: Num = True) -> Buf:
    return Buf(t.name, np.broadcast_to(np.array(t.shape, np.int64), (n, len(t.shape))), on=on)


def merge(parts: Sequence[tuple[dict, list]]) -> tuple[dict, list]:
    """The (affine terms, opaque parts) of a sum of index parts."""
    affine: dict = {}
    opaque: list = []
    for terms, extra in parts:
        for var, c in terms.items():
            affine[var] = affine[var] + c if var in affine else c
        opaque += extra
    return affine, opaque


def access(buf: Buf, dims: Sequence[tuple[dict, list]], reads: int = 0, writes: int = 0,
           on: Num = True) -> Access:
    """An access through one (affine terms, opaque parts) index per dimension."""
    return Access(buf, [a for a, _ in dims], [o for _, o in dims], reads, writes, on)


def tile_factors(values: Sequence[dict], axis: te.IterVar, levels: int) -> np.ndarray:
    """(n, levels) int64: the ``tile_<axis>`` factors of every config (outermost first)."""
    default = (1,) * (levels - 1) + (axis.extent,)
    tiles = [v.get(f"tile_{axis.name}", default) for v in values]
    if any(len(t) != levels for t in tiles):
        raise Unsupported(f"tile_{axis.name} must have {levels} factors")
    out = np.fromiter(itertools.chain.from_iterable(tiles), np.int64, len(tiles) * levels)
    out = out.reshape(len(tiles), levels)
    if (out.prod(axis=1) != axis.extent).any():
        raise Unsupported(f"tile_{axis.name} factors do not multiply to {axis.extent}")
    return out


def inlined_source(t: te.Tensor) -> "te.Tensor | None":
    """The input a producer stage copies with shifted indices (conv2d's padding:
    ``select(in bounds, data[i - pad], 0)``), or None if the stage computes anything else."""
    if not isinstance(t.op, te.ComputeOp):
        return None
    body = t.op.body
    if isinstance(body, te.Select) and isinstance(body.false_value, te.Const):
        body = body.true_value
    if not (isinstance(body, te.TensorLoad) and isinstance(body.tensor.op, te.PlaceholderOp)
            and len(body.indices) == len(t.op.axes)):
        return None
    for i, ax in zip(body.indices, t.op.axes):
        shifted = (isinstance(i, te.Binary) and i.op == "-" and i.a is ax
                   and isinstance(i.b, te.Const))
        if i is not ax and not shifted:
            return None
    return body.tensor


@lru_cache(maxsize=256)
def epilogue_reads(workload: Workload) -> tuple[int, tuple[tuple["int | None", tuple[int, ...],
                                                                   int], ...]]:
    """What the kernel computes to store one output element (``lower.common.epilogue_value``):
    its flops (BinOps and Calls, as ``context`` counts them) and its loads, per tensor in the order
    of its first load: (the tensor's position in ``workload.inputs``, the output dimensions that
    index it, loads); position None is the reduction's value (the accumulator, or the output
    itself). Without an epilogue: one load of the value, no flops. (Positions, not tensors: equal
    workloads share this cache, not their tensors.)"""
    out = workload.output
    idx = tuple(A.LoopVar(ax.name) for ax in out.op.axes)
    bufs = {None: A.Buffer(out.name, out.shape)}  # input position -> its buffer
    position = {t: i for i, t in enumerate(workload.inputs)}

    def load(t: te.Tensor, index: tuple) -> A.Expr:
        return A.Load(bufs.setdefault(position[t], A.Buffer(t.name, t.shape)), index)

    flops, reads = 0, {}  # buffer -> [dims, loads]

    def walk(e) -> None:  # ``context._Analyzer._value``
        nonlocal flops
        if isinstance(e, A.Load):
            dims = tuple(next(d for d, v in enumerate(idx) if v is i) for i in e.indices)
            reads.setdefault(e.buffer, [dims, 0])[1] += 1
        elif isinstance(e, (A.BinOp, A.Call)):
            flops += 1
            for x in (e.a, e.b) if isinstance(e, A.BinOp) else e.args:
                walk(x)
        elif not isinstance(e, (A.FloatImm, A.IntImm)):
            raise Unsupported(f"{type(e).__name__} in the epilogue of {workload.label}")

    walk(epilogue_value(workload, A.Load(bufs[None], idx), idx, load))
    positions = {b: i for i, b in bufs.items()}
    return flops, tuple((positions[b], dims, k) for b, (dims, k) in reads.items())


# ---------------------------------------------------------------- analysis


@dataclass
class Summary:
    """``context`` (N_CONTEXT, loops, n) float32, scaled as ``context.summarize`` scales it;
    ``present`` (loops, n): the loops lowering keeps (the other rows are meaningless);
    ``program`` (n, N_PROGRAM) float32. Loops are in pre-order."""

    context: np.ndarray
    present: np.ndarray
    program: np.ndarray


def analyze(nest_: Nest, columns: "frozenset[str] | None" = None) -> Summary:
    """The context vectors and whole-program figures of every config of ``nest_``; with
    ``columns`` (context column names), only those columns of the context vectors are filled
    (the others are 0), and figures that none of them needs are not computed."""
    return _Analysis(nest_, columns).run()


# Arrays are loop-major, (loops, n); access arrays are (chain positions, accesses or index
# dimensions, n).


def _flatten(nodes: list, chain: tuple, loops: list, parents: list, stmts: list) -> None:
    for node in nodes:
        if isinstance(node, Loop):
            loops.append(node)
            parents.append(chain[-1] if chain else -1)
            _flatten(node.body, chain + (len(loops) - 1,), loops, parents, stmts)
        else:
            stmts.append((node, chain))


def _prefix(x: np.ndarray, op: np.ufunc) -> np.ndarray:
    """Running ``op`` along axis 0, in place (NumPy's accumulate along a leading axis is far
    slower than a loop over it)."""
    for j in range(1, len(x)):
        op(x[j - 1], x[j], out=x[j])
    return x


def _rows(n: int, values: list, dtype) -> np.ndarray:
    """(len(values), n) of ``dtype``: row j is ``values[j]``, a number per config or one for
    all (two NumPy calls, not one per row)."""
    out = np.empty((len(values), n), dtype)
    per_config = [j for j, v in enumerate(values) if isinstance(v, np.ndarray) and v.ndim]
    if per_config:
        try:
            out[per_config] = np.array([values[j] for j in per_config])
        except ValueError:  # arrays of other shapes, broadcast one by one
            for j in per_config:
                out[j] = values[j]
    if len(per_config) < len(values):
        one = [j for j, v in enumerate(values) if not (isinstance(v, np.ndarray) and v.ndim)]
        out[one] = np.array([values[j] for j in one])[:, None]
    return out


@dataclass
class _Buffer:
    """Per-loop figures of one buffer over all its accesses, (loops, n) each (None: not
    computed, as no column asked for needs it)."""

    touched: np.ndarray
    access_count: np.ndarray
    stride: "np.ndarray | None"
    read: "np.ndarray | None"
    write: "np.ndarray | None"


_SLOT_FIGURES = ("touched_bytes", "access_count", "stride", "read", "write")


@lru_cache(maxsize=None)
def _optional_figures(columns: "frozenset[str] | None") -> frozenset[str]:
    """The per-buffer figures computed only where some of ``columns`` (None: all) reads them;
    footprints and access counts always are: both feature modes read them."""
    wanted = CTX if columns is None else columns
    return frozenset(f for f in ("stride", "read", "write")
                     if any(name.startswith("slot") and name.endswith(f"_{f}") for name in wanted))


@dataclass(frozen=True)
class _AccessPlan:
    """The accesses' structure as ``_Analysis._accesses`` uses it: chain positions and index
    dimensions, where each index term goes, and how the accesses group by buffer and loop."""

    k_max: int  # the longest chain
    slot: np.ndarray  # (k_max, accesses): the loop at each chain position, innermost first
    dims: list  # (access, dimension) of the index dimensions analysed, by access
    buf_first: list  # per buffer, the first access of it
    shape_row: np.ndarray  # per index dimension, its row among the buffers' stacked dimensions
    dim_table: np.ndarray  # (accesses, most dimensions): each one's, padded with a last one
    at_j: list  # per index term: its chain position, its index dimension, where it comes from
    at_i: list
    at_src: list  # (access, dimension, variable)
    at_loop: np.ndarray  # the loop of each
    reads: np.ndarray  # (accesses, 1)
    writes: np.ndarray
    real: np.ndarray  # (k_max, accesses, 1): a loop, not the padding
    order: np.ndarray  # the (chain position, access) cells sorted by (buffer, loop)
    sorted_rows: np.ndarray
    starts: np.ndarray  # where each (buffer, loop) group starts among them
    glob: list  # the accesses of global buffers


@lru_cache(maxsize=64)
def _access_plan(structure: tuple) -> _AccessPlan:
    n_loops, loop_vars, items = structure
    k_max = max(1, *(len(it[3]) for it in items))
    slot = np.full((k_max, len(items)), n_loops)
    dims = []
    for a, (_, _, _, loops, affine, opaque, _, _) in enumerate(items):
        kept = [d for d in range(len(affine)) if affine[d] or (d < len(opaque) and opaque[d])]
        dims += [(a, d) for d in kept or [0]]
        slot[:len(loops), a] = loops[::-1]
    of = np.array([a for a, _ in dims])
    first_dim = np.flatnonzero(np.r_[True, of[1:] != of[:-1]])
    buf_first, offsets, ndim = {}, {}, 0
    for a, (b, _, n_dims, *_) in enumerate(items):
        if b not in buf_first:
            buf_first[b], offsets[b] = a, ndim
            ndim += n_dims
    shape_row = np.array([offsets[items[a][0]] + d for a, d in dims] + [ndim])  # + the padding
    ends = np.r_[first_dim[1:], len(dims)]
    dim_table = np.full((len(items), max(ends - first_dim)), len(dims))  # padded: spans 1
    for a, (start, end) in enumerate(zip(first_dim, ends)):
        dim_table[a, :end - start] = np.arange(start, end)
    positions: dict = {}  # chain -> {loop variable: chain position}
    at_j, at_i, at_src = [], [], []
    for i, (a, d) in enumerate(dims):
        loops = items[a][3]
        if loops not in positions:
            positions[loops] = {loop_vars[s]: j for j, s in enumerate(loops[::-1])}
        for var in items[a][4][d]:
            j = positions[loops].get(var)
            if j is not None:
                at_j.append(j)
                at_i.append(i)
                at_src.append((a, d, var))
    row = np.array([it[0] for it in items]) * (n_loops + 1) + slot
    order = np.argsort(row, axis=None, kind="stable")
    sorted_rows = row.ravel()[order]
    starts = np.flatnonzero(np.r_[True, sorted_rows[1:] != sorted_rows[:-1]])
    return _AccessPlan(k_max, slot, dims, list(buf_first.values()), shape_row, dim_table,
                       at_j, at_i, at_src, slot[at_j, of[at_i]] if at_j else np.zeros(0, int),
                       np.array([it[6] for it in items])[:, None],
                       np.array([it[7] for it in items])[:, None],
                       (slot < n_loops)[:, :, None], order, sorted_rows, starts,
                       [a for a, it in enumerate(items) if it[1] == "global"])


class _Analysis:
    def __init__(self, nest_: Nest, columns: "frozenset[str] | None" = None) -> None:
        self.nest = nest_
        self.columns = columns  # None: all
        self.optional = _optional_figures(columns)
        n = self.n = nest_.n
        self.loops: list[Loop] = []
        self.parents: list[int] = []
        self.stmts: list[tuple[Stmt, tuple]] = []
        _flatten(nest_.body, (), self.loops, self.parents, self.stmts)
        self.ext = _rows(n, [lp.ext for lp in self.loops], np.int64)
        self.kind = _rows(n, [lp.kind for lp in self.loops], np.int64)
        self.virtual = _rows(n, [lp.virtual for lp in self.loops], bool)
        self.any_virtual = bool(self.virtual.any())
        self.present = (self.ext > 1) & ~self.virtual
        self.buffers: dict[Buf, _Buffer] = {}
        self.traffic = [np.zeros(n, np.int64) for _ in _CACHE_SIZES]
        self.best_read: dict[Buf, tuple[np.ndarray, np.ndarray]] = {}  # buf -> (execs, order)
        self._ranges: dict = {}  # memo of value_range per (expression, running loops)
        self._coeffs: dict = {}  # memo of dominant_coeff per (expression, loop variable)
        self._opaques: dict = {}  # memo of _opaque per (expression, chain)
        self._positions: dict = {}  # per chain: loop variable -> (chain position, loop)

    def run(self) -> Summary:
        n, n_loops = self.n, len(self.loops)
        ext, present, kind = self.ext, self.present, self.kind
        outer = np.ones((n_loops, n), np.int64)
        depth = np.zeros((n_loops, n), np.int64)
        parent_kind = np.full((n_loops, n), -1, np.int64)  # kind of the nearest present ancestor
        for s, p in enumerate(self.parents):
            if p >= 0:
                np.multiply(outer[p], ext[p], out=outer[s])
                np.add(depth[p], present[p], out=depth[s])
                parent_kind[s] = np.where(present[p], kind[p], parent_kind[p])
        body_execs = np.zeros((n_loops, n), np.int64)
        for stmt, chain in self.stmts:
            if chain:
                body_execs[chain[-1]] += stmt.on  # a statement is one leaf execution
        height = np.zeros((n_loops, n), np.int64)
        below = np.zeros((n_loops, n), bool)  # a present loop nests inside
        for s in range(n_loops - 1, -1, -1):
            p = self.parents[s]
            if p >= 0:
                body_execs[p] += ext[s] * body_execs[s]
                np.maximum(height[p], height[s] + present[s], out=height[p])
                below[p] |= present[s] | below[s]
        self.outer = outer

        figures = dict.fromkeys(("flops", "stores", "loads", "barriers"), 0)
        accesses = []
        for stmt, chain in self.stmts:
            execs = outer[chain[-1]] * ext[chain[-1]] if chain else np.ones(n, np.int64)
            execs = execs * stmt.on
            figures["flops"] = figures["flops"] + stmt.flops * execs
            figures["barriers"] = figures["barriers"] + stmt.barrier * execs
            for acc in stmt.accesses:
                on = np.asarray(acc.on & stmt.on)
                if on.any():
                    figures["loads"] = figures["loads"] + acc.reads * execs * on
                    figures["stores"] = figures["stores"] + acc.writes * execs * on
                    accesses.append((acc, chain, np.broadcast_to(on, (n,))))
        self._accesses(accesses)

        columns = {"extent": ext, "depth": depth, "height": height, "innermost": ~below,
                   "outer_iters": outer, "body_execs": body_execs, "total_iters": outer * ext}
        for k, name in enumerate(KIND_NAMES):
            columns[f"kind_{name}"] = kind == k
        columns.update(self._slot_columns())
        touched = [v for name, v in columns.items() if name.endswith("_touched_bytes")]
        columns["footprint_bytes"] = np.sum(touched, axis=0) if touched else np.zeros_like(ext)
        if self.columns is not None:
            columns = {name: v for name, v in columns.items() if name in self.columns}
        z = np.zeros((N_CONTEXT, n_loops, n), np.float32)
        scaled = [name for name in columns if CTX[name] not in _RAW]
        x = np.array([columns[c] for c in scaled], np.float64)
        np.abs(x, out=x)
        x += 1.0
        z[[CTX[c] for c in scaled]] = np.log2(x, out=x)
        for name in columns.keys() - set(scaled):
            z[CTX[name]] = columns[name]
        program = self._program(figures, depth, body_execs, parent_kind)
        return Summary(z, present, program)

    # ------------------------------------------------------------ accesses

    def _accesses(self, items: list[tuple[Access, tuple, np.ndarray]]) -> None:
        """``_Analyzer._fill_access`` for all accesses at once: for every loop of an access's
        chain, innermost first, the memory it touches below the loop, how often it runs, and
        how far one step of the loop moves it. Arrays are (chain position, access, n), and per
        index dimension (dimension, chain position, n) over the dimensions of all accesses that
        have index terms (one without any spans 1 and moves nothing: it changes no figure);
        chains are padded with a loop of extent 1 at index ``n_loops``. What depends on the
        accesses' structure only is an :class:`_AccessPlan`, made once per structure."""
        n, n_loops = self.n, len(self.loops)
        if not items:
            return
        plan = _access_plan(self._structure(items))
        k_max, slot, dims = plan.k_max, plan.slot, plan.dims
        bufs = [items[a][0].buf for a in plan.buf_first]
        pad = np.ones((1, n), np.int64)
        shape = np.concatenate([b.shape.T for b in bufs] + [pad])[plan.shape_row]
        # the index terms, (terms, n): the loop each sits at, and its coefficient there
        ext = np.concatenate([self.ext, pad])  # per loop, and the padding loop last
        virtual = np.concatenate([self.virtual, pad < 1])
        values = _rows(n, [items[a][0].affine[d][var] for a, d, var in plan.at_src], np.int64)
        if self.any_virtual:  # lowering's first copy of an unrolled body has the variable at 0
            values *= ~virtual[plan.at_loop]
        ext_t = ext[plan.at_loop]
        # per (dimension, chain position): what the loop there adds to the span, and multiplies
        # the count of distinct values by; their running sum and product outwards are the span
        # and the count while the loops from the innermost to that one run. A last dimension
        # that spans 1 pads the accesses with fewer dimensions (``plan.dim_table``).
        span = np.zeros((len(dims) + 1, k_max, n), np.int64)
        span[plan.at_i, plan.at_j] = np.abs(values) * (ext_t - 1)
        distinct = np.ones((len(dims) + 1, k_max, n), np.int64)
        distinct[plan.at_i, plan.at_j] = np.where(values != 0, ext_t, 1)
        coeff = None
        if "stride" in self.optional:
            coeff = np.zeros((len(dims) + 1, k_max, n), np.int64)
            coeff[plan.at_i, plan.at_j] = values
        later = self._add_opaque(items, dims, span, distinct, coeff)
        _prefix(span.transpose(1, 0, 2), np.add)
        span += 1
        _prefix(distinct.transpose(1, 0, 2), np.multiply)
        for add in later:
            add()
        ext, virtual = ext[slot], virtual[slot]
        np.minimum(span, shape[:, None], out=span)
        np.minimum(span, distinct, out=span)
        # per access: the product of its dimensions' spans, and the sum of their strides
        touched = span[plan.dim_table].prod(axis=1)
        touched *= ELEM_BYTES
        touched = np.ascontiguousarray(touched.transpose(1, 0, 2))  # (chain position, access, n)
        if "stride" in self.optional:
            coeff *= np.concatenate([b.strides.T for b in bufs] + [pad])[plan.shape_row][:, None]
            stride = np.abs(coeff[plan.dim_table].sum(axis=1)).transpose(1, 0, 2).copy()
        extent_product = _prefix(ext.copy(), np.multiply)
        on = np.array([item[2] for item in items])
        reads, writes, real = plan.reads, plan.writes, plan.real

        # per (buffer, loop): the largest footprint and stride, the sum of counts, any read/write
        order, sorted_rows, starts = plan.order, plan.sorted_rows, plan.starts

        def per_loop(values: np.ndarray, reduce: np.ufunc) -> np.ndarray:
            out = np.zeros((len(bufs) * (n_loops + 1), n), values.dtype)
            out[sorted_rows[starts]] = reduce.reduceat(values.reshape(-1, n)[order], starts, axis=0)
            return out.reshape(len(bufs), n_loops + 1, n)[:, :n_loops]

        none = [None] * len(bufs)
        figures = [per_loop(touched * on, np.maximum),
                   per_loop((reads + writes) * extent_product * on, np.add),
                   per_loop(stride * on, np.maximum) if "stride" in self.optional else none,
                   (per_loop((reads > 0) & on & real, np.logical_or)
                    if "read" in self.optional else none),
                   (per_loop((writes > 0) & on & real, np.logical_or)
                    if "write" in self.optional else none)]
        for i, buf in enumerate(bufs):
            self.buffers[buf] = _Buffer(*(f[i] for f in figures))

        glob = plan.glob
        if glob:
            # the memory a cache must hold for the data to be loaded once: the footprint of the
            # outermost loop whose footprint fits, times the iterations around that loop
            t_g = touched[:, glob]
            moved = t_g * np.concatenate([self.outer, pad])[slot[:, glob]]
            for t, size in enumerate(_CACHE_SIZES):
                fits = (t_g <= size) & real[:, glob]  # footprints only grow outwards
                last = k_max - 1 - np.argmax(fits[::-1], axis=0)
                at_last = np.take_along_axis(moved, last[None], axis=0)[0]
                amount = np.where(fits.any(axis=0), at_last, ELEM_BYTES * extent_product[-1, glob])
                self.traffic[t] = (amount * on[glob]).sum(axis=0)

        # ``_Analyzer.hottest_read``: the most executed read of each global buffer (the first on
        # ties); the copies of an unrolled body are separate statements, each run this often
        execs = np.where(virtual, 1, ext).prod(axis=0)
        for a, (acc, _, acc_on) in enumerate(items):
            if acc.reads and acc.buf.scope == "global":
                e = np.where(acc_on, execs[a], -1)  # -1: not read
                if acc.buf not in self.best_read:
                    self.best_read[acc.buf] = (e, np.full(n, a))
                else:
                    best, first = self.best_read[acc.buf]
                    self.best_read[acc.buf] = (np.maximum(best, e), np.where(e > best, a, first))

    def _structure(self, items: list[tuple[Access, tuple, np.ndarray]]) -> tuple:
        """What ``_access_plan`` reads of the accesses: per access its buffer (by first use),
        scope and dimensions, its chain and the chain's loop variables, which variables its
        index terms name per dimension and which dimensions have non-affine parts, and its
        load and store counts."""
        first: dict = {}  # id of a buffer -> its number, by first use
        out = []
        for acc, chain, _ in items:
            b = first.setdefault(id(acc.buf), len(first))
            out.append((b, acc.buf.scope, acc.buf.shape.shape[1], chain,
                        tuple(tuple(terms) for terms in acc.affine),
                        tuple(bool(o) for o in acc.opaque), acc.reads, acc.writes))
        return len(self.loops), tuple(lp.var for lp in self.loops), tuple(out)

    def _add_opaque(self, items: list, dims: list, span: np.ndarray, distinct: np.ndarray,
                    coeff: "np.ndarray | None") -> list[Callable[[], None]]:
        """Add the non-affine index parts to the (dimension, chain position, n) ``span``
        increments, ``distinct`` factors and ``coeff`` (None: not computed) of the affine ones,
        before their running sum and product. A part that starts at one chain position adds
        its span there, and its factor, once; one whose range grows at several positions (a
        part of several loops' variables) is added after them (the returned calls): a count
        that grows from one position to the next need not be a multiple of the one before."""
        single, later = [], []  # (dimension, position, span - 1, distinct values, move, scale, on)
        for i, (a, d) in enumerate(dims):
            acc, chain = items[a][0], items[a][1]
            for scale, e, on in acc.opaque[d] if d < len(acc.opaque) else ():
                if not (on is True or np.any(on)):
                    continue
                steps = self._opaque(e, chain)
                if len(steps) == 1:
                    j, s_o, c_o, dom = steps[0]
                    single.append((i, j, s_o - 1, c_o, dom, scale, on))
                elif steps:
                    later.append(partial(self._add_steps, span, distinct, coeff, i, len(chain),
                                         steps, scale, on))
        if single:
            dim, pos = [p[0] for p in single], [p[1] for p in single]
            on = _rows(self.n, [p[6] for p in single], bool)
            scale = _rows(self.n, [p[5] for p in single], np.int64) * on
            more = _rows(self.n, [p[2] for p in single], np.int64) * np.abs(scale)
            times = np.where(on, _rows(self.n, [p[3] for p in single], np.int64), 1)
            np.add.at(span, (dim, pos), more)  # a (dimension, position) may have several parts
            np.multiply.at(distinct, (dim, pos), times)
            if coeff is not None:
                np.add.at(coeff, (dim, pos), _rows(self.n, [p[4] for p in single], np.int64)
                          * scale)
        return later

    def _add_steps(self, span: np.ndarray, distinct: np.ndarray, coeff: "np.ndarray | None",
                   i: int, k: int, steps: list, scale: Num, on: Num) -> None:
        """Add a part of several steps to dimension ``i`` of the running ``span`` and
        ``distinct`` (after the running sum and product), and to ``coeff``."""
        on = np.broadcast_to(on, (self.n,))
        scale = np.where(on, scale, 0)
        more, times = np.zeros((k, self.n), np.int64), np.ones((k, self.n), np.int64)
        for j, s_o, c_o, dom in steps:
            more[j:] = s_o - 1
            times[j:] = c_o
            if coeff is not None:
                coeff[i, j] += dom * scale
        span[i, :k] += more * np.abs(scale)
        distinct[i, :k] *= np.where(on, times, 1)

    def _opaque(self, e, chain: tuple) -> list[tuple[int, Num, Num, Num]]:
        """A non-affine index part along ``chain`` (innermost first), as steps (j, span,
        distinct values, coefficient): from chain position j on the part has that span and
        count of values, and one step of the loop at j moves it by the coefficient; its range
        grows as the loops of its variables start running (before the first step: one value)."""
        key = (id(e), chain)  # accesses share index parts
        if key in self._opaques:
            return self._opaques[key]
        if chain not in self._positions:  # loop variable -> (chain position, loop)
            self._positions[chain] = {self.loops[s].var: (j, s) for j, s in enumerate(chain[::-1])}
        position = self._positions[chain]
        mine = sorted(position[v] for v in expr_vars(e) if v in position)
        steps = []
        for i, (j, s) in enumerate(mine):
            if self.any_virtual and self.virtual[s].any():
                raise NotImplementedError("a virtual loop inside a non-affine index")
            running = tuple(s for _, s in mine[:i + 1])  # the range depends on these loops only
            active = {self.loops[s].var: self.ext[s] for s in running}
            var = self.loops[s].var
            if (id(e), var) not in self._coeffs:
                self._coeffs[id(e), var] = dominant_coeff(e, var)
            steps.append((j, *self._range(e, active, running), self._coeffs[id(e), var]))
        self._opaques[key] = steps
        return steps

    def _range(self, e, active: dict, running: tuple) -> tuple[Num, Num]:
        """``value_range`` memoized by node and running loops: index parts share subexpressions."""
        key = (id(e), running)
        if key not in self._ranges:
            if isinstance(e, Var):
                n = active.get(e.key, 1)
                self._ranges[key] = n, n
            else:
                self._ranges[key] = value_range(e, active,
                                                lambda x: self._range(x, active, running))
        return self._ranges[key]

    # ------------------------------------------------------------ buffer slots

    def _slots(self) -> dict[Buf, np.ndarray]:
        """``_Analyzer``'s slot of every buffer, per config (-1: left out)."""
        n = self.n
        slot_of = {self.nest.args[-1]: np.full(n, SLOT_ROLES.index("output"))}
        used = {r: np.zeros(n, np.int64) for r in SLOT_ROLES}
        for buf in self.nest.allocs:
            slots = np.array([s for s, r in enumerate(SLOT_ROLES) if r == buf.scope] + [-1])
            k = used[buf.scope]
            slot_of[buf] = np.where(buf.on, slots[np.minimum(k, len(slots) - 1)], -1)
            used[buf.scope] = k + buf.on
        # the global buffers other than the output: the inputs are those the most executed
        # statement reads, in its read order; the others take the workspace slot
        globals_ = [*self.nest.args[:-1], *self.nest.workspaces]
        keys = [(np.asarray(b.on), *self.best_read.get(b, (np.full(n, -1), np.zeros(n, int))))
                for b in globals_]
        n_inputs = np.minimum(sum((e > 0) & on for on, e, _ in keys), SLOT_ROLES.count("input"))
        for i, buf in enumerate(globals_):
            on, e, f = keys[i]
            rank = sum(on2 & ((e2 > e) | ((e2 == e) & ((f2 < f) | ((f2 == f) & (j < i)))))
                       for j, (on2, e2, f2) in enumerate(keys) if j != i)
            slot = np.where(rank < n_inputs, rank,
                            np.where(rank == n_inputs, SLOT_ROLES.index("workspace"), -1))
            slot_of[buf] = np.where(on, slot, -1)
        return slot_of

    def _slot_columns(self) -> dict[str, np.ndarray]:
        slot_of = self._slots()
        columns: dict[str, np.ndarray] = {}
        for buf, b in self.buffers.items():
            slot = slot_of[buf]
            for s in np.unique(slot):
                if s < 0:
                    continue
                mine = slot == s
                every = mine.all()
                for name in _SLOT_FIGURES:
                    value = getattr(b, name.replace("_bytes", ""))
                    if value is None:
                        continue
                    col = f"slot{s}_{name}"
                    columns[col] = value if every else np.where(mine, value, columns.get(col, 0))
        for s in range(len(SLOT_ROLES)):
            if f"slot{s}_touched_bytes" in columns:
                touched = columns[f"slot{s}_touched_bytes"]
                count = columns[f"slot{s}_access_count"] * float(ELEM_BYTES)
                columns[f"slot{s}_reuse"] = np.divide(count, touched, out=np.zeros_like(count),
                                                      where=touched > 0)
        return columns

    # ------------------------------------------------------------ whole program

    def _program(self, figures: dict, depth, body_execs, parent_kind) -> np.ndarray:
        n, ext, kind, present = self.n, self.ext, self.kind, self.present

        def rows_of(*kinds: str) -> np.ndarray:
            out = kind == KIND[kinds[0]]
            for k in kinds[1:]:
                out |= kind == KIND[k]
            return out & present

        def product(mask: np.ndarray) -> np.ndarray:
            return np.where(mask, ext, 1).prod(axis=0)

        def total_bytes(bufs: list) -> Num:
            return sum((b.size * ELEM_BYTES * b.on for b in bufs), 0)

        v = np.zeros((N_PROGRAM, n), np.float64)
        for name, value in figures.items():
            v[_PROGRAM[name]] = value
        v[_PROGRAM["traffic_32KiB"]] = self.traffic[0]
        v[_PROGRAM["traffic_1MiB"]] = self.traffic[1]
        v[_PROGRAM["n_loops"]] = present.sum(axis=0)
        v[_PROGRAM["max_depth"]] = np.where(present, depth + 1, 0).max(axis=0, initial=0)
        for scope in ("local", "shared"):
            v[_PROGRAM[f"{scope}_bytes"]] = total_bytes([b for b in self.nest.allocs
                                                          if b.scope == scope])
        v[_PROGRAM["workspace_bytes"]] = total_bytes(self.nest.workspaces)
        v[_PROGRAM["global_bytes"]] = total_bytes(self.nest.args)
        par, blocks = rows_of("parallel", "blockIdx"), rows_of("blockIdx")
        threads = rows_of("threadIdx", "vthread")
        if self.nest.launch is None:
            v[_PROGRAM["parallel_iters"]] = np.where(par.any(axis=0), product(par), 0)
            v[_PROGRAM["threads"]] = np.where(threads.any(axis=0), product(threads), 0)
        else:  # a kernel without block (thread) loops is launched on the whole grid (block)
            grid, block = self.nest.launch
            v[_PROGRAM["parallel_iters"]] = product(par) * np.where(blocks.any(axis=0), 1, grid)
            v[_PROGRAM["threads"]] = np.where(threads.any(axis=0), product(threads), block)
        v[_PROGRAM["max_vector_lanes"]] = np.where(rows_of("vectorized"), ext, 0).max(
            axis=0, initial=0)
        outermost_unrolled = rows_of("unrolled") & (parent_kind != KIND["unrolled"])
        v[_PROGRAM["max_unrolled_steps"]] = np.where(outermost_unrolled, ext * body_execs,
                                                     0).max(axis=0, initial=0)
        raw = v[_RAW_PROGRAM].copy()
        v = np.log2(1.0 + v)
        v[_RAW_PROGRAM] = raw
        return v.T.astype(np.float32)
