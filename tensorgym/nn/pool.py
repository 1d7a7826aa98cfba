"""A faster max pooling for ``nn.compile``: PyTorch's own ops, arranged as a separable max.

PyTorch's CPU ``max_pool2d`` on an NCHW tensor is a scalar loop: ResNet's stem pool (3x3,
stride 2, 64x112x112) takes 5-6 ms on two threads of the machines we measure, a sixth of the
whole network once the convolutions are tuned. A window's max is the max over its columns of
the max over its rows, so the pool becomes ``k`` vectorized maxima over strided rows and ``k``
over columns (after one transposing copy that makes the columns' stride-``s`` phases
contiguous): the same values, bit for bit (a max is exact; NaN propagates as in PyTorch's
pool), about 4-5x faster there. Small pools are left as they are: their time is the ops'
dispatch, where one call wins.
"""
from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from .extract import _arg

#: pools with fewer output elements keep PyTorch's op (a few dozen ops' dispatch costs more)
MIN_OUTPUT = 32768


def max_pool2d(x: torch.Tensor, kernel: list[int], stride: list[int],
               padding: list[int]) -> torch.Tensor:
    """``F.max_pool2d(x, kernel, stride, padding)`` of a 4-D tensor (no dilation, floor
    mode), computed as a separable max."""
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding
    n, c, h, w = x.shape
    oh, ow = (h + 2 * ph - kh) // sh + 1, (w + 2 * pw - kw) // sw + 1
    # padded extents: whole blocks of the stride that hold every window
    hp, wp = sh * (oh - 1 + (kh - 1) // sh + 1), sw * (ow - 1 + (kw - 1) // sw + 1)
    xp = F.pad(x, (pw, max(wp - w - pw, 0), ph, max(hp - h - ph, 0)), value=-math.inf)
    rows = xp[:, :, :hp, :wp].reshape(n, c, hp // sh, sh, wp)
    r = rows[:, :, 0:oh, 0, :].clone()
    for d in range(1, kh):
        torch.maximum(r, rows[:, :, d // sh: d // sh + oh, d % sh, :], out=r)
    cols = r.reshape(n, c, oh, wp // sw, sw).transpose(3, 4).contiguous()
    out = cols[:, :, :, 0, 0:ow].clone()
    for d in range(1, kw):
        torch.maximum(out, cols[:, :, :, d % sw, d // sw: d // sw + ow], out=out)
    return out


def _pair(v: Any) -> list[int]:
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return [int(v[0]), int(v[-1])]


def fast_pools(gm: Any) -> list[str]:
    """Replace the graph's ``aten.max_pool2d`` nodes (4-D float32, no dilation, floor mode,
    at least ``MIN_OUTPUT`` outputs) by ``max_pool2d`` above; returns the replaced nodes'
    names."""
    done = []
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target is not torch.ops.aten.max_pool2d.default:
            continue
        x, val = node.args[0], node.meta.get("val")
        xval = x.meta.get("val") if hasattr(x, "meta") else None
        if val is None or xval is None or xval.dim() != 4 or xval.dtype != torch.float32:
            continue
        kernel = _pair(_arg(node, 1, "kernel_size"))
        stride = _pair(_arg(node, 2, "stride", None) or kernel)
        padding = _pair(_arg(node, 3, "padding", 0))
        if _pair(_arg(node, 4, "dilation", 1)) != [1, 1] or _arg(node, 5, "ceil_mode", False) \
                or val.numel() < MIN_OUTPUT:
            continue
        with gm.graph.inserting_before(node):
            new = gm.graph.call_function(max_pool2d, (x, kernel, stride, padding))
        new.meta["val"] = val
        node.replace_all_uses_with(new)
        gm.graph.erase_node(node)
        done.append(node.name)
    return done


def with_pytorch_pools(gm: Any) -> Any:
    """A module sharing ``gm``'s parameters and kernels whose graph runs PyTorch's
    ``max_pool2d`` where ``fast_pools`` put the separable max (what the pass buys, timed side
    by side by ``tensorgym bench-model``)."""
    import copy
    import warnings

    with warnings.catch_warnings():  # torch's pytree warns of its own LeafSpec as it copies
        warnings.simplefilter("ignore", FutureWarning)
        graph = copy.deepcopy(gm.graph)
    for node in graph.nodes:
        if node.op == "call_function" and node.target is max_pool2d:
            node.target = torch.ops.aten.max_pool2d.default
    out = torch.fx.GraphModule(gm, graph)
    out.recompile()
    return out


__all__ = ["MIN_OUTPUT", "fast_pools", "max_pool2d", "with_pytorch_pools"]
