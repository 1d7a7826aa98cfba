"""Loop-AST features: fixed lengths, invariances, hand-checked values and error paths."""
from __future__ import annotations

import itertools
import math
import os
import time
import warnings

import numpy as np
import pytest

from tensorgym import loopast as A
import tensorgym.features as features
from tensorgym.features import (CONTEXT_NAMES, FEATURE_MODES, NODE_TYPES, PROGRAM_NAMES,
                                RELATION_PAIRS, THRESHOLDS, Featurizer, context_matrix, extract,
                                feature_length, feature_names, featurize)
from tensorgym.features.context import CTX, summarize
from tensorgym.features.index_analysis import dominant_coeff, linear_form, value_range
from tensorgym.features.parallel import MIN_CONFIGS_PER_JOB
from tensorgym.lower import lower
from tensorgym.templates import space_for
from tensorgym.workloads import WORKLOADS, conv2d, get_workload, matmul
from .proc_tree import descendants, survivors
from .renaming import Renamer

WORKLOAD_SPECS = ["conv2d-C6", "conv2d-C1", "conv2d:1,16,14,14,32,3,2,1", "matmul:64,32,16",
                  "matmul-1024"]
FIXED_MODES = ("relation", "context", "config")


def _configs(workload, n=4, seed=0):
    space = space_for(workload, "cpu")
    return space.sample(np.random.default_rng(seed), n)


def _log(x: float) -> float:
    return math.log2(1.0 + x)


def figure3_program(names=("y", "x", "k", "A", "B", "C")) -> A.Program:
    """The paper's Figure 3a: C[y][x] = sum_k A[k][y] * B[k][x], all 8x8."""
    y, x, k = (A.LoopVar(n) for n in names[:3])
    a, b, c = (A.Buffer(n, (8, 8)) for n in names[3:])
    update = A.Store(c, (y, x), A.BinOp("+", A.Load(c, (y, x)),
                                        A.BinOp("*", A.Load(a, (k, y)), A.Load(b, (k, x)))))
    body = A.For(y, 8, "serial", A.For(x, 8, "serial", A.seq(
        A.Store(c, (y, x), A.FloatImm(0.0)), A.For(k, 8, "serial", update))))
    return A.Program("mm", (a, b, c), (), body)


# ---------------------------------------------------------------- renaming helper


# ---------------------------------------------------------------- fixed lengths


@pytest.mark.parametrize("spec", WORKLOAD_SPECS)
def test_fixed_length_finite_rows_for_every_mode(spec):
    w = get_workload(spec)
    configs = _configs(w, n=3)
    for mode in FIXED_MODES:
        x = featurize(w, configs, mode)
        assert x.dtype == np.float32
        assert x.shape == (3, feature_length(mode)) == (3, len(feature_names(mode)))
        assert np.isfinite(x).all()
        assert (x >= 0).all() or mode == "config"
    trees = featurize(w, configs, "ast")
    assert len(trees) == 3
    for t in trees:
        assert t["node_features"].shape == (len(t["node_type"]), len(NODE_TYPES) + len(CONTEXT_NAMES))


def test_relation_length_same_for_conv_and_matmul():
    rows = [featurize(w, _configs(w, 1), "relation") for w in (WORKLOADS["conv2d-C6"],
                                                              WORKLOADS["matmul-1024"])]
    assert rows[0].shape == rows[1].shape
    assert feature_length("relation") == len(RELATION_PAIRS) * len(THRESHOLDS) + len(PROGRAM_NAMES)


def test_empty_batch():
    w = WORKLOADS["matmul-1024"]
    assert featurize(w, [], "relation").shape == (0, feature_length("relation"))
    assert featurize(w, [], "ast") == []


# ---------------------------------------------------------------- invariances and purity


@pytest.mark.parametrize("spec", ["conv2d-C6", "matmul:64,32,16"])
def test_renaming_loops_and_buffers_leaves_features_unchanged(spec):
    w = get_workload(spec)
    for config in _configs(w, n=3, seed=1):
        program = lower(w, config)
        renamed = Renamer().program(program)
        assert str(renamed) != str(program)
        np.testing.assert_array_equal(context_matrix(program), context_matrix(renamed))
        for mode in ("relation", "context"):
            np.testing.assert_array_equal(extract(program, mode), extract(renamed, mode))
        t0, t1 = extract(program, "ast"), extract(renamed, "ast")
        assert t0.keys() == t1.keys()
        for key in t0:
            np.testing.assert_array_equal(t0[key], t1[key])


def test_features_are_deterministic_and_cache_transparent():
    w = WORKLOADS["conv2d-C6"]
    configs = _configs(w, n=5, seed=2)
    with Featurizer() as f:
        first = {m: f.featurize(w, configs, m) for m in FIXED_MODES}
        second = {m: f.featurize(w, configs, m) for m in FIXED_MODES}  # served from the cache
        f.clear()
        third = {m: f.featurize(w, configs, m) for m in FIXED_MODES}
    fresh = {m: featurize(w, configs, m) for m in FIXED_MODES}  # a featurizer of the call alone
    for m in FIXED_MODES:
        np.testing.assert_array_equal(first[m], fresh[m])
        np.testing.assert_array_equal(first[m], second[m])
        np.testing.assert_array_equal(first[m], third[m])
    for c, row in zip(configs, first["relation"]):
        np.testing.assert_array_equal(extract(lower(w, c), "relation"), row)


def test_parallel_featurizing_gives_the_same_rows_in_the_same_order():

    w = WORKLOADS["conv2d-C6"]
    configs = _configs(w, n=2 * MIN_CONFIGS_PER_JOB + 10, seed=5)
    configs = configs + configs[:7]  # repeats inside one batch
    f = Featurizer()
    try:
        for mode in ("relation", "context"):
            f.clear()
            serial = f.featurize(w, configs, mode, n_jobs=1, fast=False)
            f.clear()
            f.featurize(w, configs[:3], mode)  # some rows cached, the rest split over processes
            parallel = f.featurize(w, configs, mode, n_jobs=2, fast=False)
            np.testing.assert_array_equal(serial, parallel)
    finally:
        f.close()


def test_different_schedules_give_different_features():
    w = WORKLOADS["conv2d-C6"]
    configs = _configs(w, n=30, seed=3)
    for mode in FIXED_MODES:
        x = featurize(w, configs, mode)
        assert len(np.unique(x, axis=0)) >= 28, mode
    # a change of one annotation knob alone is visible
    space = space_for(w, "cpu")
    base = configs[0]
    for knob in ("vectorize", "parallel", "cache_write", "reorder"):
        i = [k.name for k in space.knobs].index(knob)
        other = list(base.choices)
        other[i] = (other[i] + 1) % space.knobs[i].size
        pair = featurize(w, [base, space.from_choices(other)], "relation")
        assert not np.array_equal(pair[0], pair[1]), knob


def test_input_slots_follow_the_main_statement_not_the_argument_list():
    """With conv2d's padding materialised, the main statement reads the padded copy: it takes
    the first input slot (like matmul's A) and the raw data moves to the workspace slot."""
    w = WORKLOADS["conv2d-C6"]
    space = space_for(w, "cpu")
    base = dict(_configs(w, 1, seed=8)[0].values)
    for inline_pad, reader_of_slot0 in ((1, "data"), (0, "pad")):
        program = lower(w, space.from_values(dict(base, inline_pad=inline_pad)))
        z = context_matrix(program)
        loops = [n for n in A.walk(program.body) if isinstance(n, A.For)]
        pad_stage = [k for k, lp in enumerate(loops) if lp.var.name.startswith("pad")]
        main = [k for k in range(len(loops)) if k not in pad_stage]
        assert z[main, CTX["slot0_read"]].max() == 1 and z[main, CTX["slot1_read"]].max() == 1
        if reader_of_slot0 == "pad":
            assert pad_stage and z[pad_stage, CTX["slot3_read"]].max() == 1  # data, in the copy
            assert z[pad_stage, CTX["slot0_write"]].max() == 1  # the copy writes pad
        else:
            assert not pad_stage and not z[:, CTX["slot3_read"]].any()


# ---------------------------------------------------------------- hand-checked values


def test_figure3_context_vectors():
    z = context_matrix(figure3_program())
    col = {n: z[:, CTX[n]] for n in CONTEXT_NAMES}
    np.testing.assert_allclose(col["extent"], [_log(8)] * 3)
    np.testing.assert_array_equal(col["depth"], [0, 1, 2])
    np.testing.assert_array_equal(col["height"], [2, 1, 0])
    np.testing.assert_array_equal(col["innermost"], [0, 0, 1])
    np.testing.assert_allclose(col["outer_iters"], [_log(1), _log(8), _log(64)], rtol=1e-6)
    # touched memory below each loop, in elements as in Figure 3b, times 4 bytes;
    # slots by role: A (input 0), B (input 1), C (output)
    touched = {"slot0": [64, 8, 8], "slot1": [64, 64, 8], "slot2": [64, 8, 1]}
    for slot, elems in touched.items():
        np.testing.assert_allclose(col[f"{slot}_touched_bytes"], [_log(4 * e) for e in elems],
                                   rtol=1e-6)
    # strides in the flattened index: A[k][y] -> k*8 + y, B[k][x], C[y][x]
    strides = {"slot0": [1, 0, 8], "slot1": [0, 1, 8], "slot2": [8, 1, 0]}
    for slot, s in strides.items():
        np.testing.assert_allclose(col[f"{slot}_stride"], [_log(v) for v in s], rtol=1e-6)
    # accesses of B below y: 8*8*8 loads; of C below k: one load and one store per iteration
    assert col["slot1_access_count"][0] == pytest.approx(_log(512))
    assert col["slot2_access_count"][2] == pytest.approx(_log(16))
    np.testing.assert_array_equal(col["slot2_write"], [1, 1, 1])
    np.testing.assert_array_equal(col["slot0_write"], [0, 0, 0])


def test_figure3_relation_feature():
    row = extract(figure3_program(), "relation")
    n_t = len(THRESHOLDS)
    p = RELATION_PAIRS.index(("slot1_access_count", "slot1_touched_bytes"))
    r = row[p * n_t:(p + 1) * n_t]
    # B's touched bytes per loop: y 256, x 256, k 32 -> log2(257), log2(257), log2(33)
    for t, beta in enumerate(THRESHOLDS):
        if beta <= _log(32):
            expected = 0.0  # no loop's footprint is below the threshold
        elif beta <= _log(256):
            expected = _log(8)  # only k: 8 accesses of B
        else:
            expected = _log(512)  # y: all 512
        assert r[t] == pytest.approx(expected, rel=1e-6), beta


def test_figure3_program_figures():
    g = dict(zip(PROGRAM_NAMES, extract(figure3_program(), "relation")[-len(PROGRAM_NAMES):]))
    assert g["flops"] == pytest.approx(_log(2 * 8 ** 3))
    assert g["stores"] == pytest.approx(_log(64 + 512))
    assert g["loads"] == pytest.approx(_log(3 * 512))
    assert g["n_loops"] == pytest.approx(_log(3))
    assert g["max_depth"] == 3
    assert g["global_bytes"] == pytest.approx(_log(3 * 64 * 4))


def test_flops_match_the_workload():
    for w in (WORKLOADS["conv2d-C6"], matmul(64, 32, 16)):
        for c in _configs(w, n=2, seed=4):
            g = dict(zip(PROGRAM_NAMES, summarize(lower(w, c)).program))
            assert g["flops"] == pytest.approx(_log(w.flops), rel=1e-6)


def _brute_force(program: A.Program):
    """For each (loop, buffer): the exact set of flat elements touched below the loop with the
    loops above it at 0, and the largest |coefficient| via ``loopast.linear_coeff``."""
    touched: dict = {}
    stride: dict = {}

    def visit(s, chain):
        if isinstance(s, A.For):
            visit(s.body, chain + [s])
        elif isinstance(s, A.Seq):
            for x in s.stmts:
                visit(x, chain)
        elif isinstance(s, A.Allocate):
            visit(s.body, chain)
        elif isinstance(s, A.Store):
            accesses = [(s.buffer, s.indices)] + [(n.buffer, n.indices) for n in A.walk(s.value)
                                                   if isinstance(n, A.Load)]
            for buf, idx in accesses:
                flat = A.flat_index(buf, idx)
                for pos, lp in enumerate(chain):
                    c = A.linear_coeff(flat, lp.var)
                    key = (id(lp), buf)
                    if c is not None:  # affine in this loop
                        stride[key] = max(stride.get(key, 0), abs(c))
                    inner = chain[pos:]
                    for values in itertools.product(*(range(x.extent) for x in inner)):
                        env = {x.var: v for x, v in zip(inner, values)}
                        touched.setdefault(key, set()).add(_eval(flat, env))

    visit(program.body, [])
    return touched, stride


def _eval(e, env):
    if isinstance(e, A.IntImm):
        return e.value
    if isinstance(e, A.LoopVar):
        return env.get(e, 0)
    ops = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
           "//": lambda a, b: a // b, "%": lambda a, b: a % b}
    return ops[e.op](_eval(e.a, env), _eval(e.b, env))


@pytest.mark.parametrize("workload", [matmul(8, 12, 6), conv2d(1, 2, 6, 6, 3, 3, 2, 0)])
def test_touched_memory_and_stride_against_brute_force(workload):
    """Touched memory is exact for these nests, fused parallel loops (``//``, ``%``) included,
    and where the index is affine in a loop the stride is what ``linear_coeff`` finds."""
    space = space_for(workload, "cpu")
    configs = space.sample(np.random.default_rng(5), 6)
    configs += [space.from_values(dict(c.values, parallel=2)) for c in configs[:2]]
    for c in configs:
        program = lower(workload, c)
        summary = summarize(program)
        touched, stride = _brute_force(program)
        loops = [n for n in A.walk(program.body) if isinstance(n, A.For)]
        slots = {b: s for s, b in enumerate(program.args[:2])}
        slots[program.args[2]] = 2
        for (loop_id, buf), elements in touched.items():
            if buf not in slots:
                continue  # local accumulator slots are checked by the Figure 3 test's logic
            k = next(i for i, lp in enumerate(loops) if id(lp) == loop_id)
            got = summary.context[k, CTX[f"slot{slots[buf]}_touched_bytes"]]
            assert got == pytest.approx(_log(4 * len(elements)), rel=1e-6), (k, buf)
            if (loop_id, buf) not in stride:
                continue
            got = summary.context[k, CTX[f"slot{slots[buf]}_stride"]]
            assert got == pytest.approx(_log(stride[(loop_id, buf)]), rel=1e-6), (k, buf)


def test_index_analysis_of_fused_loops():
    f, i = A.LoopVar("f"), A.LoopVar("i")
    outer = A.BinOp("//", f, A.IntImm(4))  # f = outer * 4 + inner
    inner = A.BinOp("%", f, A.IntImm(4))
    index = A.add(A.mul(outer, 100), A.add(A.mul(inner, 10), i))
    terms, opaque, _ = linear_form(index)
    assert terms == {i: 1} and len(opaque) == 2
    # f in range(12): outer takes 3 values, inner 4
    assert value_range(outer, {f: 12}) == (3, 3)
    assert value_range(inner, {f: 12}) == (4, 4)
    assert value_range(inner, {f: 3}) == (3, 3)
    # per step of f the index mostly moves by 10 (inner); outer moves once every 4 steps
    assert dominant_coeff(index, f) == 10
    assert dominant_coeff(index, i) == 1 == A.linear_coeff(index, i)
    values = {(a // 4) * 100 + (a % 4) * 10 + b for a in range(12) for b in range(5)}
    program = A.Program("fused", (A.Buffer("out", (400,)),), (), A.For(f, 12, "parallel", A.For(
        i, 5, "serial", A.Store(A.Buffer("out", (400,)), (index,), A.FloatImm(0.0)))))
    z = context_matrix(program)
    # the store goes to an undeclared buffer (placed by scope), so read the footprint column
    assert z[0, CTX["footprint_bytes"]] == pytest.approx(_log(4 * len(values)))


# ---------------------------------------------------------------- GPU-shaped programs


def _gpu_like_program(kind_names=("blockIdx.x", "threadIdx.x", "vthread")) -> A.Program:
    """out[b*16 + t] = sum_j shared[t, j]; shared filled from global with a barrier."""
    src = A.Buffer("src", (64, 8))
    out = A.Buffer("out", (64,))
    sh = A.Buffer("sh", (16, 8), "shared")
    b, t, v, j = (A.LoopVar(n) for n in ("b", "t", "v", "j"))
    row = A.add(A.mul(b, 16), t)
    fill = A.For(j, 8, "serial", A.Store(sh, (t, j), A.Load(src, (row, j))))
    j2 = A.LoopVar("j2")
    acc = A.For(j2, 8, "unrolled", A.Store(out, (row,), A.BinOp(
        "+", A.Load(out, (row,)), A.Load(sh, (t, j2)))))
    body = A.For(b, 4, kind_names[0], A.Allocate(sh, A.For(t, 16, kind_names[1], A.For(
        v, 1, kind_names[2], A.seq(fill, A.Barrier(), acc)))))
    return A.Program("gpu_like", (src, out), (), body, {"grid": (4, 1, 1), "block": (16, 1, 1)})


def test_gpu_loops_shared_buffers_and_barriers():
    s = summarize(_gpu_like_program())
    z = s.context
    assert z[0, CTX["kind_blockIdx"]] == 1 and z[1, CTX["kind_threadIdx"]] == 1
    assert z[2, CTX["kind_vthread"]] == 1 and z[4, CTX["kind_unrolled"]] == 1
    # the shared buffer takes the first shared slot (6); below the thread loop it holds 16x8
    assert z[1, CTX["slot6_touched_bytes"]] == pytest.approx(_log(16 * 8 * 4))
    assert z[1, CTX["slot6_write"]] == 1 and z[1, CTX["slot6_read"]] == 1
    g = dict(zip(PROGRAM_NAMES, s.program))
    assert g["barriers"] == pytest.approx(_log(4 * 16))
    assert g["shared_bytes"] == pytest.approx(_log(16 * 8 * 4))
    assert g["parallel_iters"] == pytest.approx(_log(4))
    assert g["threads"] == pytest.approx(_log(16))
    # the same kernel written with ThreadIdx expressions: the launch shape stands in for loops
    b, t = A.ThreadIdx("blockIdx.x"), A.ThreadIdx("threadIdx.x")
    out = A.Buffer("out", (64,))
    kernel = A.Program("k", (out,), (), A.Store(out, (A.add(A.mul(b, 16), t),), A.FloatImm(1.0)),
                       {"grid": (4, 1, 1), "block": (16, 1, 1)})
    g = dict(zip(PROGRAM_NAMES, summarize(kernel).program))
    assert g["parallel_iters"] == pytest.approx(_log(4)) and g["threads"] == pytest.approx(_log(16))
    assert extract(kernel, "relation").shape == (feature_length("relation"),)
    tree = extract(_gpu_like_program(), "ast")
    assert NODE_TYPES[tree["node_type"][0]] == "For"
    assert "Barrier" in [NODE_TYPES[t] for t in tree["node_type"]]


# ---------------------------------------------------------------- AST arrays


def test_ast_arrays_layout():
    w = WORKLOADS["conv2d-C6"]
    config = _configs(w, n=1, seed=6)[0]
    program = lower(w, config)
    tree = featurize(w, [config], "ast")[0]
    n = len(tree["node_type"])
    assert tree["parent"][0] == -1 and (tree["parent"][1:] < np.arange(1, n)).all()
    assert tree["child_ptr"][-1] == len(tree["child_idx"]) == n - 1
    for v in range(n):
        for c in tree["child_idx"][tree["child_ptr"][v]:tree["child_ptr"][v + 1]]:
            assert tree["parent"][c] == v and tree["depth"][c] >= tree["depth"][v]
    loops = tree["loop_index"] >= 0
    assert (tree["node_type"][loops] == NODE_TYPES.index("For")).all()
    np.testing.assert_array_equal(tree["loop_index"][loops], np.arange(loops.sum()))
    np.testing.assert_array_equal(tree["context"], context_matrix(program))
    np.testing.assert_array_equal(tree["node_features"][loops, len(NODE_TYPES):], tree["context"])
    n_for = sum(isinstance(x, A.For) for x in A.walk(program.body))
    assert loops.sum() == n_for == tree["context"].shape[0]


# ---------------------------------------------------------------- config encoding


def test_config_encoding_values():
    w = matmul(64, 32, 16)
    space = space_for(w, "cpu")
    config = space.get(0)
    row = featurize(w, [config], "config")[0]
    first = space.knobs[0]
    assert row[0] == 0.0  # choice 0 of a many-option knob
    np.testing.assert_allclose(row[1:4], [_log(f) for f in first.options[0]], rtol=1e-6)
    last = space.from_choices([k.size - 1 for k in space.knobs])
    row = featurize(w, [last], "config")[0]
    assert all(row[5 * k] == 1.0 for k, knob in enumerate(space.knobs) if knob.size > 1)
    assert not row[5 * len(space.knobs):].any()  # padding
    # a config of another space with the same name but other options is refused
    w = matmul(48, 32, 16)
    pow2 = space_for(w, "cpu", split_policy="pow2")
    odd = next(c for c in space_for(w, "cpu").sample(np.random.default_rng(7), 50)
               if c.values["tile_i"] not in pow2.knob("tile_i").options
               and c.choices[0] < pow2.knobs[0].size)
    with pytest.raises(ValueError, match="pass the space"):
        featurize(w, [odd], "config", space=pow2)


# ---------------------------------------------------------------- errors


def test_errors_are_clear():
    w = WORKLOADS["matmul-1024"]
    configs = _configs(w, 1)
    with pytest.raises(ValueError, match="unknown feature mode"):
        featurize(w, configs, "bogus")
    with pytest.raises(ValueError, match="unknown feature mode"):
        feature_length("bogus")
    with pytest.raises(ValueError, match="not fixed-length"):
        feature_length("ast")
    with pytest.raises(ValueError, match="does not fit"):
        featurize(WORKLOADS["conv2d-C6"], configs)
    with pytest.raises(TypeError, match="expected a Config"):
        featurize(w, [0])
    with pytest.raises(ValueError, match="encodes a config"):
        extract(figure3_program(), "config")
    with pytest.raises(ValueError, match="unknown loop kind"):
        context_matrix(_gpu_like_program(("blockIdx.x", "warp", "vthread")))
    assert set(FEATURE_MODES) == {"relation", "context", "config", "ast"}


def test_fast_rows_split_by_loop_order_over_a_helper_are_the_same():
    """The fast path's work split by loop order over a helper process (n_jobs=2) gives the
    rows of one process, in order, and the helper really ran. The helper starts in the
    background: calls made before it serves are computed in this process, with the same rows."""
    w = WORKLOADS["conv2d-C6"]
    configs = _configs(w, n=160, seed=11)
    assert len({tuple(c.values["reorder"]) for c in configs}) >= 3
    f = Featurizer()
    try:
        serial = {m: f.featurize(w, configs, m, n_jobs=1) for m in ("relation", "context")}
        f.clear()
        np.testing.assert_array_equal(f.featurize(w, configs, "relation", n_jobs=2),
                                      serial["relation"])  # the helper is starting meanwhile
        assert f.helpers.starting is not None
        deadline = time.monotonic() + 60
        while f.helpers.ready() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        child = f.helpers.pool.children[0]
        for mode in ("relation", "context"):
            f.clear()
            np.testing.assert_array_equal(f.featurize(w, configs, mode, n_jobs=2), serial[mode])
        assert child.alive and child.calls == 2
    finally:
        f.close()
    assert f.helpers.pool is None and not child.alive


def test_a_feature_helper_killed_while_starting_or_serving_loses_nothing():
    """A helper killed before it serves costs a warning, one killed between calls a new start:
    either way the call's rows are computed here, the same."""
    w = WORKLOADS["conv2d-C6"]
    configs = _configs(w, n=160, seed=12)
    f = Featurizer()
    try:
        serial = f.featurize(w, configs, "relation", n_jobs=1)
        for when in ("starting", "serving"):
            f.clear()
            np.testing.assert_array_equal(f.featurize(w, configs, "relation", n_jobs=2), serial)
            child = f.helpers.pool.children[0]
            if when == "serving":
                deadline = time.monotonic() + 60
                while f.helpers.ready() is None and time.monotonic() < deadline:
                    time.sleep(0.05)
                pid = child.proc.pid
            child.proc.kill()
            child.proc.wait()
            f.clear()
            if when == "starting":
                with pytest.warns(RuntimeWarning, match="feature helper process failed"):
                    rows = f.featurize(w, configs, "relation", n_jobs=2)
                assert f.helpers.pool is None
            else:
                with warnings.catch_warnings():
                    warnings.simplefilter("error")
                    rows = f.featurize(w, configs, "relation", n_jobs=2)
                assert f.helpers.starting.proc.pid != pid  # a new one starts
            np.testing.assert_array_equal(rows, serial)
    finally:
        f.close()


def test_no_featurizer_outlives_its_owner():
    """No featurizer lives in the module (no default one, nothing closed at exit): the module's
    ``featurize`` closes the helper processes of its call before it returns, and a ``with``
    block closes its featurizer's."""
    assert not [k for k, v in vars(features).items() if isinstance(v, Featurizer)]
    w = WORKLOADS["conv2d-C6"]
    configs = _configs(w, n=2 * MIN_CONFIGS_PER_JOB + 10, seed=13)
    before = descendants(os.getpid())
    serial = featurize(w, configs, "relation", fast=False)
    np.testing.assert_array_equal(featurize(w, configs, "relation", n_jobs=2, fast=False), serial)
    assert not survivors(descendants(os.getpid()) - before)
    with Featurizer() as f:
        np.testing.assert_array_equal(f.featurize(w, configs, "relation", n_jobs=2, fast=False),
                                      serial)
        assert f.helpers.pool is not None
    assert f.helpers.pool is None and not survivors(descendants(os.getpid()) - before)
