"""Task extraction: trace a PyTorch model and find its tunable operators, their shapes and the
fused epilogues that follow them (see ``tasks`` for what a task is and how its key is spelled).

Tracing is ``torch.export`` (not ``torch.fx.symbolic_trace``): fx cannot trace
``nn.TransformerEncoderLayer`` (its fast-path checks branch on tensor attributes) nor the control
flow inside ``nn.MultiheadAttention``, while export traces what actually runs, on fake tensors of
the example input's shape (its shape propagation), at the ATen level where ``conv2d``,
``linear``, ``batch_norm`` and ``scaled_dot_product_attention`` are single nodes. Export runs
with autograd on, so ``TransformerEncoderLayer`` takes its ordinary path, not the fused
inference kernel (``torch._transformer_encoder_layer_fwd``).

The epilogue of an operator is the chain of nodes that directly follow it, each the only user
of the one before: a folded ``batch_norm`` (eval mode; only directly after a conv2d) or the
operator's own bias gives ``bias``; then ``relu``/``relu6``/``gelu`` and the residual ``add`` (an
add of the chain with another tensor of exactly its shape), each at most once, in the order they
occur. Eval-mode dropout and pure layout ops (view, reshape, transpose, permute, contiguous,
unflatten) in between are transparent. An add that could end two chains (ResNet's ``out +=
identity`` follows both conv2/bn2 and the downsample's bn) goes to the operator that comes first
in the graph. Attention (``scaled_dot_product_attention``) stands for two batch_matmul tasks,
Q @ K^T and softmax(.) @ V, with the softmax (not an epilogue op) between them.
"""
from __future__ import annotations

import math
from typing import Any, Optional, Sequence

from ..errors import TensorGymError
from .tasks import ModelTask, TaskTable, UntunableNode, merge


class TraceError(TensorGymError):
    """torch.export could not trace the model on the example input."""

_LAYOUT = {"view", "reshape", "transpose", "permute", "contiguous", "unflatten", "alias",
           "_unsafe_view"}
_ACTIVATIONS = {"relu": "relu", "relu_": "relu", "relu6": "relu6", "relu6_": "relu6",
                "gelu": "gelu", "gelu_": "gelu"}  # gelu: the exact one (approximate="none")


def _aten(node: Any) -> Optional[tuple[str, str]]:
    """(name, overload) of an ATen call node, e.g. ("conv2d", "default"); None otherwise."""
    if node.op != "call_function":
        return None
    schema = getattr(node.target, "_schema", None)
    if schema is None or not schema.name.startswith("aten::"):
        return None
    return schema.name[len("aten::"):], schema.overload_name or "default"


def _arg(node: Any, i: int, name: str, default: Any = None) -> Any:
    if len(node.args) > i:
        return node.args[i]
    return node.kwargs.get(name, default)


def _shape(x: Any) -> Optional[tuple[int, ...]]:
    val = x.meta.get("val") if hasattr(x, "meta") else None
    shape = getattr(val, "shape", None)
    return None if shape is None else tuple(int(d) for d in shape)


def _pair(v: Any, default: int) -> tuple[int, int]:
    if v is None:
        return default, default
    if isinstance(v, int):
        return v, v
    v = [int(x) for x in v]
    return (v[0], v[0]) if len(v) == 1 else (v[0], v[1])


def _name(node: Any) -> str:
    """The module path of the node (``layer1.0.conv1``; ``conv1@1`` for its second call) where
    it is the module's own call, else that path and the node's name
    (``layers.encoder_layer_0.self_attention:linear``)."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return node.name
    key, (path, kind) = list(stack.items())[-1]
    if "@" in key:  # the module's second, third ... call: b@1, b@2
        path = f"{path}@{key.rpartition('@')[2]}"
    kind_name = kind if isinstance(kind, str) else getattr(kind, "__name__", str(kind))
    own = {"conv2d": "Conv2d", "linear": "Linear"}.get((_aten(node) or ("",))[0])
    if own and kind_name.rsplit(".", 1)[-1].endswith(own):
        return path
    return f"{path}:{node.name}" if path else node.name


class Walk:
    """The state of one walk over a graph: the residual adds taken so far (``claimed``) and,
    for each operator node, the chain of nodes its epilogue consumed (``chains``: layout ops,
    dropout, the folded batch_norm, the activation and the add, in graph order)."""

    def __init__(self) -> None:
        self.claimed: set = set()
        self.chains: dict = {}


def _epilogue(out: Any, has_bias: bool, foldable: bool, walk: Walk) -> tuple[str, ...]:
    """The fused ops after ``out``; adds it takes are put into ``walk.claimed``, the nodes it
    consumed into ``walk.chains[out]``."""
    ops = ["bias"] if has_bias else []
    cur, fold_ok = out, foldable
    claimed, chain = walk.claimed, walk.chains.setdefault(out, [])
    while len(cur.users) == 1:
        (user,) = cur.users
        which = _aten(user)
        if which is None:
            break
        op = which[0]
        if op in _LAYOUT or (op in ("dropout", "dropout_") and not _arg(user, 2, "train", False)):
            fold_ok = fold_ok and op not in _LAYOUT  # a BatchNorm of a reshaped conv: not its bias
            cur = user
            chain.append(user)
            continue
        if op == "batch_norm" and fold_ok and not _arg(user, 5, "training", False) and \
                user.args[0] is cur:
            if "bias" not in ops:
                ops.append("bias")
            fold_ok = False
            cur = user
            chain.append(user)
            continue
        fold_ok = False
        act = _ACTIVATIONS.get(op)
        if op in ("hardtanh", "hardtanh_") and \
                (float(_arg(user, 1, "min_val", -1.0)), float(_arg(user, 2, "max_val", 1.0))) == \
                (0.0, 6.0):
            act = "relu6"
        if act == "gelu" and _arg(user, 1, "approximate", "none") != "none":
            act = None  # the tanh approximation is another function: it ends the chain
        if act is not None and user.args[0] is cur:
            if any(a in ops for a in ("relu", "relu6", "gelu")):
                break
            ops.append(act)
            cur = user
            chain.append(user)
            continue
        if op in ("add", "add_") and which[1] == "Tensor" and "add" not in ops and \
                user not in claimed and _arg(user, 2, "alpha", 1) == 1 and len(user.args) >= 2:
            a, b = user.args[0], user.args[1]
            other = b if a is cur else a
            if other is not cur and hasattr(other, "meta") and \
                    _shape(other) == _shape(cur) == _shape(user):
                claimed.add(user)
                ops.append("add")
                cur = user
                chain.append(user)
                continue
        break
    return tuple(ops)


def _conv2d(node: Any, walk: Walk) -> "ModelTask | str":
    x, w = _shape(node.args[0]), _shape(node.args[1])
    if x is None or w is None or len(x) != 4:
        return f"input of shape {x}: conv2d takes a batched NCHW input"
    n, ic, h, wd = x
    oc, _, kh, kw = w
    stride = _pair(_arg(node, 3, "stride"), 1)
    padding = _pair(_arg(node, 4, "padding"), 0)
    dilation = _pair(_arg(node, 5, "dilation"), 1)
    groups = int(_arg(node, 6, "groups", 1))
    if kh != kw:
        return f"non-square kernel {kh}x{kw}"
    if padding[0] != padding[1]:
        return f"asymmetric padding {padding[0]},{padding[1]}"
    if stride[0] != stride[1]:
        return f"different strides {stride[0]},{stride[1]}"
    if dilation != (1, 1):
        return f"dilation {dilation[0]},{dilation[1]} (only 1 is tunable)"
    has_bias = _arg(node, 2, "bias") is not None
    epilogue = _epilogue(node, has_bias, True, walk)
    return ModelTask("conv2d", (n, ic, h, wd, oc, kh, stride[0], padding[0]), groups, epilogue,
                     1, (_name(node),))


def _linear(node: Any, walk: Walk) -> "ModelTask | str":
    x, w = _shape(node.args[0]), _shape(node.args[1])
    if x is None or w is None or len(w) != 2:
        return f"input {x}, weight {w}"
    rows = math.prod(x[:-1]) if len(x) > 1 else 1
    has_bias = _arg(node, 2, "bias") is not None
    return ModelTask("dense", (rows, w[1], w[0]), 1, _epilogue(node, has_bias, False, walk),
                     1, (_name(node),))


def _matmul(node: Any, walk: Walk) -> "ModelTask | str":
    a, b = _shape(node.args[0]), _shape(node.args[1])
    if a is None or b is None:
        return "operands of unknown shape"
    if len(a) == len(b) == 2:
        return ModelTask("matmul", (a[0], b[1], a[1]), 1, _epilogue(node, False, False, walk),
                         1, (_name(node),))
    if len(a) == len(b) and len(a) in (3, 4) and a[:-2] == b[:-2]:
        return ModelTask("batch_matmul", (math.prod(a[:-2]), a[-2], a[-1], b[-1]), 1,
                         _epilogue(node, False, False, walk), 1, (_name(node),))
    return f"operands {a} @ {b}: not a matmul or a batch_matmul of equal batch dims"


def _attention(node: Any, walk: Walk) -> "list[ModelTask] | str":
    q, k, v = (_shape(node.args[i]) for i in range(3))
    if q is None or k is None or v is None or len(q) < 3 or not q[:-2] == k[:-2] == v[:-2]:
        return f"attention of q {q}, k {k}, v {v}: batch dims differ"
    b, name = math.prod(q[:-2]), _name(node)
    return [ModelTask("batch_matmul", (b, q[-2], q[-1], k[-2]), 1, (), 1, (f"{name}.qk",)),
            ModelTask("batch_matmul", (b, q[-2], k[-2], v[-1]), 1,
                      _epilogue(node, False, False, walk), 1, (f"{name}.av",))]


_OPERATORS = {"conv2d": ("conv2d", _conv2d), "linear": ("dense", _linear),
              "matmul": ("matmul", _matmul), "bmm": ("batch_matmul", _matmul),
              "mm": ("matmul", _matmul),
              "scaled_dot_product_attention": ("batch_matmul", _attention)}
#: Operator nodes of another spelling, reported as untunable.
_OTHERS = {"_convolution": "conv2d", "convolution": "conv2d", "conv_transpose2d": "conv2d",
           "addmm": "dense", "baddbmm": "batch_matmul", "einsum": "batch_matmul"}


def export_graph(model: Any, example_input: Any, name: str = "") -> Any:
    """``torch.export`` of ``model`` (put in eval mode) on ``example_input`` (a tensor, or a
    tuple of the forward's positional arguments): the ``ExportedProgram``."""
    import torch  # torch: optional, only task extraction needs it

    model.eval()
    args = tuple(example_input) if isinstance(example_input, (tuple, list)) else (example_input,)
    try:
        return torch.export.export(model, args)
    except Exception as e:  # noqa: BLE001  (export's many failure types: one clear error)
        first = (str(e).strip().splitlines() or [""])[0]
        raise TraceError(f"torch.export cannot trace {name or type(model).__name__}: "
                         f"{type(e).__name__}: {first}") from e


def operator_nodes(graph: Any) -> tuple[list[tuple[Any, Any]], list[UntunableNode], Walk]:
    """The operator nodes of an exported ``graph``, in graph order: (node, its task, or for
    attention its two tasks), the untunable ones, and the walk (``Walk.chains``: the nodes
    each operator's epilogue consumed)."""
    found_nodes: list[tuple[Any, Any]] = []
    untunable: list[UntunableNode] = []
    walk = Walk()
    for node in graph.nodes:
        which = _aten(node)
        if which is None:
            continue
        op, overload = which
        if op in _OPERATORS and overload == "default":
            kind, fn = _OPERATORS[op]
            found = fn(node, walk)
            if isinstance(found, str):
                untunable.append(UntunableNode(_name(node), kind, found))
            else:
                found_nodes.append((node, found))
        elif op in _OPERATORS or op in _OTHERS:
            kind = _OPERATORS[op][0] if op in _OPERATORS else _OTHERS[op]
            why = " (padding given as a string)" if (op, overload) == ("conv2d", "padding") else ""
            untunable.append(UntunableNode(_name(node), kind, f"aten.{op}.{overload}{why}"))
    return found_nodes, untunable, walk


def extract_tasks(model: Any, example_input: Any, name: str = "") -> TaskTable:
    """The task table of ``model`` (an ``nn.Module``, put in eval mode) on ``example_input``
    (a tensor, or a tuple of the forward's positional arguments)."""
    graph = export_graph(model, example_input, name).graph
    found, untunable, _ = operator_nodes(graph)
    tasks: list[ModelTask] = []
    for _, task in found:
        tasks += task if isinstance(task, list) else [task]
    return merge(name or type(model).__name__, tasks, untunable)


def task_table(tasks: Sequence[ModelTask], name: str = "") -> TaskTable:
    """A table of ``tasks`` (e.g. several models' tables' tasks together), equal keys merged."""
    return merge(name, list(tasks), [])
