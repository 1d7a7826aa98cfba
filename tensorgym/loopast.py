"""The loop AST: an explicit, printable low-level IR that lowering produces and every backend
(LLVM, OpenCL C, CUDA C) and the feature extractor consume.

Index expressions are integer trees over loop variables; value expressions are float32 trees over
loads. Buffers keep their multi-dimensional shape (row-major) so features can see strides.
"""
from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Iterator, TypeVar, Union

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
    op: str  # + - * // % min max < <= >= == && (index ops) ; + - * max min (float ops)
    a: "Expr"
    b: "Expr"


@dataclass(frozen=True, eq=False)
class Call(Node):
    """A float math function (``te.FUNCTIONS``: ``erf``) of float arguments."""

    func: str
    args: tuple["Expr", ...]


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


Expr = Union[IntImm, FloatImm, LoopVar, BinOp, Select, Load, ThreadIdx, Call]

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


@dataclass(frozen=True)
class PackedLayout:
    """An input that the kernel reads in a blocked layout made once ahead of time, as inference
    compilers pre-pack weights: dimension ``dim`` of the workload's array is split into blocks of
    ``block``; the block number becomes the first dimension and the offset in the block the last,
    the other dimensions keep their order in between. An OIHW weight with ``PackedLayout(0, 16)``
    becomes ``[O/16][I][H][W][16]``; a ``[K][N]`` matrix with ``PackedLayout(1, 16)`` becomes
    ``[N/16][K][16]`` (contiguous panels of 16 columns)."""

    dim: int
    block: int

    def packed_shape(self, shape: tuple[int, ...]) -> tuple[int, ...]:
        if shape[self.dim] % self.block:
            raise ValueError(f"dimension {self.dim} of {shape} is not a multiple of {self.block}")
        rest = tuple(s for d, s in enumerate(shape) if d != self.dim)
        return (shape[self.dim] // self.block, *rest, self.block)

    def apply(self, array: Any) -> Any:
        """The packed copy of ``array`` (a NumPy array in the workload's layout), C-contiguous."""
        shape = tuple(array.shape)
        self.packed_shape(shape)  # checks the block divides the dimension
        split = shape[:self.dim] + (shape[self.dim] // self.block, self.block) + shape[self.dim + 1:]
        nd = len(shape)
        order = (self.dim, *[d if d < self.dim else d + 1 for d in range(nd) if d != self.dim],
                 self.dim + 1)
        return array.reshape(split).transpose(order).copy(order="C")


@dataclass(frozen=True, eq=False)
class Program:
    """A lowered kernel: ``args`` are the inputs then the output; ``workspaces`` are global
    scratch buffers the caller allocates (e.g. a materialised padding stage). ``input_layouts``
    (one entry per input, or empty when none is packed) says which inputs the kernel takes in a
    :class:`PackedLayout`; their ``args`` have the packed shape, and every runtime packs the
    workload's arrays before the kernel gets them (:meth:`pack_inputs`)."""

    name: str
    args: tuple[Buffer, ...]
    workspaces: tuple[Buffer, ...]
    body: Stmt
    launch: dict = field(default_factory=dict)  # GPU: {"grid": (x,y,z), "block": (x,y,z)}
    input_layouts: tuple = ()  # tuple of PackedLayout | None, one per input

    @property
    def buffers(self) -> tuple[Buffer, ...]:
        return self.args + self.workspaces

    def layout_of(self, i: int) -> "PackedLayout | None":
        """The packed layout of input ``i``, None for the workload's own."""
        return self.input_layouts[i] if i < len(self.input_layouts) else None

    def pack_inputs(self, inputs: Any) -> list:
        """The workload's input arrays as the kernel takes them (packed where a layout says)."""
        return [a if self.layout_of(i) is None else self.layout_of(i).apply(a)
                for i, a in enumerate(inputs)]

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


# ---------------------------------------------------------------- traversal and rewriting

# The fields of each node type that hold its children (a node, or a tuple of nodes), in
# traversal order. A For's loop variable and the buffer of a Load, Store or Allocate are not
# children: a rewrite that renames them rebuilds the node that holds them.
_CHILD_FIELDS: dict[type, tuple[str, ...]] = {
    For: ("body",), Seq: ("stmts",), Allocate: ("body",), If: ("cond", "then"),
    Store: ("indices", "value"), Load: ("indices",), BinOp: ("a", "b"),
    Select: ("cond", "true_value", "false_value"), Call: ("args",),
}


def child_fields(cls: type) -> tuple[str, ...]:
    """The fields of node type ``cls`` that hold child nodes (a subclass has its base's)."""
    fields = _CHILD_FIELDS.get(cls)
    if fields is None:
        fields = next((_CHILD_FIELDS[c] for c in cls.__mro__ if c in _CHILD_FIELDS), ())
        _CHILD_FIELDS[cls] = fields
    return fields


def children(node: Node) -> list[Node]:
    """The child nodes of ``node``, in traversal order."""
    out: list[Node] = []
    for f in child_fields(type(node)):
        v = getattr(node, f)
        if type(v) is tuple:
            out.extend(v)
        else:
            out.append(v)
    return out


def walk(node: Node) -> Iterator[Node]:
    """Pre-order traversal of statements and expressions."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        if child_fields(type(n)):
            stack.extend(reversed(children(n)))


T = TypeVar("T")
N = TypeVar("N", bound=Node)
_DISPATCH: dict[tuple[type, type], Callable] = {}  # (visitor class, node class) -> method


class Visitor(Generic[T]):
    """Dispatch on a node's type: ``visit(node, *args)`` calls ``visit_<Type>(node, *args)`` of
    the first class along the node type's MRO that has one, else ``generic_visit``."""

    def visit(self, node: Node, *args: Any) -> T:
        key = (type(self), type(node))
        method = _DISPATCH.get(key)
        if method is None:
            method = next((m for m in (getattr(type(self), "visit_" + c.__name__, None)
                                       for c in type(node).__mro__) if m is not None),
                          type(self).generic_visit)
            _DISPATCH[key] = method
        return method(self, node, *args)

    def generic_visit(self, node: Node, *args: Any) -> T:
        raise TypeError(f"{type(self).__name__} cannot handle {type(node).__name__}")


class Rewriter(Visitor[Node]):
    """Rebuilds a tree bottom-up. ``generic_visit`` rebuilds a node from its rewritten children
    (the node itself when none changed); a ``visit_<Type>`` method replaces nodes of that type,
    and calls ``self.generic_visit(node)`` where it wants their children rewritten first. Each
    distinct node object is rewritten once per rewriter, so shared subtrees stay shared."""

    def __init__(self) -> None:
        # id -> (node, its rewrite); holding the node keeps its id from being reused
        self._memo: dict[int, tuple[Node, Node]] = {}

    def visit(self, node: Node) -> Node:  # type: ignore[override]
        hit = self._memo.get(id(node))
        if hit is not None and hit[0] is node:
            return hit[1]
        out = super().visit(node)
        self._memo[id(node)] = (node, out)
        return out

    def generic_visit(self, node: Node) -> Node:  # type: ignore[override]
        changes: dict[str, Any] = {}
        for f in child_fields(type(node)):
            old = getattr(node, f)
            if type(old) is tuple:
                new = tuple(self.visit(x) for x in old)
                if any(a is not b for a, b in zip(new, old)):
                    changes[f] = new
            else:
                new = self.visit(old)
                if new is not old:
                    changes[f] = new
        return dataclasses.replace(node, **changes) if changes else node


class _FunctionRewriter(Rewriter):
    def __init__(self, fn: Callable[[Node], "Node | None"]) -> None:
        super().__init__()
        self.fn = fn

    def generic_visit(self, node: Node) -> Node:  # type: ignore[override]
        node = super().generic_visit(node)
        out = self.fn(node)
        return node if out is None else out


def transform(node: N, fn: Callable[[Node], "Node | None"]) -> N:
    """``node`` rebuilt bottom-up: every node's children are rewritten first, then ``fn`` gets
    the rebuilt node and returns its replacement (None keeps it). ``fn`` is called once per
    distinct node object."""
    return _FunctionRewriter(fn).visit(node)  # type: ignore[return-value]


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


class ExprPrinter(Visitor[str]):
    """Expressions as text: the pseudo-code of ``str(program)``, and the base of the C
    printers (``codegen.cstyle``), which override what C spells differently."""

    def visit_IntImm(self, e: IntImm) -> str:
        return str(e.value)

    def visit_FloatImm(self, e: FloatImm) -> str:
        return repr(float(e.value))

    def visit_LoopVar(self, e: LoopVar) -> str:
        return e.name

    def visit_ThreadIdx(self, e: ThreadIdx) -> str:
        return e.tag

    def visit_BinOp(self, e: BinOp) -> str:
        a, b = self.visit(e.a), self.visit(e.b)
        if e.op in ("min", "max"):
            return f"{e.op}({a}, {b})"
        return f"({a} {self.operator(e.op)} {b})"

    def operator(self, op: str) -> str:
        return op

    def visit_Call(self, e: Call) -> str:
        return f"{self.function(e.func)}({', '.join(self.visit(a) for a in e.args)})"

    def function(self, func: str) -> str:
        return func

    def visit_Select(self, e: Select) -> str:
        return (f"select({self.visit(e.cond)}, {self.visit(e.true_value)}, "
                f"{self.visit(e.false_value)})")

    def visit_Load(self, e: Load) -> str:
        return f"{e.buffer.name}[{', '.join(self.visit(i) for i in e.indices)}]"

    def generic_visit(self, node: Node, *args: Any) -> str:
        raise TypeError(f"cannot print {type(node).__name__}")


class _StmtPrinter(ExprPrinter):
    """Statements as indented pseudo-code lines."""

    def visit_For(self, s: For, indent: int) -> list[str]:
        tag = "" if s.kind == "serial" else f"  # {s.kind}"
        return ([f"{'  ' * indent}for {s.var.name} in range({s.extent}):{tag}"]
                + self.visit(s.body, indent + 1))

    def visit_Seq(self, s: Seq, indent: int) -> list[str]:
        return [line for x in s.stmts for line in self.visit(x, indent)]

    def visit_Store(self, s: Store, indent: int) -> list[str]:
        idx = ", ".join(self.visit(i) for i in s.indices)
        return [f"{'  ' * indent}{s.buffer.name}[{idx}] = {self.visit(s.value)}"]

    def visit_Allocate(self, s: Allocate, indent: int) -> list[str]:
        b = s.buffer
        return ([f"{'  ' * indent}{b.name} = alloc_{b.scope}({list(b.shape)})"]
                + self.visit(s.body, indent))

    def visit_If(self, s: If, indent: int) -> list[str]:
        return [f"{'  ' * indent}if {self.visit(s.cond)}:"] + self.visit(s.then, indent + 1)

    def visit_Barrier(self, s: Barrier, indent: int) -> list[str]:
        return [f"{'  ' * indent}barrier()"]


def format_expr(e: Expr) -> str:
    return ExprPrinter().visit(e)


def format_stmt(s: Stmt, indent: int = 0) -> list[str]:
    return _StmtPrinter().visit(s, indent)


def format_program(p: Program) -> str:
    sig = ", ".join(f"{b.name}{list(b.shape)}" for b in p.buffers)
    head = [f"def {p.name}({sig}):"]
    for b, layout in zip(p.args, p.input_layouts):
        if layout is not None:
            head.append(f"  # {b.name}: packed ahead of time, {layout}")
    if p.launch:
        head.append(f"  # launch {p.launch}")
    return "\n".join(head + format_stmt(p.body, 1))
