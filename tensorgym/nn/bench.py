"""``tensorgym bench-model``'s measurements: the compiled module, PyTorch eager and
``torch.compile`` (inductor) timed interleaved in one process, and each replaced task's kernel
against the PyTorch operator (with the same epilogue) it replaces.

Interleaved: every round times each variant once, in a rotating order, ``number`` calls each
(enough for a round of a variant to last ``min_round_s``); the latency reported is the median
over rounds of the mean call. Everything runs under ``torch.no_grad()``.
"""
from __future__ import annotations

import math
import statistics
import time
from typing import Any, Callable

import torch
import torch.nn.functional as F

from ..workloads import Workload
from .kernels import CheckedKernel
from .ops import kernel as kernel_op, pack


def interleaved(fns: dict[str, Callable[[], Any]], rounds: int,
                min_round_s: float = 0.05) -> dict[str, float]:
    """The median over ``rounds`` of each function's mean seconds per call."""
    numbers = {}
    with torch.no_grad():
        for name, fn in fns.items():
            fn()  # warm-up
            t0 = time.perf_counter()
            fn()
            numbers[name] = max(1, math.ceil(min_round_s / max(time.perf_counter() - t0, 1e-7)))
        times: dict[str, list[float]] = {name: [] for name in fns}
        names = list(fns)
        for r in range(rounds):
            for name in names[r % len(names):] + names[:r % len(names)]:
                fn, n = fns[name], numbers[name]
                t0 = time.perf_counter()
                for _ in range(n):
                    fn()
                times[name].append((time.perf_counter() - t0) / n)
    return {name: statistics.median(ts) for name, ts in times.items()}


def latency_table(ms: dict[str, float]) -> str:
    """A markdown table of variants' latencies (milliseconds, one named ``eager``) and eager's
    latency over each."""
    rows = [f"| {name} | {v:.3f} | {ms['eager'] / v:.2f}x |" for name, v in ms.items()]
    return "\n".join(["| variant | latency ms | eager / this |", "|---|---:|---:|", *rows])


def inductor(model: Any, x: Any) -> "tuple[Any, str]":
    """``torch.compile(model)`` (inductor) run once on ``x``, or (None, why it cannot)."""
    try:
        compiled = torch.compile(model)
        with torch.no_grad():
            compiled(x)
    except Exception as e:  # noqa: BLE001 - no C++ compiler, an unsupported op...: say so
        first = (str(e).strip().splitlines() or [""])[0]
        return None, f"torch.compile (inductor) cannot compile here: {type(e).__name__}: {first}"
    return compiled, ""


def task_pair(k: CheckedKernel, seed: int = 0, batch_norm: bool = False) \
        -> tuple[Callable[[], Any], Callable[[], Any]]:
    """(our kernel, the PyTorch operator with the same epilogue), each on random inputs;
    ``batch_norm``: PyTorch's side runs its bias as an eval-mode batch norm after the
    operator, as a model's graph does where the kernel folded one in."""
    w = k.workload
    arrays = w.random_inputs(seed)
    ours = [torch.from_numpy(a) for a in k.program.pack_inputs(arrays)]
    out_shape = list(w.output.shape)
    theirs = [torch.from_numpy(a) for a in arrays]
    reference = _torch_op(w, theirs, batch_norm)
    return (lambda: kernel_op(ours, k.address, out_shape, k.numels, k.workspaces)), reference


def attention_pair(qk: CheckedKernel, av: CheckedKernel, scale: float, seed: int = 0) \
        -> tuple[Callable[[], Any], Callable[[], Any]]:
    """(attention as ``nn.compile`` runs it: ``qk``'s kernel, PyTorch's softmax, ``av``'s
    kernel; PyTorch's ``scaled_dot_product_attention``), each on the same random q, k, v."""
    b, m, d = qk.workload.inputs[0].shape
    n, e = av.workload.inputs[1].shape[1:]
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(1, b, rows, cols, generator=gen)
               for rows, cols in ((m, d), (n, d), (n, e)))

    def call(kernel: CheckedKernel, a: torch.Tensor, bt: torch.Tensor) -> torch.Tensor:
        ins = []  # packed by the same op as the compiled graph packs them
        for i, (t, spec) in enumerate(zip((a, bt), kernel.workload.inputs)):
            lay = kernel.program.layout_of(i)
            ins.append(pack(t, list(spec.shape), lay.dim, lay.block) if lay else t)
        return kernel_op(ins, kernel.address, list(kernel.workload.output.shape), kernel.numels,
                         kernel.workspaces)

    def ours() -> Any:
        scores = call(qk, q * scale, k.transpose(-2, -1))
        return call(av, torch.softmax(scores, -1), v)

    return ours, (lambda: F.scaled_dot_product_attention(q, k, v, scale=scale))


def _torch_op(w: Workload, t: list, batch_norm: bool = False) -> Callable[[], Any]:
    extra = dict(zip((x.name for x in w.epilogue_inputs), t[len(t) - len(w.epilogue_inputs):]))
    bias = extra["bias"].reshape(-1) if "bias" in extra else None
    norm = None  # (mean, var, scale, shift) of an eval-mode batch norm in the bias's place
    if batch_norm and bias is not None:
        norm, bias = (bias * 0.1, bias.abs() + 1.0, bias.abs() + 0.5, bias), None
    if w.op == "conv2d":
        n, ic, h, wd, oc, k, stride, pad = w.params[:8]
        weight = t[1].reshape(oc, -1, k, k)

        def op() -> Any:
            return F.conv2d(t[0], weight, bias, stride, pad, 1, w.groups)
    elif w.op == "dense":
        def op() -> Any:
            return F.linear(t[0], t[1], bias)
    else:
        mm = torch.mm if w.op == "matmul" else torch.bmm

        def op() -> Any:
            y = mm(t[0], t[1])
            return y + bias if bias is not None else y
    residual = extra.get("residual")

    def run() -> Any:
        y = op()
        if norm is not None:
            y = F.batch_norm(y, *norm, False, 0.0, 1e-5)
        for e in w.epilogue:
            if e == "add":
                y = y + residual.reshape(y.shape)
            elif e == "relu":
                y = torch.relu(y)
            elif e == "relu6":
                y = torch.clamp(y, 0.0, 6.0)
            elif e == "gelu":
                y = F.gelu(y)
        return y
    return run


__all__ = ["attention_pair", "inductor", "interleaved", "latency_table", "task_pair"]
