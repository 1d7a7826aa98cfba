"""The CPU runtime's LLVM levels: kernels built at every level its policy may choose are correct,
and compile_info names the levels that built a kernel."""
import llvmlite.binding as llvm
import numpy as np
import pytest

from tensorgym.hardware.cpu import (HUGE_SOURCE_LINES, LARGE_SOURCE_LINES, CPURuntime,
                                   _target_machine)
from tensorgym.measure import LocalMeasurer, MeasureOptions
from tensorgym.lower import lower
from tensorgym.templates import space_for
from tensorgym.workloads import conv2d

W = conv2d(1, 8, 10, 10, 16, 3, 1, 1)
RT = CPURuntime()


def _kernels():
    """Two small and two large (LARGE_SOURCE_LINES or more, but quick to build) kernels of W:
    (config, program, source)."""
    small, large = [], []
    for c in space_for(W, "cpu").sample(np.random.default_rng(2), 40):
        p = lower(W, c)
        source = RT.render(p)
        lines = source.count("\n")
        group = small if lines < LARGE_SOURCE_LINES else large if lines < 6000 else []
        group.append((c, p, source))
        if len(small) >= 2 and len(large) >= 2:
            return small[:2] + large[:2]
    raise AssertionError("the sample lacks small or large kernels")


KERNELS = _kernels()


def test_compile_info_names_the_level_that_built_the_kernel():
    for _, p, source in KERNELS:
        info = RT.compile_info(p, source)
        lines = source.count("\n")
        assert info == {"opt_level": 1 if lines >= HUGE_SOURCE_LINES else 3,
                        "codegen_level": 1 if lines >= LARGE_SOURCE_LINES else 3}
        binary = RT.compile(source, p)
        assert binary == CPURuntime(**info).compile(source, p)
        if lines >= LARGE_SOURCE_LINES:  # the level makes a difference, so the equality above
            # says which one built it
            assert binary != CPURuntime(opt_level=info["opt_level"],
                                        codegen_level=3).compile(source, p)
    forced = CPURuntime(opt_level=2, codegen_level=2)
    assert forced.compile_info(*KERNELS[0][1:]) == {"opt_level": 2, "codegen_level": 2}


def test_a_huge_kernel_is_built_at_o1_and_is_correct():
    """A source of HUGE_SOURCE_LINES or more (one big unrolled block) gets the IR pipeline's O1,
    the result says so, and the kernel still computes what NumPy does."""
    w = conv2d(1, 16, 14, 14, 32, 3, 1, 1)
    config = space_for(w, "cpu").from_values(  # unroll 512 over a cache_write block
        {"tile_oc": (2, 2, 8), "tile_oh": (2, 1, 7), "tile_ow": (7, 1, 2), "tile_rc": (4, 4),
         "tile_ry": (1, 3), "tile_rx": (1, 3), "reorder": ("R0", "S1", "R1", "S2"),
         "vectorize": "inner", "unroll_max_step": 512, "parallel": 2, "cache_write": 1,
         "inline_pad": 1, "vector_axis": "oc", "pack_weight": 0})
    p = lower(w, config)
    source = RT.render(p)
    assert source.count("\n") >= HUGE_SOURCE_LINES
    assert RT.compile_info(p, source) == {"opt_level": 1, "codegen_level": 1}
    binary = RT.compile(source, p)
    assert binary == CPURuntime(opt_level=1).compile(source, p)
    assert binary != CPURuntime(opt_level=3).compile(source, p)
    m = LocalMeasurer("cpu", MeasureOptions(repeat=1, min_repeat_ms=1))
    try:
        (r,) = m.measure(w, [config])
    finally:
        m.close()
    assert r.ok, (r.error, r.error_msg)
    assert r.extra["compile"] == {"opt_level": 1, "codegen_level": 1}


@pytest.mark.parametrize("codegen_level", [None, 1, 3])
def test_kernels_built_at_each_level_the_policy_chooses_are_correct(codegen_level):
    m = LocalMeasurer("cpu", MeasureOptions(repeat=1, min_repeat_ms=1), codegen_level=codegen_level)
    try:
        results = m.measure(W, [c for c, _, _ in KERNELS])
    finally:
        m.close()
    assert all(r.ok for r in results), [(r.error, r.error_msg) for r in results if not r.ok]


def test_loop_load_elimination_never_runs():
    """It never changed these kernels and took seconds on large ones (cpu.py)."""
    RT.check_available()
    _, _, source = KERNELS[-1]
    tm = _target_machine(3)
    mod = llvm.parse_assembly(source)
    mod.triple = llvm.get_process_triple()
    mod.data_layout = str(tm.target_data)
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pb = llvm.create_pass_builder(tm, pto)
    pb.start_pass_timing()
    pb.getModulePassManager().run(mod, pb)
    report = pb.finish_pass_timing()
    assert "LICMPass" in report and "LoopLoadEliminationPass" not in report


def test_levels_are_checked():
    for kwargs in ({"opt_level": 0}, {"codegen_level": 4}, {"opt_level": "3"}):
        with pytest.raises(ValueError):
            CPURuntime(**kwargs)


def test_each_result_says_how_it_was_built():
    import numpy as np

    from tensorgym.measure import LocalMeasurer, MeasureOptions
    from tensorgym.templates import space_for
    from tensorgym.workloads import matmul

    w = matmul(24, 16, 20)
    m = LocalMeasurer("cpu", MeasureOptions(repeat=2, min_repeat_ms=1))
    try:
        for r in m.measure(w, space_for(w, "cpu").sample(np.random.default_rng(3), 3)):
            assert r.ok and r.extra["compile"]["opt_level"] == 3
            assert r.extra["compile"]["codegen_level"] in (1, 3)
    finally:
        m.close()
