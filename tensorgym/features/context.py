"""Per-loop context vectors of a lowered loop AST (paper section 4, Figure 3b) and whole-program
figures, computed in one pass over the statements.

Loops are numbered in pre-order (the order ``loopast.walk`` meets them). Buffers are placed in
fixed slots by *role* (inputs in argument order, the output, workspaces, then local and shared
allocations in the order they are allocated), never by name, so the features do not change when
loops or buffers are renamed. Magnitudes are scaled as log2(1 + x); flags and depth are raw.

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
_CACHE_SIZES = (32 << 10, 1 << 20)
# Columns kept raw (not log-scaled): nesting depth and 0/1 flags.
_RAW_COLUMNS = np.array([CTX["depth"], CTX["height"], CTX["innermost"]]
                        + [CTX[f"kind_{k}"] for k in KIND_NAMES]
                        + [CTX[f"slot{s}_{f}"] for s in range(N_SLOTS) for f in ("read", "write")])
_RAW_PROGRAM = np.array([PROGRAM_NAMES.index("max_depth")])
_DTYPE_BYTES = {"float32": 4, "float16": 2, "float64": 8, "int32": 4, "int8": 1, "int64": 8}
_L = len(LOOP_FIELDS)
_F = len(BUFFER_FIELDS)


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
        for i, buf in enumerate(program.args):
            self._assign(buf, "output" if i == len(program.args) - 1 else "input")
        for buf in program.workspaces:
            self._assign(buf, "workspace")

    def _assign(self, buf: A.Buffer, role: str) -> None:
        slots = [s for s, r in enumerate(SLOT_ROLES) if r == role]
        n = self.role_used[role]
        self.role_used[role] = n + 1
        self.slot_of[buf] = slots[n] if n < len(slots) else -1

    def _slot(self, buf: A.Buffer) -> int:
        if buf not in self.slot_of:  # not declared: place it by its scope
            self._assign(buf, buf.scope if buf.scope in ("local", "shared") else "workspace")
        return self.slot_of[buf]

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
        cached = self.forms.get(id(indices))
        if cached is None:
            if len(indices) != len(buf.shape):
                raise ValueError(f"{buf.name} has {len(buf.shape)} dims, "
                                 f"accessed with {len(indices)}")
            forms = []
            for i in indices:
                terms: dict = {}
                opaque: list = []
                _collect(i, 1, terms, opaque)
                for _, e in opaque:  # loads hidden in non-affine index parts (gathers)
                    self._index_reads(e, chain, execs)
                forms.append((terms, opaque))
            # merge accesses by the index's structure, not object identity, so a load and a
            # store of the same element count as one access however the AST was built
            shape_key = tuple((frozenset(t.items()), tuple((c, _expr_key(e)) for c, e in o))
                              for t, o in forms)
            cached = self.forms[id(indices)] = (forms, shape_key)
        forms, shape_key = cached
        key = (buf, shape_key, chain)
        acc = self.accesses.get(key)
        if acc is None:
            acc = self.accesses[key] = _Access(self._slot(buf), buf, forms, chain)
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
        n_kinds = len(KIND_NAMES)
        for lp in reversed(self.loops):  # children come after their parent in pre-order
            if lp.parent >= 0:
                parent = self.loops[lp.parent]
                parent.height = max(parent.height, lp.height + 1)
        rows = []
        for lp in self.loops:
            row = [0.0] * N_CONTEXT
            row[0] = lp.extent
            row[1] = lp.depth
            row[2] = lp.height
            row[3] = lp.innermost
            row[4 + lp.kind] = 1.0
            row[4 + n_kinds] = lp.outer
            row[5 + n_kinds] = lp.body_execs
            row[6 + n_kinds] = lp.outer * lp.extent
            rows.append(row)
        traffic = [0] * len(_CACHE_SIZES)
        for acc in self.accesses.values():
            self._fill_access(acc, rows, traffic)
        z = np.array(rows, dtype=np.float64).reshape(n, N_CONTEXT)
        touched = z[:, _L::_F]
        z[:, CTX["footprint_bytes"]] = touched.sum(axis=1)
        elem = np.full(N_SLOTS, 4.0)
        for buf, s in self.slot_of.items():
            if s >= 0:
                elem[s] = _elem_bytes(buf)
        counts = z[:, _L + 1::_F]
        z[:, _L + 2::_F] = np.divide(counts * elem, touched, out=np.zeros_like(counts),
                                     where=touched > 0)
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
        for d, (terms, _) in enumerate(forms):
            for var, c in terms.items():
                if c:
                    uses.setdefault(var, []).append((d, c))
        # non-affine index parts: [dim, scale, expr, its loop vars, span, distinct values]
        opaque = [[d, scale, e, _vars(e), 1, 1] for d, (_, op) in enumerate(forms)
                  for scale, e in op]
        count = acc.multiplicity
        col = _L + acc.slot * _F if acc.slot >= 0 else -1
        in_global = buf.scope == "global"
        fits = [eb * self.loops[acc.chain[-1]].outer * self.loops[acc.chain[-1]].extent
                if acc.chain else eb] * len(_CACHE_SIZES)
        still_fits = [True] * len(_CACHE_SIZES)
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
                        term[4], term[5] = _range(e, active)
                        stride += scale * _dominant_coeff(e, var) * strides[d]
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
            if in_global:
                for t, cap in enumerate(_CACHE_SIZES):
                    if still_fits[t] and touched <= cap:
                        fits[t] = touched * lp.outer
                    else:
                        still_fits[t] = False
            if col < 0:
                continue
            row = rows[k]
            if touched > row[col]:
                row[col] = touched
            row[col + 1] += count
            if abs(stride) > abs(row[col + 3]):
                row[col + 3] = stride
            if acc.read:
                row[col + 4] = 1.0
            if acc.write:
                row[col + 5] = 1.0
        if in_global:
            for t in range(len(_CACHE_SIZES)):
                traffic[t] += fits[t]

    def _program_vector(self, traffic: list[int]) -> np.ndarray:
        loops = self.loops
        par = [lp.extent for lp in loops if KIND_NAMES[lp.kind] in ("parallel", "blockIdx")]
        threads = [lp.extent for lp in loops if KIND_NAMES[lp.kind] in ("threadIdx", "vthread")]
        vec = [lp.extent for lp in loops if KIND_NAMES[lp.kind] == "vectorized"]
        unrolled = [lp.extent * lp.body_execs for lp in loops
                    if KIND_NAMES[lp.kind] == "unrolled"
                    and (lp.parent < 0 or KIND_NAMES[loops[lp.parent].kind] != "unrolled")]
        global_bytes = sum(b.size * _elem_bytes(b) for b in self.program.args)
        workspace_bytes = sum(b.size * _elem_bytes(b) for b in self.program.workspaces)
        v = np.array([self.flops, self.stores, self.loads, traffic[0], traffic[1], len(loops),
                      max((lp.depth + 1 for lp in loops), default=0), self.alloc_bytes["local"],
                      self.alloc_bytes["shared"], workspace_bytes, self.barriers,
                      _prod(par), _prod(threads), max(vec, default=0), max(unrolled, default=0),
                      global_bytes], dtype=np.float64)
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


# ------------------------------------------------------------ index analysis


def _linear_form(e) -> tuple[dict, list]:
    """Split an index into affine terms {LoopVar: coeff} and opaque (scale, subexpression) parts."""
    terms: dict[A.LoopVar, int] = {}
    opaque: list[tuple[int, object]] = []
    _collect(e, 1, terms, opaque)
    return terms, opaque


def _collect(e, scale: int, terms: dict, opaque: list) -> None:
    if isinstance(e, A.LoopVar):
        terms[e] = terms.get(e, 0) + scale
    elif isinstance(e, (A.IntImm, A.ThreadIdx)):
        return  # constants; a ThreadIdx is fixed within one work-item
    elif isinstance(e, A.BinOp) and e.op in ("+", "-"):
        _collect(e.a, scale, terms, opaque)
        _collect(e.b, -scale if e.op == "-" else scale, terms, opaque)
    elif isinstance(e, A.BinOp) and e.op == "*" and isinstance(e.b, A.IntImm):
        _collect(e.a, scale * e.b.value, terms, opaque)
    elif isinstance(e, A.BinOp) and e.op == "*" and isinstance(e.a, A.IntImm):
        _collect(e.b, scale * e.a.value, terms, opaque)
    elif scale:
        opaque.append((scale, e))


def _vars(e) -> frozenset:
    return frozenset(n for n in A.walk(e) if isinstance(n, A.LoopVar))


def _expr_key(e) -> tuple:
    """A hashable structural key of an index expression (loop variables by identity)."""
    if isinstance(e, A.BinOp):
        return (e.op, _expr_key(e.a), _expr_key(e.b))
    if isinstance(e, A.Select):
        return ("select", _expr_key(e.cond), _expr_key(e.true_value), _expr_key(e.false_value))
    if isinstance(e, A.Load):
        return ("load", e.buffer, tuple(_expr_key(i) for i in e.indices))
    if isinstance(e, (A.IntImm, A.FloatImm)):
        return ("imm", e.value)
    if isinstance(e, A.ThreadIdx):
        return ("thread", e.tag)
    return ("var", e)


def _range(e, active: dict) -> tuple[int, int]:
    """(span, distinct values) of an integer expression while the ``active`` loops run."""
    if isinstance(e, A.LoopVar):
        n = active.get(e, 1)
        return n, n
    if isinstance(e, A.BinOp):
        sa, ca = _range(e.a, active)
        sb, cb = _range(e.b, active)
        op = e.op
        if op in ("+", "-"):
            span, cnt = sa + sb - 1, ca * cb
        elif op == "*":
            if isinstance(e.b, A.IntImm) or isinstance(e.a, A.IntImm):
                k = abs(e.b.value if isinstance(e.b, A.IntImm) else e.a.value)
                s = sa if isinstance(e.b, A.IntImm) else sb
                c = ca if isinstance(e.b, A.IntImm) else cb
                span, cnt = ((s - 1) * k + 1, c) if k else (1, 1)
            else:
                span, cnt = sa * sb, ca * cb
        elif op == "//" and isinstance(e.b, A.IntImm) and e.b.value > 0:
            span = (sa - 1) // e.b.value + 1
            cnt = span
        elif op == "%" and isinstance(e.b, A.IntImm) and e.b.value > 0:
            span = min(sa, e.b.value)
            cnt = min(ca, span)
        elif op in ("min", "max"):
            span, cnt = max(sa, sb), ca * cb
        elif op in ("<", "<=", ">=", ">", "==", "&&"):
            span, cnt = 2, 2
        else:
            span, cnt = sa, ca
        return span, min(cnt, span)
    if isinstance(e, A.Select):
        st, ct = _range(e.true_value, active)
        sf, cf = _range(e.false_value, active)
        return max(st, sf), min(ct + cf, max(st, sf))
    return 1, 1


def _dominant_coeff(e, var: A.LoopVar) -> int:
    """How much ``e`` moves per step of ``var`` most of the time (``(f // 4) % 8`` moves 0 per
    step of ``f``, ``f % 8`` moves 1); affine expressions get their exact coefficient."""
    if isinstance(e, A.LoopVar):
        return 1 if e is var else 0
    if isinstance(e, A.BinOp):
        a = _dominant_coeff(e.a, var)
        b = _dominant_coeff(e.b, var)
        if e.op == "+":
            return a + b
        if e.op == "-":
            return a - b
        if e.op == "*":
            if isinstance(e.b, A.IntImm):
                return a * e.b.value
            if isinstance(e.a, A.IntImm):
                return b * e.a.value
            return 0
        if e.op == "//" and isinstance(e.b, A.IntImm) and e.b.value > 0:
            return int(a / e.b.value)
        if e.op == "%" and isinstance(e.b, A.IntImm) and e.b.value > 0:
            return a % e.b.value if a >= 0 else -((-a) % e.b.value)
    return 0
