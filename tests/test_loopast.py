"""The loop AST's generic traversal and rewrite: ``walk``, ``Visitor``, ``Rewriter``,
``transform``, and what is built on them (the printers, ``lower.gpu.substitute``)."""
import numpy as np
import pytest

from tensorgym import loopast as A
from tensorgym.lower import lower
from tensorgym.lower.gpu import substitute
from tensorgym.templates import space_for
from tensorgym.workloads import conv2d


def _program():
    a, c = A.Buffer("a", (8,)), A.Buffer("c", (8,))
    i, j = A.LoopVar("x"), A.LoopVar("y")
    index = A.BinOp("+", A.BinOp("*", i, A.IntImm(2)), j)  # shared by the load and the store
    body = A.For(i, 4, "serial", A.For(j, 2, "unrolled", A.seq(
        A.Store(c, (index,), A.BinOp("+", A.Load(c, (index,)), A.Load(a, (index,)))),
        A.If(A.BinOp("<", j, A.IntImm(1)), A.Barrier()))))
    return A.Program("k", (a, c), (), body), index


def _rename_loops(node):
    """A renamer on ``transform``: every loop variable replaced by a fresh ``<name>_r``."""
    fresh = {}

    def rename(n):
        if isinstance(n, A.LoopVar):
            return fresh.setdefault(n, A.LoopVar(n.name + "_r"))
        if isinstance(n, A.For):
            return A.For(rename(n.var), n.extent, n.kind, n.body)
        return None

    return A.transform(node, rename), fresh


def test_walk_is_pre_order():
    p, _ = _program()
    kinds = [type(n).__name__ for n in A.walk(p.body)]
    assert kinds[:7] == ["For", "For", "Seq", "Store", "BinOp", "BinOp", "LoopVar"]
    assert kinds[-4:] == ["BinOp", "LoopVar", "IntImm", "Barrier"]
    assert A.children(p.body) == [p.body.body] and A.children(A.IntImm(1)) == []


def test_a_renamer_rebuilds_only_what_changes_and_keeps_sharing():
    p, index = _program()
    assert A.transform(p.body, lambda n: None) is p.body  # nothing replaced: nothing rebuilt
    renamed, fresh = _rename_loops(p.body)
    assert sorted(v.name for v in fresh.values()) == ["x_r", "y_r"]
    expected = "\n".join(A.format_stmt(p.body)).replace("x", "x_r").replace("y", "y_r")
    assert "\n".join(A.format_stmt(renamed)) == expected
    loads = [n for n in A.walk(renamed) if isinstance(n, A.Load)]
    store = next(n for n in A.walk(renamed) if isinstance(n, A.Store))
    assert loads[0].indices[0] is loads[1].indices[0] is store.indices[0] is not index
    assert not {n for n in A.walk(renamed) if isinstance(n, A.LoopVar)} & set(fresh)


def test_a_renamed_lowered_program_prints_the_same_but_for_names():
    w = conv2d(1, 4, 9, 9, 8, 3, 2, 1)
    for target in ("cpu", "cuda"):
        for c in space_for(w, target).sample(np.random.default_rng(0), 5):
            p = lower(w, c)
            renamed, fresh = _rename_loops(p.body)
            text = "\n".join(A.format_stmt(renamed))
            for old, new in fresh.items():
                text = text.replace(new.name, old.name)
            assert text == "\n".join(A.format_stmt(p.body))


def test_substitute_replaces_and_folds():
    i, j = A.LoopVar("i"), A.LoopVar("j")
    c = A.Buffer("c", (64,))
    s = A.Store(c, (A.BinOp("+", i, A.BinOp("*", j, A.IntImm(8))),),
                A.BinOp("*", A.FloatImm(2.0), A.Load(c, (A.BinOp("//", j, A.IntImm(2)),))))
    out = substitute(A.For(i, 8, "serial", A.seq(s, s)), {j: A.IntImm(5)})
    assert A.format_stmt(out) == ["for i in range(8):",
                                  "  c[(i + 40)] = (2.0 * c[2])",
                                  "  c[(i + 40)] = (2.0 * c[2])"]
    flat = substitute(A.Seq((A.Seq((s, s)), s)), {})
    assert isinstance(flat, A.Seq) and len(flat.stmts) == 3  # nested sequences flattened


def test_visitors_dispatch_on_type_and_refuse_the_unknown():
    class Count(A.Visitor[int]):
        def visit_BinOp(self, e):
            return 1 + self.visit(e.a) + self.visit(e.b)

        def generic_visit(self, node, *args):
            return 0

    _, index = _program()
    assert Count().visit(index) == 2
    with pytest.raises(TypeError, match="cannot print Buffer"):
        A.format_expr(A.Buffer("x", (1,)))
