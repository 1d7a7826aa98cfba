"""Generated CPU kernels against NumPy, compiled and run in-process for speed."""
import numpy as np
import pytest

from tensorgym import loopast as A
from tensorgym.hardware.cpu import CPURuntime
from tensorgym.measure.worker import tolerance
from tensorgym.lower import lower
from tensorgym.templates import default_config, space_for

from .conftest import SMALL_WORKLOADS

RT = CPURuntime()


def run_config(w, c, rt=RT):
    p = lower(w, c)
    kernel = rt.load(rt.compile(rt.render(p), p), p)
    ins = w.random_inputs(3)
    bufs = kernel.alloc(ins)
    kernel.time(bufs, 1)
    out = kernel.read_output(bufs)
    ref = w.reference(ins)
    return p, float(np.abs(out - ref).max() / np.abs(ref).max())


def kinds(p):
    return {n.kind for n in A.walk(p.body) if isinstance(n, A.For)}


@pytest.mark.parametrize("w", SMALL_WORKLOADS, ids=lambda w: w.key)
def test_random_configs_match_numpy(w):
    space = space_for(w, "cpu")
    configs = space.sample(np.random.default_rng(hash(w.key) % 2**32), 12)
    seen = set()
    for c in configs + [default_config(w, "cpu")]:
        p, err = run_config(w, c)
        assert err <= tolerance(w), (c, err)
        seen |= kinds(p)
    assert {"parallel", "vectorized"} <= seen  # these samples exercise both


@pytest.mark.parametrize("w", SMALL_WORKLOADS[:3], ids=lambda w: w.key)
def test_every_knob_value_is_correct(w):
    """Each option of every non-split knob, on top of a random base."""
    space = space_for(w, "cpu")
    rng = np.random.default_rng(5)
    for i, knob in enumerate(space.knobs):
        if knob.kind == "split":
            continue
        base = list(space.sample(rng, 1)[0].choices)
        for opt in range(knob.size):
            base[i] = opt
            c = space.from_choices(base)
            _, err = run_config(w, c)
            assert err <= tolerance(w), (c, err)


def test_vectorized_padding_uses_masked_loads():
    w = SMALL_WORKLOADS[2]
    space = space_for(w, "cpu")
    c = space.from_values(dict(space.sample(np.random.default_rng(0), 1)[0].values,
                               inline_pad=1, vectorize="inner", reorder=("S1", "R0", "R1", "S2"),
                               tile_ow=(1, 1, 10), vector_axis="ow"))
    src = RT.render(lower(w, c))
    assert "llvm.masked.load" in src
    assert run_config(w, c)[1] <= tolerance(w)


def test_strided_gathers_read_each_lane():
    """A vector load with a constant stride in the vectorized variable (not 0 or 1) reads lane by
    lane from scalar indices, not from a vector of indices extracted lane by lane: unmasked,
    under a per-lane mask (padding), from a symbolic first index; an index that is not affine
    in the variable still takes the general path; beside them, a strided scatter."""
    x, out = A.Buffer("x", (64,)), A.Buffer("out", (4 * 48,))
    i, v = A.LoopVar("i"), A.LoopVar("v")

    def vec(block: int, index: A.Expr, value: A.Expr) -> A.Stmt:  # out[48 block + index]
        return A.For(v, 16, "vectorized", A.Store(out, (A.add(48 * block, index),), value))

    row = A.add(A.mul(i, 16), v)
    shifted = A.add(A.mul(v, 3), A.add(i, -2))  # 3v + i - 2: negative in lane 0 for i < 2
    body = A.seq(
        vec(0, row, A.Load(x, (A.add(A.mul(v, 3), i),))),
        vec(1, row, A.Select(A.BinOp(">=", shifted, A.const(0)), A.Load(x, (shifted,)),
                             A.FloatImm(-1.0))),
        vec(2, row, A.Load(x, (A.BinOp("%", A.mul(v, 7), A.const(13)),))),
        vec(3, A.add(i, A.mul(v, 3)), A.Load(x, (A.add(i, v),))))  # a strided scatter
    p = A.Program("strided", (x, out), (), A.For(i, 3, "serial", body))
    source = RT.render(p)
    assert source.count("extractelement <16 x i64>") == 16  # the non-affine gather's only
    kernel = RT.load(RT.compile(source, p), p)
    data = np.arange(64, dtype=np.float32) + 0.5
    bufs = kernel.alloc([data])
    kernel.time(bufs, 1)
    got = kernel.read_output(bufs)
    want = np.empty((4, 48), np.float32)
    lanes = np.arange(16)
    for k in range(3):
        want[0, 16 * k:16 * k + 16] = data[3 * lanes + k]
        idx = 3 * lanes + k - 2
        want[1, 16 * k:16 * k + 16] = np.where(idx >= 0, data[np.maximum(idx, 0)], -1.0)
        want[2, 16 * k:16 * k + 16] = data[(7 * lanes) % 13]
        want[3, k + 3 * lanes] = data[k + lanes]
    np.testing.assert_array_equal(got, want.ravel())
    kernel.release(bufs)


def test_parallel_loop_calls_libgomp():
    w = SMALL_WORKLOADS[0]
    c = default_config(w, "cpu")
    assert "GOMP_parallel" in RT.render(lower(w, c))
    assert "vmul" in RT.assembly(RT.render(lower(w, c))) or "vfmadd" in RT.assembly(
        RT.render(lower(w, c)))


@pytest.mark.parametrize("threads,chunks", [(2, 0), (3, 1), (2, 4), (3, 16)])
def test_parallel_loops_shared_in_any_chunks_match_numpy(threads, chunks):
    """Static (0) or claimed dynamically, on thread counts that do not divide the extents."""
    rt = CPURuntime(num_threads=threads, chunks_per_thread=chunks)
    rng = np.random.default_rng(threads * 100 + chunks)
    seen = set()
    for w in SMALL_WORKLOADS[:3]:
        for c in space_for(w, "cpu").sample(rng, 4) + [default_config(w, "cpu")]:
            p, err = run_config(w, c, rt)
            assert err <= tolerance(w), (c, err)
            source = rt.render(p)
            if "GOMP_parallel" in source:
                assert ("atomicrmw add" in source) == (chunks > 0)
            seen |= kinds(p)
    assert "parallel" in seen
    with pytest.raises(ValueError, match="chunks_per_thread"):
        CPURuntime(chunks_per_thread=-1)


def test_loads_and_stores_within_a_block_keep_memory_order():
    """The emitter forwards stored values to loads and drops overwritten stores within a basic
    block (codegen/llvm.py, _Memory): overlapping vector and scalar accesses, a scatter and a
    symbolic (loop-variable) offset must still read what memory would hold."""
    x, out = A.Buffer("x", (64,)), A.Buffer("out", (96,))
    acc, spread = A.Buffer("acc", (32,), "local"), A.Buffer("spread", (32,), "local")
    i, v, u = A.LoopVar("i"), A.LoopVar("v"), A.LoopVar("u")
    base = A.mul(i, 32)

    def vec(body):
        return A.For(v, 16, "vectorized", body)

    def ld(buf, idx):
        return A.Load(buf, (idx,))

    body = A.seq(
        vec(A.Store(acc, (v,), ld(x, A.add(base, v)))),
        vec(A.Store(acc, (A.add(v, 16),), ld(x, A.add(A.add(base, 16), v)))),
        A.Store(acc, (A.const(3),), A.BinOp("*", ld(acc, A.const(3)), A.FloatImm(2.0))),
        vec(A.Store(acc, (v,), A.BinOp("+", ld(acc, v), A.FloatImm(1.0)))),
        A.For(u, 4, "unrolled", A.Store(acc, (A.add(u, 20),), A.BinOp(
            "+", ld(acc, A.add(u, 20)), ld(acc, u)))),
        A.Store(acc, (A.const(5),), A.FloatImm(7.0)),  # overwritten before any load: dropped
        A.Store(acc, (A.const(5),), A.BinOp("+", ld(acc, A.const(5)), A.FloatImm(1.0))),
        vec(A.Store(spread, (A.mul(v, 2),), ld(acc, v))),  # a scatter
        vec(A.Store(spread, (A.add(A.mul(v, 2), 1),), A.FloatImm(-1.0))),
        vec(A.Store(out, (A.add(base, v),), ld(acc, v))),
        vec(A.Store(out, (A.add(A.add(base, 16), v),), ld(acc, A.add(v, 16)))),
        vec(A.Store(out, (A.add(64, A.add(A.mul(i, 16), v)),), ld(spread, v))))
    p = A.Program("memory_order", (x, out), (),
                  A.For(i, 2, "serial", A.Allocate(acc, A.Allocate(spread, body))))
    source = RT.render(p)
    assert "store float 0x401C000000000000" not in source  # the 7.0 store was dropped
    kernel = RT.load(RT.compile(source, p), p)
    data = np.arange(64, dtype=np.float32) / 8
    bufs = kernel.alloc([data])
    kernel.time(bufs, 1)
    got = kernel.read_output(bufs)
    want = np.empty(96, np.float32)
    for k in range(2):
        a = data[32 * k:32 * k + 32].copy()
        a[3] *= 2
        a[:16] += 1
        a[20:24] += a[:4]
        a[5] = 8.0
        s = np.empty(32, np.float32)
        s[0::2], s[1::2] = a[:16], -1.0
        want[32 * k:32 * k + 32] = a
        want[64 + 16 * k:80 + 16 * k] = s[:16]
    np.testing.assert_array_equal(got, want)
    kernel.release(bufs)
