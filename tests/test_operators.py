"""Every operator with every epilogue against NumPy (issue 32): conv2d (plain, depthwise, grouped
with a 5-D weight), dense, batch_matmul and matmul, each with none, bias, relu, relu6, gelu and
add, on small shapes (odd sizes, stride 2, no padding, batch > 1).

CPU: random configs, the default config (with and without the accumulator, so the epilogue runs
both in the write-back and in place over the tile) and the hand-derived micro-kernel seeds, on
the host ISA and on the other x86 code path (AVX2 code runs on an AVX-512 host; on an AVX2 host
AVX-512 code is only compiled). OpenCL (PoCL) and CUDA (nvcc to PTX): valid random GPU configs.
An unwritten (NaN) output stays NaN through a ReLU on the LLVM and OpenCL emitters. Workload keys
with groups and epilogues round-trip through records and datasets.

``scripts/check_operators.py`` runs the full figure (200 configs per case and path).
"""
import dataclasses
import json
import platform

import llvmlite.binding as llvm
import numpy as np
import pytest

from tensorgym import loopast as A
from tensorgym.errors import ErrorCode
from tensorgym.hardware.cpu import ISAS, CPURuntime, compile_object, host_isa, vector_lanes
from tensorgym.hardware.cuda import find_nvcc
from tensorgym.lower import lower
from tensorgym.lower.gpu import lower_gpu
from tensorgym.measure.result import MeasureResult
from tensorgym.measure.worker import relative_error, tolerance
from tensorgym.records import Records
from tensorgym.task import Task
from tensorgym.templates import default_config, space_for
from tensorgym.templates.cpu import micro_kernel_values
from tensorgym.templates.gpu import DEFAULT_GPU_LIMITS, sample_valid_configs
from tensorgym.templates.seeds import register_file
from tensorgym.workloads import batch_matmul, conv2d, dense, get_workload, matmul

from .gpu_builds import opencl_runtimes, ptx_entries

# Each kind of operator on a few small shapes; case j of a kind takes shape j mod len(shapes).
SHAPES = {
    "conv2d": [conv2d(1, 4, 9, 9, 8, 3, 2, 1), conv2d(2, 3, 7, 7, 5, 3, 1, 0),
               conv2d(1, 6, 7, 7, 4, 1, 1, 0)],
    "depthwise": [conv2d(2, 8, 9, 9, 8, 3, 2, 0, groups=8),
                  conv2d(1, 16, 7, 7, 16, 3, 1, 1, groups=16),
                  conv2d(1, 6, 5, 11, 6, 3, 1, 1, groups=6)],
    # several output channels per group: the 5-D weight and output (the last is a depthwise
    # conv2d with a channel multiplier of 2)
    "grouped": [conv2d(1, 8, 7, 7, 12, 3, 1, 1, groups=2),
                conv2d(2, 12, 9, 9, 6, 3, 2, 0, groups=3),
                conv2d(1, 8, 6, 6, 16, 1, 1, 0, groups=4),
                conv2d(1, 4, 8, 8, 8, 3, 1, 1, groups=4)],
    "dense": [dense(5, 24, 36), dense(16, 32, 48), dense(1, 17, 9)],
    "batch_matmul": [batch_matmul(3, 7, 13, 10), batch_matmul(2, 16, 8, 32),
                     batch_matmul(4, 5, 9, 3)],
    "matmul": [matmul(17, 9, 13), matmul(32, 48, 16)],
}
# Every kind gets none, relu6, gelu and add+relu (every epilogue op), and one more in turn.
COMMON = ("", "bias+relu6", "bias+gelu", "bias+add+relu")
EXTRA = {"conv2d": "bias", "depthwise": "bias+relu", "grouped": "add", "dense": "bias",
         "batch_matmul": "add", "matmul": "bias+relu"}
CASES = [shapes[j % len(shapes)].with_epilogue(e)
         for kind, shapes in SHAPES.items() for j, e in enumerate(COMMON + (EXTRA[kind],))]
RANDOM_CONFIGS = 3  # per case and CPU code path, beside the default and micro-kernel configs

HOST = host_isa()
X86 = platform.machine() in ("x86_64", "AMD64")
# The x86 code path that is not the host's: run where the host has it, else only compiled.
OTHER = {"avx512": "avx2", "avx2": "avx512"}.get(HOST) if X86 else None
PATHS = ["host", "other"]


def test_the_cases_cover_every_operator_with_every_epilogue_op():
    kinds = {"conv2d": lambda w: w.op == "conv2d" and w.groups == 1,
             "depthwise": lambda w: w.op == "conv2d" and w.groups == w.params[1] == w.params[4],
             "grouped": lambda w: w.op == "conv2d" and len(w.output.shape) == 5}
    for kind in SHAPES:
        mine = [w for w in CASES if kinds.get(kind, lambda w, k=kind: w.op == k)(w)]
        assert {e for w in mine for e in w.epilogue} == {"bias", "relu", "relu6", "gelu", "add"}
        assert () in {w.epilogue for w in mine}
    assert any(w.params[0] > 1 for w in CASES if w.op == "conv2d" and w.groups > 1)
    assert any(w.params[0] > 1 for w in CASES if w.op == "batch_matmul")
    assert any(w.params[6] == 2 and w.params[7] == 0 for w in CASES if w.op == "conv2d")


@pytest.fixture(scope="module")
def runtimes():
    """path -> (runtime, lanes): the host's own, and the other ISA's where this host runs it."""
    out = {"host": (CPURuntime(), vector_lanes())}
    if OTHER is not None and HOST == "avx512":
        out["other"] = (CPURuntime(isa=OTHER), vector_lanes(OTHER))
    return out


def cpu_configs(w, lanes, seed):
    """Random configs, the default one with and without the accumulator, the micro-kernels."""
    space = space_for(w, "cpu")
    default = default_config(w, "cpu")
    configs = space.sample(np.random.default_rng(seed), RANDOM_CONFIGS) + [
        default, space.from_values(dict(default.values, cache_write=1 - default["cache_write"]))]
    configs += [space.from_values(v) for v in micro_kernel_values(w, lanes, register_file(lanes))]
    return list({c.index: c for c in configs}.values())  # small K: both micro-kernels alike


def run(runtime, w, program, seed=3):
    kernel = runtime.load(runtime.compile(runtime.render(program), program), program)
    inputs = w.random_inputs(seed)
    bufs = kernel.alloc(inputs)
    try:
        kernel.time(bufs, 1)
        out = kernel.read_output(bufs)
        assert not kernel.check_guards(bufs)
    finally:
        kernel.release(bufs)
    return relative_error(out, w.reference(inputs))


def isa_assembly(source, isa):
    """The assembly of LLVM IR ``source`` for ``isa`` (no host needed to have it)."""
    target = llvm.Target.from_triple(llvm.get_process_triple())
    tm = target.create_target_machine(cpu=ISAS[isa][0], opt=2)
    mod = llvm.parse_assembly(source)
    return tm.emit_assembly(mod)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("i", range(len(CASES)), ids=[w.key for w in CASES])
def test_cpu_kernels_match_numpy(runtimes, i, path):
    w = CASES[i]
    if path == "other" and OTHER is None:
        pytest.skip(f"no other x86 code path on this {HOST} host")
    isa = HOST if path == "host" else OTHER
    configs = cpu_configs(w, vector_lanes(isa), seed=2 * i + (path == "other"))
    if path == "other" and path not in runtimes:  # AVX-512 code on an AVX2 host: compile only
        rt = CPURuntime()
        for c in configs:
            assert compile_object(rt.render(lower(w, c)), isa=OTHER)[:4] == b"\x7fELF"
        return
    runtime, _ = runtimes[path]
    bad = []
    for c in configs:
        err = run(runtime, w, lower(w, c))
        if not err <= tolerance(w):
            bad.append((c.values, err))
    assert not bad, f"{len(bad)} of {len(configs)} configs wrong on {isa}: {bad[:3]}"
    assert {c["cache_write"] for c in configs} == {0, 1}  # the epilogue in both places


@pytest.mark.skipif(not X86, reason="the ISAs are x86's")
def test_each_code_path_uses_its_own_vector_registers():
    """The other path's kernels are that ISA's code: AVX2 never touches a zmm register, the
    AVX-512 path uses them (its 16-lane vectors would need two ymm registers each)."""
    w = SHAPES["dense"][1].with_epilogue("bias+gelu")
    source = CPURuntime().render(lower(w, default_config(w, "cpu")))
    avx2, avx512 = isa_assembly(source, "avx2"), isa_assembly(source, "avx512")
    assert "ymm" in avx2 and "zmm" not in avx2
    assert "zmm" in avx512


def test_dense_and_batch_matmul_micro_kernels_pack_their_operand():
    for w in (SHAPES["dense"][1], SHAPES["batch_matmul"][1], SHAPES["matmul"][1]):
        found = micro_kernel_values(w, 16)
        assert found
        space = space_for(w, "cpu")
        for v in found:
            layouts = lower(w, space.from_values(v)).input_layouts
            assert any(layout is not None for layout in layouts)


# ---------------------------------------------------------------- GPU: PoCL and nvcc

# PoCL is slow: one valid random config of each case (CUDA-like limits: nvcc compiles the same
# ones), built without PoCL's optimiser but for a few of little unrolling (optimised, one
# explicitly unrolled matmul kernel took PoCL 29 s)
GPU_CONFIGS = [(w, c) for i, w in enumerate(CASES)
               for c in sample_valid_configs(w, 1, np.random.default_rng(100 + i),
                                             DEFAULT_GPU_LIMITS)]
OPTIMISED = [i for i, (w, c) in enumerate(GPU_CONFIGS)
             if c["auto_unroll_max_step"] <= 16 and not c["unroll_explicit"]][::2]


def test_some_gpu_kernels_are_built_with_pocls_optimiser():
    assert len(OPTIMISED) >= 3


@pytest.fixture(scope="module")
def opencl():
    return opencl_runtimes()


@pytest.mark.opencl
@pytest.mark.parametrize("i", range(len(GPU_CONFIGS)),
                         ids=[f"{w.key}-{c.index}" for w, c in GPU_CONFIGS])
def test_opencl_kernels_match_numpy(opencl, i):
    w, c = GPU_CONFIGS[i]
    err = run(opencl[i in OPTIMISED], w, lower_gpu(w, c, DEFAULT_GPU_LIMITS), seed=i)
    assert err <= tolerance(w), (c.values, err)


NVCC = find_nvcc()


@pytest.mark.nvcc
@pytest.mark.skipif(NVCC is None, reason="nvcc not found (install the CUDA toolkit)")
def test_cuda_kernels_compile_to_ptx(tmp_path):
    from tensorgym.codegen.cuda import render_cuda

    sources = [render_cuda(dataclasses.replace(lower_gpu(w, c, DEFAULT_GPU_LIMITS), name=f"k{i}"))
               for i, (w, c) in enumerate(GPU_CONFIGS)]
    assert any("erff(" in s for s in sources)  # the GELU's erf is CUDA's float one
    entries = ptx_entries(NVCC, "sm_80", sources, tmp_path)
    assert entries == {f"k{i}" for i in range(len(GPU_CONFIGS))}


# ---------------------------------------------------------------- NaN through the activations

N_OUT, WRITTEN = 48, 20  # the kernel writes the first WRITTEN outputs, the rest stay NaN


def _activations(x):
    """relu6 as the epilogue spells it: min(max(x, 0), 6), compare and select."""
    return A.BinOp("min", A.BinOp("max", x, A.FloatImm(0.0)), A.FloatImm(6.0))


def _expected(data):
    want = np.full(N_OUT, np.nan, np.float32)
    want[:WRITTEN] = np.clip(data[:WRITTEN], 0, 6)
    return want


def _nan_data():
    data = np.linspace(-8, 8, N_OUT).astype(np.float32)
    data[3] = np.nan  # a NaN input stays NaN too
    return data


def test_llvm_relu_keeps_an_unwritten_output_nan():
    """A kernel that writes part of its output, then runs the epilogue in place over all of it
    (as the CPU lowering does without an accumulator): the unwritten NaNs must stay NaN, not
    turn into ReLU's 0, or the correctness check would pass a kernel that skipped outputs. Both
    a vector loop and a scalar one."""
    x, out = A.Buffer("x", (N_OUT,)), A.Buffer("out", (N_OUT,))
    for kind in ("vectorized", "serial"):
        extent = 16 if kind == "vectorized" else N_OUT
        i, j, k = A.LoopVar("i"), A.LoopVar("j"), A.LoopVar("k")
        idx = A.add(A.mul(j, 16), i) if kind == "vectorized" else i
        write = A.For(k, WRITTEN, "serial", A.Store(out, (k,), A.Load(x, (k,))))
        inner = A.For(i, extent, kind, A.Store(out, (idx,), _activations(A.Load(out, (idx,)))))
        finish = A.For(j, N_OUT // 16, "serial", inner) if kind == "vectorized" else inner
        p = A.Program(f"nan_{kind}", (x, out), (), A.seq(write, finish))
        rt = CPURuntime(num_threads=1)
        kernel = rt.load(rt.compile(rt.render(p), p), p)
        data = _nan_data()
        bufs = kernel.alloc([data])
        kernel.time(bufs, 1)
        got = kernel.read_output(bufs)
        kernel.release(bufs)
        np.testing.assert_array_equal(got, _expected(data), err_msg=kind)


@pytest.mark.opencl
def test_opencl_relu_keeps_an_unwritten_output_nan(opencl):
    """The same on the C-style emitter (OpenCL), built with and without PoCL's optimiser: the
    kernel's compare and select must not become fmax, which returns the number."""
    x, out = A.Buffer("x", (N_OUT,)), A.Buffer("out", (N_OUT,))
    t = A.LoopVar("t")
    body = A.seq(A.If(A.BinOp("<", t, A.const(WRITTEN)), A.Store(out, (t,), A.Load(x, (t,)))),
                 A.Store(out, (t,), _activations(A.Load(out, (t,)))))
    p = A.Program("nan_relu", (x, out), (), A.For(t, N_OUT, "threadIdx.x", body),
                  {"grid": (1, 1, 1), "block": (N_OUT, 1, 1)})
    data = _nan_data()
    for runtime in opencl:
        source = runtime.render(p)
        assert "fmax" not in source and "fmin" not in source
        kernel = runtime.load(runtime.compile(source, p), p)
        bufs = kernel.alloc([data])
        kernel.time(bufs, 1)
        got = kernel.read_output(bufs)
        kernel.release(bufs)
        np.testing.assert_array_equal(got, _expected(data))


def test_llvm_erf_is_close_enough_for_gelu():
    """The LLVM emitter's erf (Abramowitz-Stegun 7.1.26 in float32) against math.erf on a dense
    grid, vector and scalar. The formula's own error is 1.5e-7; in float32 its 1 - t p(t) e^-x^2
    cancels near 0, measured 5.8e-7 there. GELU scales it by x / 2: 1.8e-7 at most on this grid,
    far inside ``tolerance`` (1e-5 of max |out| or more)."""
    import math

    n = 1 << 14
    x, out = A.Buffer("x", (n,)), A.Buffer("out", (n,))
    data = np.linspace(-6, 6, n).astype(np.float32)
    want = np.array([math.erf(float(v)) for v in data])
    rt = CPURuntime(num_threads=1)
    for kind in ("vectorized", "serial"):
        i, j = A.LoopVar("i"), A.LoopVar("j")
        idx = A.add(A.mul(j, 16), i)
        body = A.For(j, n // 16, "serial", A.For(i, 16, kind, A.Store(
            out, (idx,), A.Call("erf", (A.Load(x, (idx,)),)))))
        p = A.Program(f"erf_{kind}", (x, out), (), body)
        kernel = rt.load(rt.compile(rt.render(p), p), p)
        bufs = kernel.alloc([data])
        kernel.time(bufs, 1)
        got = kernel.read_output(bufs).astype(np.float64)
        kernel.release(bufs)
        assert np.abs(got - want).max() < 1e-6, kind
        gelu_error = np.abs(0.5 * data * (got - want)).max()
        assert gelu_error < 5e-7, kind
    # past the clamp of |x| (4: the tail would be a denormal there) erf is exactly +-1, and a
    # NaN (an output a wrong kernel never wrote) stays NaN through it
    far = np.array([4.0, 4.5, 50.0, 1e4, -4.0, -300.0, np.nan, 3.9] * 2, np.float32)
    i = A.LoopVar("i")
    p = A.Program("erf_far", (x, out), (), A.For(i, 16, "vectorized", A.Store(
        out, (i,), A.Call("erf", (A.Load(x, (i,)),)))))
    kernel = rt.load(rt.compile(rt.render(p), p), p)
    bufs = kernel.alloc([np.resize(far, n)])
    kernel.time(bufs, 1)
    got = kernel.read_output(bufs)[:16]
    kernel.release(bufs)
    np.testing.assert_array_equal(got[[0, 1, 2, 3]], 1.0)
    np.testing.assert_array_equal(got[[4, 5]], -1.0)
    assert np.isnan(got[6]) and abs(got[7] - math.erf(3.9)) < 1e-6


# ---------------------------------------------------------------- keys through records, datasets

KEYS = ("conv2d:1,32,112,112,32,3,1,1,32+bias+relu6", "dense:128,768,3072+bias+gelu",
        "conv2d:1,8,7,7,12,3,1,1,2+bias+add+relu", "batch_matmul:12,128,64,128+add")


def _synthetic(records, key, n=3, device="dev"):
    """``n`` results of configs of ``key`` (one a wrong answer), as test_records writes them."""
    w = get_workload(key)
    space = space_for(w, "cpu")
    results = [MeasureResult(space.get(k), (1e-3 * (k + 1),), ErrorCode.NO_ERROR, "", w.flops,
                             0.1, 0.2, 1000.0 + k) for k in range(n - 1)]
    results.append(MeasureResult(space.get(n), (), ErrorCode.WRONG_ANSWER, "wrong", w.flops,
                                 0.1, 0.2, 1000.0 + n))
    records.add_many(Task(w.key, "cpu", device), results)
    return w, space, results


def _check_read_back(recs, w, space, results):
    assert [r.workload_key for r in recs] == [w.key] * len(results)
    back = get_workload(recs[0].workload_key)
    assert back == w and back.epilogue == w.epilogue and back.groups == w.groups
    assert back.flops == w.flops and back.inputs[-1].shape == w.inputs[-1].shape
    for r, res in zip(recs, results):
        assert space_for(back, "cpu").from_json(r.config_json) == res.config
        assert r.error == res.error
        if r.ok:  # GFLOP/s are recomputed from the key's FLOPs: groups count
            assert r.gflops == pytest.approx(w.flops / res.costs[0] / 1e9)


def test_epilogue_and_groups_round_trip_through_records(tmp_path):
    db = Records(tmp_path / "r.db")
    named = get_workload("depthwise-mbv2-112+bias+relu6")  # a registered layer with an epilogue
    assert named.key == KEYS[0] and named.groups == 32
    db.add(Task(named.key, "cpu", "named"),
           MeasureResult(space_for(named, "cpu").get(7), (2e-3,), ErrorCode.NO_ERROR, "",
                         named.flops, 0.1, 0.2, 2000.0), workload=named)
    written = {key: _synthetic(db, key) for key in KEYS}
    db.close()
    db = Records(tmp_path / "r.db")
    assert sorted(db.workload_keys()) == sorted(KEYS)
    # a key whose operator is a registered layer is named after it, epilogue and all
    assert db.workload_names() == {KEYS[0]: "depthwise-mbv2-112+bias+relu6",
                                   KEYS[1]: "dense-bert-ffn+bias+gelu",
                                   KEYS[3]: "batch_matmul-bert-qk+add"}
    for key, (w, space, results) in written.items():
        _check_read_back(db.query(key, "cpu", "dev"), w, space, results)
    assert db.best(KEYS[0], "cpu", "named")[0].config_index == 7
    db.close()


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_epilogue_and_groups_round_trip_through_a_dataset(tmp_path, suffix):
    from tensorgym.dataset import Dataset

    if suffix == ".parquet":
        pytest.importorskip("pyarrow")
    db = Records(tmp_path / "r.db")
    written = {key: _synthetic(db, key) for key in KEYS}
    db.close()
    data = Dataset.load(tmp_path / "r.db")
    assert data.export(tmp_path / f"export{suffix}") == len(data) == 3 * len(KEYS)
    back = Dataset.load(tmp_path / f"export{suffix}")
    assert back.records == data.records and back.digest == data.digest
    assert sorted(t.workload for t in back.tasks()) == sorted(KEYS)
    assert back.to_records(tmp_path / "imported.db") == len(data)
    imported = Records(tmp_path / "imported.db")
    assert sorted(imported.workload_keys()) == sorted(KEYS)
    for key, (w, space, results) in written.items():
        _check_read_back(imported.query(key, "cpu", "dev"), w, space, results)
    imported.close()


def test_collected_epilogue_workloads_are_measured_correct_and_read_back(tmp_path):
    """A real collection (the measurement worker checks each kernel against NumPy with the
    epilogue's inputs), exported and read back with the keys intact."""
    from tensorgym.dataset import Dataset, collect
    from tensorgym.measure import MeasureOptions

    keys = ["conv2d:2,12,9,9,6,3,2,0,3+bias+gelu", "dense:5,24,36+bias+add+relu"]
    reports = collect(keys, n_configs=1, db=str(tmp_path / "c.db"), threads=1, progress=False,
                      options=MeasureOptions(repeat=2, max_repeat=2, min_repeat_ms=1.0,
                                             calibrate=False))
    assert [r.measured for r in reports] == [2, 2]  # the reference schedule and a config
    data = Dataset.load(tmp_path / "c.db")
    assert sorted(t.workload for t in data.tasks()) == sorted(keys)
    assert all(r.ok for r in data.records), [r.error_msg for r in data.records if not r.ok]
    data.export(tmp_path / "c.jsonl")
    rows = [json.loads(line) for line in open(tmp_path / "c.jsonl")]
    assert sorted({row["workload_key"] for row in rows}) == sorted(keys)
    assert Dataset.load(tmp_path / "c.jsonl").records == data.records
