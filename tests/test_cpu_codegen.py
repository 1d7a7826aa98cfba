"""Generated CPU kernels against NumPy, compiled and run in-process for speed."""
import numpy as np
import pytest

from tensorgym import loopast as A
from tensorgym.hardware.cpu import CPURuntime
from tensorgym.hardware.worker import tolerance
from tensorgym.lower import lower
from tensorgym.templates import default_config, space_for

from .conftest import SMALL_WORKLOADS

RT = CPURuntime()


def run_config(w, c):
    p = lower(w, c)
    kernel = RT.load(RT.compile(RT.render(p), p), p)
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


def test_parallel_loop_calls_libgomp():
    w = SMALL_WORKLOADS[0]
    c = default_config(w, "cpu")
    assert "GOMP_parallel" in RT.render(lower(w, c))
    assert "vmul" in RT.assembly(RT.render(lower(w, c))) or "vfmadd" in RT.assembly(
        RT.render(lower(w, c)))
