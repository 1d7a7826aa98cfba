"""The loop AST: an explicit, printable low-level IR that lowering produces and every backend
(LLVM, OpenCL C, CUDA C) and the feature extractor consume.

Index expressions are integer trees over loop variables; value expressions are float32 trees over
loads. Buffers keep their multi-dimensional shape (row-major) so features can see strides.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Iterator, Union

_ids = itertools.count()

# ---------------------------------------------------------------- expressions


class Node:
    pass


@dataclass(frozen=True, eq=False)
class IntImm(Node):
    value: int


@dataclass(frozen=True, eq=False)
class FloatImm(Node):
    value: float


@dataclass(frozen=True, eq=False)
class LoopVar(Node):
    name: str
    uid: int = field(default_factory=lambda: next(_ids))

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True, eq=False)
class BinOp(Node):
    op: str  # + - * // % min max < <= >= == && (index ops) ; + - * (float ops)
    a: "Expr"
    b: "Expr"


@dataclass(frozen=True, eq=False)
class Select(Node):
    cond: "Expr"
    true_value: "Expr"
    false_value: "Expr"


@dataclass(frozen=True, eq=False)
class Buffer:
    name: str
    shape: tuple[int, ...]
    scope: str = "global"  # global | local (registers/stack) | shared (GPU block memory)
    dtype: str = "float32"

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def strides(self) -> tuple[int, ...]:
        out, acc = [], 1
        for s in reversed(self.shape):
            out.append(acc)
            acc *= s
        return tuple(reversed(out))

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True, eq=False)
class Load(Node):
    buffer: Buffer
    indices: tuple["Expr", ...]


@dataclass(frozen=True, eq=False)
class ThreadIdx(Node):
    """A GPU work-item index: ``blockIdx.x``-like (``tag``="blockIdx.x") or ``threadIdx.y``..."""

    tag: str


Expr = Union[IntImm, FloatImm, LoopVar, BinOp, Select, Load, ThreadIdx]

# ---------------------------------------------------------------- statements

LOOP_KINDS = ("serial", "parallel", "vectorized", "unrolled")


@dataclass(frozen=True, eq=False)
class For(Node):
    var: LoopVar
    extent: int
    kind: str  # one of LOOP_KINDS, or a GPU binding such as "blockIdx.x" / "threadIdx.y" / "vthread"
    body: "Stmt"


@dataclass(frozen=True, eq=False)
class Store(Node):
    buffer: Buffer
    indices: tuple[Expr, ...]
    value: Expr


@dataclass(frozen=True, eq=False)
class Seq(Node):
    stmts: tuple["Stmt", ...]


@dataclass(frozen=True, eq=False)
class Allocate(Node):
    buffer: Buffer
    body: "Stmt"


@dataclass(frozen=True, eq=False)
class If(Node):
    cond: Expr
    then: "Stmt"


@dataclass(frozen=True, eq=False)
class Barrier(Node):
    """Synchronise the threads of a GPU block (``__syncthreads`` / ``barrier``)."""


Stmt = Union[For, Store, Seq, Allocate, If, Barrier]


@dataclass(frozen=True, eq=False)
class Program:
    """A lowered kernel: ``args`` are the inputs then the output; ``workspaces`` are global
    scratch buffers the caller allocates (e.g. a materialised padding stage)."""

    name: str
    args: tuple[Buffer, ...]
    workspaces: tuple[Buffer, ...]
    body: Stmt
    launch: dict = field(default_factory=dict)  # GPU: {"grid": (x,y,z), "block": (x,y,z)}

    @property
    def buffers(self) -> tuple[Buffer, ...]:
        return self.args + self.workspaces

    def __str__(self) -> str:
        return format_program(self)


# ---------------------------------------------------------------- helpers


def const(v: "int | Expr") -> Expr:
    return IntImm(v) if isinstance(v, int) else v


def add(a: "int | Expr", b: "int | Expr") -> Expr:
    a, b = const(a), const(b)
    if isinstance(a, IntImm) and a.value == 0:
        return b
    if isinstance(b, IntImm) and b.value == 0:
        return a
    if isinstance(a, IntImm) and isinstance(b, IntImm):
        return IntImm(a.value + b.value)
    return BinOp("+", a, b)


def mul(a: "int | Expr", b: "int | Expr") -> Expr:
    a, b = const(a), const(b)
    for x, y in ((a, b), (b, a)):
        if isinstance(x, IntImm):
            if x.value == 0:
                return IntImm(0)
            if x.value == 1:
                return y
    if isinstance(a, IntImm) and isinstance(b, IntImm):
        return IntImm(a.value * b.value)
    return BinOp("*", a, b)


def seq(*stmts: "Stmt | None") -> Stmt:
    flat: list[Stmt] = []
    for s in stmts:
        if s is None:
            continue
        flat.extend(s.stmts if isinstance(s, Seq) else (s,))
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))


def walk(node: Node) -> Iterator[Node]:
    """Pre-order traversal of statements and expressions."""
    yield node
    if isinstance(node, For):
        yield from walk(node.body)
    elif isinstance(node, Seq):
        for s in node.stmts:
            yield from walk(s)
    elif isinstance(node, (Allocate,)):
        yield from walk(node.body)
    elif isinstance(node, If):
        yield from walk(node.cond)
        yield from walk(node.then)
    elif isinstance(node, Store):
        for i in node.indices:
            yield from walk(i)
        yield from walk(node.value)
    elif isinstance(node, Load):
        for i in node.indices:
            yield from walk(i)
    elif isinstance(node, BinOp):
        yield from walk(node.a)
        yield from walk(node.b)
    elif isinstance(node, Select):
        yield from walk(node.cond)
        yield from walk(node.true_value)
        yield from walk(node.false_value)


def linear_coeff(e: Expr, var: LoopVar) -> "int | None":
    """The coefficient of ``var`` if ``e`` is affine in it (other terms free), else None."""
    if isinstance(e, LoopVar):
        return 1 if e is var else 0
    if isinstance(e, (IntImm, ThreadIdx)):
        return 0
    if isinstance(e, BinOp):
        ca, cb = linear_coeff(e.a, var), linear_coeff(e.b, var)
        if ca is None or cb is None:
            return None
        if e.op == "+":
            return ca + cb
        if e.op == "-":
            return ca - cb
        if e.op == "*":
            if ca == 0 and cb == 0:
                return 0
            if ca == 0 and isinstance(e.a, IntImm):
                return e.a.value * cb
            if cb == 0 and isinstance(e.b, IntImm):
                return e.b.value * ca
            return None
        return 0 if ca == 0 and cb == 0 else None
    if isinstance(e, Select):
        parts = [linear_coeff(x, var) for x in (e.cond, e.true_value, e.false_value)]
        return 0 if all(p == 0 for p in parts) else None
    if isinstance(e, Load):
        return 0 if all(linear_coeff(i, var) == 0 for i in e.indices) else None
    return None


def flat_index(buf: Buffer, indices: tuple[Expr, ...]) -> Expr:
    out: Expr = IntImm(0)
    for i, s in zip(indices, buf.strides):
        out = add(out, mul(i, s))
    return out


# ---------------------------------------------------------------- printing


def format_expr(e: Expr) -> str:
    if isinstance(e, IntImm):
        return str(e.value)
    if isinstance(e, FloatImm):
        return repr(float(e.value))
    if isinstance(e, LoopVar):
        return e.name
    if isinstance(e, ThreadIdx):
        return e.tag
    if isinstance(e, BinOp):
        if e.op in ("min", "max"):
            return f"{e.op}({format_expr(e.a)}, {format_expr(e.b)})"
        return f"({format_expr(e.a)} {e.op} {format_expr(e.b)})"
    if isinstance(e, Select):
        return (f"select({format_expr(e.cond)}, {format_expr(e.true_value)}, "
                f"{format_expr(e.false_value)})")
    if isinstance(e, Load):
        return f"{e.buffer.name}[{', '.join(format_expr(i) for i in e.indices)}]"
    raise TypeError(e)


def format_stmt(s: Stmt, indent: int = 0) -> list[str]:
    pad = "  " * indent
    if isinstance(s, For):
        tag = "" if s.kind == "serial" else f"  # {s.kind}"
        return [f"{pad}for {s.var.name} in range({s.extent}):{tag}"] + format_stmt(s.body, indent + 1)
    if isinstance(s, Seq):
        return [line for x in s.stmts for line in format_stmt(x, indent)]
    if isinstance(s, Store):
        idx = ", ".join(format_expr(i) for i in s.indices)
        return [f"{pad}{s.buffer.name}[{idx}] = {format_expr(s.value)}"]
    if isinstance(s, Allocate):
        return ([f"{pad}{s.buffer.name} = alloc_{s.buffer.scope}({list(s.buffer.shape)})"]
                + format_stmt(s.body, indent))
    if isinstance(s, If):
        return [f"{pad}if {format_expr(s.cond)}:"] + format_stmt(s.then, indent + 1)
    if isinstance(s, Barrier):
        return [f"{pad}barrier()"]
    raise TypeError(s)


def format_program(p: Program) -> str:
    sig = ", ".join(f"{b.name}{list(b.shape)}" for b in p.buffers)
    head = [f"def {p.name}({sig}):"]
    if p.launch:
        head.append(f"  # launch {p.launch}")
    return "\n".join(head + format_stmt(p.body, 1))
