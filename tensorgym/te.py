"""A small tensor-expression layer: placeholders, ``compute`` with index expressions,
reduction axes with ``sum``, and a padding stage.

Expressions are immutable trees. A :class:`Tensor` is either a placeholder (an input) or the
result of a :class:`ComputeOp`; lowering (``tensorgym.lower``) turns a compute into loops.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Callable, Sequence, Union

_ids = itertools.count()


class Expr:
    """Base of index and value expressions; operators build new trees."""

    def __add__(self, o: ExprLike) -> Expr:
        return Binary("+", self, as_expr(o))

    def __radd__(self, o: ExprLike) -> Expr:
        return Binary("+", as_expr(o), self)

    def __sub__(self, o: ExprLike) -> Expr:
        return Binary("-", self, as_expr(o))

    def __rsub__(self, o: ExprLike) -> Expr:
        return Binary("-", as_expr(o), self)

    def __mul__(self, o: ExprLike) -> Expr:
        return Binary("*", self, as_expr(o))

    def __rmul__(self, o: ExprLike) -> Expr:
        return Binary("*", as_expr(o), self)

    def __floordiv__(self, o: ExprLike) -> Expr:
        return Binary("//", self, as_expr(o))

    def __mod__(self, o: ExprLike) -> Expr:
        return Binary("%", self, as_expr(o))

    def __lt__(self, o: ExprLike) -> Expr:  # type: ignore[override]
        return Binary("<", self, as_expr(o))

    def __ge__(self, o: ExprLike) -> Expr:  # type: ignore[override]
        return Binary(">=", self, as_expr(o))

    __hash__ = object.__hash__


ExprLike = Union[Expr, int, float]


@dataclass(frozen=True, eq=False)
class Const(Expr):
    value: Union[int, float]
    dtype: str = "int"  # "int" for indices, "float32" for values


@dataclass(frozen=True, eq=False)
class Var(Expr):
    name: str
    uid: int = field(default_factory=lambda: next(_ids))

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True, eq=False)
class IterVar(Var):
    """A loop axis of a compute: spatial (``reduce=False``) or a reduction axis."""

    extent: int = 1
    reduce: bool = False


@dataclass(frozen=True, eq=False)
class Binary(Expr):
    op: str  # + - * // % < >= && max min (max and min also of floats)
    a: Expr
    b: Expr


@dataclass(frozen=True, eq=False)
class Call(Expr):
    """A float math function of its arguments (``erf``: the GELU epilogue)."""

    func: str
    args: tuple[Expr, ...]


FUNCTIONS = ("erf",)


@dataclass(frozen=True, eq=False)
class Select(Expr):
    cond: Expr
    true_value: Expr
    false_value: Expr


@dataclass(frozen=True, eq=False)
class TensorLoad(Expr):
    tensor: "Tensor"
    indices: tuple[Expr, ...]


@dataclass(frozen=True, eq=False)
class Reduce(Expr):
    """``sum(body, axis=...)``: the only reduction we need (conv2d, matmul)."""

    body: Expr
    axes: tuple[IterVar, ...]


def as_expr(x: ExprLike) -> Expr:
    if isinstance(x, Expr):
        return x
    if isinstance(x, bool):
        raise TypeError("booleans are not expressions")
    if isinstance(x, int):
        return Const(x, "int")
    if isinstance(x, float):
        return Const(x, "float32")
    raise TypeError(f"cannot make an expression of {x!r}")


def maximum(a: ExprLike, b: ExprLike) -> Expr:
    return Binary("max", as_expr(a), as_expr(b))


def minimum(a: ExprLike, b: ExprLike) -> Expr:
    return Binary("min", as_expr(a), as_expr(b))


def call(func: str, *args: ExprLike) -> Call:
    if func not in FUNCTIONS:
        raise ValueError(f"unknown function {func!r}; use one of {', '.join(FUNCTIONS)}")
    return Call(func, tuple(as_expr(a) for a in args))


def all_of(*conds: Expr) -> Expr:
    out = conds[0]
    for c in conds[1:]:
        out = Binary("&&", out, c)
    return out


@dataclass(frozen=True, eq=False)
class PlaceholderOp:
    pass


@dataclass(frozen=True, eq=False)
class ComputeOp:
    axes: tuple[IterVar, ...]
    body: Expr

    @property
    def reduce_axes(self) -> tuple[IterVar, ...]:
        return self.body.axes if isinstance(self.body, Reduce) else ()


@dataclass(frozen=True, eq=False)
class Tensor:
    name: str
    shape: tuple[int, ...]
    op: Union[PlaceholderOp, ComputeOp]
    dtype: str = "float32"

    def __getitem__(self, idx: Union[ExprLike, Sequence[ExprLike]]) -> TensorLoad:
        if not isinstance(idx, tuple):
            idx = (idx,)
        if len(idx) != len(self.shape):
            raise IndexError(f"{self.name} has {len(self.shape)} dims, indexed with {len(idx)}")
        return TensorLoad(self, tuple(as_expr(i) for i in idx))

    @property
    def size(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    def __repr__(self) -> str:
        return f"Tensor({self.name}, {self.shape})"


def placeholder(shape: Sequence[int], name: str) -> Tensor:
    return Tensor(name, tuple(int(s) for s in shape), PlaceholderOp())


def reduce_axis(extent: int, name: str) -> IterVar:
    return IterVar(name, extent=int(extent), reduce=True)


def sum(body: ExprLike, axis: Union[IterVar, Sequence[IterVar]]) -> Reduce:  # noqa: A001
    axes = (axis,) if isinstance(axis, IterVar) else tuple(axis)
    return Reduce(as_expr(body), axes)


def compute(shape: Sequence[int], fn: Callable[..., ExprLike], name: str,
            axis_names: Sequence[str] | None = None) -> Tensor:
    names = list(axis_names) if axis_names else [f"i{k}" for k in range(len(shape))]
    axes = tuple(IterVar(n, extent=int(s)) for n, s in zip(names, shape))
    body = as_expr(fn(*axes))
    return Tensor(name, tuple(int(s) for s in shape), ComputeOp(axes, body))


def pad(data: Tensor, pad_before: Sequence[int], name: str = "pad") -> Tensor:
    """Zero-pad ``data`` by ``pad_before`` on each side of each dim, as a separate stage."""
    shape = [s + 2 * p for s, p in zip(data.shape, pad_before)]

    def body(*idx: Expr) -> Expr:
        conds = []
        src = []
        for i, p, s in zip(idx, pad_before, data.shape):
            if p:
                conds += [i >= p, i < p + s]
                src.append(i - p)
            else:
                src.append(i)
        if not conds:
            return data[tuple(src)]
        return Select(all_of(*conds), data[tuple(src)], Const(0.0, "float32"))

    return compute(shape, body, name, axis_names=[f"{name}_{k}" for k in range(len(shape))])


def input_tensors(t: Tensor) -> list[Tensor]:
    """The tensors that ``t``'s compute reads directly, in first-use order."""
    if isinstance(t.op, PlaceholderOp):
        return []
    out: list[Tensor] = []

    def visit(e: Expr) -> None:
        if isinstance(e, TensorLoad):
            if e.tensor not in out:
                out.append(e.tensor)
            for i in e.indices:
                visit(i)
        elif isinstance(e, Binary):
            visit(e.a)
            visit(e.b)
        elif isinstance(e, Select):
            visit(e.cond)
            visit(e.true_value)
            visit(e.false_value)
        elif isinstance(e, Reduce):
            visit(e.body)
        elif isinstance(e, Call):
            for a in e.args:
                visit(a)

    visit(t.op.body)
    return out
