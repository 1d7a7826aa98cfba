"""The paper's neural cost model (section 3.1, Figure 3c/3d): a child-sum TreeGRU over the loop
AST, batched level by level (``ast_batch``), with a linear head on the tree embedding.

- ``variant="context"`` (Figure 3d, default): a loop's input is its context vector (the same
  one the GBT's features come from), other statements embed their node type; every loop's
  hidden state ``h`` is soft-scattered into ``n_slots`` memory slots, ``out_i = softmax(W^T h)_i
  h``, and the scattered vectors of all loops are summed into the final embedding. Nothing
  depends on names, so it transfers across loop nests and operators.
- ``variant="vanilla"`` (Figure 3c): each node embeds its identifier (node type / loop kind, the
  loop variable's name when the trees carry ``loop_var``) plus the loop extent; the root's
  hidden state is the embedding.

Trained with the pairwise logistic rank loss of Equation 2 over pairs within a minibatch (and
within one ``groups`` id), or squared error. Warm-started by default: each ``fit`` continues
from the previous weights on all data, as the tuner refits after every batch of measurements.
"""
from __future__ import annotations

import contextlib
import math
from typing import Iterator, Mapping, Sequence

import numpy as np
import torch
from torch import nn

from .ast_batch import (EXTENT_COLUMN, N_NODE_FEATURES, N_TOKENS, N_TYPES, AstBatch,
                        check_trees, collate)

VARIANTS = ("context", "vanilla")
LOSSES = ("rank", "reg")


class ChildSumTreeGRU(nn.Module):
    """h = z * sum(h_children) + (1 - z) * tanh(W_h x + U_h sum(r_k * h_k)), with one reset
    gate r_k per child and z, r_k sigmoids of the node input and (summed / own) child states."""

    def __init__(self, n_in: int, hidden: int) -> None:
        super().__init__()
        self.hidden = hidden
        self.w = nn.Linear(n_in, 3 * hidden)
        self.u_z = nn.Linear(hidden, hidden, bias=False)
        self.u_r = nn.Linear(hidden, hidden, bias=False)
        self.u_h = nn.Linear(hidden, hidden, bias=False)

    def forward(self, x: torch.Tensor, b: AstBatch) -> torch.Tensor:
        """Hidden states of all nodes, rows in ``b``'s level order."""
        sizes = [hi - lo for lo, hi in zip(b.level_ptr, b.level_ptr[1:])]
        # one split per level up front: slicing per level would make backward build a
        # full-size gradient for every slice
        per_level = self.w(x).split(sizes, dim=0)
        levels: list[torch.Tensor] = []
        # without autograd, levels are written into one buffer instead of re-concatenated
        out = None if torch.is_grad_enabled() else x.new_empty(b.n_nodes, self.hidden)
        for k, wx in enumerate(per_level):
            lo, hi = b.level_ptr[k], b.level_ptr[k + 1]
            wz, wr, wh = wx.split(self.hidden, dim=1)
            if k == 0:  # leaves
                z = torch.sigmoid(wz)
                h = (1 - z) * torch.tanh(wh)
            else:
                if out is not None:
                    below = out[:lo]
                else:
                    below = levels[0] if len(levels) == 1 else torch.cat(levels)
                e0, e1 = b.edge_ptr[k], b.edge_ptr[k + 1]
                par = b.edge_parent[e0:e1]
                h_child = below.index_select(0, b.edge_child[e0:e1])
                zeros = h_child.new_zeros(hi - lo, self.hidden)
                h_sum = zeros.index_add(0, par, h_child)
                r = torch.sigmoid(wr.index_select(0, par) + self.u_r(h_child))
                h_reset = zeros.index_add(0, par, r * h_child)
                z = torch.sigmoid(wz + self.u_z(h_sum))
                h = z * h_sum + (1 - z) * torch.tanh(wh + self.u_h(h_reset))
            if out is not None:
                out[lo:hi] = h
            else:
                levels.append(h)
        return out if out is not None else torch.cat(levels)


class TreeGRUNet(nn.Module):
    """Node inputs (per ``variant``) -> ChildSumTreeGRU -> tree embedding -> linear score."""

    def __init__(self, variant: str = "context", hidden: int = 64, n_slots: int = 8,
                 max_names: int = 256) -> None:
        super().__init__()
        if variant not in VARIANTS:
            raise ValueError(f"unknown TreeGRU variant {variant!r}; use one of {VARIANTS}")
        self.variant = variant
        self.hidden = hidden
        self.n_slots = n_slots
        n_ctx = N_NODE_FEATURES - N_TYPES
        # input scaling, set from the first training data (``set_scaling``); kept in state_dict
        self.register_buffer("mean", torch.zeros(n_ctx))
        self.register_buffer("scale", torch.ones(n_ctx))
        if variant == "context":
            self.type_embed = nn.Embedding(N_TYPES, hidden)
            self.context_encoder = nn.Sequential(nn.Linear(n_ctx, hidden), nn.ReLU(),
                                                 nn.Linear(hidden, hidden))
            self.slot_logits = nn.Linear(hidden, n_slots, bias=False)
            out = hidden * n_slots
        else:
            self.token_embed = nn.Embedding(N_TOKENS, hidden)
            self.name_embed = nn.Embedding(max_names + 1, hidden, padding_idx=0)
            self.extent_proj = nn.Linear(1, hidden, bias=False)
            out = hidden
        self.tree_gru = ChildSumTreeGRU(hidden, hidden)
        self.head = nn.Linear(out, 1)

    def set_scaling(self, features: np.ndarray) -> None:
        """Standardize context columns with the statistics of ``features`` (loop rows)."""
        ctx = torch.from_numpy(features[:, N_TYPES:])
        self.mean.copy_(ctx.mean(0))
        self.scale.copy_(1.0 / ctx.std(0).clamp_min(1e-3))

    def node_inputs(self, b: AstBatch) -> torch.Tensor:
        if self.variant == "context":
            ctx = (b.features[:, N_TYPES:] - self.mean) * self.scale
            x = self.type_embed(b.node_type)
            loops = b.loop_rows
            return x.index_add(0, loops, self.context_encoder(ctx.index_select(0, loops)))
        col = EXTENT_COLUMN - N_TYPES
        loops = b.loop_rows
        ext = b.features[loops, EXTENT_COLUMN:EXTENT_COLUMN + 1]
        ext = (ext - self.mean[col]) * self.scale[col]
        x = self.token_embed(b.token) + self.name_embed(b.name_id)
        return x.index_add(0, loops, self.extent_proj(ext))

    def embed(self, b: AstBatch) -> torch.Tensor:
        h = self.tree_gru(self.node_inputs(b), b)
        if self.variant == "vanilla":
            return h.index_select(0, b.root)
        h_loop = h.index_select(0, b.loop_rows)
        weights = torch.softmax(self.slot_logits(h_loop), dim=1)  # (loops, slots)
        scattered = (weights.unsqueeze(2) * h_loop.unsqueeze(1)).flatten(1)
        out = h.new_zeros(b.n_trees, self.n_slots * self.hidden)
        return out.index_add(0, b.tree[b.loop_rows], scattered)

    def forward(self, b: AstBatch) -> torch.Tensor:
        return self.head(self.embed(b)).squeeze(1)


def pairwise_rank_loss(scores: torch.Tensor, y: torch.Tensor,
                       groups: torch.Tensor | None = None) -> torch.Tensor:
    """Equation 2: mean over pairs with y_i > y_j (same group) of log(1 + exp(-(s_i - s_j)))."""
    better = y.unsqueeze(1) > y.unsqueeze(0)
    if groups is not None:
        better &= groups.unsqueeze(1) == groups.unsqueeze(0)
    if not better.any():
        return scores.sum() * 0.0
    diff = scores.unsqueeze(1) - scores.unsqueeze(0)
    return nn.functional.softplus(-diff[better]).mean()


def _default_device() -> str:
    return "cuda" if torch.cuda.is_available() else "cpu"


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Run with ``n`` intra-op threads, restoring torch's setting after. The TreeGRU's ops are
    small (one tree level at a time), where thread hand-offs cost more than they save: on a
    busy 2-core machine one thread was 60x faster per op than two."""
    before = torch.get_num_threads()
    if n is not None and n != before:
        torch.set_num_threads(n)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


class TreeGRUCostModel:
    """Cost model over ``featurize(..., "ast")`` trees: ``fit(X, y)``, ``predict(X)`` (higher =
    faster), ``feature_mode = "ast"``. ``n_epochs`` passes over the data per ``fit`` (at least
    ``min_steps`` minibatch updates); ``warm_start=False`` retrains from scratch each time.
    ``num_threads``: torch threads during fit/predict on the CPU (restored after; None keeps
    torch's setting). ``device``: "cuda" when torch sees a GPU, else "cpu", unless given."""

    feature_mode = "ast"

    @property
    def reads_loop_names(self) -> bool:
        """The vanilla model embeds loop variable names: the tuner asks the env for them."""
        return self.variant == "vanilla"

    def __init__(self, variant: str = "context", loss: str = "rank", hidden: int = 64,
                 n_slots: int = 8, n_epochs: int = 20, min_steps: int = 60,
                 batch_size: int = 128, lr: float = 3e-3, weight_decay: float = 1e-5,
                 warm_start: bool = True, max_names: int = 256, predict_batch: int = 4096,
                 num_threads: int | None = 1, seed: int = 0,
                 device: str | None = None) -> None:
        if variant not in VARIANTS:
            raise ValueError(f"unknown TreeGRU variant {variant!r}; use one of {VARIANTS}")
        if loss not in LOSSES:
            raise ValueError(f"unknown loss {loss!r}; use one of {LOSSES}")
        if min(hidden, n_slots, batch_size, predict_batch) < 1 or n_epochs < 0 or min_steps < 0:
            raise ValueError("hidden, n_slots, batch_size, predict_batch must be >= 1 and "
                             "n_epochs, min_steps >= 0")
        self.variant = variant
        self.loss = loss
        self.hidden = hidden
        self.n_slots = n_slots
        self.n_epochs = n_epochs
        self.min_steps = min_steps
        self.batch_size = batch_size
        self.lr = lr
        self.weight_decay = weight_decay
        self.warm_start = warm_start
        self.max_names = max_names
        self.predict_batch = predict_batch
        self.num_threads = num_threads
        self.seed = seed
        self.device = torch.device(device or _default_device())
        self.net: TreeGRUNet | None = None
        self.names: dict[str, int] = {}
        self.rng = np.random.default_rng(seed)

    @property
    def fitted(self) -> bool:
        return self.net is not None

    def _new_net(self) -> TreeGRUNet:
        with torch.random.fork_rng(devices=[]):  # seeded init without touching the global RNG
            torch.manual_seed(self.seed)
            net = TreeGRUNet(self.variant, self.hidden, self.n_slots, self.max_names)
        return net.to(self.device)

    def _learn_names(self, trees: Sequence[Mapping]) -> None:
        if self.variant != "vanilla":
            return
        for t in trees:
            for name in t.get("loop_var", ()):
                name = str(name)
                if name and name not in self.names and len(self.names) < self.max_names:
                    self.names[name] = len(self.names) + 1

    def _batch(self, trees: Sequence[Mapping]) -> AstBatch:
        return collate(trees, self.names or None).to_torch(self.device)

    def fit(self, X: Sequence[Mapping], y: np.ndarray, groups: Sequence[int] | None = None,
            base_margin: np.ndarray | None = None) -> None:
        """Train on trees ``X`` and targets ``y`` (higher = faster). ``groups``: pairs are only
        formed within one group (one workload). ``base_margin``: scores of another model that
        this one learns a correction on top of (the transfer model's local part)."""
        with self._threads():
            self._fit(X, y, groups, base_margin)

    def _threads(self) -> "contextlib.AbstractContextManager[None]":
        return torch_threads(self.num_threads if self.device.type == "cpu" else None)

    def _fit(self, X: Sequence[Mapping], y: np.ndarray, groups: Sequence[int] | None,
             base_margin: np.ndarray | None) -> None:
        check_trees(X)
        y = np.asarray(y, np.float64)
        if len(X) == 0:
            raise ValueError("cannot fit a cost model on zero trees")
        if y.shape != (len(X),) or not np.all(np.isfinite(y)):
            raise ValueError(f"need {len(X)} finite targets, got shape {y.shape}")
        g = np.zeros(len(X), np.int64) if groups is None else np.asarray(groups, np.int64)
        margin = np.zeros(len(X)) if base_margin is None else np.asarray(base_margin, np.float64)
        if g.shape != y.shape or margin.shape != y.shape:
            raise ValueError("groups and base_margin need one value per tree")
        if self.net is None or not self.warm_start:
            self.net = self._new_net()
            self.names = {}
            self._learn_names(X)
            feats = np.concatenate([t["node_features"][t["loop_index"] >= 0] for t in X])
            if len(feats) > 1:
                self.net.set_scaling(feats.astype(np.float32))
            self._optimizer = torch.optim.AdamW(self.net.parameters(), lr=self.lr,
                                                weight_decay=self.weight_decay)
        else:
            self._learn_names(X)
        n = len(X)
        steps = max(self.min_steps, self.n_epochs * math.ceil(n / self.batch_size))
        dev = self.device
        y_t = torch.as_tensor(y, dtype=torch.float32, device=dev)
        g_t = torch.as_tensor(g, device=dev)
        m_t = torch.as_tensor(margin, dtype=torch.float32, device=dev)
        self.net.train()
        order = np.empty(0, np.int64)
        for _ in range(steps):
            if len(order) < min(self.batch_size, n):
                order = np.concatenate([order, self.rng.permutation(n)])
            idx, order = order[:self.batch_size], order[self.batch_size:]
            idx = np.unique(idx)  # an epoch boundary can repeat a tree within one minibatch
            scores = self.net(self._batch([X[i] for i in idx]))
            i_t = torch.as_tensor(idx, device=dev)
            scores = scores + m_t[i_t]
            if self.loss == "rank":
                loss = pairwise_rank_loss(scores, y_t[i_t], g_t[i_t])
            else:
                loss = nn.functional.mse_loss(scores, y_t[i_t])
            self._optimizer.zero_grad(set_to_none=True)
            loss.backward()
            self._optimizer.step()
        self.net.eval()

    def predict(self, X: Sequence[Mapping], base_margin: np.ndarray | None = None) -> np.ndarray:
        """Scores of trees ``X`` (float64, higher = faster), ``predict_batch`` trees per pass;
        ``base_margin`` is added (see ``fit``)."""
        if self.net is None:
            raise RuntimeError("predict() before fit()")
        check_trees(X)
        out = np.empty(len(X), np.float64)
        self.net.eval()
        with self._threads(), torch.no_grad():
            for lo in range(0, len(X), self.predict_batch):
                chunk = X[lo:lo + self.predict_batch]
                out[lo:lo + len(chunk)] = self.net(self._batch(chunk)).double().cpu().numpy()
        if base_margin is not None:
            out += np.asarray(base_margin, np.float64)
        return out

    # ------------------------------------------------------------ persistence

    def state_dict(self) -> dict:
        """Everything needed to rebuild the fitted model (``torch.save``-able)."""
        if self.net is None:
            raise RuntimeError("state_dict() before fit()")
        return {"variant": self.variant, "hidden": self.hidden, "n_slots": self.n_slots,
                "max_names": self.max_names, "names": dict(self.names),
                "net": {k: v.detach().cpu() for k, v in self.net.state_dict().items()}}

    def load_state_dict(self, state: Mapping) -> None:
        for key in ("variant", "hidden", "n_slots", "max_names"):
            setattr(self, key, state[key])
        self.names = dict(state["names"])
        self.net = self._new_net()
        self.net.load_state_dict(state["net"])
        self.net.eval()
        self._optimizer = torch.optim.AdamW(self.net.parameters(), lr=self.lr,
                                            weight_decay=self.weight_decay)
