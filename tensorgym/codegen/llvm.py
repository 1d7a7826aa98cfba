"""Loop AST -> LLVM IR, written as text.

* ``vectorized`` loops become LLVM vector operations: an access whose flattened index has stride
  1 in the loop variable is one vector load/store, stride 0 is a broadcast, anything else is a
  per-lane gather (from scalar indices where the stride is a constant:
  :meth:`_Emitter._strided_gather`), or a scatter in a loop over the lanes
  (:meth:`_Emitter.scatter`). (LLVM's
  gather/scatter intrinsics compile 3-10x faster, but as vgatherdps/vscatterdps two C6 kernels
  ran 10% and 32% slower on a Zen 4.) Loads under a
  ``Select`` condition become masked loads, so padding that is inlined never touches memory
  outside its buffer.
* ``unrolled`` loops are emitted once per iteration with the variable a constant.
* a top-level ``parallel`` loop is outlined into a function that libgomp's ``GOMP_parallel`` runs
  on every thread. With ``chunks_per_thread`` k > 0 (default ``CHUNKS_PER_THREAD``) the
  iterations are cut into about k chunks per thread, which the threads claim one by one from a
  counter (an atomic add): a thread whose core runs slower, as a VM's vCPU does while the host
  gives its sibling hyperthread to another tenant, takes fewer chunks instead of holding the
  others at the join (on a 2-vCPU Emerald Rapids VM two-thread ResNet-18 kernels ran 7% faster
  so, benchmarks/bench_parallel.py). k = 0: each thread takes one contiguous chunk (the static
  split before).
* within a basic block, a load of an address stored or loaded before gets that value, and a store
  that a later one overwrites, with no load between, is dropped (:class:`_Memory`). Unrolled
  register tiles update the same accumulator many times in one block: doing this here, in linear
  time, lets the CPU runtime turn off LLVM's dead-store elimination, which is quadratic in a
  block's memory accesses and was most of the O3 pipeline's time on such kernels.

The IR is written as text rather than built with llvmlite.ir: an unrolled kernel has tens of
thousands of instructions, and building them as Python objects cost as much as LLVM's whole O3
pipeline on them (benchmarks/bench_compile.py prints render time beside compile time).
"""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass, field
from typing import Optional

from .. import loopast as A

KERNEL_NAME = "tg_kernel"
CHUNKS_PER_THREAD = 4  # of a parallel loop, claimed dynamically (0: one static chunk each)


def emit_llvm(program: A.Program, num_threads: int = 0,
              chunks_per_thread: int = CHUNKS_PER_THREAD) -> str:
    """The LLVM IR module (text) of ``program``; its entry point is ``void tg_kernel(float*...)``
    taking ``program.buffers`` in order. ``num_threads=0`` lets libgomp choose;
    ``chunks_per_thread``: see the module docstring."""
    if chunks_per_thread < 0:
        raise ValueError(f"chunks_per_thread must be >= 0, got {chunks_per_thread}")
    return _Emitter(program, num_threads, chunks_per_thread).text()


@dataclass(frozen=True, eq=False)
class _V:
    """An SSA value or constant: its type and how an operand spells it."""

    ty: str
    ref: str

    @property
    def vector(self) -> bool:
        return self.ty[0] == "<"

    def __str__(self) -> str:
        return f"{self.ty} {self.ref}"


def _i64(k: int) -> _V:
    return _V("i64", str(k))


def _f32(x: float) -> _V:
    # LLVM spells a float constant as the hex of the double it widens to, exactly
    bits = struct.unpack("<Q", struct.pack("<d", struct.unpack("<f", struct.pack("<f", x))[0]))[0]
    return _V("float", f"0x{bits:016X}")


def _vec(width: int, elem: str) -> str:
    return f"<{width} x {elem}>"


def _elem(ty: str) -> str:
    return ty[ty.index("x ") + 2:-1] if ty[0] == "<" else ty


_ZERO = _i64(0)
_ICMP = {"<": "slt", ">=": "sge", "<=": "sle", "==": "eq"}
_FOLD = {"+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y,
         "min": min, "max": max}


class _Function:
    """One function being written: allocas for the entry block, then blocks of lines."""

    def __init__(self, name: str, params: list[str]) -> None:
        self.name = name
        self.params = params
        self.allocas: list[str] = []
        self.lane_slots: dict[str, tuple[str, str]] = {}  # vector type -> scatter's stack slots
        self.blocks: dict[str, list[str]] = {}
        self.n = 0
        self.block = self.new_block("body")

    def new_block(self, hint: str) -> str:
        label = f"{hint}.b{len(self.blocks)}"
        self.blocks[label] = []
        return label

    def fresh(self) -> str:
        self.n += 1
        return f"%t{self.n}"

    def text(self) -> str:
        out = [f"define void @\"{self.name}\"({', '.join(self.params)}) {{", "entry:",
               *self.allocas, f"  br label %{next(iter(self.blocks))}"]
        for label, lines in self.blocks.items():
            out.append(f"{label}:")
            out.extend(line for line in lines if line)  # blank: a store deleted
        out.append("}")
        return "\n".join(out)


_Key = tuple  # (symbolic terms, constant offset, lanes): an address, see _Emitter._address


@dataclass
class _Cached:
    value: _V
    store: "int | None" = None  # the line of this block that stored it, while nothing read it


def _overlap(a: _Key, b: _Key) -> bool:
    """Whether two addresses may share an element: the same symbolic terms compare exactly."""
    if a[0] != b[0]:
        return True
    return a[1] < b[1] + b[2] and b[1] < a[1] + a[2]


class _Memory:
    """What one basic block has loaded from and stored to each buffer, by address: a load of a
    known address gets the value, and a store that a later store to the same address overwrites,
    with nothing reading it between, is deleted (its line blanked). Stores stay where they are
    otherwise, so memory order never changes. Buffers are distinct allocations (noalias
    parameters, allocas): an access to one never touches another; an address with no key (a
    gather, a scatter, a non-affine index) may touch any element of its buffer. Forgotten at
    every branch, call and return (``clear``)."""

    def __init__(self) -> None:
        self.bufs: dict = {}  # Buffer -> {key: _Cached}

    def get(self, buf, key: _Key) -> "_V | None":
        hit = self.bufs.get(buf, {}).get(key)
        return hit.value if hit is not None else None

    def read(self, buf, key: "_Key | None") -> None:
        """A load from memory at ``key`` (None: anywhere in ``buf``): the stores it may see stay."""
        for k, c in self.bufs.get(buf, {}).items():
            if key is None or _overlap(k, key):
                c.store = None

    def loaded(self, buf, key: _Key, value: _V) -> None:
        self.bufs.setdefault(buf, {})[key] = _Cached(value)

    def stored(self, buf, key: "_Key | None", value: _V, lines: list) -> None:
        """The store just appended to ``lines`` wrote ``value`` at ``key`` (None: somewhere)."""
        if key is None:
            self.bufs.pop(buf, None)
            return
        cached = self.bufs.setdefault(buf, {})
        old = cached.get(key)
        if old is not None and old.store is not None:
            lines[old.store] = ""  # overwritten, never read: dead
        for k in [k for k in cached if _overlap(k, key)]:
            del cached[k]
        cached[key] = _Cached(value, len(lines) - 1)

    def clear(self) -> None:
        self.bufs.clear()


@dataclass
class _Scope:
    """Per-function codegen state."""

    fn: _Function
    buffers: dict  # Buffer -> pointer value
    cur: list  # the lines of the block being written
    env: dict = field(default_factory=dict)  # LoopVar -> i64 value or <W x i64> vector
    width: int = 0  # lanes of the enclosing vectorized loop (0: scalar code)
    vec_var: "A.LoopVar | None" = None
    # Index values already emitted, one dict per enclosing basic-block region: a value from an
    # outer region dominates inner code, one from a finished loop body does not.
    cse: list = field(default_factory=lambda: [{}])
    mem: _Memory = field(default_factory=_Memory)  # this basic block's loads and stores

    def emit(self, op: str, ty: str) -> _V:
        """Append ``%new = op`` and return the new value of type ``ty``."""
        name = self.fn.fresh()
        self.cur.append(f"  {name} = {op}")
        return _V(ty, name)

    def do(self, op: str) -> None:
        self.cur.append(f"  {op}")

    def branch(self, op: str) -> None:
        """End the block with ``op`` (a branch, a call or a return): what it loaded and stored
        is forgotten."""
        self.mem.clear()
        self.cur.append(f"  {op}")

    def goto(self, label: str) -> None:
        self.fn.block = label
        self.cur = self.fn.blocks[label]


class _Emitter:
    def __init__(self, program: A.Program, num_threads: int, chunks_per_thread: int = 0) -> None:
        self.program = program
        self.num_threads = num_threads
        self.chunks_per_thread = chunks_per_thread
        self.functions: list[_Function] = []
        self.declares: dict[str, str] = {}
        # Per-node caches, keyed by id: each entry holds its node, so no id is reused while the
        # emitter (and so the cache) lives.
        self._flat_cache: dict[int, tuple[A.Node, A.Expr]] = {}
        self._vars_cache: dict[int, tuple[A.Node, tuple]] = {}
        self._coeff_cache: dict[tuple[int, int], tuple[A.Node, "int | None"]] = {}
        self._leaf_cache: dict[int, tuple[A.Node, bool]] = {}
        self._affine_cache: dict[int, tuple[A.Node, tuple]] = {}
        sc = self._new_scope(KERNEL_NAME, [])
        self.stmt(program.body, sc)
        sc.branch("ret void")

    def text(self) -> str:
        return "\n\n".join([*self.declares.values(), *(f.text() for f in self.functions)]) + "\n"

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

    def _coeff(self, flat: A.Expr, var: A.LoopVar) -> "int | None":
        """``A.linear_coeff``, once per (index, variable)."""
        key = (id(flat), id(var))
        hit = self._coeff_cache.get(key)
        if hit is None:
            hit = self._coeff_cache[key] = ((flat, var), A.linear_coeff(flat, var))
        return hit[1]

    def _innermost(self, s: A.For) -> bool:
        """Whether no loop is nested in ``s``."""
        hit = self._leaf_cache.get(id(s))
        if hit is None:
            hit = self._leaf_cache[id(s)] = (s, not any(isinstance(n, A.For)
                                                        for n in A.walk(s.body)))
        return hit[1]

    def _new_scope(self, name: str, extra_params: list[str]) -> _Scope:
        """A function taking the program's buffers (noalias pointers) and ``extra_params``."""
        bufs = self.program.buffers
        params = [f"ptr noalias %b{j}" for j in range(len(bufs))] + extra_params
        fn = _Function(name, params)
        self.functions.append(fn)
        return _Scope(fn, {buf: _V("ptr", f"%b{j}") for j, buf in enumerate(bufs)},
                      fn.blocks[fn.block])

    def _declare(self, name: str, ret: str, args: list[str]) -> str:
        self.declares.setdefault(name, f"declare {ret} @\"{name}\"({', '.join(args)})")
        return f"@\"{name}\""

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
            name = f"%{s.buffer.name}.{len(sc.fn.allocas)}"
            sc.fn.allocas.append(f"  {name} = alloca [{s.buffer.size} x float]")
            sc.buffers[s.buffer] = _V("ptr", name)
            self.stmt(s.body, sc)
        elif isinstance(s, A.If):
            cond = self.scalar_cond(s.cond, sc)
            then, end = sc.fn.new_block("if"), sc.fn.new_block("endif")
            sc.branch(f"br i1 {cond.ref}, label %{then}, label %{end}")
            sc.goto(then)
            sc.cse.append({})
            self.stmt(s.then, sc)
            sc.cse.pop()
            sc.branch(f"br label %{end}")
            sc.goto(end)
        else:
            raise NotImplementedError(f"LLVM codegen does not handle {type(s).__name__}")

    def loop(self, s: A.For, sc: _Scope) -> None:
        if s.kind == "unrolled":
            for k in range(s.extent):
                sc.env[s.var] = _i64(k)
                self.stmt(s.body, sc)
        elif s.kind == "vectorized" and sc.width == 0 and self._innermost(s):
            lanes = ", ".join(f"i64 {k}" for k in range(s.extent))
            sc.env[s.var] = _V(_vec(s.extent, "i64"), f"<{lanes}>")
            sc.width, sc.vec_var = s.extent, s.var
            self.stmt(s.body, sc)
            sc.width, sc.vec_var = 0, None
        elif s.kind == "parallel" and sc.fn.name == KERNEL_NAME and sc.width == 0 and not sc.env:
            self.parallel(s, sc)
        else:
            self.serial(s.var, _ZERO, _i64(s.extent), s.body, sc)
        sc.env.pop(s.var, None)

    def serial(self, var: A.LoopVar, begin: _V, end: _V, body: A.Stmt, sc: _Scope) -> None:
        def emit_body(i: _V) -> None:
            sc.env[var] = i
            sc.cse.append({})
            self.stmt(body, sc)
            sc.cse.pop()

        self._counted_loop(var.name, begin, end, emit_body, sc)

    @staticmethod
    def _counted_loop(hint: str, begin: _V, end: _V, emit_body, sc: _Scope) -> None:
        """``for i in range(begin, end)``, already rotated: a guard (none where the bounds are
        constants), then the body, which ends by testing whether to go round again.
        ``emit_body(i)`` writes the body into the current block. (A loop tested at its head
        makes LLVM's LoopRotate copy the head: a fifth of the IR pipeline on big kernels.)"""
        fn = sc.fn
        constant = all(v.ref.lstrip("-").isdigit() for v in (begin, end))
        if constant and int(begin.ref) >= int(end.ref):
            return  # an empty range
        loop, done = (fn.new_block(f"{hint}.{part}") for part in ("loop", "done"))
        pre = fn.block
        if constant:
            sc.branch(f"br label %{loop}")
        else:
            enter = sc.emit(f"icmp slt i64 {begin.ref}, {end.ref}", "i1")
            sc.branch(f"br i1 {enter.ref}, label %{loop}, label %{done}")
        i = _V("i64", fn.fresh())
        sc.goto(loop)
        emit_body(i)
        nxt = sc.emit(f"add nsw i64 {i.ref}, 1", "i64")
        again = sc.emit(f"icmp slt i64 {nxt.ref}, {end.ref}", "i1")
        latch = fn.block
        sc.branch(f"br i1 {again.ref}, label %{loop}, label %{done}")
        fn.blocks[loop].insert(0, f"  {i.ref} = phi i64 [{begin.ref}, %{pre}], "
                                  f"[{nxt.ref}, %{latch}]")
        sc.goto(done)

    def parallel(self, s: A.For, sc: _Scope) -> None:
        """Outline the loop: a body function taking (buffers..., begin, end) with noalias
        pointers, a trampoline that libgomp calls on each thread, and the GOMP_parallel call.
        The closure holds the buffers' pointers, then (dynamic chunks) the next iteration to
        claim, set to 0 before each call."""
        k = sum(f.name.endswith(".omp") for f in self.functions)
        n = len(self.program.buffers)
        body_name = f"{KERNEL_NAME}.par{k}"
        inner = self._new_scope(body_name, ["i64 %begin", "i64 %end"])
        self.serial(s.var, _V("i64", "%begin"), _V("i64", "%end"), s.body, inner)
        inner.branch("ret void")

        dynamic = self.chunks_per_thread > 0
        closure = "{" + ", ".join(["ptr"] * n + (["i64"] if dynamic else [])) + "}"
        tramp = _Function(f"{KERNEL_NAME}.par{k}.omp", ["ptr %closure"])
        self.functions.append(tramp)
        tb = _Scope(tramp, {}, tramp.blocks[tramp.block])
        ptrs = []
        for j in range(n):
            slot = tb.emit(f"getelementptr {closure}, ptr %closure, i32 0, i32 {j}", "ptr")
            ptrs.append(tb.emit(f"load ptr, ptr {slot.ref}", "ptr"))
        counts = []
        for name in ("omp_get_num_threads", "omp_get_thread_num"):
            got = tb.emit(f"call i32 {self._declare(name, 'i32', [])}()", "i32")
            counts.append(tb.emit(f"sext i32 {got.ref} to i64", "i64"))
        nthr, tid = counts
        if dynamic:
            self._claim_chunks(tb, s.extent, nthr, closure, n, ptrs, body_name)
        else:
            chunk = self._ceil_div(tb, s.extent, nthr)
            lo = tb.emit(f"mul i64 {tid.ref}, {chunk.ref}", "i64")
            hi = self._below(tb, tb.emit(f"add i64 {lo.ref}, {chunk.ref}", "i64"), s.extent)
            args = ", ".join([*(str(p) for p in ptrs), str(lo), str(hi)])
            tb.do(f"call void @\"{body_name}\"({args})")
            tb.do("ret void")

        data = f"%closure{k}"
        sc.fn.allocas.append(f"  {data} = alloca {closure}")
        if dynamic:
            slot = sc.emit(f"getelementptr {closure}, ptr {data}, i32 0, i32 {n}", "ptr")
            sc.do(f"store i64 0, ptr {slot.ref}")
        for j, buf in enumerate(self.program.buffers):
            slot = sc.emit(f"getelementptr {closure}, ptr {data}, i32 0, i32 {j}", "ptr")
            sc.do(f"store ptr {sc.buffers[buf].ref}, ptr {slot.ref}")
        gomp = self._declare("GOMP_parallel", "void", ["ptr", "ptr", "i32", "i32"])
        sc.branch(f"call void {gomp}(ptr @\"{tramp.name}\", ptr {data}, i32 {self.num_threads}, "
              "i32 0)")

    @staticmethod
    def _ceil_div(tb: _Scope, extent: int, parts: _V) -> _V:
        """ceil(extent / parts): the iterations of one chunk."""
        top = tb.emit(f"add i64 {extent}, {parts.ref}", "i64")
        return tb.emit(f"sdiv i64 {tb.emit(f'sub i64 {top.ref}, 1', 'i64').ref}, {parts.ref}",
                       "i64")

    @staticmethod
    def _below(tb: _Scope, v: _V, extent: int) -> _V:
        under = tb.emit(f"icmp slt i64 {v.ref}, {extent}", "i1")
        return tb.emit(f"select i1 {under.ref}, i64 {v.ref}, i64 {extent}", "i64")

    def _claim_chunks(self, tb: _Scope, extent: int, nthr: _V, closure: str, n: int,
                      ptrs: list, body_name: str) -> None:
        """The trampoline's loop: claim [lo, lo + grain) from the closure's counter until it
        passes the extent, running the body on each."""
        chunks = tb.emit(f"mul i64 {nthr.ref}, {self.chunks_per_thread}", "i64")
        grain = self._ceil_div(tb, extent, chunks)
        counter = tb.emit(f"getelementptr {closure}, ptr %closure, i32 0, i32 {n}", "ptr")
        fn = tb.fn
        claim, work, done = fn.new_block("claim"), fn.new_block("chunk"), fn.new_block("claimed")
        tb.branch(f"br label %{claim}")
        tb.goto(claim)
        lo = tb.emit(f"atomicrmw add ptr {counter.ref}, i64 {grain.ref} monotonic", "i64")
        more = tb.emit(f"icmp slt i64 {lo.ref}, {extent}", "i1")
        tb.branch(f"br i1 {more.ref}, label %{work}, label %{done}")
        tb.goto(work)
        hi = self._below(tb, tb.emit(f"add i64 {lo.ref}, {grain.ref}", "i64"), extent)
        args = ", ".join([*(str(p) for p in ptrs), str(lo), str(hi)])
        tb.do(f"call void @\"{body_name}\"({args})")
        tb.branch(f"br label %{claim}")
        tb.goto(done)
        tb.do("ret void")

    def store(self, s: A.Store, sc: _Scope) -> None:
        value = self.value(s.value, sc, None)
        flat = self._flat(s)
        base = sc.buffers[s.buffer].ref
        if sc.width == 0:
            ptr = self._gep(base, self.index(flat, sc), sc)
            sc.do(f"store {value}, ptr {ptr.ref}")
            sc.mem.stored(s.buffer, self._address(flat, sc), value, sc.cur)
            return
        coeff = self._coeff(flat, sc.vec_var)
        value = self.broadcast(value, sc)
        if coeff == 1:
            ptr = self._gep(base, self.uniform_index(flat, sc), sc)
            sc.do(f"store {value}, ptr {ptr.ref}, align 4")
            sc.mem.stored(s.buffer, self._address(flat, sc), value, sc.cur)
        else:
            self.scatter(base, self.broadcast(self.index(flat, sc), sc), value, sc)
            sc.mem.stored(s.buffer, None, value, sc.cur)

    def scatter(self, base: str, idx: _V, value: _V, sc: _Scope) -> None:
        """Store each lane of ``value`` at its index (lanes that share one are stored in lane
        order), in a loop over the lanes: a register tile copied out to a layout whose lanes are
        not contiguous (output channels in the lanes of an NCHW output) is hundreds of
        scatters, and as straight-line code one basic block of tens of thousands of
        instructions, which LLVM's machine scheduler takes seconds over (quadratic in a block)."""
        fn, width = sc.fn, sc.width
        slots = fn.lane_slots.get(value.ty)  # one pair per function and width, reused
        if slots is None:
            slots = fn.lane_slots[value.ty] = (f"%lanes.v{width}", f"%lanes.i{width}")
            fn.allocas.append(f"  {slots[0]} = alloca {value.ty}, align 64")
            fn.allocas.append(f"  {slots[1]} = alloca {idx.ty}, align 64")
        vals, idxs = slots
        sc.do(f"store {value}, ptr {vals}, align 64")
        sc.do(f"store {idx}, ptr {idxs}, align 64")
        def emit_lane(lane: _V) -> None:
            v_ptr = sc.emit(f"getelementptr inbounds float, ptr {vals}, {lane}", "ptr")
            i_ptr = sc.emit(f"getelementptr inbounds i64, ptr {idxs}, {lane}", "ptr")
            v = sc.emit(f"load float, ptr {v_ptr.ref}", "float")
            i = sc.emit(f"load i64, ptr {i_ptr.ref}", "i64")
            sc.do(f"store {v}, ptr {self._gep(base, i, sc).ref}")

        self._counted_loop("lane", _ZERO, _i64(width), emit_lane, sc)

    def _address(self, flat: A.Expr, sc: _Scope) -> "_Key | None":
        """``flat`` as (symbolic terms, constant, lanes) with the current loop values: the terms
        are (value, coefficient) pairs of loop variables and non-affine parts that are not
        constants here. None for an access to several non-contiguous lanes."""
        terms, const = self._affine(flat)
        sym: dict[str, int] = {}
        lanes = 1
        for node, c in terms:
            if node is sc.vec_var:
                if c != 1:
                    return None
                lanes = sc.width
                continue
            if isinstance(node, A.LoopVar):
                v = sc.env[node]
            elif sc.vec_var is not None and sc.vec_var in self._vars_of(node):
                return None
            else:
                v = self.index(node, sc)
            if v.vector:
                return None
            if v.ref.lstrip("-").isdigit():
                const += c * int(v.ref)
            else:
                sym[v.ref] = sym.get(v.ref, 0) + c
        return tuple(sorted((k, c) for k, c in sym.items() if c)), const, lanes

    def _affine(self, e: A.Expr) -> tuple[tuple, int]:
        """``e`` as ((node, coefficient), ...) and a constant, where each node is a loop
        variable or a part that is not affine (a division, a min); once per index."""
        hit = self._affine_cache.get(id(e))
        if hit is None:
            terms: dict = {}
            const = self._collect(e, 1, terms)
            hit = self._affine_cache[id(e)] = (e, (tuple((terms[k][0], c) for k, c in
                                                         ((k, terms[k][1]) for k in terms)),
                                                   const))
        return hit[1]

    def _collect(self, e: A.Expr, scale: int, terms: dict) -> int:
        """Add ``scale * e``'s terms to ``terms`` (id -> [node, coefficient]); its constant."""
        if isinstance(e, A.IntImm):
            return scale * e.value
        if isinstance(e, A.BinOp) and e.op in ("+", "-"):
            return (self._collect(e.a, scale, terms)
                    + self._collect(e.b, -scale if e.op == "-" else scale, terms))
        if isinstance(e, A.BinOp) and e.op == "*":
            if isinstance(e.a, A.IntImm):
                return self._collect(e.b, scale * e.a.value, terms)
            if isinstance(e.b, A.IntImm):
                return self._collect(e.a, scale * e.b.value, terms)
        terms.setdefault(id(e), [e, 0])[1] += scale
        return 0

    # ------------------------------------------------------------ expressions

    def index(self, e: A.Expr, sc: _Scope) -> _V:
        """An integer expression: i64, or <W x i64> if it depends on the vectorized loop."""
        if isinstance(e, A.IntImm):
            return _i64(e.value)
        if isinstance(e, A.LoopVar):
            return sc.env[e]
        inputs = tuple(sc.env[v].ref for v in self._vars_of(e))
        key = (id(e), inputs)
        for cache in reversed(sc.cse):
            if key in cache:
                return cache[key][0]
        value = self._index(e, sc)
        sc.cse[-1][key] = (value, e)  # holding e keeps its id unique
        return value

    def _index(self, e: A.Expr, sc: _Scope) -> _V:
        if not isinstance(e, A.BinOp):
            raise NotImplementedError(f"index expression {e!r}")
        x, y = self.index(e.a, sc), self.index(e.b, sc)
        op = e.op
        if not x.vector and not y.vector and x.ref.lstrip("-").isdigit() \
                and y.ref.lstrip("-").isdigit():
            folded = self._fold(op, int(x.ref), int(y.ref))
            if folded is not None:
                return folded
        if x.vector != y.vector:
            x, y = self.broadcast(x, sc), self.broadcast(y, sc)
        ty = x.ty
        if op in ("+", "-", "*", "//", "%"):
            inst = {"+": "add", "-": "sub", "*": "mul", "//": "sdiv", "%": "srem"}[op]
            return sc.emit(f"{inst} {x}, {y.ref}", ty)  # operands are non-negative
        bools = ty.replace(_elem(ty), "i1")
        if op in _ICMP:
            return sc.emit(f"icmp {_ICMP[op]} {x}, {y.ref}", bools)
        if op == "&&":
            return sc.emit(f"and {x}, {y.ref}", ty)
        if op in ("min", "max"):
            pick = sc.emit(f"icmp {'slt' if op == 'min' else 'sgt'} {x}, {y.ref}", bools)
            return sc.emit(f"select {pick}, {x}, {y}", ty)
        raise NotImplementedError(f"index expression {e!r}")

    @staticmethod
    def _fold(op: str, x: int, y: int) -> Optional[_V]:
        if op in _FOLD:
            return _i64(_FOLD[op](x, y))
        if op in _ICMP:
            truth = {"<": x < y, ">=": x >= y, "<=": x <= y, "==": x == y}[op]
            return _V("i1", "true" if truth else "false")
        if op in ("//", "%") and x >= 0 and y > 0:  # sdiv/srem agree with Python here
            return _i64(x // y if op == "//" else x % y)
        return None

    def uniform_index(self, e: A.Expr, sc: _Scope) -> _V:
        """``e`` with the vectorized variable set to 0: the scalar base of a vector access."""
        saved = sc.env[sc.vec_var]
        sc.env[sc.vec_var] = _ZERO
        try:
            return self.index(e, sc)
        finally:
            sc.env[sc.vec_var] = saved

    def scalar_cond(self, e: A.Expr, sc: _Scope) -> _V:
        c = self.index(e, sc)
        if c.vector:
            raise NotImplementedError("If with a per-lane condition")
        return c

    def value(self, e: A.Expr, sc: _Scope, mask: Optional[_V]) -> _V:
        """A float expression; ``mask`` (i1 or <W x i1>) guards the loads it contains."""
        if isinstance(e, A.FloatImm):
            return _f32(e.value)
        if isinstance(e, A.Load):
            return self.load(e, sc, mask)
        if isinstance(e, A.Select):
            cond = self.index(e.cond, sc)
            inner = cond if mask is None else self._and(*self._same_shape(mask, cond, sc), sc)
            t = self.value(e.true_value, sc, inner)
            f = self.value(e.false_value, sc, mask)
            if cond.vector or t.vector or f.vector:
                t, f = self.broadcast(t, sc), self.broadcast(f, sc)
            if cond.ref in ("true", "false"):
                return t if cond.ref == "true" else f
            return sc.emit(f"select {cond}, {t}, {f}", t.ty)
        if isinstance(e, A.BinOp) and e.op in ("+", "*", "-"):
            x, y = self.value(e.a, sc, mask), self.value(e.b, sc, mask)
            if x.vector != y.vector:
                x, y = self.broadcast(x, sc), self.broadcast(y, sc)
            inst = {"+": "fadd", "*": "fmul", "-": "fsub"}[e.op]
            return sc.emit(f"{inst} fast {x}, {y.ref}", x.ty)
        if isinstance(e, A.BinOp) and e.op in ("max", "min"):
            x, y = self._same_shape(self.value(e.a, sc, mask), self.value(e.b, sc, mask), sc)
            return _FloatOps(self, x, sc).pick(e.op, x, y)
        if isinstance(e, A.Call) and e.func == "erf":
            return self._erf(self.value(e.args[0], sc, mask), sc)
        raise NotImplementedError(f"value expression {e!r}")

    # Abramowitz and Stegun 7.1.26: erf(x) = 1 - t (a1 + t (a2 + ...)) exp(-x^2),
    # t = 1 / (1 + p |x|), x >= 0, odd in x: 1.5e-7 in exact arithmetic, up to 6e-7 in float32
    # near 0 (the 1 - ... rounds), which GELU's x / 2 scales to below 2e-7.
    _ERF_P = 0.3275911
    _ERF_A = (0.254829592, -0.284496736, 1.421413741, -1.453152027, 1.061405429)

    # |x| is clamped at 4: erf(4) = 1 - 1.5e-8 rounds to 1 in float32 as every larger |x|
    # does, and past it the tail t * poly * exp(-x^2) falls below float32's smallest normal:
    # each such multiply took a denormal assist (a dense layer's GELU over large outputs cost
    # 1.1 ms of a 4.1 ms kernel on an Emerald Rapids VM)
    _ERF_CLAMP = 4.0

    def _erf(self, x: _V, sc: _Scope) -> _V:
        f = _FloatOps(self, x, sc)
        ax = f.pick("min", f.intrinsic("fabs", x), f.const(self._ERF_CLAMP))
        t = f.op("fdiv", f.const(1.0), f.op("fadd", f.const(1.0), f.op("fmul", ax, f.const(self._ERF_P))))
        poly = f.horner(t, self._ERF_A[::-1])
        tail = f.op("fmul", f.op("fmul", poly, t), self._exp(f.op("fneg", f.op("fmul", ax, ax)), f))
        return f.intrinsic("copysign", f.op("fsub", f.const(1.0), tail), x)

    # exp(x) = 2^n e^r, n = round(x / ln 2), |r| <= ln 2 / 2, e^r by its Taylor series to r^7
    # (relative error 5e-9), 2^n by the exponent bits: inline, so a vector stays a vector
    # (llvm.exp of a vector is a libm call per lane: 2.7 ms of a 6 ms dense + GELU kernel)
    _LN2_HI, _LN2_LO = 0.693145751953125, 1.428606765330187e-06  # ln 2 = hi + lo, hi exact

    def _exp(self, x: _V, f: "_FloatOps") -> _V:
        x = f.pick("max", x, f.const(-87.0))  # e^-87 is float32's smallest normal: no denormal scale
        n = f.intrinsic("rint", f.op("fmul", x, f.const(1.4426950408889634)))
        r = f.op("fsub", f.op("fsub", x, f.op("fmul", n, f.const(self._LN2_HI))),
                 f.op("fmul", n, f.const(self._LN2_LO)))
        poly = f.horner(r, [1.0 / math.factorial(k) for k in range(7, -1, -1)])
        return f.op("fmul", poly, f.power_of_two(n))

    def load(self, e: A.Load, sc: _Scope, mask: Optional[_V]) -> _V:
        flat = self._flat(e)
        coeff = self._coeff(flat, sc.vec_var) if sc.width else 0
        if mask is not None and mask.ref == "true":
            mask = None
        key = self._address(flat, sc) if coeff in (0, 1) else None
        if mask is None and key is not None:
            hit = sc.mem.get(e.buffer, key)
            if hit is not None:
                return hit
        sc.mem.read(e.buffer, key)
        value = self._load(e, flat, coeff, sc, mask)
        if mask is None and key is not None:
            sc.mem.loaded(e.buffer, key, value)
        return value

    def _load(self, e: A.Load, flat: A.Expr, coeff: "int | None", sc: _Scope,
              mask: Optional[_V]) -> _V:
        base = sc.buffers[e.buffer].ref
        if coeff == 0:  # one address for all lanes
            idx = self.uniform_index(flat, sc) if sc.width else self.index(flat, sc)
            if mask is not None:
                idx = sc.emit(f"select {self._any(mask, sc)}, {idx}, i64 0", "i64")
            return sc.emit(f"load float, ptr {self._gep(base, idx, sc).ref}", "float")
        vty = _vec(sc.width, "float")
        if coeff == 1:
            ptr = self._gep(base, self.uniform_index(flat, sc), sc).ref
            if mask is None:
                return sc.emit(f"load {vty}, ptr {ptr}, align 4", vty)
            mask = self.broadcast(mask, sc)
            fn = self._declare(f"llvm.masked.load.v{sc.width}f32.p0", vty,
                               ["ptr", "i32", mask.ty, vty])
            return sc.emit(f"call {vty} {fn}(ptr {ptr}, i32 4, {mask}, {vty} zeroinitializer)",
                           vty)
        out = _V(vty, "zeroinitializer")
        if coeff is not None:
            return self._strided_gather(base, self.uniform_index(flat, sc), coeff, out, sc, mask)
        idx = self.broadcast(self.index(flat, sc), sc)
        for lane in range(sc.width):
            li = self._extract(idx, lane, sc)
            if mask is not None:
                m = self._extract(mask, lane, sc) if mask.vector else mask
                li = sc.emit(f"select {m}, {li}, i64 0", "i64")
            elem = sc.emit(f"load float, ptr {self._gep(base, li, sc).ref}", "float")
            out = sc.emit(f"insertelement {out}, {elem}, i32 {lane}", vty)
        return out

    def _strided_gather(self, base: str, first: _V, stride: int, out: _V, sc: _Scope,
                        mask: Optional[_V]) -> _V:
        """Lane k of ``out`` loaded from ``first + k * stride``: a constant offset from one
        pointer, or (masked: a masked-off lane reads index 0) a scalar add. LLVM kept the
        general path's vector of 64-bit indices, extracted lane by lane, in the machine code
        (AVX2 has no 64-bit vector multiply): on a Zen 3, this path took 9-30% off such
        kernels' instructions and ran every one of 18 tuned C6/C1 gather kernels 1.02-1.56x
        faster; it also compiles ~10% faster. A third of a C6 tune's kernels gather."""
        vty = out.ty
        unmasked = None if mask is not None else self._gep(base, first, sc)
        for lane in range(sc.width):
            if unmasked is not None:  # every lane is read: each address is in bounds
                ptr = unmasked if lane == 0 else sc.emit(
                    f"getelementptr inbounds float, ptr {unmasked.ref}, i64 {lane * stride}",
                    "ptr")
            else:
                li = first if lane == 0 else self._add(first, lane * stride, sc)
                m = self._extract(mask, lane, sc) if mask.vector else mask
                li = sc.emit(f"select {m}, {li}, i64 0", "i64")
                ptr = self._gep(base, li, sc)
            elem = sc.emit(f"load float, ptr {ptr.ref}", "float")
            out = sc.emit(f"insertelement {out}, {elem}, i32 {lane}", vty)
        return out

    @staticmethod
    def _add(x: _V, k: int, sc: _Scope) -> _V:
        if x.ref.lstrip("-").isdigit():
            return _i64(int(x.ref) + k)
        return sc.emit(f"add i64 {x.ref}, {k}", "i64")

    # ------------------------------------------------------------ helpers

    @staticmethod
    def _gep(base: str, idx: _V, sc: _Scope) -> _V:
        return sc.emit(f"getelementptr inbounds float, ptr {base}, {idx}", "ptr")

    @staticmethod
    def _extract(v: _V, lane: int, sc: _Scope) -> _V:
        return sc.emit(f"extractelement {v}, i32 {lane}", _elem(v.ty))

    def _and(self, x: _V, y: _V, sc: _Scope) -> _V:
        if x.ref == "true" or y.ref == "false":
            return y
        if y.ref == "true" or x.ref == "false":
            return x
        return sc.emit(f"and {x}, {y.ref}", x.ty)

    def broadcast(self, v: _V, sc: _Scope) -> _V:
        if v.vector or sc.width == 0:
            return v
        vty = _vec(sc.width, v.ty)
        if v.ref in ("true", "false") or v.ref.lstrip("-").isdigit() or v.ref.startswith("0x"):
            return _V(vty, "<" + ", ".join([str(v)] * sc.width) + ">")
        one = sc.emit(f"insertelement {vty} poison, {v}, i32 0", vty)
        return sc.emit(f"shufflevector {one}, {vty} poison, {_vec(sc.width, 'i32')} "
                       "zeroinitializer", vty)

    def _same_shape(self, x: _V, y: _V, sc: _Scope) -> tuple[_V, _V]:
        if x.vector != y.vector:
            return self.broadcast(x, sc), self.broadcast(y, sc)
        return x, y

    @staticmethod
    def _any(mask: _V, sc: _Scope) -> _V:
        if not mask.vector:
            return mask
        bits = sc.emit(f"bitcast {mask} to i{sc.width}", f"i{sc.width}")
        return sc.emit(f"icmp ne {bits}, 0", "i1")


class _FloatOps:
    """Float32 arithmetic on one value's shape (scalar, or the scope's vector width) for the
    emitter's math expansions (erf, exp)."""

    def __init__(self, emitter: "_Emitter", like: _V, sc: _Scope) -> None:
        self.e, self.sc, self.ty = emitter, sc, like.ty
        self.vector = like.vector
        self.suffix = f"v{sc.width}f32" if like.vector else "f32"

    def const(self, c: float) -> _V:
        return self.e.broadcast(_f32(c), self.sc) if self.vector else _f32(c)

    def op(self, inst: str, *args: _V) -> _V:
        if inst == "fneg":
            return self.sc.emit(f"fneg {args[0]}", self.ty)
        return self.sc.emit(f"{inst} {args[0]}, {args[1].ref}", self.ty)

    def intrinsic(self, name: str, *args: _V) -> _V:
        fn = self.e._declare(f"llvm.{name}.{self.suffix}", self.ty, [self.ty] * len(args))
        return self.sc.emit(f"call {self.ty} {fn}({', '.join(map(str, args))})", self.ty)

    def horner(self, x: _V, coefs: "list[float] | tuple[float, ...]") -> _V:
        """c0 x^k + ... + ck, highest power first."""
        out = self.const(coefs[0])
        for c in coefs[1:]:
            out = self.op("fadd", self.op("fmul", out, x), self.const(c))
        return out

    def pick(self, op: str, x: _V, y: _V) -> _V:
        """max(x, y) or min(x, y) by a compare and a select, no fast-math, so a NaN in x stays
        NaN: an output never written must not turn into a valid-looking 0 through a ReLU."""
        first, second = (x, y) if op == "max" else (y, x)
        bools = _vec(self.sc.width, "i1") if self.vector else "i1"
        less = self.sc.emit(f"fcmp olt {first}, {second.ref}", bools)
        return self.sc.emit(f"select {less}, {second}, {first}" if op == "max"
                            else f"select {less}, {first}, {second}", self.ty)

    def power_of_two(self, n: _V) -> _V:
        """2^n for an integral float n in float32's normal range, from the exponent bits."""
        ity = _vec(self.sc.width, "i32") if self.vector else "i32"
        i = self.sc.emit(f"fptosi {n} to {ity}", ity)
        bias = (_V(ity, "<" + ", ".join(["i32 127"] * self.sc.width) + ">") if self.vector
                else _V("i32", "127"))
        shift = (_V(ity, "<" + ", ".join(["i32 23"] * self.sc.width) + ">") if self.vector
                 else _V("i32", "23"))
        biased = self.sc.emit(f"add {i}, {bias.ref}", ity)
        bits = self.sc.emit(f"shl {biased}, {shift.ref}", ity)
        return self.sc.emit(f"bitcast {bits} to {self.ty}", self.ty)
