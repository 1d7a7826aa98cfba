"""``Forest``: an XGBoost tree ensemble evaluated by a small loop compiled with LLVM, for the
world model's heads. ``Booster.inplace_predict`` costs ~0.2-0.9 ms a call whatever the batch (its
per-call set-up: JSON configuration, array interfaces, a thread pool), so a single replay env
answering one miss per step with two heads ran at ~600 steps/s; this evaluator costs ~10 us a
call, and per row of a batch a little less than XGBoost on one thread.

The trees are flattened into one array of 16-byte nodes; the compiled function takes blocks of
64 rows through each tree level by level (no branch on the data: a leaf is its own child, so
every row takes the tree's depth in steps, and the rows of a block step side by side), then adds
each row's leaf in float32, in tree order after the base margin, as XGBoost's CPU predictor
does: the margins equal XGBoost's bit for bit (tests check it). One function serves every
forest; it is compiled once per process.
"""
from __future__ import annotations

import ctypes
import json
from functools import lru_cache
from typing import Any

import numpy as np

from ...errors import TensorGymError

# objective -> the transform of the margin into a prediction
_LINK = {"reg:squarederror": "identity", "binary:logistic": "sigmoid",
         "rank:pairwise": "identity", "rank:ndcg": "identity"}

BLOCK = 64  # rows walked tree by tree: a tree's nodes stay in the L1 cache across them

_IR = """
define void @tg_forest(ptr noalias %X, i64 %n, i64 %stride, ptr noalias %nodes,
                       ptr noalias %roots, ptr noalias %depths, i64 %ntrees, ptr noalias %out) {
entry:
  %idx = alloca [BLOCK x i32], align 64
  %any = icmp sgt i64 %n, 0
  br i1 %any, label %block, label %done
block:
  %b = phi i64 [0, %entry], [%bend, %blockend]
  %b64 = add i64 %b, BLOCK
  %short = icmp slt i64 %n, %b64
  %bend = select i1 %short, i64 %n, i64 %b64
  %rows = sub i64 %bend, %b
  br label %tree
tree:
  %t = phi i64 [0, %block], [%t1, %treeend]
  %rootp = getelementptr i32, ptr %roots, i64 %t
  %root = load i32, ptr %rootp
  %depthp = getelementptr i32, ptr %depths, i64 %t
  %depth = load i32, ptr %depthp
  br label %init
init:
  %j0 = phi i64 [0, %tree], [%j01, %init]
  %ip0 = getelementptr i32, ptr %idx, i64 %j0
  store i32 %root, ptr %ip0
  %j01 = add i64 %j0, 1
  %initdone = icmp eq i64 %j01, %rows
  br i1 %initdone, label %levels, label %init
levels:
  %d = phi i32 [0, %init], [%d1, %levelend]
  %deeper = icmp slt i32 %d, %depth
  br i1 %deeper, label %step, label %sum
step:
  %j = phi i64 [0, %levels], [%j1, %step]
  %ip = getelementptr i32, ptr %idx, i64 %j
  %k = load i32, ptr %ip
  %k64 = sext i32 %k to i64
  %np = getelementptr {i32, float, i32, i32}, ptr %nodes, i64 %k64
  %f = load i32, ptr %np
  %tp = getelementptr {i32, float, i32, i32}, ptr %nodes, i64 %k64, i32 1
  %th = load float, ptr %tp
  %lp = getelementptr {i32, float, i32, i32}, ptr %nodes, i64 %k64, i32 2
  %l = load i32, ptr %lp
  %rp = getelementptr {i32, float, i32, i32}, ptr %nodes, i64 %k64, i32 3
  %rr = load i32, ptr %rp
  %fi = and i32 %f, 1073741823
  %f64 = zext i32 %fi to i64
  %r = add i64 %b, %j
  %off = mul i64 %r, %stride
  %vi = add i64 %off, %f64
  %vp = getelementptr float, ptr %X, i64 %vi
  %v = load float, ptr %vp
  %lt = fcmp olt float %v, %th
  %c = select i1 %lt, i32 %l, i32 %rr
  %nan = fcmp uno float %v, %v
  %dlbit = and i32 %f, 1073741824
  %dl = icmp ne i32 %dlbit, 0
  %m = select i1 %dl, i32 %l, i32 %rr
  %next = select i1 %nan, i32 %m, i32 %c
  store i32 %next, ptr %ip
  %j1 = add i64 %j, 1
  %stepdone = icmp eq i64 %j1, %rows
  br i1 %stepdone, label %levelend, label %step
levelend:
  %d1 = add i32 %d, 1
  br label %levels
sum:
  %js = phi i64 [0, %levels], [%js1, %sum]
  %ips = getelementptr i32, ptr %idx, i64 %js
  %ks = load i32, ptr %ips
  %ks64 = sext i32 %ks to i64
  %lvp = getelementptr {i32, float, i32, i32}, ptr %nodes, i64 %ks64, i32 1
  %lv = load float, ptr %lvp
  %rs = add i64 %b, %js
  %op = getelementptr float, ptr %out, i64 %rs
  %acc = load float, ptr %op
  %acc1 = fadd float %acc, %lv
  store float %acc1, ptr %op
  %js1 = add i64 %js, 1
  %sumdone = icmp eq i64 %js1, %rows
  br i1 %sumdone, label %treeend, label %sum
treeend:
  %t1 = add i64 %t, 1
  %last = icmp eq i64 %t1, %ntrees
  br i1 %last, label %blockend, label %tree
blockend:
  %end = icmp eq i64 %bend, %n
  br i1 %end, label %done, label %block
done:
  ret void
}
""".replace("BLOCK", str(BLOCK))

# a node: its feature (bit 30: a missing value goes left), threshold or leaf value, and its
# children, in one 16-byte record; a leaf is its own child, so every row takes the tree's depth in
# steps with no branch on the data, and the rows of a block step side by side
_NODE = np.dtype([("feat", "<i4"), ("thr", "<f4"), ("left", "<i4"), ("right", "<i4")])
_DEFAULT_LEFT = 1 << 30

_P = ctypes.c_void_p
_I64 = ctypes.c_int64


@lru_cache(maxsize=None)
def _logf() -> Any:
    import ctypes.util

    name = ctypes.util.find_library("m")
    if name is None:
        return None
    fn = ctypes.CDLL(name).logf
    fn.restype, fn.argtypes = ctypes.c_float, [ctypes.c_float]
    return fn


def _prob_to_margin(p: np.float32) -> np.float32:
    """XGBoost's base margin of a logistic model, ``-logf(1 / p - 1)`` in float32 with the C
    library's ``logf`` as XGBoost calls it (NumPy's float32 log can round the other way)."""
    odds = np.float32(1) / p - np.float32(1)
    logf = _logf()
    return np.float32(-(logf(odds) if logf is not None else np.log(odds)))


@lru_cache(maxsize=None)
def _kernel() -> Any:
    from ...hardware.cpu import jit

    fn = ctypes.CFUNCTYPE(None, _P, _I64, _I64, _P, _P, _P, _I64, _P)
    return fn(jit(_IR, "tg_forest"))


def _depth(left: np.ndarray, right: np.ndarray) -> int:
    """The number of splits on the longest path from the root (node 0)."""
    depth, level = 0, [0]
    while True:
        level = [c for k in level if left[k] >= 0 for c in (left[k], right[k])]
        if not level:
            return depth
        depth += 1


class Forest:
    """The trees of a single-output XGBoost ``Booster`` (gbtree, numerical splits), evaluated
    with ``predict(X)`` (float32 rows) -> float64 predictions, as ``Booster.inplace_predict``."""

    def __init__(self, booster: Any) -> None:
        model = json.loads(bytes(booster.save_raw("json")))
        learner = model["learner"]
        gb = learner["gradient_booster"]
        if gb.get("name") != "gbtree":
            raise TensorGymError(f"Forest evaluates gbtree boosters, not {gb.get('name')!r}")
        objective = learner["objective"]["name"]
        if objective not in _LINK:
            raise TensorGymError(f"Forest has no link for objective {objective!r}")
        params = learner["learner_model_param"]
        if int(params.get("num_target", "1")) > 1 or int(params.get("num_class", "0")) > 1:
            raise TensorGymError("Forest evaluates single-output boosters only")
        self.link = _LINK[objective]
        base = np.float32(params["base_score"].strip("[]"))
        if self.link == "sigmoid":
            base = _prob_to_margin(base)
        self.base = np.float32(base)
        self.n_features = int(params["num_feature"])
        trees = gb["model"]["trees"]
        parts, roots, depths, offset = [], [], [], 0
        for tree in trees:
            if any(int(x) != 0 for x in tree.get("split_type", [])):
                raise TensorGymError("Forest evaluates numerical splits only")
            left = np.asarray(tree["left_children"], np.int64)
            leaf = left < 0
            node = np.zeros(len(left), _NODE)
            feat = np.asarray(tree["split_indices"], np.int64)
            if feat.size and feat.max() >= _DEFAULT_LEFT:
                raise TensorGymError("Forest evaluates boosters of under 2**30 features")
            here = np.arange(len(left)) + offset
            node["feat"] = np.where(leaf, 0, feat | np.where(
                np.asarray(tree["default_left"], bool), _DEFAULT_LEFT, 0))
            node["thr"] = np.asarray(tree["split_conditions"], np.float64)
            node["left"] = np.where(leaf, here, left + offset)  # a leaf is its own child
            node["right"] = np.where(leaf, here, np.asarray(tree["right_children"]) + offset)
            parts.append(node)
            roots.append(offset)
            depths.append(_depth(left, np.asarray(tree["right_children"], np.int64)))
            offset += len(left)
        self.nodes = np.ascontiguousarray(np.concatenate(parts) if parts else np.zeros(1, _NODE))
        self.roots = np.asarray(roots, np.int32)
        self.depths = np.asarray(depths, np.int32)
        self.n_trees = len(trees)
        self._ptrs = (self.nodes.ctypes.data, self.roots.ctypes.data, self.depths.ctypes.data)

    def margin(self, X: np.ndarray) -> np.ndarray:
        """(n,) float32 margins (base + the leaves' sum) of rows ``X`` (n, n_features)."""
        X = np.ascontiguousarray(X, np.float32)
        if X.ndim != 2 or X.shape[1] != self.n_features:
            raise TensorGymError(f"Forest of {self.n_features} features given rows of shape "
                                 f"{X.shape}")
        out = np.full(len(X), self.base, np.float32)
        if self.n_trees and len(X):
            _kernel()(X.ctypes.data, len(X), X.shape[1], *self._ptrs, self.n_trees,
                      out.ctypes.data)
        return out

    def predict(self, X: np.ndarray) -> np.ndarray:
        """(n,) float64 predictions: the margins through the objective's link."""
        m = self.margin(X).astype(np.float64)
        return 1.0 / (1.0 + np.exp(-m)) if self.link == "sigmoid" else m


__all__ = ["Forest"]
