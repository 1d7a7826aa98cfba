"""Per-loop context vectors of a lowered loop AST (paper section 4, Figure 3b) and whole-program
figures, computed in one pass over the statements.

Loops are numbered in pre-order (the order ``loopast.walk`` meets them). Buffers are placed in
fixed slots by *role*, never by name, so the features do not change when loops or buffers are
renamed: two input slots (the global buffers read by the most executed statement, in its read
order), the output (last argument), one workspace slot (other global buffers), then local and
shared allocations in allocation order (``SLOT_ROLES``). Magnitudes are scaled as log2(1 + x); flags and depth are raw.

Touched memory of an access below loop L is estimated per buffer dimension as
``min(dim size, span of the index, product of the extents that move it)`` over the loops from L
inwards, which is exact for affine indices with unit overlap (``oh + ry``) and a close upper
bound otherwise; ``//`` and ``%`` (fused loops) are handled by an interval-style range analysis.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from .. import loopast as A
from .index_analysis import dominant_coeff, linear_form, loop_vars, value_range

KIND_NAMES = ("serial", "parallel", "vectorized", "unrolled", "blockIdx", "threadIdx", "vthread")
_KIND_INDEX = {k: i for i, k in enumerate(KIND_NAMES)}

# Buffer slots by role; extra buffers of a role beyond its slots are left out of the features.
SLOT_ROLES = ("input", "input", "output", "workspace", "local", "local", "shared", "shared")
N_SLOTS = len(SLOT_ROLES)
BUFFER_FIELDS = ("touched_bytes", "access_count", "reuse", "stride", "read", "write")
LOOP_FIELDS = ("extent", "depth", "height", "innermost", *(f"kind_{k}" for k in KIND_NAMES),
               "outer_iters", "body_execs", "total_iters", "footprint_bytes")
CONTEXT_NAMES = LOOP_FIELDS + tuple(f"slot{s}_{f}" for s in range(N_SLOTS) for f in BUFFER_FIELDS)
N_CONTEXT = len(CONTEXT_NAMES)
CTX = {n: i for i, n in enumerate(CONTEXT_NAMES)}

PROGRAM_NAMES = ("flops", "stores", "loads", "traffic_32KiB", "traffic_1MiB", "n_loops",
                 "max_depth", "local_bytes", "shared_bytes", "workspace_bytes", "barriers",
                 "parallel_iters", "threads", "max_vector_lanes", "max_unrolled_steps",
                 "global_bytes")
N_PROGRAM = len(PROGRAM_NAMES)
_CACHE_SIZES = (32 << 10, 1 << 20)  # the caches of traffic_32KiB and traffic_1MiB
# Columns kept raw (not log-scaled): nesting depth and 0/1 flags.
_RAW_COLUMNS = np.array([CTX["depth"], CTX["height"], CTX["innermost"]]
                        + [CTX[f"kind_{k}"] for k in KIND_NAMES]
                        + [CTX[f"slot{s}_{f}"] for s in range(N_SLOTS) for f in ("read", "write")])
_RAW_PROGRAM = np.array([PROGRAM_NAMES.index("max_depth")])
_DTYPE_BYTES = {"float32": 4, "float16": 2, "float64": 8, "int32": 4, "int8": 1, "int64": 8}
# the columns of each slot's buffer fields, and of one field over all slots
_SLOT_COLUMNS = tuple({f: CTX[f"slot{s}_{f}"] for f in BUFFER_FIELDS} for s in range(N_SLOTS))
_FIELD_COLUMNS = {f: np.array([c[f] for c in _SLOT_COLUMNS]) for f in BUFFER_FIELDS}
_KIND_COLUMNS = tuple(CTX[f"kind_{k}"] for k in KIND_NAMES)


@functools.lru_cache(maxsize=64)
def kind_index(kind: str) -> int:
    """The one-hot position of a loop kind; GPU bindings match by prefix (``threadIdx.y``)."""
    base = kind.split(".", 1)[0]
    if base in _KIND_INDEX:
        return _KIND_INDEX[base]
    raise ValueError(f"unknown loop kind {kind!r}; expected one of {', '.join(KIND_NAMES)} "
                     "(GPU bindings may carry a suffix such as '.x')")


@dataclass
class LoopInfo:
    var: A.LoopVar
    extent: int
    kind: int
    depth: int
    parent: int
    outer: int  # iterations of all enclosing loops
    body_execs: int = 0  # leaf statements executed per iteration
    innermost: bool = True
    height: int = 0  # loops nested below, on the deepest path


@dataclass
class ProgramSummary:
    """``context`` (n_loops, N_CONTEXT) and ``program`` (N_PROGRAM,), both scaled; ``loops``."""

    context: np.ndarray
    program: np.ndarray
    loops: list[LoopInfo]


@dataclass
class _Access:
    """Accesses of one buffer through one index tuple under one loop chain (a load and a store
    of the same element, as in ``C = C + ...``, share one)."""

    slot: int
    buffer: A.Buffer
    forms: list
    chain: tuple[int, ...]
    multiplicity: int = 0
    read: bool = False
    write: bool = False


def summarize(program: A.Program) -> ProgramSummary:
    return _Analyzer(program).run()


def context_matrix(program: A.Program) -> np.ndarray:
    """The scaled context feature matrix Z: one row per loop (pre-order), ``N_CONTEXT`` columns."""
    return summarize(program).context


class _Analyzer:
    def __init__(self, program: A.Program) -> None:
        self.program = program
        self.loops: list[LoopInfo] = []
        self.accesses: dict[tuple, _Access] = {}
        self.forms: dict[int, list] = {}
        self.slot_of: dict[A.Buffer, int] = {}
        self.role_used = {r: 0 for r in SLOT_ROLES}
        self.flops = self.loads = self.stores = self.barriers = 0
        self.alloc_bytes = {"local": 0, "shared": 0}
        # global buffers other than the output get their slots after the walk (see _assign_inputs)
        self.globals: list[A.Buffer] = [*program.args[:-1], *program.workspaces]
        self.hottest_read: dict[A.Buffer, tuple[int, int]] = {}  # buf -> (-execs, read order)
        self.n_reads = 0
        if program.args:
            self._assign(program.args[-1], "output")

    def _assign(self, buf: A.Buffer, role: str) -> None:
        slots = [s for s, r in enumerate(SLOT_ROLES) if r == role]
        n = self.role_used[role]
        self.role_used[role] = n + 1
        self.slot_of[buf] = slots[n] if n < len(slots) else -1

    def _note_buffer(self, buf: A.Buffer) -> None:
        if buf in self.slot_of or buf in self.hottest_read or buf in self.globals:
            return
        if buf.scope in ("local", "shared"):  # not allocated by an Allocate: place it by scope
            self._assign(buf, buf.scope)
        else:
            self.globals.append(buf)

    def _assign_inputs(self) -> None:
        """The two input slots go to the global buffers read by the most executed statement,
        in the order that statement reads them (the operands of the main computation: the
        padded copy of conv2d's data when it is materialised, as for matmul's A); the other
        global buffers (e.g. the raw data then) take the workspace slot."""
        never = (1, 0)
        order = sorted(range(len(self.globals)),
                       key=lambda i: (self.hottest_read.get(self.globals[i], never), i))
        for i in order:
            buf = self.globals[i]
            if buf not in self.slot_of:
                main = self.role_used["input"] < 2 and buf in self.hottest_read
                self._assign(buf, "input" if main else "workspace")

    # ------------------------------------------------------------ the walk

    def _stmt(self, s: A.Stmt, chain: tuple[int, ...], execs: int) -> int:
        """Visit ``s`` (executed ``execs`` times); return its leaf executions per execution."""
        if isinstance(s, A.For):
            if s.extent < 1:
                raise ValueError(f"loop {s.var.name} has extent {s.extent}")
            idx = len(self.loops)
            parent = chain[-1] if chain else -1
            if parent >= 0:
                self.loops[parent].innermost = False
            info = LoopInfo(s.var, s.extent, kind_index(s.kind), len(chain), parent, execs)
            self.loops.append(info)
            info.body_execs = self._stmt(s.body, chain + (idx,), execs * s.extent)
            return s.extent * info.body_execs
        if isinstance(s, A.Seq):
            return sum(self._stmt(x, chain, execs) for x in s.stmts)
        if isinstance(s, A.Store):
            self._access(s.buffer, s.indices, True, chain, execs)
            self._value(s.value, chain, execs)
            return 1
        if isinstance(s, A.Allocate):
            scope = s.buffer.scope if s.buffer.scope in ("local", "shared") else "workspace"
            if s.buffer not in self.slot_of:
                self._assign(s.buffer, scope)
            if scope in self.alloc_bytes:
                self.alloc_bytes[scope] += s.buffer.size * _elem_bytes(s.buffer)
            return self._stmt(s.body, chain, execs)
        if isinstance(s, A.If):
            self._index_reads(s.cond, chain, execs)
            return self._stmt(s.then, chain, execs)
        if isinstance(s, A.Barrier):
            self.barriers += execs
            return 1
        raise TypeError(f"unexpected statement {type(s).__name__} in the loop AST")

    def _access(self, buf, indices, write, chain, execs) -> None:
        if write:
            self.stores += execs
        else:
            self.loads += execs
        if len(indices) != len(buf.shape):
            raise ValueError(f"{buf.name} has {len(buf.shape)} dims, accessed with {len(indices)}")
        forms = []
        keys = []
        for i in indices:
            form = self.forms.get(id(i))  # lowering shares index expressions between accesses
            if form is None:
                form = self.forms[id(i)] = linear_form(i)
            forms.append(form)
            keys.append(form[2])
            for _, e in form[1]:  # loads hidden in non-affine index parts (gathers)
                self._index_reads(e, chain, execs)
        # merge accesses by the index's structure, not object identity, so a load and a
        # store of the same element count as one access however the AST was built
        shape_key = tuple(keys)
        key = (buf, shape_key, chain)
        acc = self.accesses.get(key)
        if acc is None:
            self._note_buffer(buf)
            acc = self.accesses[key] = _Access(-1, buf, forms, chain)
        if not write and buf.scope == "global":
            rank = (-execs, self.n_reads)
            self.n_reads += 1
            if rank < self.hottest_read.get(buf, (1, 0)):
                self.hottest_read[buf] = rank
        acc.multiplicity += 1
        if write:
            acc.write = True
        else:
            acc.read = True

    def _value(self, e, chain, execs) -> None:
        """A float expression: count its arithmetic and record its loads."""
        if isinstance(e, A.Load):
            self._access(e.buffer, e.indices, False, chain, execs)
        elif isinstance(e, A.BinOp):
            self.flops += execs
            self._value(e.a, chain, execs)
            self._value(e.b, chain, execs)
        elif isinstance(e, A.Select):
            self._index_reads(e.cond, chain, execs)
            self._value(e.true_value, chain, execs)
            self._value(e.false_value, chain, execs)
        elif isinstance(e, A.Call):
            self.flops += execs
            for a in e.args:
                self._value(a, chain, execs)

    def _index_reads(self, e, chain, execs) -> None:
        """An integer expression: only its (rare) loads matter."""
        if isinstance(e, A.Load):
            self._access(e.buffer, e.indices, False, chain, execs)
        elif isinstance(e, A.BinOp):
            self._index_reads(e.a, chain, execs)
            self._index_reads(e.b, chain, execs)
        elif isinstance(e, A.Select):
            for x in (e.cond, e.true_value, e.false_value):
                self._index_reads(x, chain, execs)

    # ------------------------------------------------------------ features

    def run(self) -> ProgramSummary:
        self._stmt(self.program.body, (), 1)
        n = len(self.loops)
        for lp in reversed(self.loops):  # children come after their parent in pre-order
            if lp.parent >= 0:
                parent = self.loops[lp.parent]
                parent.height = max(parent.height, lp.height + 1)
        rows = []
        for lp in self.loops:
            row = [0.0] * N_CONTEXT
            row[CTX["extent"]] = lp.extent
            row[CTX["depth"]] = lp.depth
            row[CTX["height"]] = lp.height
            row[CTX["innermost"]] = lp.innermost
            row[_KIND_COLUMNS[lp.kind]] = 1.0
            row[CTX["outer_iters"]] = lp.outer
            row[CTX["body_execs"]] = lp.body_execs
            row[CTX["total_iters"]] = lp.outer * lp.extent
            rows.append(row)
        traffic = [0] * len(_CACHE_SIZES)
        self._assign_inputs()
        for acc in self.accesses.values():
            acc.slot = self.slot_of[acc.buffer]
            self._fill_access(acc, rows, traffic)
        z = np.array(rows, dtype=np.float64).reshape(n, N_CONTEXT)
        touched = z[:, _FIELD_COLUMNS["touched_bytes"]]
        z[:, CTX["footprint_bytes"]] = touched.sum(axis=1)
        elem = np.full(N_SLOTS, 4.0)
        for buf, s in self.slot_of.items():
            if s >= 0:
                elem[s] = _elem_bytes(buf)
        counts = z[:, _FIELD_COLUMNS["access_count"]]
        z[:, _FIELD_COLUMNS["reuse"]] = np.divide(counts * elem, touched,
                                                  out=np.zeros_like(counts), where=touched > 0)
        raw = z[:, _RAW_COLUMNS]
        z = np.log2(1.0 + np.abs(z))
        z[:, _RAW_COLUMNS] = raw
        return ProgramSummary(z.astype(np.float32), self._program_vector(traffic), self.loops)

    def _fill_access(self, acc: _Access, rows: list, traffic: list[int]) -> None:
        buf = acc.buffer
        eb = _elem_bytes(buf)
        forms = acc.forms
        strides = buf.strides
        shape = buf.shape
        n_dims = len(shape)
        lin_span = [1] * n_dims
        lin_count = [1] * n_dims
        uses: dict[A.LoopVar, list[tuple[int, int]]] = {}  # var -> [(dim, coeff)]
        for d, (terms, _, _) in enumerate(forms):
            for var, c in terms.items():
                if c:
                    uses.setdefault(var, []).append((d, c))
        # non-affine index parts: [dim, scale, expr, its loop vars, span, distinct values]
        opaque = [[d, scale, e, loop_vars(e), 1, 1] for d, (_, op, _) in enumerate(forms)
                  for scale, e in op]
        count = acc.multiplicity
        col = _SLOT_COLUMNS[acc.slot] if acc.slot >= 0 else None
        in_global = buf.scope == "global"
        fits = [eb * self.loops[acc.chain[-1]].outer * self.loops[acc.chain[-1]].extent
                if acc.chain else eb] * len(_CACHE_SIZES)
        first_fit = 0  # caches are ascending and footprints only grow outwards
        n_caches = len(_CACHE_SIZES) if in_global else 0
        flags = [col[f] for f, on in (("read", acc.read), ("write", acc.write)) if on and col]
        active: dict[A.LoopVar, int] = {}
        loops = self.loops
        touched = eb
        for k in reversed(acc.chain):
            lp = loops[k]
            var, ext = lp.var, lp.extent
            count *= ext
            stride = 0
            changed = False
            for d, c in uses.get(var, ()):
                lin_span[d] += abs(c) * (ext - 1)
                lin_count[d] *= ext
                stride += c * strides[d]
                changed = True
            if opaque:
                active[var] = ext
                for term in opaque:
                    if var in term[3]:
                        d, scale, e = term[0], term[1], term[2]
                        term[4], term[5] = value_range(e, active)
                        stride += scale * dominant_coeff(e, var) * strides[d]
                        changed = True
            if changed:
                span = lin_span[:]
                cnt = lin_count[:]
                for d, scale, _, _, s_o, c_o in opaque:
                    span[d] += abs(scale) * (s_o - 1)
                    cnt[d] *= c_o
                touched = eb
                for d in range(n_dims):
                    touched *= min(shape[d], span[d], cnt[d])
            while first_fit < n_caches and touched > _CACHE_SIZES[first_fit]:
                first_fit += 1
            for t in range(first_fit, n_caches):
                fits[t] = touched * lp.outer
            if col is None:
                continue
            row = rows[k]
            if touched > row[col["touched_bytes"]]:
                row[col["touched_bytes"]] = touched
            row[col["access_count"]] += count
            if abs(stride) > abs(row[col["stride"]]):
                row[col["stride"]] = stride
            for f in flags:
                row[f] = 1.0
        if in_global:
            for t in range(len(_CACHE_SIZES)):
                traffic[t] += fits[t]

    def _program_vector(self, traffic: list[int]) -> np.ndarray:
        loops = self.loops
        par = [lp.extent for lp in loops if KIND_NAMES[lp.kind] in ("parallel", "blockIdx")]
        threads = [lp.extent for lp in loops if KIND_NAMES[lp.kind] in ("threadIdx", "vthread")]
        launch = self.program.launch or {}
        # a GPU kernel may bind work-items through ThreadIdx expressions instead of loops
        if not any(KIND_NAMES[lp.kind] == "blockIdx" for lp in loops) and "grid" in launch:
            par += list(launch["grid"])
        if not threads and "block" in launch:
            threads = list(launch["block"])
        vec = [lp.extent for lp in loops if KIND_NAMES[lp.kind] == "vectorized"]
        unrolled = [lp.extent * lp.body_execs for lp in loops
                    if KIND_NAMES[lp.kind] == "unrolled"
                    and (lp.parent < 0 or KIND_NAMES[loops[lp.parent].kind] != "unrolled")]
        figures = {
            "flops": self.flops, "stores": self.stores, "loads": self.loads,
            "traffic_32KiB": traffic[0], "traffic_1MiB": traffic[1], "n_loops": len(loops),
            "max_depth": max((lp.depth + 1 for lp in loops), default=0),
            "local_bytes": self.alloc_bytes["local"], "shared_bytes": self.alloc_bytes["shared"],
            "workspace_bytes": sum(b.size * _elem_bytes(b) for b in self.program.workspaces),
            "barriers": self.barriers, "parallel_iters": _prod(par), "threads": _prod(threads),
            "max_vector_lanes": max(vec, default=0), "max_unrolled_steps": max(unrolled, default=0),
            "global_bytes": sum(b.size * _elem_bytes(b) for b in self.program.args)}
        v = np.array([figures[name] for name in PROGRAM_NAMES], dtype=np.float64)
        raw = v[_RAW_PROGRAM].copy()
        v = np.log2(1.0 + v)
        v[_RAW_PROGRAM] = raw
        return v.astype(np.float32)


def _prod(xs: list[int]) -> int:
    out = 1
    for x in xs:
        out *= x
    return out if xs else 0


def _elem_bytes(buf: A.Buffer) -> int:
    try:
        return _DTYPE_BYTES[buf.dtype]
    except KeyError:
        raise ValueError(f"buffer {buf.name} has unsupported dtype {buf.dtype!r}") from None
