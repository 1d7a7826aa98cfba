"""Rewriting one operator of an exported graph (``ExportedProgram.module()``) into a call of
``torch.ops.tensorgym.kernel``: the operator node and the epilogue chain it fused (as
``extract.operator_nodes`` found it) become one node, plus the chain's layout ops replayed on
its output.

Constant inputs (conv2d / linear weights and biases, a folded eval-mode BatchNorm) are computed
once here, in the kernel's input layout (reshaped to the workload's shapes, packed where the
program packs them), and kept as buffers of the graph module; activations are passed as they
are (the op makes them contiguous), packed by graph nodes where the program packs them.
"""
from __future__ import annotations

from typing import Any, Optional

import torch

from ..errors import TensorGymError
from .extract import _LAYOUT, _aten, _arg
from .kernels import CheckedKernel
from .ops import pack


#: layout ops that always keep the elements' row-major order (a residual added after them is,
#: in memory, in the operator's own layout)
_KEEP_ORDER = {"view", "reshape", "_unsafe_view", "unflatten", "alias", "contiguous"}


def keeps_order(node: Any) -> bool:
    """Whether layout op ``node`` leaves its input's elements in row-major order: a reshape
    always; a transpose or permute where it only moves dimensions of size 1 (BERT's attention
    output, ``(128, 1, 768)`` transposed to ``(1, 128, 768)``, at batch 1)."""
    op = _aten(node)[0]
    if op in _KEEP_ORDER:
        return True
    if op not in ("transpose", "permute"):
        return False
    shape = tuple(node.args[0].meta["val"].shape)
    dims = list(range(len(shape)))
    if op == "transpose":
        a, b = (d % len(shape) for d in node.args[1:3])
        dims[a], dims[b] = dims[b], dims[a]
    else:
        dims = [d % len(shape) for d in node.args[1]]
    moved = [d for d in dims if shape[d] != 1]
    return moved == sorted(moved)


class NotReplaceable(TensorGymError):
    """An operator node whose graph this rewrite cannot take (it keeps PyTorch's op)."""


def _const(gm: Any, node: Any) -> Optional[torch.Tensor]:
    if node is None:
        return None
    if getattr(node, "op", None) != "get_attr":
        raise NotReplaceable(f"{node} is not a constant of the module (a parameter or buffer)")
    obj = gm
    for part in node.target.split("."):
        obj = getattr(obj, part)
    return obj.detach().to(torch.float32)


def _fold_bn(gm: Any, bn: Any, weight: torch.Tensor, bias: Optional[torch.Tensor]) \
        -> tuple[torch.Tensor, torch.Tensor]:
    """Conv weight and bias with the eval-mode batch_norm ``bn`` folded in."""
    gamma, beta = _const(gm, _arg(bn, 1, "weight")), _const(gm, _arg(bn, 2, "bias"))
    mean, var = _const(gm, _arg(bn, 3, "running_mean")), _const(gm, _arg(bn, 4, "running_var"))
    if mean is None or var is None:
        raise NotReplaceable("a batch_norm without running statistics")
    eps = float(_arg(bn, 7, "eps", 1e-5))
    scale = torch.rsqrt(var + eps) * (gamma if gamma is not None else 1.0)
    b = bias if bias is not None else torch.zeros_like(mean)
    shift = beta if beta is not None else 0.0
    return weight * scale.reshape(-1, *[1] * (weight.dim() - 1)), (b - mean) * scale + shift


def _operands(gm: Any, node: Any, chain: list) -> tuple[list, Optional[torch.Tensor]]:
    """The operator's own inputs (a node or a constant tensor each) and its bias (a tensor or
    None), the chain's batch_norm folded in."""
    op = _aten(node)[0]
    if op in ("matmul", "mm", "bmm"):
        return [node.args[0], node.args[1]], None
    weight, bias = _const(gm, node.args[1]), _const(gm, _arg(node, 2, "bias"))
    bns = [n for n in chain if _aten(n)[0] == "batch_norm"]
    if bns:
        weight, bias = _fold_bn(gm, bns[0], weight, bias)
    return [node.args[0], weight], bias


def _residual(node: Any, chain: list) -> Any:
    """The other operand of the chain's residual add."""
    prev = node
    for n in chain:
        if _aten(n)[0] in ("add", "add_"):
            a, b = n.args[0], n.args[1]
            return b if a is prev else a
        prev = n
    raise NotReplaceable("the epilogue has no residual add")


def replace(gm: Any, node: Any, chain: list, kernel: CheckedKernel, tag: str) -> None:
    """Replace ``node`` and its epilogue ``chain`` in ``gm.graph`` by a call of ``kernel``;
    constants become buffers of ``gm`` named ``tag``_<i>. Raises NotReplaceable (the graph
    unchanged) where it cannot."""
    ops = [_aten(n)[0] for n in chain]
    layout = [n for n in chain if _aten(n)[0] in _LAYOUT]
    adds = [i for i, o in enumerate(ops) if o in ("add", "add_")]
    if adds and any(o in _LAYOUT and not keeps_order(n)
                    for n, o in zip(chain[:adds[0]], ops[:adds[0]])):
        # a reshape keeps the elements' order, so the residual's memory is the kernel's layout
        raise NotReplaceable("a residual add after a transpose or permute")
    operands, bias = _operands(gm, node, chain)
    sources = operands + ([bias] if "bias" in kernel.workload.epilogue else []) + \
        ([_residual(node, chain)] if "add" in kernel.workload.epilogue else [])
    program, graph = kernel.program, gm.graph
    final = chain[-1] if chain else node
    with torch.no_grad():
        consts = [_kernel_input(s, t.shape, program.layout_of(i)) if isinstance(s, torch.Tensor)
                  else s for i, (s, t) in enumerate(zip(sources, kernel.workload.inputs))]
    with graph.inserting_before(final):
        out = _call(gm, kernel, consts, tag, list(node.meta["val"].shape))
        out.meta["val"] = node.meta["val"]
        for n in layout:  # elementwise ops commute with them: replay them on the output
            out = graph.call_function(n.target, (out, *n.args[1:]), dict(n.kwargs))
            out.meta["val"] = n.meta.get("val")
    final.replace_all_uses_with(out)
    for n in reversed([node, *chain]):
        graph.erase_node(n)


def _call(gm: Any, kernel: Any, sources: list, tag: str, out_shape: list) -> Any:
    """A node calling ``kernel`` on ``sources`` (graph nodes, or constant tensors already in
    the kernel's layout, which become buffers ``tag``_<i>); activations the program packs
    are packed by a node."""
    graph, program = gm.graph, kernel.program
    inputs = []
    for i, (src, t) in enumerate(zip(sources, kernel.workload.inputs)):
        if isinstance(src, torch.Tensor):
            gm.register_buffer(f"{tag}_{i}", src)
            inputs.append(graph.get_attr(f"{tag}_{i}"))
        elif program.layout_of(i) is not None:
            lay = program.layout_of(i)
            inputs.append(graph.call_function(pack, (src, list(t.shape), lay.dim, lay.block)))
        else:
            inputs.append(src)
    return graph.call_function(torch.ops.tensorgym.kernel.default,
                               (inputs, kernel.address, out_shape, kernel.numels,
                                kernel.workspaces))


def attention_scale(node: Any) -> float:
    """The softmax scale of a ``scaled_dot_product_attention`` node; NotReplaceable where the
    node masks, drops out or is causal (the two kernels compute plain attention)."""
    if _arg(node, 3, "attn_mask") is not None:
        raise NotReplaceable("attention with a mask")
    if float(_arg(node, 4, "dropout_p", 0.0) or 0.0) != 0.0:
        raise NotReplaceable("attention with dropout")
    if _arg(node, 5, "is_causal", False):
        raise NotReplaceable("causal attention")
    if node.kwargs.get("enable_gqa", False):
        raise NotReplaceable("grouped-query attention")
    scale = _arg(node, 6, "scale")
    if scale is not None:
        return float(scale)
    return 1.0 / float(node.args[0].meta["val"].shape[-1]) ** 0.5


def replace_attention(gm: Any, node: Any, chain: list, qk: Any, av: Any, tag: str) -> None:
    """Replace the ``scaled_dot_product_attention`` ``node`` by its two batch_matmul kernels
    with PyTorch's softmax between them: ``av(softmax(qk(q * scale, k^T)), v)``."""
    if any(_aten(n)[0] not in _LAYOUT for n in chain):
        raise NotReplaceable("attention with an epilogue")  # layout ops stay as they are
    scale = attention_scale(node)
    q, k, v = node.args[:3]
    graph = gm.graph
    with graph.inserting_before(node):
        qs = graph.call_function(torch.ops.aten.mul.Tensor, (q, scale))
        kt = graph.call_function(torch.ops.aten.transpose.int, (k, -2, -1))
        scores = _call(gm, qk, [qs, kt], f"{tag}_qk", list(qk.workload.output.shape))
        probs = graph.call_function(torch.ops.aten._softmax.default, (scores, -1, False))
        out = _call(gm, av, [probs, v], f"{tag}_av", list(av.workload.output.shape))
        out = graph.call_function(torch.ops.aten.view.default,
                                  (out, list(node.meta["val"].shape)))
        out.meta["val"] = node.meta["val"]
    node.replace_all_uses_with(out)
    graph.erase_node(node)


def _kernel_input(t: torch.Tensor, shape: tuple, layout: Any) -> torch.Tensor:
    if t.numel() != int(torch.Size(shape).numel()):
        raise NotReplaceable(f"a constant of {t.numel()} elements for an input of shape {shape}")
    if layout is None:
        return pack(t, list(shape), 0, 0).clone()
    return pack(t, list(shape), layout.dim, layout.block)


def drop_unused_constants(gm: Any) -> None:
    """Erase get_attr nodes nothing uses any more (the replaced operators' parameters)."""
    for n in list(gm.graph.nodes):
        if n.op == "get_attr" and not n.users:
            gm.graph.erase_node(n)
