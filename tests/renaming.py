"""A loop-AST rewrite for tests: the same program with every loop variable and buffer renamed."""
import dataclasses

from tensorgym import loopast as A


class Renamer(A.Rewriter):
    """Rebuild a program with every loop variable and buffer replaced by a fresh, renamed one."""

    def __init__(self) -> None:
        super().__init__()
        self.vars: dict = {}
        self.bufs: dict = {}

    def var(self, v: A.LoopVar) -> A.LoopVar:
        if v not in self.vars:
            self.vars[v] = A.LoopVar(f"renamed_{len(self.vars)}")
        return self.vars[v]

    def buf(self, b: A.Buffer) -> A.Buffer:
        if b not in self.bufs:
            # names sort in the reverse order of creation, so name-sorting would reorder slots
            self.bufs[b] = A.Buffer(f"buf_{99 - len(self.bufs)}", b.shape, b.scope, b.dtype)
        return self.bufs[b]

    def visit_LoopVar(self, v: A.LoopVar) -> A.LoopVar:
        return self.var(v)

    def visit_For(self, s: A.For) -> A.For:
        var = self.var(s.var)  # before the body: names in pre-order
        return dataclasses.replace(self.generic_visit(s), var=var)

    def visit_Load(self, n):  # also Store and Allocate: every node that names a buffer
        buffer = self.buf(n.buffer)
        return dataclasses.replace(self.generic_visit(n), buffer=buffer)

    visit_Store = visit_Allocate = visit_Load

    def program(self, p: A.Program) -> A.Program:
        args = tuple(self.buf(b) for b in p.args)
        return A.Program("renamed", args, tuple(self.buf(b) for b in p.workspaces),
                         self.visit(p.body), dict(p.launch))
