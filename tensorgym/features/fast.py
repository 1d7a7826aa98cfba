"""The fast path of ``featurize``: ``relation`` and ``context`` rows of a batch of configs from the
template's loop structure (``nest_cpu``, ``nest_gpu``, analysed by ``nest``), without lowering
each config. Its rows equal those of the lowering path (``lower`` + ``context.summarize``) bit for
bit; ``supports`` says which workloads and templates it covers, and everything else takes the
lowering path.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Sequence

import numpy as np

from .. import te
from ..errors import InvalidConfigError
from ..space import Config
from ..templates.gpu import REDUCE_LEVELS, operands
from ..workloads import Workload
from .context import N_CONTEXT
from .nest import analyze, inlined_source
from .nest_cpu import cpu_groups
from .nest_gpu import gpu_groups
from .relation import RELATION_COLUMNS, relation_rows

FAST_MODES = ("relation", "context")
_GROUPS = {"cpu": cpu_groups, "gpu": gpu_groups}  # template -> its nest builder
# Below these batch sizes lowering each config is quicker than the fast path's fixed cost
# (about 4 ms per batch on the CPU, where lowering a C6 config takes 0.45 ms; 4 ms for a GPU
# kernel, whose lowering is slow; ``benchmarks/bench_featurize.py`` times calls of 16 configs).
MIN_BATCH = {"cpu": 8, "gpu": 2}
CHUNK = 512  # configs analysed at once: arrays are loops x accesses x dims x n, and past a few
# MiB each (2048 C6 configs: ~10 MiB) an analysis runs at half the speed per config


def supports(workload: Workload, template: str, mode: str) -> bool:
    """Whether the fast path computes ``mode`` rows of ``workload`` for configs of a space of
    ``template`` (``config.template``: "cpu" or "gpu")."""
    return mode in FAST_MODES and _template_ok(workload, template)


def worthwhile(workload: Workload, template: str, mode: str, n: int) -> bool:
    """Whether ``featurize`` should take the fast path for ``n`` configs of ``template``."""
    return n >= MIN_BATCH.get(template, 1) and supports(workload, template, mode)


@lru_cache(maxsize=256)
def _template_ok(workload: Workload, target: str) -> bool:
    out = workload.output
    if workload.op not in REDUCE_LEVELS or target not in _GROUPS:
        return False
    if target == "gpu" and sum(ax.extent > 1 for ax in out.op.axes) > 3:
        return False  # more than three bound axes: lowering fuses some into one dimension
    tensors = [*workload.inputs, out]
    producers = [t for t in te.input_tensors(out) if isinstance(t.op, te.ComputeOp)]
    if any(t.dtype != "float32" for t in tensors + producers) or len(producers) > 1:
        return False
    if any(inlined_source(t) is None for t in producers):
        return False
    if not any(ax.extent > 1 for ax in out.op.reduce_axes):
        return False  # no reduction loop: lowering merges statements the nest keeps apart
    if not any(ax.extent > 1 for ax in out.op.axes):
        return False  # a single output element: nothing to tile, not worth a nest
    try:
        operands(workload)
    except InvalidConfigError:  # not a reduction of a product of two affine loads
        return False
    return True


def fast_rows(workload: Workload, configs: Sequence[Config], mode: str,
              max_loops: int) -> np.ndarray:
    """float32 (len(configs), row length) rows of a non-empty batch of configs of one template
    (``supports`` must hold); raises ``nest.Unsupported`` for knob values it does not model."""
    templates = {c.template for c in configs}
    if len(templates) != 1 or mode not in FAST_MODES:
        raise ValueError(f"fast_rows takes configs of one template and a mode in {FAST_MODES}, "
                         f"got templates {sorted(templates)} and mode {mode!r}")
    groups = _GROUPS[templates.pop()]
    out = None
    for start in range(0, len(configs), CHUNK):
        chunk = configs[start:start + CHUNK]
        for idx, nest_ in groups(workload, chunk):
            s = analyze(nest_, RELATION_COLUMNS if mode == "relation" else None)
            loops = (relation_rows(s.context, s.present) if mode == "relation"
                     else _context_rows(s.context, s.present, max_loops))
            if out is None:
                out = np.empty((len(configs), loops.shape[1] + s.program.shape[1]), np.float32)
            out[start + idx, :loops.shape[1]] = loops
            out[start + idx, loops.shape[1]:] = s.program
    return out


def _context_rows(z: np.ndarray, present: np.ndarray, max_loops: int) -> np.ndarray:
    """The context vectors (``z`` (N_CONTEXT, loops, n)) of the loops lowering keeps, in
    pre-order, zero-padded or truncated to ``max_loops`` rows, flattened."""
    n = present.shape[1]
    n_rows = min(max_loops, int(present.sum(axis=0).max(initial=0)))
    order = np.argsort(~present, axis=0, kind="stable")[:n_rows]
    kept = np.take_along_axis(present, order, axis=0)
    flat = np.zeros((n, max_loops, N_CONTEXT), np.float32)
    flat[:, :len(order)] = np.where(kept, z[:, order, np.arange(n)], 0).transpose(2, 1, 0)
    return flat.reshape(n, -1)
