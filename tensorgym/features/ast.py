"""The loop AST as arrays for a tree model (the paper's context-encoded TreeGRU, Figure 3d).

``ast_arrays(program)`` returns a dict of numpy arrays over the *statement* nodes (expressions
are summarised by the loops' context vectors), numbered in pre-order so every parent has a
smaller index than its children and iterating indices in reverse is a valid bottom-up order:

- ``node_type`` int64 (n,): index into ``NODE_TYPES``; node 0 is the root (the program body).
- ``parent`` int64 (n,): parent node, -1 for the root.
- ``child_ptr`` int64 (n + 1,), ``child_idx`` int64 (n - 1,): children of node v, in program
  order, are ``child_idx[child_ptr[v]:child_ptr[v + 1]]`` (CSR).
- ``depth`` int64 (n,): number of enclosing loops.
- ``loop_index`` int64 (n,): row of ``context`` for ``For`` nodes, -1 otherwise.
- ``context`` float32 (n_loops, N_CONTEXT): ``context_matrix(program)``, loops in pre-order.
- ``node_features`` float32 (n, len(NODE_TYPES) + N_CONTEXT): node-type one-hot, then the
  loop's context row (zeros for non-loop nodes).
- ``program`` float32 (N_PROGRAM,): whole-program figures.
"""
from __future__ import annotations

import numpy as np

from .. import loopast as A
from .context import N_CONTEXT, ProgramSummary, summarize

NODE_TYPES = ("For", "Seq", "Store", "Allocate", "If", "Barrier")
_TYPE_OF = {A.For: 0, A.Seq: 1, A.Store: 2, A.Allocate: 3, A.If: 4, A.Barrier: 5}


def _children(s: A.Stmt) -> tuple:
    if isinstance(s, (A.For, A.Allocate)):
        return (s.body,)
    if isinstance(s, A.Seq):
        return s.stmts
    if isinstance(s, A.If):
        return (s.then,)
    return ()


def ast_arrays(program: A.Program, summary: "ProgramSummary | None" = None) -> dict:
    summary = summary or summarize(program)
    types, parents, depths, loop_index = [], [], [], []
    children: list[list[int]] = []
    n_loops = 0
    stack = [(program.body, -1, 0)]
    while stack:
        s, parent, depth = stack.pop()
        v = len(types)
        t = _TYPE_OF.get(type(s))
        if t is None:
            raise TypeError(f"unexpected statement {type(s).__name__} in the loop AST")
        types.append(t)
        parents.append(parent)
        depths.append(depth)
        children.append([])
        if parent >= 0:
            children[parent].append(v)
        if t == 0:
            loop_index.append(n_loops)
            n_loops += 1
        else:
            loop_index.append(-1)
        inner = depth + (t == 0)
        stack.extend((c, v, inner) for c in reversed(_children(s)))
    n = len(types)
    child_ptr = np.zeros(n + 1, dtype=np.int64)
    child_ptr[1:] = np.cumsum([len(c) for c in children])
    loop_index_arr = np.array(loop_index, dtype=np.int64)
    feats = np.zeros((n, len(NODE_TYPES) + N_CONTEXT), dtype=np.float32)
    feats[np.arange(n), types] = 1.0
    is_loop = loop_index_arr >= 0
    feats[is_loop, len(NODE_TYPES):] = summary.context[loop_index_arr[is_loop]]
    return {
        "node_type": np.array(types, dtype=np.int64),
        "parent": np.array(parents, dtype=np.int64),
        "child_ptr": child_ptr,
        "child_idx": np.array([c for cs in children for c in cs], dtype=np.int64),
        "depth": np.array(depths, dtype=np.int64),
        "loop_index": loop_index_arr,
        "context": summary.context,
        "node_features": feats,
        "program": summary.program,
    }


def loop_names(program: A.Program) -> np.ndarray:
    """The loop variable name of every statement node of ``program``, in ``ast_arrays``' node
    order ('' for statements that are not loops): what the vanilla TreeGRU embeds. Kept apart
    from the features, which must not change when loops are renamed."""
    out: list[str] = []
    stack = [program.body]
    while stack:
        s = stack.pop()
        out.append(s.var.name if isinstance(s, A.For) else "")
        stack.extend(reversed(_children(s)))
    return np.array(out)
