"""Workloads: conv2d (NCHW, with ``groups``: grouped and depthwise), matmul, dense (``x @ W^T``)
and batch_matmul, each with an optional fused epilogue; the ResNet-18 layers of the paper's
Table 1; a NumPy reference and FLOP count for each.

A workload is a small frozen dataclass; ``workload.key`` identifies it in records, datasets and
on the command line: the op, its sizes in ``PARAMS[op]`` order, then ``+`` and each epilogue op::

    conv2d:N,IC,H,W,OC,K,STRIDE,PAD[,GROUPS]   conv2d:1,64,56,56,64,3,1,1+bias+relu
    matmul:M,N,K                                matmul:1024,1024,1024
    dense:ROWS,IN,OUT                           dense:128,768,3072+bias+gelu
    batch_matmul:B,M,K,N                        batch_matmul:12,128,64,128

conv2d's GROUPS is written only when it is not 1. ``get_workload`` takes a registered name
(``conv2d-C6``, optionally followed by an epilogue: ``conv2d-C6+bias+relu``) or such a key.

The epilogue (``EPILOGUE_OPS``) is part of the kernel: ``bias`` adds a vector over the output
channels (conv2d's OC, the last axis of the others), ``add`` a residual of the output's shape,
``relu`` / ``relu6`` / ``gelu`` (erf form, as PyTorch's default) apply to the value so far; ops
apply in the order written, bias first, at most one activation and one add. The extra inputs
(``bias``, ``residual``) follow the operator's own inputs. Grouped conv2d with more than one
output channel per group has a 5-D weight ``(G, OC/G, IC/G, K, K)`` and output ``(N, G, OC/G,
OH, OW)``: PyTorch's ``(OC, IC/G, K, K)`` weight and ``(N, OC, OH, OW)`` output reshaped, the
same memory. Sizes are exact integers, exactly as many as the op takes, and
a workload whose tensors exceed ``MAX_TENSOR_BYTES`` (2 GiB, overridable) is refused when it is
made, before anything is allocated.
"""
from __future__ import annotations

import math
import os
import re
from dataclasses import InitVar, dataclass
from functools import cached_property
from typing import Optional

import numpy as np

from . import te
from .errors import InvalidWorkloadError, UnknownWorkloadError, WorkloadTooLargeError
from .space import is_int

MAX_TENSOR_BYTES = 2 * 2**30
"""Default limit on a workload's tensors: all inputs and the output, in float32 bytes. A workload
is checked once, when it is made (``conv2d``, ``matmul``, ``get_workload``, ``Workload(...)``);
the limit is ``max_bytes=`` if given, else ``$TENSORGYM_MAX_TENSOR_BYTES`` if set, else this
constant. Unpickling (e.g. in the measurement worker) does not check again."""
MAX_BYTES_ENV = "TENSORGYM_MAX_TENSOR_BYTES"

# The sizes each op takes, in key order.
PARAMS = {"conv2d": ("N", "IC", "H", "W", "OC", "K", "STRIDE", "PAD"), "matmul": ("M", "N", "K"),
          "dense": ("ROWS", "IN", "OUT"), "batch_matmul": ("B", "M", "K", "N")}
# Trailing sizes an op may add, each 1 when left out (and then left out of the key).
OPTIONAL_PARAMS = {"conv2d": ("GROUPS",)}

EPILOGUE_OPS = ("bias", "relu", "relu6", "gelu", "add")
ACTIVATIONS = ("relu", "relu6", "gelu")


def size_limit(max_bytes: Optional[int] = None) -> int:
    """The tensor size limit in bytes that applies to a workload made now."""
    if max_bytes is not None:
        if not is_int(max_bytes):
            raise InvalidWorkloadError(f"max_bytes must be an integer, got {max_bytes!r}")
        return int(max_bytes)
    text = os.environ.get(MAX_BYTES_ENV)
    if text is None:
        return MAX_TENSOR_BYTES
    if not re.fullmatch(r"[0-9]+", text.strip()):
        raise InvalidWorkloadError(f"${MAX_BYTES_ENV}={text!r} is not a byte count")
    return int(text)


def check_epilogue(epilogue: "str | tuple[str, ...] | list[str]") -> tuple[str, ...]:
    """The epilogue as a tuple of ops (a ``+``-joined string is split), or InvalidWorkloadError:
    ops from ``EPILOGUE_OPS``, bias first, at most one activation and one add."""
    if isinstance(epilogue, str):
        epilogue = tuple(e for e in epilogue.split("+") if e) if epilogue else ()
    if not isinstance(epilogue, (tuple, list)) or not all(isinstance(e, str) for e in epilogue):
        raise InvalidWorkloadError(f"an epilogue is a tuple of op names, got {epilogue!r:.80}")
    ops = tuple(epilogue)
    bad = [e for e in ops if e not in EPILOGUE_OPS]
    if bad:
        raise InvalidWorkloadError(f"unknown epilogue op(s) {', '.join(map(repr, bad))}; use "
                                   f"{', '.join(EPILOGUE_OPS)}")
    if "bias" in ops[1:] or ops.count("add") > 1 or sum(e in ACTIVATIONS for e in ops) > 1:
        raise InvalidWorkloadError(f"epilogue {'+'.join(ops)}: bias comes first, and there is at "
                                   "most one activation and one add")
    return ops


@dataclass(frozen=True)
class Workload:
    """``op`` (a key of ``PARAMS``) and its sizes (``PARAMS[op]``, then any of
    ``OPTIONAL_PARAMS[op]``, exact integers), and the fused ``epilogue`` (ops of
    ``EPILOGUE_OPS``). ``max_bytes`` overrides the size limit for this one workload (see
    ``MAX_TENSOR_BYTES``)."""

    op: str
    params: tuple[int, ...]
    name: str = ""
    max_bytes: InitVar[Optional[int]] = None
    epilogue: tuple[str, ...] = ()

    def __post_init__(self, max_bytes: Optional[int]) -> None:
        if self.op not in PARAMS:
            raise InvalidWorkloadError(f"unknown op {self.op!r}; use one of {', '.join(PARAMS)}")
        names = PARAMS[self.op]
        extra = OPTIONAL_PARAMS.get(self.op, ())
        params = self.params
        if not isinstance(params, (tuple, list)) or \
                not len(names) <= len(params) <= len(names) + len(extra):
            optional = f", then optionally {','.join(extra)}" if extra else ""
            raise InvalidWorkloadError(f"{self.op} takes {len(names)} sizes "
                                       f"({','.join(names)}{optional}), got {params!r}")
        bad = [f"{n}={v!r}" for n, v in zip(names + extra, params) if not is_int(v)]
        if bad:
            raise InvalidWorkloadError(f"{self.op} sizes must be integers, got {', '.join(bad)}")
        params = [int(v) for v in params]
        while len(params) > len(names) and params[-1] == 1:  # a default size is not spelled
            params.pop()
        object.__setattr__(self, "params", tuple(params))
        if not isinstance(self.name, str):
            raise InvalidWorkloadError(f"a workload name must be a str, got {self.name!r} "
                                       f"({self.op} takes {len(names)} sizes: {','.join(names)})")
        object.__setattr__(self, "epilogue", check_epilogue(self.epilogue))
        _CHECKS[self.op](*self.params)
        limit = size_limit(max_bytes)
        if self.nbytes > limit:
            raise WorkloadTooLargeError(
                f"{self.key} needs {self.nbytes / 2**30:.3g} GiB for its tensors (inputs and "
                f"output, float32), over the limit of {limit / 2**30:.3g} GiB; raise it with "
                f"max_bytes=..., tensorgym.workloads.MAX_TENSOR_BYTES or ${MAX_BYTES_ENV}")

    @property
    def key(self) -> str:
        try:  # asked for on every replay step (task look-ups): spelled once, not a field
            return self.__dict__["_key"]
        except KeyError:
            key = self.operator_key + "".join(f"+{e}" for e in self.epilogue)
            object.__setattr__(self, "_key", key)
            return key

    @property
    def operator_key(self) -> str:
        """The key without the epilogue."""
        return f"{self.op}:{','.join(map(str, self.params))}"

    @property
    def groups(self) -> int:
        """conv2d's groups (1 for every other op)."""
        return self.params[8] if self.op == "conv2d" and len(self.params) > 8 else 1

    def with_epilogue(self, epilogue: "str | tuple[str, ...]", name: str = "", *,
                      max_bytes: Optional[int] = None) -> "Workload":
        """The same operator with ``epilogue`` (``()`` for none) in place of its own."""
        return Workload(self.op, self.params, name, max_bytes, epilogue=epilogue)

    @property
    def label(self) -> str:
        return self.name or self.key

    @cached_property
    def tensors(self) -> tuple[list[te.Tensor], te.Tensor]:
        """(inputs, output) of the tensor expression: the operator's inputs, then the
        epilogue's (``bias``, ``residual``); the output is the reduction, which the kernel
        stores through ``epilogue_body``."""
        inputs, out = _BUILDERS[self.op](*self.params)
        if "bias" in self.epilogue:
            dims = channel_dims(self.op, out.shape)
            inputs.append(te.placeholder(tuple(out.shape[d] for d in dims), "bias"))
        if "add" in self.epilogue:
            inputs.append(te.placeholder(out.shape, "residual"))
        return inputs, out

    @cached_property
    def epilogue_body(self) -> Optional[te.Expr]:
        """What the kernel stores at ``output[axes]`` (``output.op.axes``) in terms of the
        reduction's value there (a load of ``output`` itself), or None without an epilogue."""
        if not self.epilogue:
            return None
        inputs, out = self.tensors
        axes = out.op.axes
        x: te.Expr = out[axes]
        extra = {t.name: t for t in inputs}
        for op in self.epilogue:
            if op == "bias":
                x = x + extra["bias"][tuple(axes[d] for d in channel_dims(self.op, out.shape))]
            elif op == "add":
                x = x + extra["residual"][axes]
            elif op == "relu":
                x = te.maximum(x, 0.0)
            elif op == "relu6":
                x = te.minimum(te.maximum(x, 0.0), 6.0)
            else:  # gelu: x * (1 + erf(x / sqrt 2)) / 2
                x = 0.5 * x * (1.0 + te.call("erf", x * _SQRT1_2))
        return x

    @property
    def inputs(self) -> list[te.Tensor]:
        return self.tensors[0]

    @property
    def output(self) -> te.Tensor:
        return self.tensors[1]

    @property
    def nbytes(self) -> int:
        """Bytes of all inputs and the output in float32."""
        return 4 * (sum(t.size for t in self.inputs) + self.output.size)

    @property
    def flops(self) -> int:
        out = self.output
        red = 1
        for ax in out.op.reduce_axes:
            red *= ax.extent
        return 2 * out.size * red

    def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
        """Uniform in [-1, 1), made directly in float32 (no float64 copy); fixed by ``seed``."""
        rng = np.random.default_rng(seed)
        out = []
        for t in self.inputs:
            x = rng.random(t.shape, dtype=np.float32)
            x *= 2
            x -= 1
            out.append(x)
        return out

    def reference(self, inputs: list[np.ndarray]) -> np.ndarray:
        n = len(self.inputs) - len(self.epilogue_inputs)
        out = _REFERENCES[self.op](self.params, [x.astype(np.float64) for x in inputs[:n]])
        extra = dict(zip((t.name for t in self.epilogue_inputs), inputs[n:]))
        for op in self.epilogue:
            if op == "bias":
                dims = channel_dims(self.op, out.shape)
                shape = [out.shape[d] if d in dims else 1 for d in range(out.ndim)]
                out = out + extra["bias"].astype(np.float64).reshape(shape)
            elif op == "add":
                out = out + extra["residual"].astype(np.float64)
            elif op == "relu":
                out = np.maximum(out, 0.0)
            elif op == "relu6":
                out = np.minimum(np.maximum(out, 0.0), 6.0)
            else:
                out = 0.5 * out * (1.0 + _erf_array(out * _SQRT1_2))
        return out.astype(np.float32)

    @property
    def epilogue_inputs(self) -> list[te.Tensor]:
        """The inputs the epilogue adds (``bias``, ``residual``), last among ``inputs``."""
        return [t for t in self.inputs if t.name in ("bias", "residual")]

    @property
    def reduction_length(self) -> int:
        n = 1
        for ax in self.output.op.reduce_axes:
            n *= ax.extent
        return n

    def __reduce__(self):  # pickle without the cached tensors, and without checking again
        return (_restore, (self.op, self.params, self.name, self.epilogue))


def _restore(op: str, params: tuple[int, ...], name: str,
             epilogue: tuple[str, ...] = ()) -> Workload:
    w = object.__new__(Workload)
    for field, value in (("op", op), ("params", params), ("name", name), ("epilogue", epilogue)):
        object.__setattr__(w, field, value)
    return w


_SQRT1_2 = 0.7071067811865476
_erf = np.frompyfunc(math.erf, 1, 1)


def _erf_array(x: np.ndarray) -> np.ndarray:
    return _erf(x).astype(np.float64)


def channel_dims(op: str, shape: tuple[int, ...]) -> tuple[int, ...]:
    """The output dims a bias runs along: conv2d's channels (OC, or G and OC/G of a 5-D
    grouped output), the last dim of the others."""
    if op == "conv2d":
        return (1, 2) if len(shape) == 5 else (1,)
    return (len(shape) - 1,)


def _check_conv2d(n: int, ic: int, h: int, w: int, oc: int, k: int, stride: int,
                  pad: int, groups: int = 1) -> None:
    if min(n, ic, h, w, oc, k, stride, groups) < 1 or pad < 0:
        raise InvalidWorkloadError(f"conv2d needs positive sizes and pad >= 0, got "
                                   f"{(n, ic, h, w, oc, k, stride, pad, groups)}")
    if ic % groups or oc % groups:
        raise InvalidWorkloadError(f"conv2d groups={groups} must divide both IC={ic} and "
                                   f"OC={oc}")
    if (h + 2 * pad - k) < 0 or (w + 2 * pad - k) < 0:
        raise InvalidWorkloadError(f"conv2d kernel {k} is larger than the padded input "
                                   f"{h + 2 * pad}x{w + 2 * pad}")


def _check_positive(op: str):
    def check(*sizes: int) -> None:
        if min(sizes) < 1:
            raise InvalidWorkloadError(f"{op} needs positive sizes, got {sizes}")
    return check


def conv2d(n: int, ic: int, h: int, w: int, oc: int, k: int, stride: int = 1, pad: int = 0,
           name: str = "", *, groups: int = 1, epilogue: "str | tuple[str, ...]" = (),
           max_bytes: Optional[int] = None) -> Workload:
    """A 2-D convolution, NCHW input (n, ic, h, w), OIHW weight (oc, ic // groups, k, k);
    ``groups`` > 1 is a grouped convolution (depthwise: groups == ic == oc)."""
    return Workload("conv2d", (n, ic, h, w, oc, k, stride, pad, groups), name, max_bytes,
                    epilogue=epilogue)


def matmul(m: int, n: int, k: int, name: str = "", *, epilogue: "str | tuple[str, ...]" = (),
           max_bytes: Optional[int] = None) -> Workload:
    """C[m, n] = A[m, k] @ B[k, n]."""
    return Workload("matmul", (m, n, k), name, max_bytes, epilogue=epilogue)


def dense(rows: int, in_features: int, out_features: int, name: str = "", *,
          epilogue: "str | tuple[str, ...]" = (), max_bytes: Optional[int] = None) -> Workload:
    """Y[rows, out] = X[rows, in] @ W[out, in]^T: a linear layer (``+bias`` adds its bias)."""
    return Workload("dense", (rows, in_features, out_features), name, max_bytes,
                    epilogue=epilogue)


def batch_matmul(b: int, m: int, k: int, n: int, name: str = "", *,
                 epilogue: "str | tuple[str, ...]" = (),
                 max_bytes: Optional[int] = None) -> Workload:
    """C[b, m, n] = A[b, m, k] @ B[b, k, n]: attention's products, one matmul per batch."""
    return Workload("batch_matmul", (b, m, k, n), name, max_bytes, epilogue=epilogue)


def _build_conv2d(n, ic, h, w, oc, k, stride, pad, groups=1):
    data = te.placeholder((n, ic, h, w), "data")
    src = te.pad(data, (0, 0, pad, pad), "pad") if pad else data
    oh = (h + 2 * pad - k) // stride + 1
    ow = (w + 2 * pad - k) // stride + 1
    icg, ocg = ic // groups, oc // groups
    rc = te.reduce_axis(icg, "rc")
    ry = te.reduce_axis(k, "ry")
    rx = te.reduce_axis(k, "rx")
    if groups == 1:
        weight = te.placeholder((oc, ic, k, k), "weight")
        out = te.compute(
            (n, oc, oh, ow),
            lambda nn, ff, yy, xx: te.sum(
                src[nn, rc, yy * stride + ry, xx * stride + rx] * weight[ff, rc, ry, rx],
                axis=[rc, ry, rx]),
            "conv", axis_names=["n", "oc", "oh", "ow"])
    elif ocg == 1:  # one output channel per group (depthwise): channel ff reads group ff
        weight = te.placeholder((oc, icg, k, k), "weight")
        out = te.compute(
            (n, oc, oh, ow),
            lambda nn, ff, yy, xx: te.sum(
                src[nn, ff * icg + rc, yy * stride + ry, xx * stride + rx]
                * weight[ff, rc, ry, rx], axis=[rc, ry, rx]),
            "conv", axis_names=["n", "oc", "oh", "ow"])
    else:  # the group is an axis of its own, so every index stays affine
        weight = te.placeholder((groups, ocg, icg, k, k), "weight")
        out = te.compute(
            (n, groups, ocg, oh, ow),
            lambda nn, gg, ff, yy, xx: te.sum(
                src[nn, gg * icg + rc, yy * stride + ry, xx * stride + rx]
                * weight[gg, ff, rc, ry, rx], axis=[rc, ry, rx]),
            "conv", axis_names=["n", "g", "oc", "oh", "ow"])
    return [data, weight], out


def _build_matmul(m, n, k):
    a = te.placeholder((m, k), "A")
    b = te.placeholder((k, n), "B")
    rk = te.reduce_axis(k, "rk")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, rk] * b[rk, j], axis=rk), "C",
                   axis_names=["i", "j"])
    return [a, b], c


def _build_dense(rows, cin, cout):
    x = te.placeholder((rows, cin), "X")
    w = te.placeholder((cout, cin), "W")
    rk = te.reduce_axis(cin, "rk")
    y = te.compute((rows, cout), lambda i, j: te.sum(x[i, rk] * w[j, rk], axis=rk), "Y",
                   axis_names=["i", "j"])
    return [x, w], y


def _build_batch_matmul(batch, m, k, n):
    a = te.placeholder((batch, m, k), "A")
    b = te.placeholder((batch, k, n), "B")
    rk = te.reduce_axis(k, "rk")
    c = te.compute((batch, m, n), lambda bb, i, j: te.sum(a[bb, i, rk] * b[bb, rk, j], axis=rk),
                   "C", axis_names=["b", "i", "j"])
    return [a, b], c


def _ref_conv2d(params, inputs):
    n, ic, h, w, oc, k, stride, pad, groups = (*params, 1)[:9]
    data, weight = inputs
    data = np.pad(data, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (h + 2 * pad - k) // stride + 1
    ow = (w + 2 * pad - k) // stride + 1
    icg, ocg = ic // groups, oc // groups
    weight = weight.reshape(groups, ocg, icg, k, k)
    out = np.zeros((n, groups, ocg, oh, ow))
    for ry in range(k):
        for rx in range(k):
            patch = data[:, :, ry:ry + stride * oh:stride, rx:rx + stride * ow:stride]
            patch = patch.reshape(n, groups, icg, oh, ow)
            out += np.einsum("ngchw,goc->ngohw", patch, weight[..., ry, rx], optimize=True)
    if groups == 1 or ocg == 1:
        return out.reshape(n, oc, oh, ow)
    return out


def _ref_matmul(params, inputs):
    a, b = inputs
    return a @ b


def _ref_dense(params, inputs):
    x, w = inputs
    return x @ w.T


def _ref_batch_matmul(params, inputs):
    a, b = inputs
    return np.matmul(a, b)


_BUILDERS = {"conv2d": _build_conv2d, "matmul": _build_matmul, "dense": _build_dense,
             "batch_matmul": _build_batch_matmul}
_REFERENCES = {"conv2d": _ref_conv2d, "matmul": _ref_matmul, "dense": _ref_dense,
               "batch_matmul": _ref_batch_matmul}
_CHECKS = {"conv2d": _check_conv2d, "matmul": _check_positive("matmul"),
           "dense": _check_positive("dense"), "batch_matmul": _check_positive("batch_matmul")}

# The paper's Table 1 (ResNet-18, batch 1): H=W, IC, OC, K, S; padding K // 2.
_RESNET18 = {
    "C1": (224, 3, 64, 7, 2), "C2": (56, 64, 64, 3, 1), "C3": (56, 64, 64, 1, 1),
    "C4": (56, 64, 128, 3, 2), "C5": (56, 64, 128, 1, 2), "C6": (28, 128, 128, 3, 1),
    "C7": (28, 128, 256, 3, 2), "C8": (28, 128, 256, 1, 2), "C9": (14, 256, 256, 3, 1),
    "C10": (14, 256, 512, 3, 2), "C11": (14, 256, 512, 1, 2), "C12": (7, 512, 512, 3, 1),
}

# The registered layers are small; a low limit set for the user's own shapes must not break import.
_NO_LIMIT = 2**63
WORKLOADS: dict[str, Workload] = {
    f"conv2d-{c}": conv2d(1, ic, hw, hw, oc, k, s, k // 2, name=f"conv2d-{c}", max_bytes=_NO_LIMIT)
    for c, (hw, ic, oc, k, s) in _RESNET18.items()
}
WORKLOADS["matmul-1024"] = matmul(1024, 1024, 1024, name="matmul-1024", max_bytes=_NO_LIMIT)
# One of each newer operator, from the corpus's models (``tensorgym tasks MODEL``).
WORKLOADS["depthwise-mbv2-112"] = conv2d(1, 32, 112, 112, 32, 3, 1, 1, groups=32,
                                         name="depthwise-mbv2-112", max_bytes=_NO_LIMIT)
WORKLOADS["grouped-resnext-56"] = conv2d(1, 128, 56, 56, 128, 3, 1, 1, groups=32,
                                         name="grouped-resnext-56", max_bytes=_NO_LIMIT)
WORKLOADS["dense-bert-ffn"] = dense(128, 768, 3072, name="dense-bert-ffn", max_bytes=_NO_LIMIT)
WORKLOADS["batch_matmul-bert-qk"] = batch_matmul(12, 128, 64, 128, name="batch_matmul-bert-qk",
                                                 max_bytes=_NO_LIMIT)


def get_workload(spec: "str | Workload", *, max_bytes: Optional[int] = None) -> Workload:
    """A registered name (``conv2d-C6``), a key (``conv2d:1,96,17,17,160,3,1,1``: exactly the
    op's number of decimal integers, conv2d's optional GROUPS after them), either followed by an
    epilogue (``+bias+relu``), or a Workload (returned as is: it was checked when made). A key
    whose tensors exceed the size limit (``max_bytes``, see ``MAX_TENSOR_BYTES``) raises
    ``WorkloadTooLargeError``; any other bad spec ``UnknownWorkloadError``."""
    if isinstance(spec, Workload):
        return spec
    if not isinstance(spec, str):
        raise UnknownWorkloadError(f"a workload is a registered name, a shape key or a Workload, "
                                   f"got {type(spec).__name__} {spec!r}")
    if spec in WORKLOADS:
        return WORKLOADS[spec]
    for w in WORKLOADS.values():
        if w.key == spec:
            return w
    head, _, epilogue = spec.partition("+")
    try:
        ops = check_epilogue(epilogue)
    except InvalidWorkloadError as e:
        raise UnknownWorkloadError(f"cannot build {spec!r:.80}: {e}") from None
    for name, base in WORKLOADS.items():  # a registered layer with an epilogue keeps its name
        if head in (name, base.key):
            return Workload(base.op, base.params, "+".join((name, *ops)), max_bytes, epilogue=ops)
    op, sep, rest = head.partition(":")
    if sep and op in PARAMS:
        names, extra = PARAMS[op], OPTIONAL_PARAMS.get(op, ())
        parts = rest.split(",")
        if not len(names) <= len(parts) <= len(names) + len(extra) or \
                not all(re.fullmatch(r"[0-9]+", p) for p in parts):
            optional = f"[,{','.join(extra)}]" if extra else ""
            raise UnknownWorkloadError(
                f"cannot build {op} from {rest!r:.80}: expected {len(names)} non-negative "
                f"integers, {op}:{','.join(names)}{optional}")
        if any(len(p) > 30 for p in parts):  # e.g. a key read from a file: 5,000 digits
            raise UnknownWorkloadError(
                f"cannot build {op} from {rest!r:.80}: a size of "
                f"{max(map(len, parts))} digits is no tensor's")
        try:
            return Workload(op, tuple(int(p) for p in parts), max_bytes=max_bytes, epilogue=ops)
        except WorkloadTooLargeError:
            raise
        except InvalidWorkloadError as e:
            raise UnknownWorkloadError(f"cannot build {op} from {rest!r}: {e}") from None
    raise UnknownWorkloadError(
        f"unknown workload {spec!r:.200}; registered: {', '.join(WORKLOADS)}; "
        "or give a shape such as conv2d:1,96,17,17,160,3,1,1, conv2d:1,32,112,112,32,3,1,1,32 "
        "(groups), matmul:333,517,129, dense:128,768,3072 or batch_matmul:12,128,64,128, "
        "optionally followed by an epilogue such as +bias+relu")
