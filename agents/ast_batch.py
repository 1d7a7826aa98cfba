"""Packing many loop-AST trees (``featurize(..., mode="ast")``) into one batch of arrays so a
tree model processes the whole batch level by level, bottom-up, instead of node by node.

Nodes of all trees are concatenated and sorted by *height* (0 for leaves, 1 + the highest child
otherwise). All nodes of one height depend only on lower heights, so a TreeGRU evaluates each
height as one set of tensor ops; the nodes of height ``k`` occupy rows
``level_ptr[k]:level_ptr[k + 1]`` and their children always have smaller row numbers.

Vanilla (Figure 3c) tokens: a node's type, and for loops the loop kind and the loop variable's
name (``loop_var``, which ``featurize(..., "ast")`` carries beside the features; the features
themselves do not change when loops are renamed, only the vanilla model reads names).
"""
from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Mapping, Sequence

import numpy as np

from tensorgym.features.ast import NODE_TYPES
from tensorgym.features.context import CONTEXT_NAMES, KIND_NAMES

N_TYPES = len(NODE_TYPES)
N_KINDS = len(KIND_NAMES)
N_TOKENS = N_TYPES + N_KINDS  # non-loop nodes: their type; loops: N_TYPES + their kind
N_NODE_FEATURES = N_TYPES + len(CONTEXT_NAMES)
_FOR = NODE_TYPES.index("For")
_KIND_COLUMNS = np.array([N_TYPES + CONTEXT_NAMES.index(f"kind_{k}") for k in KIND_NAMES])
EXTENT_COLUMN = N_TYPES + CONTEXT_NAMES.index("extent")
_REQUIRED = ("node_type", "parent", "loop_index", "node_features")


@dataclass
class AstBatch:
    """A batch of trees; node rows are in level order (see module docstring).

    ``edge_child``/``edge_parent`` list every (child row, parent row) pair sorted by the parent's
    level; the edges of level ``k`` are ``edge_ptr[k]:edge_ptr[k + 1]``. ``edge_parent`` is local
    to its level (parent row minus ``level_ptr[k]``) so it indexes that level's outputs directly.
    """

    n_trees: int
    level_ptr: list[int]
    edge_ptr: list[int]
    node_type: "np.ndarray"  # (N,) int64
    features: "np.ndarray"  # (N, N_NODE_FEATURES) float32
    token: "np.ndarray"  # (N,) int64, < N_TOKENS
    name_id: "np.ndarray"  # (N,) int64, 0 = no / unknown name
    tree: "np.ndarray"  # (N,) int64
    root: "np.ndarray"  # (n_trees,) int64: row of each tree's root
    loop_rows: "np.ndarray"  # (n_loops,) int64: rows of For nodes
    edge_child: "np.ndarray"  # (E,) int64
    edge_parent: "np.ndarray"  # (E,) int64

    @property
    def n_nodes(self) -> int:
        return len(self.node_type)

    @property
    def n_levels(self) -> int:
        return len(self.level_ptr) - 1

    def to_torch(self, device=None) -> "AstBatch":
        """The same batch with every array a torch tensor on ``device``."""
        import torch  # noqa: PLC0415  (torch only where a batch goes to a model)

        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            out[f.name] = torch.from_numpy(v).to(device) if isinstance(v, np.ndarray) else v
        return AstBatch(**out)


def check_trees(trees: Sequence[Mapping]) -> None:
    """Clear errors for input that is not a list of ``featurize(..., "ast")`` dicts."""
    if isinstance(trees, np.ndarray) or not isinstance(trees, Sequence):
        raise TypeError("expected a list of AST dicts from featurize(..., mode='ast'), got "
                        f"{type(trees).__name__}; is the model's feature_mode 'ast'?")
    for i, t in enumerate(trees):
        if not isinstance(t, Mapping) or any(k not in t for k in _REQUIRED):
            raise TypeError(f"tree {i} is not an AST dict with keys {_REQUIRED}")
        if t["node_features"].shape != (len(t["node_type"]), N_NODE_FEATURES):
            raise ValueError(f"tree {i}: node_features has shape {t['node_features'].shape}, "
                             f"expected ({len(t['node_type'])}, {N_NODE_FEATURES})")


def node_heights(parent: np.ndarray) -> np.ndarray:
    """Height of every node of a forest given global parent indices (-1 for roots), with
    parents numbered before their children (the featurizer's pre-order)."""
    n = len(parent)
    height = np.zeros(n, np.int64)
    child = np.flatnonzero(parent >= 0)
    par = parent[child]
    # each pass settles at least one more level; stops when nothing changes
    for _ in range(n):
        new = np.zeros(n, np.int64)
        np.maximum.at(new, par, height[child] + 1)
        if np.array_equal(new, height):
            break
        height = new
    return height


def collate(trees: Sequence[Mapping], names: "Mapping[str, int] | None" = None) -> AstBatch:
    """Pack ``trees`` into an ``AstBatch``. ``names`` maps loop variable names to ids >= 1 (for
    the vanilla model); names missing from it, or trees without ``loop_var``, get id 0."""
    check_trees(trees)
    if not trees:
        raise ValueError("cannot collate an empty list of trees")
    sizes = np.array([len(t["node_type"]) for t in trees], np.int64)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    node_type = np.concatenate([t["node_type"] for t in trees]).astype(np.int64)
    feats = np.concatenate([t["node_features"] for t in trees]).astype(np.float32, copy=False)
    tree = np.repeat(np.arange(len(trees), dtype=np.int64), sizes)
    parent = np.concatenate([t["parent"] for t in trees]).astype(np.int64)
    parent = np.where(parent >= 0, parent + offsets[tree], -1)

    is_loop = node_type == _FOR
    token = node_type.copy()
    token[is_loop] = N_TYPES + np.argmax(feats[is_loop][:, _KIND_COLUMNS], axis=1)
    name_id = np.zeros(len(node_type), np.int64)
    if names:
        for t, off in zip(trees, offsets):
            if "loop_var" in t:
                ids = [names.get(str(v), 0) for v in t["loop_var"]]
                name_id[off:off + len(ids)] = ids
        name_id[~is_loop] = 0

    height = node_heights(parent)
    order = np.lexsort((np.arange(len(height)), height))  # by height, then original order
    row_of = np.empty_like(order)
    row_of[order] = np.arange(len(order))
    level_ptr = np.searchsorted(height[order], np.arange(height.max() + 2)).tolist()

    child = np.flatnonzero(parent >= 0)
    child_row, parent_row = row_of[child], row_of[parent[child]]
    by_parent = np.argsort(parent_row, kind="stable")
    child_row, parent_row = child_row[by_parent], parent_row[by_parent]
    edge_ptr = np.searchsorted(parent_row, level_ptr).tolist()
    parent_level = np.searchsorted(level_ptr, parent_row, side="right") - 1
    edge_parent = parent_row - np.asarray(level_ptr, np.int64)[parent_level]

    return AstBatch(
        n_trees=len(trees), level_ptr=level_ptr, edge_ptr=edge_ptr,
        node_type=node_type[order], features=feats[order], token=token[order],
        name_id=name_id[order], tree=tree[order], root=row_of[offsets],
        loop_rows=np.flatnonzero(is_loop[order]), edge_child=child_row, edge_parent=edge_parent)
