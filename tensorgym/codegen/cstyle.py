"""One C-style walker for GPU kernels; OpenCL C and CUDA C differ only by a :class:`Dialect`.

Loops bound to ``blockIdx``/``threadIdx`` become index declarations (the launch shape runs them),
``vthread`` and ``unrolled`` loops get an unroll pragma, a ``vectorized`` loop that copies
contiguous floats becomes one vector load/store (else an unrolled loop). Shared buffers are
declared at kernel scope, as OpenCL C requires.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable

from .. import loopast as A

GPU_BINDINGS = tuple(f"{k}.{d}" for k in ("blockIdx", "threadIdx") for d in "xyz")


@dataclass(frozen=True)
class Dialect:
    name: str
    kernel_prefix: str  # before the kernel's name; "{launch}" is replaced by launch_attribute
    launch_attribute: Callable[[tuple[int, int, int]], str]  # block shape -> text
    global_qualifier: str  # of pointer arguments
    shared_qualifier: str  # of block-shared arrays
    restrict: str
    barrier: str
    work_items: dict  # "blockIdx.x" -> "get_group_id(0)" ...
    vector_copy: Callable[[int, str, str], str]  # (width, dst pointer, src pointer) -> statement
    vector_load: Callable[[int, str], str]  # (width, pointer) -> an expression of the vector
    preamble: str = ""
    unroll_pragma: str = "#pragma unroll"
    functions: dict = field(default_factory=dict)  # te.FUNCTIONS name -> the dialect's float one


class CStyleRenderer(A.ExprPrinter):
    """Renders a program in a dialect: statements are visited with their depth, expressions
    print as in the loop AST's pseudo-code except where C spells them differently."""

    def __init__(self, dialect: Dialect):
        self.d = dialect

    def render(self, program: A.Program) -> str:
        self._names: dict[A.LoopVar, str] = {}
        self._used: set[str] = {c_identifier(n.buffer.name) for n in A.walk(program.body)
                                if isinstance(n, A.Allocate)}
        self._used.update(c_identifier(b.name) for b in program.buffers)
        block = tuple(program.launch.get("block", (1, 1, 1)))
        args = []
        for i, b in enumerate(program.buffers):
            const = "const " if i < len(program.args) - 1 else ""
            args.append(f"{self.d.global_qualifier}{const}float* {self.d.restrict}{c_identifier(b.name)}")
        shared = [n.buffer for n in A.walk(program.body)
                  if isinstance(n, A.Allocate) and n.buffer.scope == "shared"]
        lines = [self.d.preamble] if self.d.preamble else []
        prefix = self.d.kernel_prefix.replace("{launch}", self.d.launch_attribute(block))
        lines.append(f"{prefix} {c_identifier(program.name)}({', '.join(args)}) {{")
        for b in shared:
            lines.append(f"  {self.d.shared_qualifier}float {c_identifier(b.name)}[{b.size}];")
        lines += self.visit(program.body, 1)
        lines.append("}")
        return "\n".join(lines) + "\n"

    # ---------------------------------------------------------------- statements

    def visit_Seq(self, s: A.Seq, depth: int) -> list[str]:
        return [line for x in s.stmts for line in self.visit(x, depth)]

    def visit_Store(self, s: A.Store, depth: int) -> list[str]:
        return [f"{'  ' * depth}{self._access(s.buffer, s.indices)} = {self.visit(s.value)};"]

    def visit_Barrier(self, s: A.Barrier, depth: int) -> list[str]:
        return [f"{'  ' * depth}{self.d.barrier}"]

    def visit_If(self, s: A.If, depth: int) -> list[str]:
        pad = "  " * depth
        return [f"{pad}if ({self.visit(s.cond)}) {{"] + self.visit(s.then, depth + 1) + [f"{pad}}}"]

    def visit_Allocate(self, s: A.Allocate, depth: int) -> list[str]:
        if s.buffer.scope == "shared":  # declared at kernel scope
            return self.visit(s.body, depth)
        if s.buffer.scope != "local":
            raise ValueError(f"cannot allocate a {s.buffer.scope} buffer inside a kernel")
        return ([f"{'  ' * depth}float {c_identifier(s.buffer.name)}[{s.buffer.size}];"]
                + self.visit(s.body, depth))

    def visit_For(self, s: A.For, depth: int) -> list[str]:
        pad = "  " * depth
        name = self._name(s.var)
        if s.kind in GPU_BINDINGS:
            return [f"{pad}int {name} = {self.d.work_items[s.kind]};"] + self.visit(s.body, depth)
        if s.kind == "vectorized":
            copy = self._vector_copy(s)
            if copy is not None:
                return [f"{pad}{copy}"]
            update = self._vector_update(s, depth)
            if update is not None:
                return update
        elif s.kind not in ("serial", "unrolled", "vthread"):
            raise ValueError(f"loop kind {s.kind!r} has no meaning in a GPU kernel")
        head = [f"{pad}{self.d.unroll_pragma}"] if s.kind != "serial" else []
        return (head + [f"{pad}for (int {name} = 0; {name} < {s.extent}; ++{name}) {{"]
                + self.visit(s.body, depth + 1) + [f"{pad}}}"])

    def _vector_copy(self, s: A.For) -> "str | None":
        """``dst[i + lane] = src[j + lane]`` over all lanes as one vector load and store."""
        st = s.body
        if not (s.extent in (2, 4, 8, 16) and isinstance(st, A.Store) and isinstance(st.value, A.Load)):
            return None
        dst = A.flat_index(st.buffer, st.indices)
        src = A.flat_index(st.value.buffer, st.value.indices)
        if A.linear_coeff(dst, s.var) != 1 or A.linear_coeff(src, s.var) != 1:
            return None
        self._names[s.var] = "0"  # the vector's first lane
        text = self.d.vector_copy(s.extent,
                                  f"({c_identifier(st.buffer.name)} + {self.visit(dst)})",
                                  f"({c_identifier(st.value.buffer.name)} + {self.visit(src)})")
        del self._names[s.var]
        return text

    def _vector_update(self, s: A.For, depth: int) -> "list[str] | None":
        """``acc[i + lane] += x * sh[j + lane]`` over all lanes (``x`` free of the lane, ``acc``
        local) as one vector load of ``sh`` and a scalar update per lane."""
        st = s.body
        if not (s.extent in (2, 4) and isinstance(st, A.Store) and st.buffer.scope == "local"
                and isinstance(st.value, A.BinOp) and st.value.op == "+"
                and isinstance(st.value.a, A.Load) and st.value.a.buffer is st.buffer
                and isinstance(st.value.b, A.BinOp) and st.value.b.op == "*"):
            return None
        lane_free = [f for f in (st.value.b.a, st.value.b.b)
                     if not any(n is s.var for n in A.walk(f))]
        vec = [f for f in (st.value.b.a, st.value.b.b) if isinstance(f, A.Load)
               and f.buffer.scope == "shared"
               and A.linear_coeff(A.flat_index(f.buffer, f.indices), s.var) == 1]
        acc_at = A.flat_index(st.buffer, st.indices)
        if len(lane_free) != 1 or len(vec) != 1 or A.linear_coeff(acc_at, s.var) is None:
            return None
        self._names[s.var] = "0"  # the vector's first lane
        if self.visit(A.flat_index(st.buffer, st.value.a.indices)) != self.visit(acc_at):
            del self._names[s.var]
            return None  # not an update of the element it reads
        pad = "  " * depth
        name = self._name(A.LoopVar(f"{vec[0].buffer.name}_v"))
        offset = self.visit(A.flat_index(vec[0].buffer, vec[0].indices))
        ptr = f"({c_identifier(vec[0].buffer.name)} + {offset})"
        x = self.visit(lane_free[0])
        lines = [f"{pad}{{", f"{pad}  float{s.extent} {name} = {self.d.vector_load(s.extent, ptr)};"]
        for k in range(s.extent):
            self._names[s.var] = str(k)
            target = f"{c_identifier(st.buffer.name)}[{self.visit(acc_at)}]"
            lines.append(f"{pad}  {target} = ({target} + ({x} * {name}.{'xyzw'[k]}));")
        del self._names[s.var]
        return lines + [f"{pad}}}"]

    # ---------------------------------------------------------------- expressions

    def _name(self, var: A.LoopVar) -> str:
        if var not in self._names:
            base = c_identifier(var.name)
            name, k = base, 1
            while name in self._used:
                name, k = f"{base}_{k}", k + 1
            self._used.add(name)
            self._names[var] = name
        return self._names[var]

    def _access(self, buf: A.Buffer, indices) -> str:
        return f"{c_identifier(buf.name)}[{self.visit(A.flat_index(buf, tuple(indices)))}]"

    def visit_FloatImm(self, e: A.FloatImm) -> str:
        if not math.isfinite(e.value):
            raise ValueError(f"non-finite constant {e.value}")
        return f"{float(e.value)!r}f"

    def visit_LoopVar(self, e: A.LoopVar) -> str:
        return self._name(e)

    def visit_ThreadIdx(self, e: A.ThreadIdx) -> str:
        return self.d.work_items[e.tag]

    def visit_Load(self, e: A.Load) -> str:
        return self._access(e.buffer, e.indices)

    def visit_Select(self, e: A.Select) -> str:
        return f"({self.visit(e.cond)} ? {self.visit(e.true_value)} : {self.visit(e.false_value)})"

    def operator(self, op: str) -> str:
        return "/" if op == "//" else op  # indices are never negative: C division floors

    def visit_BinOp(self, e: A.BinOp) -> str:
        if e.op in ("min", "max"):
            # a compare, not fmaxf/fminf: a NaN in a stays NaN through a ReLU, and the same
            # spelling serves ints and floats
            a, b = self.visit(e.a), self.visit(e.b)
            return f"({a} < {b} ? {b} : {a})" if e.op == "max" else f"({b} < {a} ? {b} : {a})"
        return super().visit_BinOp(e)

    def function(self, func: str) -> str:
        return self.d.functions.get(func, func)

    def generic_visit(self, node: A.Node, *args) -> "str | list[str]":
        raise TypeError(f"cannot render {type(node).__name__}")


def c_identifier(name: str) -> str:
    """A C identifier for a loop-AST name such as ``oc.v`` or ``pad_shared.ld``."""
    out = re.sub(r"\W", "_", name)
    return out if out[:1].isalpha() or out[:1] == "_" else f"v_{out}"
