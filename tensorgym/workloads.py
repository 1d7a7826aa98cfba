"""Workloads: conv2d (NCHW) and matmul, the ResNet-18 layers of the paper's Table 1, and a
NumPy reference and FLOP count for each.

A workload is a small frozen dataclass; ``workload.key`` (e.g. ``conv2d:1,128,28,28,128,3,1,1``)
identifies it in records and on the command line, and ``get_workload`` takes either a registered
name (``conv2d-C6``) or such a key. Sizes are exact integers, exactly as many as the op takes, and
a workload whose tensors exceed ``MAX_TENSOR_BYTES`` (2 GiB, overridable) is refused when it is
made, before anything is allocated.
"""
from __future__ import annotations

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
PARAMS = {"conv2d": ("N", "IC", "H", "W", "OC", "K", "STRIDE", "PAD"), "matmul": ("M", "N", "K")}


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


@dataclass(frozen=True)
class Workload:
    """``op`` (``conv2d`` or ``matmul``) and its sizes (``PARAMS[op]``, exact integers).
    ``max_bytes`` overrides the size limit for this one workload (see ``MAX_TENSOR_BYTES``)."""

    op: str
    params: tuple[int, ...]
    name: str = ""
    max_bytes: InitVar[Optional[int]] = None

    def __post_init__(self, max_bytes: Optional[int]) -> None:
        if self.op not in PARAMS:
            raise InvalidWorkloadError(f"unknown op {self.op!r}; use one of {', '.join(PARAMS)}")
        names = PARAMS[self.op]
        params = self.params
        if not isinstance(params, (tuple, list)) or len(params) != len(names):
            raise InvalidWorkloadError(f"{self.op} takes {len(names)} sizes "
                                       f"({','.join(names)}), got {params!r}")
        bad = [f"{n}={v!r}" for n, v in zip(names, params) if not is_int(v)]
        if bad:
            raise InvalidWorkloadError(f"{self.op} sizes must be integers, got {', '.join(bad)}")
        object.__setattr__(self, "params", tuple(int(v) for v in params))
        if not isinstance(self.name, str):
            raise InvalidWorkloadError(f"a workload name must be a str, got {self.name!r} "
                                       f"({self.op} takes {len(names)} sizes: {','.join(names)})")
        _CHECKS[self.op](*self.params)
        limit = size_limit(max_bytes)
        if self.nbytes > limit:
            raise WorkloadTooLargeError(
                f"{self.key} needs {self.nbytes / 2**30:.3g} GiB for its tensors (inputs and "
                f"output, float32), over the limit of {limit / 2**30:.3g} GiB; raise it with "
                f"max_bytes=..., tensorgym.workloads.MAX_TENSOR_BYTES or ${MAX_BYTES_ENV}")

    @property
    def key(self) -> str:
        return f"{self.op}:{','.join(map(str, self.params))}"

    @property
    def label(self) -> str:
        return self.name or self.key

    @cached_property
    def tensors(self) -> tuple[list[te.Tensor], te.Tensor]:
        """(inputs, output) of the tensor expression."""
        return _BUILDERS[self.op](*self.params)

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
        return _REFERENCES[self.op](self.params, inputs)

    @property
    def reduction_length(self) -> int:
        n = 1
        for ax in self.output.op.reduce_axes:
            n *= ax.extent
        return n

    def __reduce__(self):  # pickle without the cached tensors, and without checking again
        return (_restore, (self.op, self.params, self.name))


def _restore(op: str, params: tuple[int, ...], name: str) -> Workload:
    w = object.__new__(Workload)
    for field, value in (("op", op), ("params", params), ("name", name)):
        object.__setattr__(w, field, value)
    return w


def _check_conv2d(n: int, ic: int, h: int, w: int, oc: int, k: int, stride: int,
                  pad: int) -> None:
    if min(n, ic, h, w, oc, k, stride) < 1 or pad < 0:
        raise InvalidWorkloadError(f"conv2d needs positive sizes and pad >= 0, got "
                                   f"{(n, ic, h, w, oc, k, stride, pad)}")
    if (h + 2 * pad - k) < 0 or (w + 2 * pad - k) < 0:
        raise InvalidWorkloadError(f"conv2d kernel {k} is larger than the padded input "
                                   f"{h + 2 * pad}x{w + 2 * pad}")


def _check_matmul(m: int, n: int, k: int) -> None:
    if min(m, n, k) < 1:
        raise InvalidWorkloadError(f"matmul needs positive sizes, got {(m, n, k)}")


def conv2d(n: int, ic: int, h: int, w: int, oc: int, k: int, stride: int = 1, pad: int = 0,
           name: str = "", *, max_bytes: Optional[int] = None) -> Workload:
    """A 2-D convolution, NCHW input (n, ic, h, w), OIHW weight (oc, ic, k, k)."""
    return Workload("conv2d", (n, ic, h, w, oc, k, stride, pad), name, max_bytes)


def matmul(m: int, n: int, k: int, name: str = "", *,
           max_bytes: Optional[int] = None) -> Workload:
    """C[m, n] = A[m, k] @ B[k, n]."""
    return Workload("matmul", (m, n, k), name, max_bytes)


def _build_conv2d(n, ic, h, w, oc, k, stride, pad):
    data = te.placeholder((n, ic, h, w), "data")
    weight = te.placeholder((oc, ic, k, k), "weight")
    src = te.pad(data, (0, 0, pad, pad), "pad") if pad else data
    oh = (h + 2 * pad - k) // stride + 1
    ow = (w + 2 * pad - k) // stride + 1
    rc = te.reduce_axis(ic, "rc")
    ry = te.reduce_axis(k, "ry")
    rx = te.reduce_axis(k, "rx")
    out = te.compute(
        (n, oc, oh, ow),
        lambda nn, ff, yy, xx: te.sum(
            src[nn, rc, yy * stride + ry, xx * stride + rx] * weight[ff, rc, ry, rx],
            axis=[rc, ry, rx]),
        "conv", axis_names=["n", "oc", "oh", "ow"])
    return [data, weight], out


def _build_matmul(m, n, k):
    a = te.placeholder((m, k), "A")
    b = te.placeholder((k, n), "B")
    rk = te.reduce_axis(k, "rk")
    c = te.compute((m, n), lambda i, j: te.sum(a[i, rk] * b[rk, j], axis=rk), "C",
                   axis_names=["i", "j"])
    return [a, b], c


def _ref_conv2d(params, inputs):
    n, ic, h, w, oc, k, stride, pad = params
    data, weight = (x.astype(np.float64) for x in inputs)
    data = np.pad(data, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (h + 2 * pad - k) // stride + 1
    ow = (w + 2 * pad - k) // stride + 1
    out = np.zeros((n, oc, oh, ow))
    for ry in range(k):
        for rx in range(k):
            patch = data[:, :, ry:ry + stride * oh:stride, rx:rx + stride * ow:stride]
            out += np.einsum("nchw,oc->nohw", patch, weight[:, :, ry, rx], optimize=True)
    return out.astype(np.float32)


def _ref_matmul(params, inputs):
    a, b = (x.astype(np.float64) for x in inputs)
    return (a @ b).astype(np.float32)


_BUILDERS = {"conv2d": _build_conv2d, "matmul": _build_matmul}
_REFERENCES = {"conv2d": _ref_conv2d, "matmul": _ref_matmul}
_CHECKS = {"conv2d": _check_conv2d, "matmul": _check_matmul}

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


def get_workload(spec: "str | Workload", *, max_bytes: Optional[int] = None) -> Workload:
    """A registered name (``conv2d-C6``), a key (``conv2d:1,96,17,17,160,3,1,1``: exactly the
    op's number of decimal integers), or a Workload (returned as is: it was checked when made).
    A key whose tensors exceed the size limit (``max_bytes``, see ``MAX_TENSOR_BYTES``) raises
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
    op, sep, rest = spec.partition(":")
    if sep and op in PARAMS:
        names = PARAMS[op]
        parts = rest.split(",")
        if len(parts) != len(names) or not all(re.fullmatch(r"[0-9]+", p) for p in parts):
            raise UnknownWorkloadError(
                f"cannot build {op} from {rest!r:.80}: expected {len(names)} non-negative "
                f"integers, {op}:{','.join(names)}")
        if any(len(p) > 30 for p in parts):  # e.g. a key read from a file: 5,000 digits
            raise UnknownWorkloadError(
                f"cannot build {op} from {rest!r:.80}: a size of "
                f"{max(map(len, parts))} digits is no tensor's")
        try:
            return Workload(op, tuple(int(p) for p in parts), max_bytes=max_bytes)
        except WorkloadTooLargeError:
            raise
        except InvalidWorkloadError as e:
            raise UnknownWorkloadError(f"cannot build {op} from {rest!r}: {e}") from None
    raise UnknownWorkloadError(
        f"unknown workload {spec!r}; registered: {', '.join(WORKLOADS)}; "
        "or give a shape such as conv2d:1,96,17,17,160,3,1,1 or matmul:333,517,129")
