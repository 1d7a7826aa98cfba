"""The CPU template's vendor-class knobs: output channels in the vector lanes (``vector_axis``),
pre-packed weights and B panels (``pack_weight``, ``pack_b``), on the host ISA and on AVX2."""
import numpy as np
import pytest

from tensorgym import loopast as A
from tensorgym.errors import ErrorCode
from tensorgym.hardware.cpu import CPURuntime, host_isa, vector_lanes
from tensorgym.measure import LocalMeasurer, MeasureOptions
from tensorgym.hardware.runtime import checked_inputs, packing_seconds
from tensorgym.measure.worker import tolerance
from tensorgym.lower import lower
from tensorgym.templates import default_config, space_for
from tensorgym.templates.cpu import micro_kernel_values
from tensorgym.workloads import conv2d, matmul

from .conftest import SMALL_WORKLOADS

ISAS = ["avx2"] + (["avx512"] if host_isa() == "avx512" else [])
RUNTIMES = {isa: CPURuntime(isa=isa) for isa in ISAS}
NEW_KNOBS = ("vector_axis", "pack_weight", "pack_b", "contiguous_writeback", "pad_vector")


def run_config(rt, w, c):
    p = lower(w, c)
    kernel = rt.load(rt.compile(rt.render(p), p), p)
    ins = w.random_inputs(3)
    bufs = kernel.alloc(ins)
    try:
        kernel.time(bufs, 1)
        out = kernel.read_output(bufs)
        assert not kernel.check_guards(bufs)
    finally:
        kernel.release(bufs)
    ref = w.reference(ins)
    return p, float(np.abs(out - ref).max() / np.abs(ref).max())


def with_new_knobs(space, rng, n):
    """``n`` random configs whose new knobs take every combination of their options in turn."""
    names = [k.name for k in space.knobs if k.name in NEW_KNOBS]
    combos = np.array(np.meshgrid(*[range(space.knob(k).size) for k in names])).reshape(
        len(names), -1).T
    out = []
    for i, c in enumerate(space.sample(rng, n)):
        values = dict(c.values)
        for name, opt in zip(names, combos[i % len(combos)]):
            values[name] = space.knob(name).options[opt]
        out.append(space.from_values(values))
    return out


def test_packed_layout_moves_the_block_of_one_dimension_innermost():
    rng = np.random.default_rng(0)
    weight = rng.random((32, 3, 5, 5), dtype=np.float32)
    packed = A.PackedLayout(0, 16).apply(weight)
    assert packed.shape == (2, 3, 5, 5, 16) and packed.flags.c_contiguous
    o, i, h, w = 21, 2, 4, 1
    assert packed[o // 16, i, h, w, o % 16] == weight[o, i, h, w]
    b = rng.random((12, 40), dtype=np.float32)
    panels = A.PackedLayout(1, 8).apply(b)
    assert panels.shape == (5, 12, 8)
    np.testing.assert_array_equal(panels[3], b[:, 24:32])
    with pytest.raises(ValueError, match="not a multiple"):
        A.PackedLayout(1, 7).apply(b)


def test_space_has_the_new_knobs_and_the_reference_schedule_does_not_use_them():
    c1 = conv2d(1, 3, 32, 32, 16, 7, 2, 3)
    assert space_for(c1, "cpu").knob("vector_axis").options == ("ow", "oc")
    assert space_for(c1, "cpu").knob("pack_weight").options == (0, 1)
    assert space_for(matmul(32, 48, 16), "cpu").knob("pack_b").options == (0, 1)
    assert "vector_axis" not in {k.name for k in space_for(matmul(32, 48, 16), "cpu").knobs}
    ref = default_config(c1, "cpu")
    assert ref["vector_axis"] == "ow" and ref["pack_weight"] == 0
    assert lower(c1, ref).input_layouts == ()


def test_output_channels_in_the_lanes_make_vector_weight_loads_and_broadcast_inputs():
    w = conv2d(1, 4, 9, 9, 32, 3, 2, 1)
    space = space_for(w, "cpu")
    c = space.from_values(dict(default_config(w, "cpu").values, tile_oc=(1, 2, 16),
                               tile_ow=(1, 1, 5), vector_axis="oc", pack_weight=1, cache_write=1,
                               inline_pad=0, unroll_max_step=64))
    p = lower(w, c)
    assert p.input_layouts == (None, A.PackedLayout(0, 16))
    assert p.args[1].shape == (2, 4, 3, 3, 16)
    vec = [n for n in A.walk(p.body) if isinstance(n, A.For) and n.kind == "vectorized"]
    assert {n.var.name for n in vec} >= {"oc.2"}
    update = next(n for loop in vec if loop.var.name == "oc.2"
                  for n in A.walk(loop.body) if isinstance(n, A.Store)
                  and isinstance(n.value, A.BinOp) and n.value.op == "+")
    loads = {n.buffer.name: n for n in A.walk(update.value) if isinstance(n, A.Load)}
    oc2 = next(loop.var for loop in vec if loop.var.name == "oc.2")
    assert A.linear_coeff(A.flat_index(loads["weight"].buffer, loads["weight"].indices), oc2) == 1
    assert A.linear_coeff(A.flat_index(loads["pad"].buffer, loads["pad"].indices), oc2) == 0
    assert "weight: packed ahead of time" in str(p)
    for rt in RUNTIMES.values():
        assert run_config(rt, w, c)[1] <= tolerance(w)


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("w", SMALL_WORKLOADS + [conv2d(1, 3, 16, 16, 32, 7, 2, 3)],
                         ids=lambda w: w.key)
def test_random_configs_with_the_new_knobs_match_numpy(w, isa):
    space = space_for(w, "cpu")
    for c in with_new_knobs(space, np.random.default_rng(hash(w.key) % 2**32), 8):
        _, err = run_config(RUNTIMES[isa], w, c)
        assert err <= tolerance(w), (isa, c, err)


def _vector_stores(p: A.Program, buffer: str) -> list[tuple[A.For, A.Store]]:
    """(vector loop, store) for every store to ``buffer`` inside a vectorized loop."""
    return [(loop, n) for loop in A.walk(p.body) if isinstance(loop, A.For)
            and loop.kind == "vectorized" for n in A.walk(loop.body)
            if isinstance(n, A.Store) and n.buffer.name == buffer]


@pytest.mark.parametrize("isa", ISAS)
@pytest.mark.parametrize("epilogue", [(), ("bias", "relu"), ("bias", "add", "relu")])
def test_a_contiguous_write_back_and_padding_rows_match_numpy(isa, epilogue):
    """Output channels in the lanes, written back to the NCHW output with ``ow`` as the vector
    loop (contiguous stores), and the padding materialised as fused, vectorized rows; in every
    combination with the plain forms, parallel loops and vectorization."""
    lanes = vector_lanes(isa)
    w = conv2d(1, 3, 30, 30, 2 * lanes, 7, 2, 3, epilogue=epilogue)  # C1's shape, small: ow 15
    space = space_for(w, "cpu")
    base = dict(default_config(w, "cpu").values, reorder=("S1", "R0", "R1", "S2"),
                tile_oc=(1, 2, lanes), tile_ow=(1, 3, 5), tile_oh=(5, 3, 1), vector_axis="oc",
                pack_weight=1, inline_pad=0, cache_write=1, unroll_max_step=16)
    for contiguous in (0, 1):
        for rows in (0, 1):
            for parallel in (0, 1, 2):
                for vectorize in ("none", "inner"):
                    c = space.from_values(dict(base, contiguous_writeback=contiguous,
                                               pad_vector=rows, parallel=parallel,
                                               vectorize=vectorize))
                    p, err = run_config(RUNTIMES[isa], w, c)
                    assert err <= tolerance(w), (c.values, err)
                    if vectorize == "inner":
                        out = {loop.var.name for loop, _ in _vector_stores(p, "conv")}
                        assert out == ({"ow.2"} if contiguous else {"oc.2"}), out
                        pad = {loop.var.name for loop, _ in _vector_stores(p, "pad")}
                        # C1's padded rows (36 wide) are one vector; the plain stage's too
                        assert pad == ({"pad.pad_3.1"} if rows else {"pad_3"}), pad
                    par = [n for n in A.walk(p.body) if isinstance(n, A.For)
                           and n.kind == "parallel"]
                    if rows and parallel:
                        assert par[0].var.name == "pad.fused" and par[0].extent == 3 * 36


def test_padding_rows_wider_than_a_vector_are_split_into_chunks():
    """C1's 230-wide padded rows: 5 chunks of 46 lanes, the 690 rows of 3 channels fused."""
    from tensorgym.lower.cpu import row_lanes

    assert row_lanes(230) == 46 and row_lanes(58) == 58 and row_lanes(229) == 1
    w = conv2d(1, 3, 224, 224, 64, 7, 2, 3)
    space = space_for(w, "cpu")
    c = space.from_values(dict(default_config(w, "cpu").values, inline_pad=0, pad_vector=1,
                               parallel=2, vectorize="inner"))
    loops = [n for n in A.walk(lower(w, c).body) if isinstance(n, A.For)]
    assert [(n.extent, n.kind) for n in loops[:3]] == [(690, "parallel"), (5, "serial"),
                                                       (46, "vectorized")]


@pytest.mark.parametrize("isa", ISAS)
def test_vendor_style_micro_kernels_match_numpy(isa):
    """Register-blocked kernels of the kind the seeds hold: an ow x oc-block tile of
    accumulators (unrolled), the oc block in the lanes, packed weights / B panels."""
    lanes = vector_lanes(isa)
    cases = [
        (conv2d(1, 3, 30, 30, 2 * lanes, 7, 2, 3),
         dict(tile_oc=(1, 2, lanes), tile_ow=(3, 1, 5), tile_oh=(5, 3, 1), tile_rc=(3, 1),
              vector_axis="oc", pack_weight=1, inline_pad=0)),
        (conv2d(1, 16, 14, 14, 2 * lanes, 3, 1, 1),
         dict(tile_oc=(2, 1, lanes), tile_ow=(1, 2, 7), tile_oh=(7, 2, 1), tile_rc=(4, 4),
              vector_axis="oc", pack_weight=1, inline_pad=1)),
        (conv2d(1, 16, 14, 14, 2 * lanes, 1, 2, 0),
         dict(tile_oc=(1, 1, 2 * lanes), tile_ow=(1, 1, 7), tile_oh=(7, 1, 1), tile_rc=(2, 8),
              vector_axis="oc", pack_weight=1)),
        (matmul(24, 4 * lanes, 20),
         dict(tile_i=(2, 3, 4), tile_j=(2, 2, lanes), tile_rk=(2, 10), pack_b=1)),
    ]
    for w, values in cases:
        space = space_for(w, "cpu")
        base = dict(default_config(w, "cpu").values, reorder=("S1", "R0", "R1", "S2"),
                    vectorize="inner", unroll_max_step=512, cache_write=1, parallel=1)
        c = space.from_values(dict(base, **values))
        p, err = run_config(RUNTIMES[isa], w, c)
        assert err <= tolerance(w), (w, err)
        assert any(layout is not None for layout in p.input_layouts)


@pytest.mark.parametrize("isa", ISAS)
def test_hand_derived_micro_kernels_are_configs_that_match_numpy(isa):
    lanes, registers = vector_lanes(isa), 32 if isa == "avx512" else 16
    for w in (conv2d(1, 8, 14, 14, 4 * lanes, 3, 2, 1), conv2d(1, 16, 7, 7, 2 * lanes, 1, 1, 0),
              conv2d(1, 3, 22, 22, lanes, 7, 2, 3), matmul(48, 4 * lanes, 40)):
        found = micro_kernel_values(w, lanes, registers)
        assert found
        space = space_for(w, "cpu")
        for values in found:
            c = space.from_values(values)
            block = c["tile_oc" if w.op == "conv2d" else "tile_j"][-1]
            assert block % lanes == 0
            _, err = run_config(RUNTIMES[isa], w, c)
            assert err <= tolerance(w), (w, values, err)


@pytest.mark.parametrize("m,k,blocked", [(128, 768, False), (128, 3072, True), (1024, 1024, True)])
def test_gemm_seeds_sweep_the_rows_of_a_over_one_b_panel(m, k, blocked):
    """Each parallel iteration of a GEMM seed owns one B panel and its middle tile walks A's
    rows; A's rows are blocked in the outer tile only where all of them would not fit L2."""
    from tensorgym.templates.cpu import GEMM_ROWS_BYTES

    found = micro_kernel_values(matmul(m, 256, k), 16, 32)
    outers = {v["tile_i"][0] for v in found}
    assert 1 in outers and (len(outers) > 1) == blocked
    for v in found:
        outer, middle, rows = v["tile_i"]
        assert outer * middle * rows == m and v["tile_j"][1] == 1
        assert outer == 1 or (m // outer) * k * 4 <= GEMM_ROWS_BYTES
        vectors = v["tile_j"][2] // 16
        assert rows * vectors <= 16  # accumulators that leave registers for the loads


def test_inputs_are_packed_for_the_kernel_once_and_checked():
    w = matmul(8, 32, 4)
    space = space_for(w, "cpu")
    c = space.from_values(dict(default_config(w, "cpu").values, tile_j=(1, 4, 8), pack_b=1))
    p = lower(w, c)
    a, b = w.random_inputs(0)
    got = checked_inputs(p, [a, b])
    assert got[1].shape == (4, 4, 8)
    np.testing.assert_array_equal(got[1][2], b[:, 16:24])
    again = checked_inputs(p, got)  # already packed: taken as it is
    np.testing.assert_array_equal(again[1], got[1])
    with pytest.raises(ValueError, match="packed to"):
        checked_inputs(p, [a, b[:, :16]])
    assert packing_seconds(p, [a, b]) > 0
    assert packing_seconds(lower(w, default_config(w, "cpu")), [a, b]) == 0.0


def test_layouts_are_part_of_the_source():
    """Two programs that differ only in their inputs' layouts must not share a compiled kernel
    (sources key the compile cache and the batch's de-duplication)."""
    w = matmul(8, 32, 4)
    space = space_for(w, "cpu")
    base = dict(default_config(w, "cpu").values, tile_j=(1, 32, 1))  # block 1: same addresses
    rt = CPURuntime()
    src = [rt.render(lower(w, space.from_values(dict(base, pack_b=p)))) for p in (0, 1)]
    assert src[0] != src[1]


def test_measured_through_the_worker_with_packed_inputs():
    w = conv2d(1, 4, 9, 9, 32, 3, 2, 1)
    space = space_for(w, "cpu")
    configs = with_new_knobs(space, np.random.default_rng(7), 4)
    m = LocalMeasurer("cpu", MeasureOptions(timeout=10.0, repeat=2, min_repeat_ms=1))
    try:
        results = m.measure(w, configs)
    finally:
        m.close()
    assert all(r.error == ErrorCode.NO_ERROR for r in results), [r.error_msg for r in results]


def test_an_isa_the_host_lacks_or_does_not_know_is_refused():
    with pytest.raises(ValueError, match="unknown isa"):
        CPURuntime(isa="sse9")
    assert vector_lanes("avx2") == 8 and vector_lanes("avx512") == 16
    assert "avx2" in CPURuntime(isa="avx2").device_name()


@pytest.mark.skipif(host_isa() == "other", reason="the vector registers counted are x86's")
def test_the_host_build_does_its_fmas_on_the_hosts_widest_vectors():
    """Whatever LLVM names this CPU, a vendor-class kernel built for the host does its
    multiply-adds as packed FMAs on the widest registers the CPU has: zmm on AVX-512, ymm on
    AVX2, and never on vectors narrower than the host's lanes (the micro-kernel's accumulators)."""
    import re

    from tensorgym.hardware.host import host_vector_lanes
    from tensorgym.workloads import get_workload

    lanes = host_vector_lanes()
    wide, narrow = ("zmm", "ymm") if lanes == 16 else ("ymm", "xmm")
    rt = CPURuntime()
    for key in ("conv2d-C6", "dense:16,256,256"):
        w = get_workload(key)
        values = micro_kernel_values(w, lanes, 32 if lanes == 16 else 16)[0]
        source = rt.render(lower(w, space_for(w, "cpu").from_values(values)))
        fmas = re.findall(r"\bvfn?madd\d+ps\s+[^\n]*?%(zmm|ymm|xmm)", rt.assembly(source))
        counts = {r: fmas.count(r) for r in ("zmm", "ymm", "xmm")}
        assert counts[wide] >= 8, (key, counts)  # a register tile of accumulators, unrolled
        assert counts[narrow] <= counts[wide] // 8, (key, counts)
        if lanes == 8:
            assert counts["zmm"] == 0, (key, counts)
