import numpy as np

from tensorgym import loopast as A
from tensorgym.lower import lower
from tensorgym.templates import space_for
from tensorgym.workloads import get_workload, matmul


def test_lowering_is_pure_and_printable():
    w = get_workload("conv2d-C6")
    space = space_for(w, "cpu")
    c = space.sample(np.random.default_rng(0), 1)[0]
    for pack in (0, 1):
        c = space.from_values(dict(c.values, pack_weight=pack))
        a, b = str(lower(w, c)), str(lower(w, c))
        assert a == b
        oc_block = c["tile_oc"][-1]
        weight = (f"weight[{128 // oc_block}, 128, 3, 3, {oc_block}]" if pack
                  else "weight[128, 128, 3, 3]")
        assert a.startswith(f"def conv2d_kernel(data[1, 128, 28, 28], {weight}")
        assert "for " in a and "conv[" in a


def test_loop_extents_cover_the_iteration_space():
    """The product of the extents of the loops around the update is the full iteration space."""
    w = matmul(24, 36, 12)
    space = space_for(w, "cpu")
    for c in space.sample(np.random.default_rng(1), 30):
        p = lower(w, c)

        def visit(s, prod):
            if isinstance(s, A.For):
                yield from visit(s.body, prod * s.extent)
            elif isinstance(s, (A.Seq,)):
                for x in s.stmts:
                    yield from visit(x, prod)
            elif isinstance(s, A.Allocate):
                yield from visit(s.body, prod)
            elif isinstance(s, A.Store) and isinstance(s.value, A.BinOp):
                yield prod

        assert list(visit(p.body, 1)) == [24 * 36 * 12], c


def test_cache_write_allocates_local_accumulator():
    w = matmul(32, 32, 32)
    space = space_for(w, "cpu")
    base = space.sample(np.random.default_rng(2), 1)[0].values
    with_acc = lower(w, space.from_values(dict(base, cache_write=1)))
    without = lower(w, space.from_values(dict(base, cache_write=0)))
    local = [n for n in A.walk(with_acc.body) if isinstance(n, A.Allocate)]
    assert local and local[0].buffer.scope == "local"
    assert not [n for n in A.walk(without.body) if isinstance(n, A.Allocate)]


def test_only_the_reduction_nest_is_unrolled_around_a_local_accumulator():
    """With cache_write, ``unroll_max_step`` unrolls the update's nest; the accumulator's
    zeroing and write-back (once per tile) stay loops. Without it the zeroing of the output
    tile is unrolled as before."""
    w = get_workload("conv2d-C6")
    space = space_for(w, "cpu")
    # unroll 512, cache_write 1, an inner tile of 224 vectors
    c = space.from_values({"tile_oc": (2, 2, 32), "tile_oh": (1, 14, 2), "tile_ow": (7, 1, 4),
                           "tile_rc": (16, 8), "tile_ry": (1, 3), "tile_rx": (1, 3),
                           "reorder": ("R0", "S1", "R1", "S2"), "vectorize": "inner",
                           "unroll_max_step": 512, "parallel": 2, "cache_write": 1,
                           "inline_pad": 1, "vector_axis": "oc", "pack_weight": 1})
    assert c["unroll_max_step"] == 512 and c["cache_write"] == 1

    def unrolled_stores(program):
        """Per store, in program order: its buffer, whether it updates, whether an unrolled
        loop encloses it."""
        inside = {id(n) for f in A.walk(program.body) if isinstance(f, A.For)
                  and f.kind == "unrolled" for n in A.walk(f.body)}
        return [(s.buffer.name, isinstance(s.value, A.BinOp), id(s) in inside)
                for s in A.walk(program.body) if isinstance(s, A.Store)]

    assert unrolled_stores(lower(w, c)) == [("acc", False, False), ("acc", True, True),
                                            ("conv", False, False)]
    plain = unrolled_stores(lower(w, space.from_values(dict(c.values, cache_write=0))))
    assert plain == [("conv", False, True), ("conv", True, True)]


def test_padding_stage_is_inlined_or_materialised():
    w = get_workload("conv2d-C6")
    space = space_for(w, "cpu")
    base = space.get(0).values
    assert lower(w, space.from_values(dict(base, inline_pad=1))).workspaces == ()
    ws = lower(w, space.from_values(dict(base, inline_pad=0))).workspaces
    assert [b.shape for b in ws] == [(1, 128, 30, 30)]
