"""The workload descriptor: a fixed-length float32 row saying what a task is (the operator, its
sizes, its cost and its target), the same for every schedule of the task. The env's
``action_mode="edit"`` appends it to every observation so that one policy can act on many tasks.

Columns (``descriptor_names()``, ``DESCRIPTOR_LENGTH`` in all), every one a finite value >= 0:

- the operator kind, one-hot over ``KINDS``: ``conv2d``; ``depthwise_conv2d`` (conv2d with
  groups == IC == OC > 1); ``grouped_conv2d`` (any other conv2d with groups > 1); ``dense``;
  ``batch_matmul``; ``matmul``;
- ``log2(1 + size)`` of each of the op's sizes, in the order of its key (``workloads.PARAMS``,
  then the optional ones), zero-padded to ``MAX_SIZES`` slots (``SIZE_NAMES`` names them per op):
  conv2d ``N, IC, H, W, OC, K, STRIDE, PAD, GROUPS`` (GROUPS always written, 1 if left out of
  the key); dense ``ROWS, IN, OUT``; batch_matmul ``B, M, K, N``; matmul ``M, N, K``;
- ``log2(1 + FLOPs)`` (``Workload.flops``), ``log2(1 + bytes)`` of every input (the epilogue's
  too) and the output in float32 (``Workload.nbytes``), and ``log2(1 + FLOPs / bytes)``, the
  arithmetic intensity;
- one flag per epilogue op (``workloads.EPILOGUE_OPS``: bias, relu, relu6, gelu, add);
- the target, one-hot over ``TARGETS`` (cpu, opencl, cuda; aliases such as ``llvm`` accepted).

``log2(1 + x)`` keeps every column non-negative (an intensity below 1 FLOP/byte too), so an
observation space ``Box(0, max)`` holds it. A pure function of (workload, target): no state.
"""
from __future__ import annotations

import math

import numpy as np

from ..hardware.target import canonical_target
from ..workloads import EPILOGUE_OPS, OPTIONAL_PARAMS, PARAMS, Workload

KINDS = ("conv2d", "depthwise_conv2d", "grouped_conv2d", "dense", "batch_matmul", "matmul")
TARGETS = ("cpu", "opencl", "cuda")
MAX_SIZES = max(len(PARAMS[op]) + len(OPTIONAL_PARAMS.get(op, ())) for op in PARAMS)
COST_NAMES = ("log2_flops", "log2_bytes", "log2_intensity")
SIZE_NAMES = {op: PARAMS[op] + OPTIONAL_PARAMS.get(op, ()) for op in PARAMS}
"""The sizes each op writes into the size slots, in slot order."""


def descriptor_names() -> tuple[str, ...]:
    """The name of every column, in order (the size slots are ``log2_size0`` ... since what
    they hold depends on the op: ``SIZE_NAMES``)."""
    return (tuple(f"op_{k}" for k in KINDS) + tuple(f"log2_size{i}" for i in range(MAX_SIZES))
            + COST_NAMES + tuple(f"epilogue_{e}" for e in EPILOGUE_OPS)
            + tuple(f"target_{t}" for t in TARGETS))


DESCRIPTOR_LENGTH = len(KINDS) + MAX_SIZES + len(COST_NAMES) + len(EPILOGUE_OPS) + len(TARGETS)


def operator_kind(workload: Workload) -> str:
    """The workload's entry of ``KINDS``."""
    groups = workload.groups
    if workload.op != "conv2d" or groups == 1:
        return workload.op
    ic, oc = workload.params[1], workload.params[4]
    return "depthwise_conv2d" if groups == ic == oc else "grouped_conv2d"


def shape_sizes(workload: Workload) -> tuple[int, ...]:
    """Every size of the op in ``SIZE_NAMES[op]`` order, optional ones filled with their
    default of 1."""
    names = SIZE_NAMES[workload.op]
    return tuple(workload.params) + (1,) * (len(names) - len(workload.params))


def _log2p(x: float) -> float:
    return math.log2(1.0 + x)


def workload_descriptor(workload: Workload, target: str) -> np.ndarray:
    """The ``(DESCRIPTOR_LENGTH,)`` float32 descriptor of ``workload`` on ``target``."""
    if not isinstance(workload, Workload):
        raise TypeError(f"a descriptor describes a Workload, not {type(workload).__name__}")
    target = canonical_target(target)  # raises for an unknown target
    kind = np.zeros(len(KINDS), np.float64)
    kind[KINDS.index(operator_kind(workload))] = 1.0
    sizes = np.zeros(MAX_SIZES, np.float64)
    for i, v in enumerate(shape_sizes(workload)):
        sizes[i] = _log2p(v)
    flops, nbytes = float(workload.flops), float(workload.nbytes)
    cost = [_log2p(flops), _log2p(nbytes), _log2p(flops / nbytes)]
    epilogue = [float(e in workload.epilogue) for e in EPILOGUE_OPS]
    where = [float(t == target) for t in TARGETS]
    return np.concatenate([kind, sizes, cost, epilogue, where]).astype(np.float32)


__all__ = ["DESCRIPTOR_LENGTH", "KINDS", "MAX_SIZES", "SIZE_NAMES", "TARGETS",
           "descriptor_names", "operator_kind", "shape_sizes", "workload_descriptor"]
