"""Seed schedules: where a search starts instead of at random (a tuner's warm start).

``seed_configs(workload, target)`` gives the reference schedule (``default_config``) and, for the
CPU template, a small family of hand-derived micro-kernel schedules built from its knobs the way
one writes a GEMM/convolution kernel by hand:

- the innermost output axis (conv2d's ``ow``, matmul's ``j``) gets a register tile of one vector
  (its largest divisor that fits the host's lanes, or half of them: on AVX-512 machines whose
  FMA units are 256 bits wide, as Zen 4's, a half-width vector runs as fast) and is vectorized;
- the other spatial axes nearest it (conv2d's ``oc`` and ``oh``, matmul's ``i``) get register
  blocks, so that a tile of ``accumulators`` vectors stays in registers (``cache_write``) while
  the reduction runs: the order ``("S1", "R0", "R1", "S2")`` puts the tile innermost;
- the widest reduction axis (input channels, ``k``) gets a small inner tile and the filter's
  window stays in the outer reduction loops; the inner loops are unrolled (``unroll_max_step``);
- the first two outer loops are fused and run in parallel.

Every knob a recipe does not set keeps the reference schedule's value, so the seeds stay valid
configs as the template gains knobs. The GPU template has no hand-derived seeds (yet): its seed
is the reference schedule alone.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from ..hardware.host import host_vector_lanes
from ..hardware.target import Target, get_target
from ..space import Config, ConfigSpace
from ..workloads import Workload
from . import default_config, space_for
from .cpu import CPU_ORDERS, default_cpu_values, micro_kernel_values


@dataclass(frozen=True)
class Recipe:
    """One hand-derived CPU micro-kernel: ``vector`` is the vector tile in multiples of the
    host's lanes (0.5: half a register), ``accumulators`` the vector registers the register
    tile may fill, ``reduce_inner`` the inner tile of the widest reduction axis."""

    vector: float
    accumulators: int
    reduce_inner: int
    unroll: int
    parallel: int = 2


#: in the order a tuner should measure them. Measured on a 2-core Zen 4 (AVX-512), 2 threads,
#: interleaved with oneDNN/MKL (issue 13): the first reached 180 GFLOP/s on C6 (oneDNN 181) and
#: the second and third 88-90 on matmul-1024, where the first gets 42 (its B loads stride 4 KiB)
CPU_RECIPES = (
    Recipe(1.0, 16, 2, 512),
    Recipe(2.0, 16, 2, 512),
    Recipe(1.0, 8, 4, 64),
    Recipe(0.5, 16, 8, 64, parallel=1),
    Recipe(0.5, 16, 4, 512),
    Recipe(0.5, 16, 2, 64),
    Recipe(1.0, 16, 1, 64),
)


def register_file(lanes: int) -> int:
    """Vector registers of the ISA with ``lanes`` float32 lanes: 32 on AVX-512, else 16."""
    return 32 if lanes >= 16 else 16


#: registers a micro-kernel leaves for its input loads and weight broadcasts: C6 with 32
#: accumulators of 16 lanes ran at 31 GFLOP/s against 94 with 16 (1 thread; it spills)
SPARE_REGISTERS = 4


def seed_configs(workload: Workload, target: "str | Target", lanes: "int | None" = None,
                 max_seeds: int = 8) -> list[Config]:
    """The reference schedule, then up to ``max_seeds - 1`` distinct hand-derived schedules
    (CPU template), for a vector width of ``lanes`` float32s (default: the host's,
    ``host_vector_lanes``). Deterministic: the same arguments give the same list."""
    if max_seeds < 1:
        raise ValueError(f"max_seeds must be >= 1, got {max_seeds}")
    target = get_target(target)
    seeds = [default_config(workload, target)]
    if target.template != "cpu":
        return seeds
    if lanes is None:
        lanes = host_vector_lanes()  # loads LLVM (hardware.host imports it on the first call)
    space = space_for(workload, target)
    seen = {seeds[0].index}
    # first the vendor-class kernels (output channels / B columns in the lanes, packed operand:
    # templates/cpu.micro_kernel_values; benchmarks/bench_cpu_packed.py measures them), then
    # the recipes on the classic layout
    vendor_class = [space.from_values(v)
                    for v in micro_kernel_values(workload, lanes, register_file(lanes))]
    for config in vendor_class + [cpu_seed(workload, space, r, lanes) for r in CPU_RECIPES]:
        if len(seeds) >= max_seeds:
            break
        if config is not None and config.index not in seen:
            seen.add(config.index)
            seeds.append(config)
    return seeds


def _largest_divisor(n: int, at_most: float) -> int:
    return max(d for d in range(1, max(1, int(at_most)) + 1) if n % d == 0)


def cpu_seed(workload: Workload, space: ConfigSpace, recipe: Recipe,
             lanes: int) -> "Config | None":
    """``recipe`` applied to ``workload``'s CPU space (None where the workload has no spatial
    axis to vectorize)."""
    op = workload.output.op
    spatial = [ax for ax in op.axes if ax.extent > 1]
    reduce = [ax for ax in op.reduce_axes if ax.extent > 1]
    if not spatial:
        return None
    values = default_cpu_values(workload)
    vec_axis, block_axes = spatial[-1], spatial[:-1][-2:]
    wanted = max(1.0, recipe.vector * lanes)
    vec = _largest_divisor(vec_axis.extent, wanted)
    if vec < wanted / 2:  # a poor fit (ow = 7 in 4 lanes gives 1): fill one register instead
        vec = _largest_divisor(vec_axis.extent, max(wanted, lanes))
    vectors = math.ceil(vec / lanes)
    budget = max(1, min(recipe.accumulators, register_file(lanes) - SPARE_REGISTERS) // vectors)
    tiles = {vec_axis.name: vec}
    # the axis just outside the vector axis (conv2d's oh) gets at most 4 rows, the one before
    # it (oc) the rest of the budget: channels reuse each input load, rows each weight
    for i, ax in enumerate(reversed(block_axes)):
        share = budget if i == len(block_axes) - 1 else min(4, budget)
        tiles[ax.name] = _largest_divisor(ax.extent, share)
        budget = max(1, budget // tiles[ax.name])
    for ax in spatial:
        values[f"tile_{ax.name}"] = (ax.extent // tiles.get(ax.name, 1), 1, tiles.get(ax.name, 1))
    widest = max(reduce, key=lambda ax: ax.extent, default=None)
    for ax in reduce:
        inner = _largest_divisor(ax.extent, recipe.reduce_inner) if ax is widest else 1
        values[f"tile_{ax.name}"] = (ax.extent // inner, inner)
    values.update(reorder=CPU_ORDERS[0], vectorize="inner", unroll_max_step=recipe.unroll,
                  parallel=recipe.parallel, cache_write=1)
    return space.from_values(values)


__all__ = ["CPU_RECIPES", "SPARE_REGISTERS", "Recipe", "cpu_seed", "register_file", "seed_configs"]
