"""Workloads: conv2d (NCHW) and matmul, the ResNet-18 layers of the paper's Table 1, and a
NumPy reference and FLOP count for each.

A workload is a small frozen dataclass; ``workload.key`` (e.g. ``conv2d:1,128,28,28,128,3,1,1``)
identifies it in records and on the command line, and ``get_workload`` takes either a registered
name (``conv2d-C6``) or such a key.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from . import te
from .errors import UnknownWorkloadError


@dataclass(frozen=True)
class Workload:
    op: str  # "conv2d" or "matmul"
    params: tuple[int, ...]
    name: str = ""

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
    def flops(self) -> int:
        out = self.output
        red = 1
        for ax in out.op.reduce_axes:
            red *= ax.extent
        return 2 * out.size * red

    def random_inputs(self, seed: int = 0) -> list[np.ndarray]:
        rng = np.random.default_rng(seed)
        return [rng.uniform(-1.0, 1.0, t.shape).astype(np.float32) for t in self.inputs]

    def reference(self, inputs: list[np.ndarray]) -> np.ndarray:
        return _REFERENCES[self.op](self.params, inputs)

    @property
    def reduction_length(self) -> int:
        n = 1
        for ax in self.output.op.reduce_axes:
            n *= ax.extent
        return n

    def __reduce__(self):  # pickle without the cached tensors
        return (Workload, (self.op, self.params, self.name))


def conv2d(n: int, ic: int, h: int, w: int, oc: int, k: int, stride: int = 1, pad: int = 0,
           name: str = "") -> Workload:
    """A 2-D convolution, NCHW input (n, ic, h, w), OIHW weight (oc, ic, k, k)."""
    params = (n, ic, h, w, oc, k, stride, pad)
    if min(n, ic, h, w, oc, k, stride) < 1 or pad < 0:
        raise ValueError(f"conv2d needs positive sizes and pad >= 0, got {params}")
    if (h + 2 * pad - k) < 0 or (w + 2 * pad - k) < 0:
        raise ValueError(f"conv2d kernel {k} is larger than the padded input {h + 2 * pad}")
    return Workload("conv2d", params, name)


def matmul(m: int, n: int, k: int, name: str = "") -> Workload:
    """C[m, n] = A[m, k] @ B[k, n]."""
    if min(m, n, k) < 1:
        raise ValueError(f"matmul needs positive sizes, got {(m, n, k)}")
    return Workload("matmul", (m, n, k), name)


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
_FACTORIES = {"conv2d": conv2d, "matmul": matmul}

# The paper's Table 1 (ResNet-18, batch 1): H=W, IC, OC, K, S; padding K // 2.
_RESNET18 = {
    "C1": (224, 3, 64, 7, 2), "C2": (56, 64, 64, 3, 1), "C3": (56, 64, 64, 1, 1),
    "C4": (56, 64, 128, 3, 2), "C5": (56, 64, 128, 1, 2), "C6": (28, 128, 128, 3, 1),
    "C7": (28, 128, 256, 3, 2), "C8": (28, 128, 256, 1, 2), "C9": (14, 256, 256, 3, 1),
    "C10": (14, 256, 512, 3, 2), "C11": (14, 256, 512, 1, 2), "C12": (7, 512, 512, 3, 1),
}

WORKLOADS: dict[str, Workload] = {
    f"conv2d-{c}": conv2d(1, ic, hw, hw, oc, k, s, k // 2, name=f"conv2d-{c}")
    for c, (hw, ic, oc, k, s) in _RESNET18.items()
}
WORKLOADS["matmul-1024"] = matmul(1024, 1024, 1024, name="matmul-1024")


def get_workload(spec: "str | Workload") -> Workload:
    """A registered name (``conv2d-C6``), a key (``conv2d:1,96,17,17,160,3,1,1``), or a Workload."""
    if isinstance(spec, Workload):
        return spec
    if spec in WORKLOADS:
        return WORKLOADS[spec]
    for w in WORKLOADS.values():
        if w.key == spec:
            return w
    op, sep, rest = spec.partition(":")
    if sep and op in _FACTORIES:
        try:
            args = [int(x) for x in rest.split(",")]
            return _FACTORIES[op](*args)
        except (ValueError, TypeError) as e:
            raise UnknownWorkloadError(
                f"cannot build {op} from {rest!r}: {e}. Expected e.g. "
                "conv2d:N,IC,H,W,OC,K,STRIDE,PAD or matmul:M,N,K") from None
    raise UnknownWorkloadError(
        f"unknown workload {spec!r}; registered: {', '.join(WORKLOADS)}; "
        "or give a shape such as conv2d:1,96,17,17,160,3,1,1 or matmul:333,517,129")
