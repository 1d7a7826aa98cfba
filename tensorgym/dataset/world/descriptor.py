"""The workload descriptor: a fixed-length row of what the workload is, the same for every config
of a task, which lets one model learn across tasks.

Columns (``DESCRIPTOR_NAMES``): the operator kind one-hot (``KINDS``: conv2d, depthwise conv2d,
grouped conv2d, dense, batch_matmul, matmul); log2(1 + size) of each of the op's sizes in
``PARAMS[op]`` order (then conv2d's GROUPS), zero-padded to ``MAX_PARAMS``; log2 of FLOPs, of the
bytes of every input and the output (float32), of the arithmetic intensity (FLOPs per byte), of
the output's elements and of the reduction's length; log2 groups; one flag per epilogue op
(``EPILOGUE_OPS``); the target one-hot (``TARGETS``: cpu, opencl, cuda).
"""
from __future__ import annotations

import math

import numpy as np

from ...hardware.target import canonical_target
from ...workloads import EPILOGUE_OPS, PARAMS, Workload

KINDS = ("conv2d", "depthwise", "grouped", "dense", "batch_matmul", "matmul")
MAX_PARAMS = 9
TARGETS = ("cpu", "opencl", "cuda")
DESCRIPTOR_NAMES = (
    tuple(f"op_{k}" for k in KINDS) + tuple(f"log2_size{i}" for i in range(MAX_PARAMS))
    + ("log2_flops", "log2_bytes", "log2_intensity", "log2_outputs", "log2_reduction",
       "log2_groups") + tuple(f"epilogue_{e}" for e in EPILOGUE_OPS)
    + tuple(f"target_{t}" for t in TARGETS))
N_DESCRIPTOR = len(DESCRIPTOR_NAMES)


def kind(workload: Workload) -> str:
    """The operator kind: conv2d with groups == IC > 1 is depthwise, other groups > 1 grouped."""
    if workload.op != "conv2d" or workload.groups == 1:
        return workload.op
    return "depthwise" if workload.groups == workload.params[1] else "grouped"


def describe(workload: Workload, target: str) -> np.ndarray:
    """The (``N_DESCRIPTOR``,) float32 descriptor of ``workload`` on ``target``."""
    target = canonical_target(target)
    if target not in TARGETS:
        raise ValueError(f"unknown target {target!r}; use one of {', '.join(TARGETS)}")
    if workload.op not in PARAMS:
        raise ValueError(f"unknown op {workload.op!r}")
    row = np.zeros(N_DESCRIPTOR, np.float32)
    row[KINDS.index(kind(workload))] = 1.0
    base = len(KINDS)
    sizes = list(workload.params) + ([1] * (len(PARAMS[workload.op]) + 1 - len(workload.params))
                                     if workload.op == "conv2d" else [])
    for i, v in enumerate(sizes[:MAX_PARAMS]):
        row[base + i] = math.log2(1 + v)
    base += MAX_PARAMS
    flops, nbytes = workload.flops, workload.nbytes
    row[base:base + 6] = (math.log2(flops), math.log2(nbytes), math.log2(flops / nbytes),
                          math.log2(workload.output.size), math.log2(workload.reduction_length),
                          math.log2(workload.groups))
    base += 6
    for i, e in enumerate(EPILOGUE_OPS):
        row[base + i] = float(e in workload.epilogue)
    base += len(EPILOGUE_OPS)
    row[base + TARGETS.index(target)] = 1.0
    return row


__all__ = ["DESCRIPTOR_NAMES", "KINDS", "N_DESCRIPTOR", "TARGETS", "describe", "kind"]
