"""Loop AST -> LLVM IR (llvmlite.ir).

* ``vectorized`` loops become LLVM vector operations: an access whose flattened index has stride
  1 in the loop variable is one vector load/store, stride 0 is a broadcast, anything else is a
  per-lane gather/scatter. Loads under a ``Select`` condition become masked loads, so padding
  that is inlined never touches memory outside its buffer.
* ``unrolled`` loops are emitted once per iteration with the variable a constant.
* a top-level ``parallel`` loop is outlined into a function that libgomp's ``GOMP_parallel`` runs
  on every thread, each taking a contiguous chunk of the iterations.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import llvmlite.ir as ir

from .. import loopast as A

F32 = ir.FloatType()
I64 = ir.IntType(64)
I32 = ir.IntType(32)
I1 = ir.IntType(1)
I8P = ir.IntType(8).as_pointer()
F32P = F32.as_pointer()
FAST = ("fast",)

KERNEL_NAME = "tg_kernel"
_ZERO = ir.Constant(I64, 0)


def emit_llvm(program: A.Program, num_threads: int = 0) -> str:
    """The LLVM IR module (text) of ``program``; its entry point is ``void tg_kernel(float*...)``
    taking ``program.buffers`` in order. ``num_threads=0`` lets libgomp choose."""
    return str(_Emitter(program, num_threads).module)


@dataclass
class _Scope:
    """Per-function codegen state."""

    fn: ir.Function
    builder: ir.IRBuilder
    entry: ir.IRBuilder  # positioned at the top of the entry block, for allocas
    buffers: dict  # Buffer -> pointer value
    env: dict = field(default_factory=dict)  # LoopVar -> i64 value or <W x i64> vector
    width: int = 0  # lanes of the enclosing vectorized loop (0: scalar code)
    vec_var: "A.LoopVar | None" = None
    # Index values already emitted, one dict per enclosing basic-block region: a value from an
    # outer region dominates inner code, one from a finished loop body does not.
    cse: list = field(default_factory=lambda: [{}])


class _Emitter:
    def __init__(self, program: A.Program, num_threads: int) -> None:
        self.program = program
        self.num_threads = num_threads
        self.module = ir.Module(name=program.name)
        self._n_outlined = 0
        self._intrinsics: dict[str, ir.Function] = {}
        # Per-node caches, keyed by id: each entry holds its node, so no id is reused while the
        # emitter (and so the cache) lives.
        self._flat_cache: dict[int, tuple[A.Node, A.Expr]] = {}
        self._vars_cache: dict[int, tuple[A.Node, tuple]] = {}
        buffers = program.buffers
        fnty = ir.FunctionType(ir.VoidType(), [F32P] * len(buffers))
        fn = ir.Function(self.module, fnty, KERNEL_NAME)
        for arg in fn.args:
            arg.add_attribute("noalias")
        scope = self._new_scope(fn, dict(zip(buffers, fn.args)))
        self.stmt(program.body, scope)
        scope.builder.ret_void()

    # ------------------------------------------------------------ scaffolding

    def _flat(self, access: "A.Load | A.Store") -> A.Expr:
        """The flattened index of a load/store node, built once per node."""
        hit = self._flat_cache.get(id(access))
        if hit is None:
            hit = self._flat_cache[id(access)] = (access, A.flat_index(access.buffer,
                                                                        access.indices))
        return hit[1]

    def _vars_of(self, e: A.Expr) -> tuple:
        """The loop variables ``e`` reads, in order of first use."""
        hit = self._vars_cache.get(id(e))
        if hit is None:
            found = tuple(dict.fromkeys(n for n in A.walk(e) if isinstance(n, A.LoopVar)))
            hit = self._vars_cache[id(e)] = (e, found)
        return hit[1]

    def _new_scope(self, fn: ir.Function, buffers: dict) -> _Scope:
        entry = fn.append_basic_block("entry")
        body = fn.append_basic_block("body")
        eb = ir.IRBuilder(entry)
        eb.branch(body)
        eb.position_at_start(entry)
        return _Scope(fn, ir.IRBuilder(body), eb, buffers)

    def _declare(self, name: str, ret: ir.Type, args: list) -> ir.Function:
        if name not in self._intrinsics:
            self._intrinsics[name] = ir.Function(self.module, ir.FunctionType(ret, args), name)
        return self._intrinsics[name]

    # ------------------------------------------------------------ statements

    def stmt(self, s: A.Stmt, sc: _Scope) -> None:
        if isinstance(s, A.Seq):
            for x in s.stmts:
                self.stmt(x, sc)
        elif isinstance(s, A.For):
            self.loop(s, sc)
        elif isinstance(s, A.Store):
            self.store(s, sc)
        elif isinstance(s, A.Allocate):
            ty = ir.ArrayType(F32, s.buffer.size)
            ptr = sc.entry.alloca(ty, name=s.buffer.name)
            sc.buffers[s.buffer] = sc.entry.bitcast(ptr, F32P)
            self.stmt(s.body, sc)
        elif isinstance(s, A.If):
            cond = self.scalar_cond(s.cond, sc)
            with sc.builder.if_then(cond):
                sc.cse.append({})
                self.stmt(s.then, sc)
                sc.cse.pop()
        else:
            raise NotImplementedError(f"LLVM codegen does not handle {type(s).__name__}")

    def loop(self, s: A.For, sc: _Scope) -> None:
        if s.kind == "unrolled":
            for k in range(s.extent):
                sc.env[s.var] = ir.Constant(I64, k)
                self.stmt(s.body, sc)
        elif s.kind == "vectorized" and sc.width == 0 and not any(
                isinstance(n, A.For) for n in A.walk(s.body)):
            sc.env[s.var] = ir.Constant(ir.VectorType(I64, s.extent), list(range(s.extent)))
            sc.width, sc.vec_var = s.extent, s.var
            self.stmt(s.body, sc)
            sc.width, sc.vec_var = 0, None
        elif s.kind == "parallel" and sc.fn.name == KERNEL_NAME and sc.width == 0 and not sc.env:
            self.parallel(s, sc)
        else:
            self.serial(s.var, ir.Constant(I64, 0), ir.Constant(I64, s.extent), s.body, sc)
        sc.env.pop(s.var, None)

    def serial(self, var: A.LoopVar, begin, end, body: A.Stmt, sc: _Scope) -> None:
        b = sc.builder
        pre = b.block
        head = b.append_basic_block(f"{var.name}.head")
        loop = b.append_basic_block(f"{var.name}.loop")
        done = b.append_basic_block(f"{var.name}.done")
        b.branch(head)
        b.position_at_end(head)
        i = b.phi(I64, name=var.name)
        i.add_incoming(begin, pre)
        b.cbranch(b.icmp_signed("<", i, end), loop, done)
        b.position_at_end(loop)
        sc.env[var] = i
        sc.cse.append({})
        self.stmt(body, sc)
        sc.cse.pop()
        nxt = b.add(i, ir.Constant(I64, 1), flags=["nsw"])
        i.add_incoming(nxt, b.block)
        b.branch(head)
        b.position_at_end(done)

    def parallel(self, s: A.For, sc: _Scope) -> None:
        """Outline the loop: a body function taking (buffers..., begin, end) with noalias
        pointers, a trampoline that libgomp calls on each thread, and the GOMP_parallel call."""
        k = self._n_outlined
        self._n_outlined += 1
        bufs = list(self.program.buffers)
        body_ty = ir.FunctionType(ir.VoidType(), [F32P] * len(bufs) + [I64, I64])
        body_fn = ir.Function(self.module, body_ty, f"{KERNEL_NAME}.par{k}")
        for arg in body_fn.args[:len(bufs)]:
            arg.add_attribute("noalias")
        inner = self._new_scope(body_fn, dict(zip(bufs, body_fn.args)))
        begin, end = body_fn.args[-2:]
        self.serial(s.var, begin, end, s.body, inner)
        inner.builder.ret_void()

        closure_ty = ir.LiteralStructType([F32P] * len(bufs))
        tramp = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [I8P]),
                            f"{KERNEL_NAME}.par{k}.omp")
        tb = ir.IRBuilder(tramp.append_basic_block("entry"))
        closure = tb.bitcast(tramp.args[0], closure_ty.as_pointer())
        ptrs = [tb.load(tb.gep(closure, [ir.Constant(I32, 0), ir.Constant(I32, j)]))
                for j in range(len(bufs))]
        nthr = tb.sext(tb.call(self._declare("omp_get_num_threads", I32, []), []), I64)
        tid = tb.sext(tb.call(self._declare("omp_get_thread_num", I32, []), []), I64)
        extent = ir.Constant(I64, s.extent)
        chunk = tb.sdiv(tb.sub(tb.add(extent, nthr), ir.Constant(I64, 1)), nthr)
        lo = tb.mul(tid, chunk)
        hi = tb.add(lo, chunk)
        hi = tb.select(tb.icmp_signed("<", hi, extent), hi, extent)
        tb.call(body_fn, ptrs + [lo, hi])
        tb.ret_void()

        b = sc.builder
        data = sc.entry.alloca(closure_ty, name=f"closure{k}")
        for j, buf in enumerate(bufs):
            b.store(sc.buffers[buf], b.gep(data, [ir.Constant(I32, 0), ir.Constant(I32, j)]))
        gomp = self._declare("GOMP_parallel", ir.VoidType(),
                             [tramp.type, I8P, ir.IntType(32), ir.IntType(32)])
        b.call(gomp, [tramp, b.bitcast(data, I8P), ir.Constant(I32, self.num_threads),
                      ir.Constant(I32, 0)])

    def store(self, s: A.Store, sc: _Scope) -> None:
        b = sc.builder
        value = self.value(s.value, sc, None)
        flat = self._flat(s)
        base = sc.buffers[s.buffer]
        if sc.width == 0:
            b.store(value, b.gep(base, [self.index(flat, sc)], inbounds=True))
            return
        coeff = A.linear_coeff(flat, sc.vec_var)
        value = self.broadcast(value, sc)
        if coeff == 1:
            ptr = b.gep(base, [self.uniform_index(flat, sc)], inbounds=True)
            b.store(value, b.bitcast(ptr, value.type.as_pointer()), align=4)
        else:  # scatter lane by lane (lanes of a stride-0 store overwrite in order)
            idx = self.broadcast(self.index(flat, sc), sc, I64)
            for lane in range(sc.width):
                ptr = b.gep(base, [b.extract_element(idx, ir.Constant(I32, lane))], inbounds=True)
                b.store(b.extract_element(value, ir.Constant(I32, lane)), ptr)

    # ------------------------------------------------------------ expressions

    def index(self, e: A.Expr, sc: _Scope):
        """An integer expression: i64, or <W x i64> if it depends on the vectorized loop."""
        if isinstance(e, A.IntImm):
            return ir.Constant(I64, e.value)
        if isinstance(e, A.LoopVar):
            return sc.env[e]
        inputs = tuple(sc.env[v] for v in self._vars_of(e))
        key = (id(e),) + tuple(map(id, inputs))
        for cache in reversed(sc.cse):
            if key in cache:
                return cache[key][0]
        value = self._index(e, sc)
        sc.cse[-1][key] = (value, e, inputs)  # holding e and inputs keeps their ids unique
        return value

    def _index(self, e: A.Expr, sc: _Scope):
        b = sc.builder
        if isinstance(e, A.IntImm):
            return ir.Constant(I64, e.value)
        if isinstance(e, A.LoopVar):
            return sc.env[e]
        if isinstance(e, A.BinOp):
            x, y = self.index(e.a, sc), self.index(e.b, sc)
            if isinstance(x.type, ir.VectorType) != isinstance(y.type, ir.VectorType):
                x, y = self.broadcast(x, sc, x.type), self.broadcast(y, sc, y.type)
            op = e.op
            if op == "+":
                return b.add(x, y)
            if op == "-":
                return b.sub(x, y)
            if op == "*":
                return b.mul(x, y)
            if op == "//":  # operands are non-negative in lowered programs
                return b.sdiv(x, y)
            if op == "%":
                return b.srem(x, y)
            if op in ("<", ">=", "<=", "=="):
                return b.icmp_signed(op, x, y)
            if op == "&&":
                return b.and_(x, y)
            if op == "min":
                return b.select(b.icmp_signed("<", x, y), x, y)
            if op == "max":
                return b.select(b.icmp_signed(">", x, y), x, y)
        raise NotImplementedError(f"index expression {e!r}")

    def uniform_index(self, e: A.Expr, sc: _Scope):
        """``e`` with the vectorized variable set to 0: the scalar base of a vector access."""
        saved = sc.env[sc.vec_var]
        sc.env[sc.vec_var] = _ZERO
        try:
            return self.index(e, sc)
        finally:
            sc.env[sc.vec_var] = saved

    def scalar_cond(self, e: A.Expr, sc: _Scope):
        c = self.index(e, sc)
        if isinstance(c.type, ir.VectorType):
            raise NotImplementedError("If with a per-lane condition")
        return c

    def value(self, e: A.Expr, sc: _Scope, mask):
        """A float expression; ``mask`` (i1 or <W x i1>) guards the loads it contains."""
        b = sc.builder
        if isinstance(e, A.FloatImm):
            return ir.Constant(F32, e.value)
        if isinstance(e, A.Load):
            return self.load(e, sc, mask)
        if isinstance(e, A.Select):
            cond = self.index(e.cond, sc)
            inner = cond if mask is None else b.and_(*self._same_shape(mask, cond, sc))
            t = self.value(e.true_value, sc, inner)
            f = self.value(e.false_value, sc, mask)
            if isinstance(cond.type, ir.VectorType):
                t, f = self.broadcast(t, sc), self.broadcast(f, sc)
            elif isinstance(t.type, ir.VectorType) or isinstance(f.type, ir.VectorType):
                t, f = self.broadcast(t, sc), self.broadcast(f, sc)
            return b.select(cond, t, f)
        if isinstance(e, A.BinOp):
            x, y = self.value(e.a, sc, mask), self.value(e.b, sc, mask)
            if isinstance(x.type, ir.VectorType) != isinstance(y.type, ir.VectorType):
                x, y = self.broadcast(x, sc), self.broadcast(y, sc)
            if e.op == "+":
                return b.fadd(x, y, flags=FAST)
            if e.op == "*":
                return b.fmul(x, y, flags=FAST)
            if e.op == "-":
                return b.fsub(x, y, flags=FAST)
        raise NotImplementedError(f"value expression {e!r}")

    def load(self, e: A.Load, sc: _Scope, mask):
        b = sc.builder
        base = sc.buffers[e.buffer]
        flat = self._flat(e)
        coeff = A.linear_coeff(flat, sc.vec_var) if sc.width else 0
        if coeff == 0:  # one address for all lanes
            idx = self.uniform_index(flat, sc) if sc.width else self.index(flat, sc)
            if mask is not None:
                idx = b.select(self._any(mask, sc), idx, ir.Constant(I64, 0))
            return b.load(b.gep(base, [idx], inbounds=True))
        vty = ir.VectorType(F32, sc.width)
        if coeff == 1:
            ptr = b.bitcast(b.gep(base, [self.uniform_index(flat, sc)], inbounds=True),
                            vty.as_pointer())
            if mask is None:
                return b.load(ptr, align=4)
            mask = self.broadcast(mask, sc, I1)
            fn = self._declare(f"llvm.masked.load.v{sc.width}f32.p0", vty,
                               [vty.as_pointer(), I32, mask.type, vty])
            return b.call(fn, [ptr, ir.Constant(I32, 4), mask, ir.Constant(vty, None)])
        idx = self.broadcast(self.index(flat, sc), sc, I64)
        out = ir.Constant(vty, None)
        for lane in range(sc.width):
            li = b.extract_element(idx, ir.Constant(I32, lane))
            if mask is not None:
                m = mask if not isinstance(mask.type, ir.VectorType) else \
                    b.extract_element(mask, ir.Constant(I32, lane))
                li = b.select(m, li, ir.Constant(I64, 0))
            out = b.insert_element(out, b.load(b.gep(base, [li], inbounds=True)),
                                   ir.Constant(I32, lane))
        return out

    # ------------------------------------------------------------ vector helpers

    def broadcast(self, v, sc: _Scope, elem: ir.Type = F32):
        if isinstance(v.type, ir.VectorType) or sc.width == 0:
            return v
        b = sc.builder
        vty = ir.VectorType(v.type, sc.width)
        one = b.insert_element(ir.Constant(vty, None), v, ir.Constant(I32, 0))
        return b.shuffle_vector(one, ir.Constant(vty, None),
                                ir.Constant(ir.VectorType(I32, sc.width), [0] * sc.width))

    def _same_shape(self, x, y, sc: _Scope):
        if isinstance(x.type, ir.VectorType) != isinstance(y.type, ir.VectorType):
            return self.broadcast(x, sc, I1), self.broadcast(y, sc, I1)
        return x, y

    def _any(self, mask, sc: _Scope):
        if not isinstance(mask.type, ir.VectorType):
            return mask
        bits = sc.builder.bitcast(mask, ir.IntType(sc.width))
        return sc.builder.icmp_unsigned("!=", bits, ir.Constant(ir.IntType(sc.width), 0))
