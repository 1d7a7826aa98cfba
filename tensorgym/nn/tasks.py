"""The tasks of a model: ``ModelTask`` (one tunable operator with its fused epilogue, its shape,
how often it occurs and the traced nodes it stands for) and ``TaskTable`` (a model's tasks,
de-duplicated, and the operator nodes that fit no task).

Keys (issue 32's spelling): the operator's shape, then ``+`` and each epilogue op in order::

    conv2d:N,IC,H,W,OC,K,STRIDE,PAD[,GROUPS]   conv2d:1,64,56,56,64,3,1,1+bias+relu
    dense:ROWS,IN,OUT                           dense:128,768,3072+bias+gelu
    batch_matmul:B,M,K,N                        batch_matmul:12,128,64,128
    matmul:M,N,K                                (tensorgym's matmul: a plain 2-D torch.matmul)

A conv2d key has a ninth field, GROUPS, only when groups != 1 (depthwise: GROUPS == IC). A task
key is exactly its ``tensorgym.workloads`` key (``ModelTask.workload()``), epilogue included.
Nothing here imports torch.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from ..errors import TensorGymError
from ..workloads import EPILOGUE_OPS, Workload

#: The sizes of each operator, in key order (conv2d's GROUPS is the separate ``groups`` field).
PARAMS: dict[str, tuple[str, ...]] = {
    "conv2d": ("N", "IC", "H", "W", "OC", "K", "STRIDE", "PAD"),
    "dense": ("ROWS", "IN", "OUT"),
    "batch_matmul": ("B", "M", "K", "N"),
    "matmul": ("M", "N", "K"),
}

# EPILOGUE_OPS (tensorgym.workloads): an epilogue holds bias first (if any), then at most one
# activation and at most one residual add, in the order they occur in the model (ResNet: bias,
# add, relu).


class TaskKeyError(TensorGymError, ValueError):
    """A task key that is not ``op:sizes[+epilogue...]``."""


def _key(op: str, params: tuple[int, ...], groups: int, epilogue: tuple[str, ...]) -> str:
    sizes = params + ((groups,) if op == "conv2d" and groups != 1 else ())
    return f"{op}:{','.join(map(str, sizes))}" + "".join(f"+{e}" for e in epilogue)


def _flops(op: str, p: tuple[int, ...], groups: int) -> int:
    """2 * multiply-adds of the operator (the epilogue is not counted)."""
    if op == "conv2d":
        n, ic, h, w, oc, k, s, pad = p
        oh, ow = (h + 2 * pad - k) // s + 1, (w + 2 * pad - k) // s + 1
        return 2 * n * oc * oh * ow * (ic // groups) * k * k
    if op == "dense":
        rows, cin, cout = p
        return 2 * rows * cin * cout
    if op == "batch_matmul":
        b, m, k, n = p
        return 2 * b * m * k * n
    m, n, k = p
    return 2 * m * n * k


@dataclass(frozen=True)
class ModelTask:
    """One tunable task of a model: ``op`` (a key of ``PARAMS``), ``params`` (its sizes in key
    order; ``dims`` names them), ``groups`` (conv2d; 1 otherwise), ``epilogue`` (the fused ops
    that follow it, in order), ``count`` (how often it occurs in the model: its weight) and
    ``nodes`` (the traced nodes it stands for, one per occurrence)."""

    op: str
    params: tuple[int, ...]
    groups: int = 1
    epilogue: tuple[str, ...] = ()
    count: int = 1
    nodes: tuple[str, ...] = field(default=(), compare=False)

    def __post_init__(self) -> None:
        if self.op not in PARAMS or len(self.params) != len(PARAMS[self.op]):
            raise TaskKeyError(f"{self.op} takes sizes {','.join(PARAMS.get(self.op, ()))}, "
                               f"got {self.params!r}")
        bad = [e for e in self.epilogue if e not in EPILOGUE_OPS]
        if bad:
            raise TaskKeyError(f"unknown epilogue op(s) {bad}; use {', '.join(EPILOGUE_OPS)}")

    @property
    def key(self) -> str:
        return _key(self.op, self.params, self.groups, self.epilogue)

    @property
    def operator_key(self) -> str:
        """The key without the epilogue."""
        return _key(self.op, self.params, self.groups, ())

    @property
    def signature(self) -> tuple[str, tuple[int, ...], int, tuple[str, ...]]:
        """(op, params, groups, epilogue): what the key spells (``parse_key`` gives it back)."""
        return self.op, self.params, self.groups, self.epilogue

    @property
    def dims(self) -> dict[str, int]:
        """The sizes by name, e.g. ``{"ROWS": 128, "IN": 768, "OUT": 3072}``."""
        d = dict(zip(PARAMS[self.op], self.params))
        if self.op == "conv2d":
            d["GROUPS"] = self.groups
        return d

    @property
    def flops(self) -> int:
        """FLOPs of one occurrence: 2 * multiply-adds, the epilogue not counted."""
        return _flops(self.op, self.params, self.groups)

    def workload(self, name: str = "") -> Workload:
        """The task as a ``tensorgym.workloads.Workload``: its operator and fused epilogue,
        ``workload().key == key``."""
        sizes = self.params + ((self.groups,) if self.op == "conv2d" else ())
        return Workload(self.op, sizes, name, epilogue=self.epilogue)


def parse_key(key: str) -> tuple[str, tuple[int, ...], int, tuple[str, ...]]:
    """``conv2d:1,32,112,112,32,3,1,1,32+bias+relu6`` -> (op, params, groups, epilogue)."""
    head, *epilogue = key.strip().split("+")
    op, sep, rest = head.partition(":")
    n = len(PARAMS.get(op, ()))
    parts = rest.split(",")
    if not sep or op not in PARAMS or not all(re.fullmatch(r"[0-9]+", p) for p in parts) or \
            len(parts) not in ((n, n + 1) if op == "conv2d" else (n,)):
        raise TaskKeyError(f"bad task key {key!r}: expected one of "
                           + ", ".join(f"{o}:{','.join(p)}" for o, p in PARAMS.items())
                           + " (conv2d may add GROUPS), then +bias, +relu, ...")
    sizes = tuple(int(p) for p in parts)
    groups = sizes[n] if len(sizes) > n else 1
    task = ModelTask(op, sizes[:n], groups, tuple(epilogue))  # checks the epilogue
    return task.signature


@dataclass(frozen=True)
class UntunableNode:
    """A conv2d/linear/matmul node that fits no task, and why."""

    node: str
    op: str
    reason: str


@dataclass(frozen=True)
class TaskTable:
    """A model's tasks (equal keys merged, counts added) in order of first occurrence, and the
    operator nodes that did not fit a task."""

    model: str
    tasks: tuple[ModelTask, ...]
    untunable: tuple[UntunableNode, ...] = ()

    @property
    def instances(self) -> int:
        """Operator occurrences the tasks stand for (the sum of their counts)."""
        return sum(t.count for t in self.tasks)

    @property
    def flops(self) -> int:
        """FLOPs of one pass through the tasks (each task's FLOPs times its count)."""
        return sum(t.flops * t.count for t in self.tasks)

    def count(self, op: Optional[str] = None) -> int:
        """Occurrences of ``op`` (all operators if None)."""
        return sum(t.count for t in self.tasks if op is None or t.op == op)

    def find(self, key: str) -> ModelTask:
        for t in self.tasks:
            if t.key == key:
                return t
        raise KeyError(key)

    def totals(self) -> str:
        return (f"{self.model}: {len(self.tasks)} tasks, {self.instances} instances, "
                f"{self.flops / 1e9:.3f} GFLOP; untunable nodes: {len(self.untunable)}")

    def markdown(self) -> str:
        lines = [f"## {self.model}", "",
                 "| key | op | epilogue | GFLOP | count |",
                 "|---|---|---|---:|---:|"]
        for t in self.tasks:
            lines.append(f"| `{t.key}` | {t.op} | {'+'.join(t.epilogue) or '-'} | "
                         f"{t.flops / 1e9:.4g} | {t.count} |")
        lines += ["", self.totals()]
        if self.untunable:
            lines += ["", "| untunable node | op | reason |", "|---|---|---|"]
            lines += [f"| {u.node} | {u.op} | {u.reason} |" for u in self.untunable]
        return "\n".join(lines) + "\n"


def merge(model: str, tasks: list[ModelTask], untunable: list[UntunableNode]) -> TaskTable:
    """De-duplicate ``tasks`` (each of count 1 or more) by key, keeping first-occurrence order."""
    merged: dict[str, ModelTask] = {}
    for t in tasks:
        if t.key in merged:
            m = merged[t.key]
            merged[t.key] = ModelTask(m.op, m.params, m.groups, m.epilogue, m.count + t.count,
                                      m.nodes + t.nodes)
        else:
            merged[t.key] = t
    return TaskTable(model, tuple(merged.values()), tuple(untunable))
