"""The GPU template (OpenCL and CUDA share it), after AutoTVM's direct conv2d / dense CUDA
templates.

Every output axis is split in four levels ``(block, vthread, thread, inner)``: the block level is
bound to ``blockIdx``, the thread level to ``threadIdx``, and a thread computes a register tile of
``vthread x inner`` outputs per axis (virtual threads interleave with stride ``thread * inner``).
Reduction axes are split in two levels ``(outer, inner)`` for conv2d (AutoTVM's ``tile_rc/ry/rx``)
and three ``(outer, middle, inner)`` for matmul; per outer step the block cooperatively loads the
tiles of both operands into shared memory between barriers. ``auto_unroll_max_step`` unrolls the
innermost compute loops whose trip count stays within it; ``unroll_explicit`` chooses between an
unroll pragma and unrolling in the loop AST. ``vec_load`` loads 2 or 4 contiguous floats per
thread where the operand allows it (only present when some operand could).

Two knobs shape the shared-memory tiles (issue 37), both off in a config written before they
existed: ``double_buffer`` keeps two copies of each tile, so the block loads the next reduction
step's tiles while it computes on the current ones, with one barrier per step instead of two;
``smem_pad`` pads each tile's rows (by one float, or by the vector width where loads are vectors,
which keeps them aligned) so that threads reading down a column of a tile whose row length is a
multiple of 32 banks do not all hit one bank. ``vec_shared`` reads an operand's shared tile as
float2/float4 vectors in the arithmetic where a thread's register tile runs along the tile's
rows: the ``inner`` factor of an output axis that alone indexes the operand's last dimension
(matmul's and batch_matmul's B along ``j``), 2 or 4 wide, every vector aligned. It takes
effect under the unroll pragma only: ``unroll_explicit`` copies the arithmetic per step in the
loop AST, and a vector loop in each copy is one loop per copy, which the fast featurizer
(``features/nest_gpu.py``) does not model.

This module also holds the pure tile arithmetic (:func:`gpu_plan`) that both the limit check and
the lowering read, so the two can never disagree.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Mapping

from .. import te
from ..errors import InvalidConfigError
from ..hardware.target import DEFAULT_GPU_LIMITS
from ..space import Config, ConfigSpace, SpaceKey, other_knob, split_knob
from ..workloads import Workload

SPATIAL_LEVELS = 4
REDUCE_LEVELS = {"conv2d": 2, "matmul": 3, "dense": 3, "batch_matmul": 3}
UNROLL_STEPS = (0, 16, 64, 512)
VECTOR_WIDTHS = (1, 2, 4)

# Registers a thread needs besides its accumulator (indices, addresses, the loaded operands):
# a rough estimate, used only to reject configs that cannot possibly fit.
REGISTER_OVERHEAD = 24
FLOAT_BYTES = 4


def gpu_space(workload: Workload) -> ConfigSpace:
    """The knobs of the GPU template; one space (``<op>/gpu``) for both GPU targets."""
    if workload.op not in REDUCE_LEVELS:
        raise InvalidConfigError(f"no GPU template for workload op {workload.op!r}")
    op = workload.output.op
    knobs = [split_knob(f"tile_{ax.name}", ax.extent, SPATIAL_LEVELS)
             for ax in op.axes if ax.extent > 1]
    knobs += [split_knob(f"tile_{ax.name}", ax.extent, REDUCE_LEVELS[workload.op])
              for ax in op.reduce_axes if ax.extent > 1]
    knobs += [other_knob("auto_unroll_max_step", UNROLL_STEPS),
              other_knob("unroll_explicit", (0, 1))]
    if any(o.vector_dim is not None for o in operands(workload)):
        knobs.append(other_knob("vec_load", VECTOR_WIDTHS))
    knobs += [other_knob("double_buffer", (0, 1), added=True),
              other_knob("smem_pad", (0, 1), added=True)]
    if any(row_axis(o, op.axes) is not None for o in operands(workload)):
        knobs.append(other_knob("vec_shared", (0, 1), added=True))
    return ConfigSpace(f"{workload.op}/gpu", tuple(knobs), SpaceKey(workload.key, "gpu"))


# ---------------------------------------------------------------- operand analysis


@dataclass(frozen=True)
class Affine:
    """``const + sum(coef[axis] * axis)``: one index of an operand."""

    coefs: tuple[tuple[te.IterVar, int], ...]
    const: int

    def coef(self, axis: te.IterVar) -> int:
        return dict(self.coefs).get(axis, 0)


def affine(e: te.Expr) -> Affine:
    """The affine form of an index expression; raises if it is not affine with constant
    coefficients (every workload we template indexes its operands affinely)."""
    if isinstance(e, te.IterVar):
        return Affine(((e, 1),), 0)
    if isinstance(e, te.Const) and e.dtype == "int":
        return Affine((), int(e.value))
    if isinstance(e, te.Binary) and e.op in "+-":
        a, b = affine(e.a), affine(e.b)
        sign = 1 if e.op == "+" else -1
        coefs = dict(a.coefs)
        for ax, c in b.coefs:
            coefs[ax] = coefs.get(ax, 0) + sign * c
        return Affine(tuple((ax, c) for ax, c in coefs.items() if c), a.const + sign * b.const)
    if isinstance(e, te.Binary) and e.op == "*":
        a, b = affine(e.a), affine(e.b)
        if not b.coefs:
            a, b = b, a
        if a.coefs:
            raise InvalidConfigError("operand index is not affine (product of two axes)")
        return Affine(tuple((ax, c * a.const) for ax, c in b.coefs if c * a.const), a.const * b.const)
    raise InvalidConfigError(f"operand index {e!r} is not affine")


@dataclass(frozen=True)
class Operand:
    """One factor of the reduction body, e.g. ``pad[n, rc, oh*s+ry, ow*s+rx]``."""

    tensor: te.Tensor
    index: tuple[Affine, ...]
    vector_dim: "te.IterVar | None"  # the axis of a contiguous last index, if vector loads may apply


def operands(workload: Workload) -> tuple[Operand, Operand]:
    body = workload.output.op.body.body
    if not (isinstance(body, te.Binary) and body.op == "*"
            and all(isinstance(x, te.TensorLoad) for x in (body.a, body.b))):
        raise InvalidConfigError("the GPU template needs a reduction of a product of two loads")
    out = []
    for load in (body.a, body.b):
        index = tuple(affine(i) for i in load.indices)
        moving = [(ax, c) for ax, c in index[-1].coefs if ax.extent > 1]
        vec_axis = None
        if (isinstance(load.tensor.op, te.PlaceholderOp) and index[-1].const == 0
                and len(moving) == 1 and moving[0][1] == 1 and load.tensor.shape[-1] % 2 == 0):
            vec_axis = moving[0][0]
        out.append(Operand(load.tensor, index, vec_axis))
    return out[0], out[1]


# ---------------------------------------------------------------- tile arithmetic


@dataclass(frozen=True)
class GpuPlan:
    """What a config means: per-axis factors, launch shape, shared tiles, register tile."""

    spatial: tuple[tuple[te.IterVar, tuple[int, ...]], ...]  # (axis, (block, vthread, thread, inner))
    reduce: tuple[tuple[te.IterVar, tuple[int, ...]], ...]  # (axis, (outer, [middle,] inner))
    shared_shapes: tuple[tuple[int, ...], ...]  # one per operand: the tile, unpadded
    vector_widths: tuple[int, ...]  # per operand: 1 (scalar) or the legal vec_load width
    unroll_max_step: int
    unroll_explicit: bool
    stages: int = 1  # copies of each shared tile: 2 with double_buffer (and a reduction to step)
    pads: tuple[int, ...] = ()  # per operand: floats added to each row of its shared tile
    # vec_shared: (operand, output axis, width) read as vectors from shared memory, or None
    shared_vector: "tuple[int, te.IterVar, int] | None" = None

    @property
    def reduce_steps(self) -> int:
        """Outer reduction steps: how many times the block loads its shared tiles."""
        return math.prod(f[0] for _, f in self.reduce)

    def shared_buffer_shape(self, i: int) -> tuple[int, ...]:
        """Operand ``i``'s shared allocation: (stages,) + the tile, its last dim padded."""
        shape = self.shared_shapes[i]
        pad = self.pads[i] if self.pads else 0
        return (self.stages,) * (self.stages > 1) + shape[:-1] + (shape[-1] + pad,)

    @property
    def threads(self) -> tuple[int, ...]:
        return tuple(f[2] for _, f in self.spatial)

    @property
    def blocks(self) -> tuple[int, ...]:
        return tuple(f[0] for _, f in self.spatial)

    @property
    def threads_per_block(self) -> int:
        return math.prod(self.threads)

    @property
    def accumulator_size(self) -> int:
        return math.prod(f[1] * f[3] for _, f in self.spatial)

    @property
    def shared_bytes(self) -> int:
        return FLOAT_BYTES * sum(math.prod(self.shared_buffer_shape(i))
                                 for i in range(len(self.shared_shapes)))

    def tile_extent(self, axis: te.IterVar) -> int:
        """Extent of ``axis`` covered by one block (spatial) or one outer step (reduction)."""
        for ax, f in self.spatial:
            if ax is axis:
                return f[1] * f[2] * f[3]
        for ax, f in self.reduce:
            if ax is axis:
                return math.prod(f[1:])
        raise KeyError(axis)

    def launch_dims(self, extents: tuple[int, ...]) -> tuple[int, int, int]:
        """Per-axis extents packed into (x, y, z): last axis on x; leading axes fuse into z."""
        nontrivial = [e for e in extents if e > 1]
        dims = list(reversed(nontrivial[-2:])) + [math.prod(nontrivial[:-2])]
        return tuple((dims + [1, 1, 1])[:3])  # type: ignore[return-value]

    @property
    def launch(self) -> dict:
        return {"grid": self.launch_dims(self.blocks), "block": self.launch_dims(self.threads)}


def gpu_plan(workload: Workload, config: Config) -> GpuPlan:
    key = config.space_key
    if key is None or key.template != "gpu" or key.workload_key != workload.key:
        raise InvalidConfigError(f"config of space {key or config.space_name} is not a GPU "
                                 f"config for {workload.label}")
    op = workload.output.op
    v = config.values
    nred = REDUCE_LEVELS[workload.op]
    spatial = tuple((ax, tuple(v.get(f"tile_{ax.name}", (1, 1, 1, ax.extent)))) for ax in op.axes)
    reduce = tuple((ax, tuple(v.get(f"tile_{ax.name}", (1,) * (nred - 1) + (ax.extent,))))
                   for ax in op.reduce_axes)
    for ax, f in spatial + reduce:
        if math.prod(f) != ax.extent:
            raise InvalidConfigError(f"tile_{ax.name}={f} does not multiply to {ax.extent}")
    plan = GpuPlan(spatial, reduce, (), (), int(v["auto_unroll_max_step"]),
                   bool(v["unroll_explicit"]))
    shapes, widths = [], []
    for o in operands(workload):
        shapes.append(tuple(sum(c * (plan.tile_extent(ax) - 1) for ax, c in a.coefs) + 1
                            for a in o.index))
        widths.append(_vector_width(o, plan, workload, int(v.get("vec_load", 1))))
    stages = 2 if v.get("double_buffer", 0) and plan.reduce_steps > 1 else 1
    pads = tuple(max(1, w) if v.get("smem_pad", 0) and len(sh) > 1 and sh[-1] > 1 else 0
                 for sh, w in zip(shapes, widths))
    plan = GpuPlan(spatial, reduce, tuple(shapes), tuple(widths), plan.unroll_max_step,
                   plan.unroll_explicit, stages, pads)
    if v.get("vec_shared", 0) and not plan.unroll_explicit:
        plan = _with_shared_vector(plan, workload)
    return plan


def row_axis(o: Operand, axes: tuple) -> "te.IterVar | None":
    """The output axis that alone indexes ``o``'s last dimension with coefficient 1, if any."""
    last = o.index[-1]
    if len(last.coefs) == 1 and last.coefs[0][1] == 1 and last.coefs[0][0] in axes:
        return last.coefs[0][0]
    return None


def _with_shared_vector(plan: GpuPlan, workload: Workload) -> GpuPlan:
    """``plan`` reading the first operand it can as vectors from shared memory (see the module
    docstring): the row axis's ``inner`` factor is the width, 2 or 4, and the tile's rows
    (padding included) keep every vector aligned."""
    factors = dict(plan.spatial)
    for i, o in enumerate(operands(workload)):
        ax = row_axis(o, workload.output.op.axes)
        if ax is None:
            continue
        width = factors[ax][3]
        row = plan.shared_buffer_shape(i)[-1]
        if width in (2, 4) and row % width == 0:
            return dataclasses.replace(plan, shared_vector=(i, ax, width))
    return plan


def _vector_width(o: Operand, plan: GpuPlan, workload: Workload, width: int) -> int:
    """``width`` if every vector of the operand's shared tile starts at a multiple of ``width``
    in memory (so CUDA's float4 loads are aligned), else 1."""
    if width == 1 or o.vector_dim is None:
        return 1
    tile = plan.tile_extent(o.vector_dim)
    # The tile's start along the last dim is a multiple of ``tile``; rows start at multiples of
    # the row length.
    if tile % width or o.tensor.shape[-1] % width:
        return 1
    return width


def check_gpu_config(workload: Workload, config: Config,
                     limits: "Mapping | None" = None) -> GpuPlan:
    """Reject, before any compilation, a config the device cannot launch. ``limits`` is the
    runtime's ``limits()`` dict (missing keys are not checked); returns the plan when valid."""
    lim = dict(DEFAULT_GPU_LIMITS if limits is None else limits)
    plan = gpu_plan(workload, config)
    block, grid = plan.launch["block"], plan.launch["grid"]
    problems = []
    if "max_threads_per_block" in lim and plan.threads_per_block > lim["max_threads_per_block"]:
        problems.append(f"{plan.threads_per_block} threads per block > "
                        f"{lim['max_threads_per_block']}")
    for name, dims, key in (("block", block, "max_block_dims"), ("grid", grid, "max_grid_dims")):
        if key in lim:
            for axis, d, m in zip("xyz", dims, lim[key]):
                if d > m:
                    problems.append(f"{name} dim {axis} = {d} > {m}")
    if "max_shared_memory_per_block" in lim and plan.shared_bytes > lim["max_shared_memory_per_block"]:
        problems.append(f"{plan.shared_bytes} bytes of shared memory > "
                        f"{lim['max_shared_memory_per_block']}")
    regs = plan.accumulator_size + REGISTER_OVERHEAD
    if "max_registers_per_thread" in lim and regs > lim["max_registers_per_thread"]:
        problems.append(f"~{regs} registers per thread (accumulator {plan.accumulator_size}) > "
                        f"{lim['max_registers_per_thread']}")
    if "max_registers_per_block" in lim and regs * plan.threads_per_block > lim["max_registers_per_block"]:
        problems.append(f"~{regs * plan.threads_per_block} registers per block > "
                        f"{lim['max_registers_per_block']}")
    if problems:
        raise InvalidConfigError(f"invalid GPU config for {workload.label} (config {config.index}): "
                                 + "; ".join(problems))
    return plan


def sample_valid_configs(workload: Workload, n: int, rng, limits: "Mapping | None" = None,
                         max_tries: int = 100_000) -> list[Config]:
    """``n`` distinct uniformly drawn configs that pass :func:`check_gpu_config` (rejection
    sampling: what a random-search tuner sees after the pre-build check)."""
    space = gpu_space(workload)
    out: list[Config] = []
    seen: set[int] = set()
    for _ in range(max_tries):
        if len(out) == n:
            break
        c = space.sample(rng, 1)[0]
        if c.index in seen:
            continue
        seen.add(c.index)
        try:
            check_gpu_config(workload, c, limits)
        except InvalidConfigError:
            continue
        out.append(c)
    return out


def default_gpu_values(workload: Workload) -> dict:
    """A plain hand-written GPU schedule, the reference rewards are measured against: one
    output per thread, up to 16 x 8 threads over the two innermost output axes, the channel
    (or k) reduction staged through shared memory 8 (16) at a time, no unrolling."""
    space = gpu_space(workload)
    op = workload.output.op
    thread_caps = {ax: cap for ax, cap in zip(reversed(op.axes), (16, 8))}
    values = {}
    for ax in op.axes:
        if ax.extent > 1:
            t = max(d for d in range(1, thread_caps.get(ax, 1) + 1) if ax.extent % d == 0)
            values[f"tile_{ax.name}"] = (ax.extent // t, 1, t, 1)
    levels = REDUCE_LEVELS[workload.op]
    for i, ax in enumerate(op.reduce_axes):
        if ax.extent > 1:
            cap = (8 if levels == 2 else 16) if i == 0 else ax.extent
            r = max(d for d in range(1, cap + 1) if ax.extent % d == 0)
            values[f"tile_{ax.name}"] = (ax.extent // r,) + (1,) * (levels - 2) + (r,)
    values.update(auto_unroll_max_step=0, unroll_explicit=0, double_buffer=0, smem_pad=0)
    if "vec_shared" in {k.name for k in space.knobs}:
        values["vec_shared"] = 0
    if "vec_load" in {k.name for k in space.knobs}:
        values["vec_load"] = 1
    return values
