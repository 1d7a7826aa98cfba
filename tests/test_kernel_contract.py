"""Every kernel's whole contract is checked: injected kernels that crash, hang, compute the wrong
thing, leave outputs unwritten, write out of bounds or into an input are each reported on
themselves, and the correct kernel measured right after each one is NO_ERROR."""
import numpy as np
import pytest

from tensorgym import loopast as A
from tensorgym.errors import ErrorCode, TargetUnavailableError
from tensorgym.measure import LocalMeasurer, MeasureOptions, Measurer
from tensorgym.hardware.runtime import GUARD
from tensorgym.measure.result import RunResult
from tensorgym.measure.worker import Reference, run_job
from tensorgym.lower import lower
from tensorgym.templates import default_config
from tensorgym.workloads import matmul

W = matmul(8, 8, 8)
N = 8 * 8  # floats in each buffer
OPTS = MeasureOptions(timeout=3.0, repeat=2, min_repeat_ms=1, n_parallel=1)
FAST_OPENCL = {"build_options": ("-cl-opt-disable",)}


def correct(target: str) -> A.Program:
    return lower(W, default_config(W, target))


def with_body(base: A.Program, body: A.Stmt) -> A.Program:
    return A.Program("injected", base.args, base.workspaces, body, base.launch)


def write_past_end(c: A.Buffer, first: int, count: int) -> A.Stmt:
    """C[N + first + k] = 1 for k < count. The index is flattened by hand (C[8, j] is
    C[64 + j]): no bounds check sits between a Store and its address."""
    k = A.LoopVar("k")
    return A.For(k, count, "serial", A.Store(c, (A.IntImm(8), A.add(k, first)), A.FloatImm(1.0)))


def oob(first: int, count: int):
    """The correct kernel, then :func:`write_past_end`."""
    return lambda base: with_body(base, A.seq(base.body, write_past_end(base.args[-1], first,
                                                                        count)))


def serial_matmul(rows: int):
    """C = A @ B for the first ``rows`` rows only, one work-item."""
    def make(base: A.Program) -> A.Program:
        a, b, c = base.args
        i, j, r = A.LoopVar("i"), A.LoopVar("j"), A.LoopVar("r")
        acc = A.BinOp("+", A.Load(c, (i, j)), A.BinOp("*", A.Load(a, (i, r)), A.Load(b, (r, j))))
        body = A.For(i, rows, "serial", A.For(j, 8, "serial", A.seq(
            A.Store(c, (i, j), A.FloatImm(0.0)), A.For(r, 8, "serial", A.Store(c, (i, j), acc)))))
        return A.Program("injected", base.args, (), body,
                         {"grid": (1, 1, 1), "block": (1, 1, 1)} if base.launch else {})
    return make


def from_second_group(first: int, count: int):
    """Two work-groups each compute C, then the second does :func:`write_past_end`. The OpenCL
    build step launches only the first group (PoCL's JIT warm-up), so only the worker runs the
    bad write."""
    def make(base: A.Program) -> A.Program:
        second = A.BinOp("==", A.ThreadIdx("blockIdx.x"), A.IntImm(1))
        body = A.seq(serial_matmul(8)(base).body,
                     A.If(second, write_past_end(base.args[-1], first, count)))
        return A.Program("injected", base.args, (), body, {"grid": (2, 1, 1), "block": (1, 1, 1)})
    return make


def zeros(base: A.Program) -> A.Program:
    c = base.args[-1]
    i, j = A.LoopVar("i"), A.LoopVar("j")
    return A.Program("injected", base.args, (), A.For(i, 8, "serial", A.For(
        j, 8, "serial", A.Store(c, (i, j), A.FloatImm(0.0)))),
        {"grid": (1, 1, 1), "block": (1, 1, 1)} if base.launch else {})


def segfault(base: A.Program) -> A.Program:
    return with_body(base, A.Store(base.args[-1], (A.IntImm(1 << 40), A.IntImm(0)),
                                   A.FloatImm(1.0)))


def hang(base: A.Program) -> A.Program:
    a, _, c = base.args
    i = A.LoopVar("i")
    row = A.BinOp("%", i, A.IntImm(8))
    return with_body(base, A.For(i, 10**15, "serial", A.Store(
        c, (row, A.IntImm(0)),
        A.BinOp("+", A.Load(c, (row, A.IntImm(0))), A.Load(a, (row, A.IntImm(1)))))))


def into_input(base: A.Program) -> A.Program:
    return with_body(base, A.seq(base.body, A.Store(base.args[0], (A.IntImm(3), A.IntImm(3)),
                                                    A.FloatImm(2.0))))


# (name, kernel from the correct program, error code, words of the message). The canaries span
# GUARD floats on each side, so the 1- and 4096-float overruns hit one; past them lie PROT_NONE
# guards on host memory (the worker faults and dies).
CANARY_CASES = [
    ("oob-1", oob(0, 1), ErrorCode.RUNTIME_DEVICE, "1 float(s) written up to 1 past the end of C"),
    ("oob-4096", oob(0, 4096), ErrorCode.RUNTIME_DEVICE, "up to 4096 past the end of C"),
    ("oob-before-start", oob(-N - 1, 1), ErrorCode.RUNTIME_DEVICE, "1 before the start of C"),
    ("wrong-answer", zeros, ErrorCode.WRONG_ANSWER, "max relative error"),
    ("partial-write", serial_matmul(7), ErrorCode.WRONG_ANSWER, "8 of 64 outputs never written"),
]
CRASH_CASES = [
    ("segfault", segfault, ErrorCode.RUNTIME_DEVICE, "died"),
    ("hang", hang, ErrorCode.RUN_TIMEOUT, "no result within"),
    ("oob-into-guard-page", oob(GUARD + 1024, 1), ErrorCode.RUNTIME_DEVICE, "died"),
    ("into-input", into_input, ErrorCode.RUNTIME_DEVICE, "died"),  # inputs are read-only
]


def _measurer(target: str, **runtime_kwargs) -> Measurer:
    m = LocalMeasurer(target, OPTS, **runtime_kwargs)
    try:
        m.runtime.check_available()
    except TargetUnavailableError as e:
        pytest.skip(f"no {target} device: {e}")
    return m


@pytest.fixture(scope="module")
def cpu():
    m = _measurer("cpu")
    yield m
    m.close()


@pytest.fixture(scope="module")
def opencl():
    m = _measurer("opencl", **FAST_OPENCL)
    yield m
    m.close()


@pytest.fixture(scope="module")
def cuda():
    m = _measurer("cuda")
    yield m
    m.close()


def _bad_then_good(measurer: Measurer, target: str, make, code: ErrorCode, words: str) -> None:
    cfg = default_config(W, target)
    bad = measurer.run_program(W, make(correct(target)), cfg)
    assert bad.error == code and words in bad.error_msg, (bad.error, bad.error_msg)
    assert not bad.ok and bad.gflops == 0
    good = measurer.measure(W, [cfg])[0]
    assert good.error == ErrorCode.NO_ERROR and good.ok, good.error_msg


@pytest.mark.parametrize("name,make,code,words", CANARY_CASES + CRASH_CASES,
                         ids=[c[0] for c in CANARY_CASES + CRASH_CASES])
def test_cpu_injected_kernel_is_labelled_and_the_next_one_is_fine(cpu, name, make, code, words):
    _bad_then_good(cpu, "cpu", make, code, words)


# On a CPU device (PoCL) OpenCL buffers are guarded host mappings too. Kernels that crash or hang
# at once are left out: the OpenCL build step launches each kernel once (PoCL's JIT warm-up), so
# they fail their build before a worker runs them.
OPENCL_CASES = CANARY_CASES + [("oob-into-guard-page", from_second_group(GUARD + 1024, 1),
                                ErrorCode.RUNTIME_DEVICE, "died")]


@pytest.mark.opencl
@pytest.mark.parametrize("name,make,code,words", OPENCL_CASES, ids=[c[0] for c in OPENCL_CASES])
def test_opencl_injected_kernel_is_labelled_and_the_next_one_is_fine(opencl, name, make, code,
                                                                     words):
    if name == "oob-into-guard-page" and not opencl.runtime.host_memory:
        pytest.skip("a GPU's buffers have canaries but no guard pages")
    _bad_then_good(opencl, "opencl", make, code, words)


# A GPU's buffers have canaries but no guard pages; a wild address is the driver's illegal-address
# error, which poisons the context: the worker is replaced before the next kernel.
CUDA_CASES = CANARY_CASES + [("segfault", segfault, ErrorCode.RUNTIME_DEVICE, ""),
                             ("hang", hang, ErrorCode.RUN_TIMEOUT, "no result within")]


@pytest.mark.cuda
@pytest.mark.parametrize("name,make,code,words", CUDA_CASES, ids=[c[0] for c in CUDA_CASES])
def test_cuda_injected_kernel_is_labelled_and_the_next_one_is_fine(cuda, name, make, code, words):
    _bad_then_good(cuda, "cuda", make, code, words)


# ---------------------------------------------------------------- run_job itself, in process


def _runtime(target: str):
    from tensorgym.hardware.runtime import get_runtime

    rt = get_runtime(target, **(FAST_OPENCL if target == "opencl" else {}))
    try:
        rt.check_available()
    except TargetUnavailableError as e:
        pytest.skip(f"no {target} device: {e}")
    return rt


def _job(rt, program: A.Program, source: "str | None" = None) -> RunResult:
    binary = rt.compile(source or rt.render(program), program)
    return run_job(rt, Reference(0), W, program, binary, OPTS)


TARGETS = ["cpu", pytest.param("opencl", marks=pytest.mark.opencl),
           pytest.param("cuda", marks=pytest.mark.cuda)]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("name,make,code,words", CANARY_CASES, ids=[c[0] for c in CANARY_CASES])
def test_run_job_flags_a_broken_contract_as_suspect(target, name, make, code, words):
    """The parent restarts the worker on ``suspect``: set for every broken contract, never for
    a correct kernel."""
    rt = _runtime(target)
    ok = _job(rt, correct(target))
    assert ok.error == 0 and 2 <= len(ok.costs) <= 10 and not ok.suspect, ok
    bad = _job(rt, make(correct(target)))
    assert bad.error == int(code) and words in bad.error_msg and bad.suspect, bad


@pytest.mark.opencl
def test_opencl_kernel_that_writes_an_input_is_caught():
    """OpenCL C declares inputs const, so the loop AST cannot write one: edit the source."""
    rt = _runtime("opencl")
    program = correct("opencl")
    src = rt.render(program).replace("const ", "").replace("{\n", "{\n  A[3] = 2.0f;\n", 1)
    bad = _job(rt, program, src)
    assert bad.error == int(ErrorCode.RUNTIME_DEVICE) and bad.suspect, bad
    assert "input A written" in bad.error_msg


def _mappings() -> int:
    with open("/proc/self/maps") as f:
        return sum(1 for _ in f)


@pytest.mark.parametrize("target", TARGETS)
def test_outputs_start_nan_between_canaries_and_buffers_are_freed(target):
    rt = _runtime(target)
    program = correct(target)
    kernel = rt.load(rt.compile(rt.render(program), program), program)
    inputs = W.random_inputs(0)
    kept = []  # no buffer is freed by garbage collection here: only by release
    for _ in range(2):  # the first round warms up (thread stacks); the second must give back all
        before = _mappings()
        bufs = kernel.alloc(inputs)
        kept.append(bufs)
        assert np.isnan(kernel.read_output(bufs)).all()  # before any run
        assert kernel.check_guards(bufs) == []
        kernel.time(bufs, 1)
        np.testing.assert_allclose(kernel.read_output(bufs), W.reference(inputs), rtol=1e-5)
        assert kernel.check_guards(bufs) == []
        kernel.release(bufs)
        kernel.release(bufs)  # a second release frees nothing twice
    if target == "cpu" or getattr(rt, "host_memory", False):  # each buffer is a mapping of its own
        assert _mappings() == before
    kernel.close()
