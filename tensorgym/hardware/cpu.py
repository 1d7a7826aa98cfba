"""CPU runtime: LLVM IR from the loop AST, optimised and compiled to object code for the host
CPU with llvmlite, loaded with MCJIT and called through ctypes. Parallel loops run on libgomp."""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import platform
from functools import lru_cache
from typing import Any, Sequence

import llvmlite.binding as llvm
import numpy as np

from ..codegen.llvm import CHUNKS_PER_THREAD, KERNEL_NAME, emit_llvm
from ..errors import TargetUnavailableError
from ..loopast import Program
from ..processes.host import available_cpus
from .device import Device
from .host import host_vector_lanes
from .runtime import (CANARY, GUARD, HostMapping, Kernel, Runtime, canary_damage, checked_inputs,
                      page_floats)


# LoopLoadElimination forwards a store to a load of a later iteration, which the templates' loops
# never have, but its dependence analysis is quadratic in the memory accesses of a loop body: 12 CPU
# seconds for a C1 kernel with 512 unrolled updates of its output. Without it, 400 random kernels
# of C1, C6, C7 and matmul-1024 compiled to identical objects (benchmarks/bench_compile.py checks
# its sample too). Dead-store elimination is quadratic the same way (1-2.4 s of a 6-15k line
# unrolled kernel, 60% of the O3 pipeline over a C6 tune's kernels), and the emitter already drops
# the stores it would (codegen/llvm.py, _Memory): over the 256 kernels of a C6 tune it changed 4
# objects, all of slow kernels. The option is LLVM's and process-wide: it holds for every llvmlite
# user here.
_DISABLED_PASSES = "loop-load-elim,dse"

# Sources of this many lines or more get the backend's "less" level (1), whose run time measured the
# same (benchmarks/bench_compile.py): its schedulers are quadratic in a basic block, and a big
# unrolled kernel is one big block (over 10,000 lines, "less" takes 40% off the backend's time,
# up to 2 s). Below this size the backend is cheap and the saving a few milliseconds.
LARGE_SOURCE_LINES = 2000
# Sources of this many lines or more also get the IR pipeline's O1. On the kernels of a 256-trial
# C6 tune (those over 20 GFLOP/s, 15 interleaved rounds, beside a second O3 binary as a control
# for the noise): 5,000-20,000 lines, 39 kernels, O1 ran in a median 0.99x the time of O3
# (control 1.00x; single kernels 0.91-1.37x and 0.85-1.31x, one config 1.00x and 1.37x on two
# tries) and built in 0.76x; over 20,000 lines, 12 kernels, 1.00x (0.97-1.01x; control
# 0.98-1.06x) in 0.82x the build time. Below 5,000 lines it saved 3-7% of a cheap build. Such a
# kernel is mostly one unrolled block, where O3's extra passes find little that O1's do not.
HUGE_SOURCE_LINES = 5000


@lru_cache(maxsize=None)
def _init_llvm() -> None:
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.set_option("tensorgym", f"-opt-disable={_DISABLED_PASSES}")
    # an OpenMP runtime this process already has (torch's wheel ships its own libgomp): one
    # runtime per process, or two thread pools would fight over the cores
    loaded = mapped_libraries("libgomp")
    gomp = loaded[0] if loaded else ctypes.util.find_library("gomp")
    if gomp is None:
        raise TargetUnavailableError(
            "libgomp (GCC's OpenMP runtime) was not found; parallel CPU kernels need it. "
            "Install it (Debian: apt-get install libgomp1) or use target 'opencl'")
    llvm.load_library_permanently(gomp)


def mapped_libraries(stem: str) -> list[str]:
    """Paths of the shared libraries whose file name starts with ``stem`` (``libgomp``) mapped
    into this process, in the order first seen in /proc/self/maps (empty where it is absent)."""
    found: list[str] = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                fields = line.split(maxsplit=5)
                path = fields[5].strip() if len(fields) == 6 else ""
                if os.path.basename(path).startswith(stem) and ".so" in path and \
                        path not in found:
                    found.append(path)
    except OSError:
        pass
    return found


# ``CPURuntime(isa=...)``: generate code for a narrower instruction set than the host's (an object
# for it runs on any host that has it), e.g. to test the AVX2 code path on an AVX-512 machine.
# isa -> (LLVM CPU name, vector lanes of float32)
ISAS = {"avx2": ("x86-64-v3", 8), "avx512": ("x86-64-v4", 16)}


def host_isa() -> str:
    """``avx512``, ``avx2`` or ``other``: the widest float32 vector ISA of this host."""
    _init_llvm()
    features = llvm.get_host_cpu_features()
    if features.get("avx512f"):
        return "avx512"
    return "avx2" if features.get("avx2") and features.get("fma") else "other"


def vector_lanes(isa: "str | None" = None) -> int:
    """float32 lanes of one vector register of ``isa`` (default: the host's): 16 on AVX-512,
    8 on AVX2, else 4 (SSE, NEON). Schedules whose vector loops are multiples of it fill the
    registers."""
    if isa is None:
        return host_vector_lanes()
    return ISAS[isa][1] if isa in ISAS else 4


def _check_isa(isa: "str | None") -> None:
    if isa is None:
        return
    if isa not in ISAS:
        raise ValueError(f"unknown isa {isa!r}; use one of {', '.join(ISAS)} or None (the host's)")
    if isa == "avx512" and host_isa() != "avx512" or isa == "avx2" and host_isa() == "other":
        raise TargetUnavailableError(f"this CPU cannot run {isa} code (it has {host_isa()}); "
                                     f"use isa=None (the host's)")


@lru_cache(maxsize=None)
def _target_machine(codegen_level: int = 3, isa: "str | None" = None) -> llvm.TargetMachine:
    _init_llvm()
    target = llvm.Target.from_triple(llvm.get_process_triple())
    if isa is not None:
        cpu, features = ISAS[isa][0], ""
    else:
        cpu, features = llvm.get_host_cpu_name(), llvm.get_host_cpu_features().flatten()
    return target.create_target_machine(cpu=cpu, features=features, opt=codegen_level,
                                        reloc="default", codemodel="jitdefault")


def _optimize(mod: llvm.ModuleRef, tm: llvm.TargetMachine, opt_level: int = 3) -> None:
    """LLVM's pipeline at ``opt_level``, except that its own loop vectorizer and unroller are off:
    the schedule decides what is vectorized and unrolled (and they would multiply compile time)."""
    pto = llvm.create_pipeline_tuning_options(speed_level=opt_level)
    pto.loop_vectorization = False
    pto.loop_unrolling = False
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(mod, pb)


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


# Freeing an MCJIT engine that holds an added object file crashes LLVM later on, so engines
# are kept for the life of the process; the measurement worker restarts itself periodically.
_LIVE_ENGINES: list = []


def compile_object(source: str, opt_level: int = 3, codegen_level: int = 3,
                   isa: "str | None" = None) -> bytes:
    """LLVM IR ``source`` optimised (``_optimize``) and compiled to an object file for this CPU
    (or for ``isa``)."""
    tm = _target_machine(codegen_level, isa)
    mod = llvm.parse_assembly(source)
    mod.triple = llvm.get_process_triple()
    mod.data_layout = str(tm.target_data)
    mod.verify()
    _optimize(mod, tm, opt_level)
    return tm.emit_object(mod)


def load_object(binary: bytes, name: str) -> tuple[Any, int]:
    """The object file ``binary`` loaded in this process: (its engine, which keeps the code
    alive, and the address of its function ``name``)."""
    engine = llvm.create_mcjit_compiler(llvm.parse_assembly(""), _target_machine())
    objfile = llvm.ObjectFileRef.from_data(binary)
    engine.add_object_file(objfile)
    engine.finalize_object()
    address = engine.get_function_address(name)
    if not address:
        raise RuntimeError(f"{name} not found in the compiled object")
    _LIVE_ENGINES.append((engine, objfile, binary))
    return engine, address


def host_cpu_name() -> str:
    """LLVM's name of this CPU (``znver4``, ``emeraldrapids``, ...)."""
    return llvm.get_host_cpu_name()


def jit(source: str, name: str) -> int:
    """The address of function ``name`` of LLVM IR ``source``, compiled as kernels are and
    loaded in this process for its life (the FMA peak's loop is JIT-compiled this way)."""
    return load_object(compile_object(source), name)[1]


class GuardedBuffer:
    """One buffer in a :class:`HostMapping`: [PROT_NONE][canary][data][canary][PROT_NONE]. A
    small overrun lands in a canary (:meth:`damage`), a larger one faults."""

    def __init__(self, name: str, data: "np.ndarray | None", size: int, stagger: int) -> None:
        self.name = name
        # Buffers start a cache line apart within their page: at one page offset, loads and
        # stores 4 KiB apart would alias and slow kernels down.
        self.start = GUARD + 16 * (stagger % 64)
        self.mem = HostMapping(page_floats(self.start + size + GUARD))
        self.mem.array.view(np.uint32)[:] = CANARY
        self.array = self.mem.array[self.start:self.start + size]
        self.array[:] = np.nan if data is None else data.reshape(-1)
        self.ptr = self.mem.ptr + 4 * self.start

    def damage(self) -> list[str]:
        whole = self.mem.array
        return canary_damage(self.name, whole[:self.start], whole[self.start + self.array.size:])

    def free(self) -> None:
        self.array = None
        self.mem.free()


class CPUKernel(Kernel):
    def __init__(self, engine, address: int, program: Program) -> None:
        self._engine = engine  # keeps the code alive
        self.program = program
        self._fn = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * len(program.buffers))(address)

    def alloc(self, inputs: Sequence[np.ndarray]) -> list[GuardedBuffer]:
        data = checked_inputs(self.program, inputs)
        bufs: list[GuardedBuffer] = []
        try:
            for i, b in enumerate(self.program.buffers):
                bufs.append(GuardedBuffer(b.name, data[i] if i < len(data) else None, b.size, i))
                if i < len(data):  # a kernel that writes an input faults
                    bufs[-1].mem.make_read_only()
        except BaseException:
            self.release(bufs)
            raise
        return bufs

    def _ptrs(self, bufs: list[GuardedBuffer]) -> list[int]:
        return [b.ptr for b in bufs]

    def time(self, bufs: list[GuardedBuffer], number: int) -> float:
        import time

        ptrs = self._ptrs(bufs)
        fn = self._fn
        t0 = time.perf_counter()
        for _ in range(number):
            fn(*ptrs)
        return (time.perf_counter() - t0) / number

    def read_output(self, bufs: list[GuardedBuffer]) -> np.ndarray:
        return bufs[len(self.program.args) - 1].array.reshape(self.program.args[-1].shape).copy()

    def check_guards(self, bufs: list[GuardedBuffer]) -> list[str]:
        # inputs are read-only mappings: writing them faults instead
        return [line for b in bufs[len(self.program.args) - 1:] for line in b.damage()]

    def release(self, bufs: list[GuardedBuffer]) -> None:
        for b in bufs:
            b.free()

    _flush_buf: "np.ndarray | None" = None

    def flush_cache(self) -> None:
        if CPUKernel._flush_buf is None:
            CPUKernel._flush_buf = np.zeros(64 << 20 >> 2, np.float32)  # 64 MiB > any LLC here
        CPUKernel._flush_buf += 1.0


def _default_threads() -> int:
    try:
        return max(1, int(os.environ.get("OMP_NUM_THREADS", "").split(",")[0]))
    except ValueError:
        return available_cpus()


class CPURuntime(Runtime):
    target = "cpu"

    def __init__(self, num_threads: int = 0, opt_level: "int | None" = None,
                 codegen_level: "int | None" = None, isa: "str | None" = None,
                 chunks_per_thread: int = CHUNKS_PER_THREAD) -> None:
        """``opt_level``: LLVM's IR pipeline (1-3; O1 and O2 build a few tenths faster but run up
        to 2x slower on some kernels, see benchmarks/bench_compile.py); None chooses per kernel:
        O3, or O1 for a source of HUGE_SOURCE_LINES or more. ``codegen_level``: the backend's
        (1-3); None chooses per kernel (:meth:`compile_info`). ``isa``: generate code for this
        instruction set (``ISAS``: ``avx2``, ``avx512``) instead of the host CPU's own; the host
        must have it. ``chunks_per_thread``: how a parallel loop is shared (``codegen.llvm``: k
        chunks per thread claimed dynamically, 0 one static chunk each)."""
        # 0: OMP_NUM_THREADS if set, else the cores this process may use (affinity, cgroup
        # quota), made explicit so that the device label says what the kernels really use
        self.num_threads = num_threads or _default_threads()
        if opt_level not in (None, 1, 2, 3) or codegen_level not in (None, 1, 2, 3):
            raise ValueError(f"LLVM levels are 1, 2 or 3: opt_level={opt_level!r}, "
                             f"codegen_level={codegen_level!r}")
        self.opt_level = opt_level
        self.codegen_level = codegen_level
        _check_isa(isa)
        self.isa = isa
        if not isinstance(chunks_per_thread, int) or chunks_per_thread < 0:
            raise ValueError(f"chunks_per_thread is an integer >= 0, got {chunks_per_thread!r}")
        self.chunks_per_thread = chunks_per_thread

    def check_available(self) -> None:
        _init_llvm()

    def device_info(self) -> Device:
        _init_llvm()
        return Device("cpu", _cpu_model(), llvm.get_host_cpu_name(), self.isa or "",
                      self.num_threads)

    def render(self, program: Program) -> str:
        source = emit_llvm(program, self.num_threads, self.chunks_per_thread)
        if any(layout is not None for layout in program.input_layouts):
            # the inputs' layouts are part of what the kernel means: two programs with the same
            # code but differently packed inputs are different kernels (sources key the caches)
            source += "".join(f"; input {b.name}: {layout}\n"
                              for b, layout in zip(program.args, program.input_layouts))
        return source

    def _levels(self, source: str) -> tuple[int, int]:
        """(IR pipeline, backend) levels for ``source``: the given ones, else by its size."""
        lines = source.count("\n")
        opt = self.opt_level or (1 if lines >= HUGE_SOURCE_LINES else 3)
        codegen = self.codegen_level or (1 if lines >= LARGE_SOURCE_LINES else 3)
        return opt, codegen

    def compile_info(self, program: Program, source: str) -> dict:
        """The LLVM levels :meth:`compile` builds this source at: the IR pipeline's (O1 for a
        source of HUGE_SOURCE_LINES lines or more), and the backend's ("less", 1, for a source
        of LARGE_SOURCE_LINES lines or more)."""
        opt, codegen = self._levels(source)
        info = {"opt_level": opt, "codegen_level": codegen}
        return dict(info, isa=self.isa) if self.isa else info

    def compile(self, source: str, program: Program) -> bytes:
        opt, codegen = self._levels(source)
        return compile_object(source, opt, codegen, self.isa)

    def load(self, binary: Any, program: Program) -> CPUKernel:
        engine, address = load_object(binary, KERNEL_NAME)
        return CPUKernel(engine, address, program)

    def assembly(self, source: str) -> str:
        """Host assembly of the optimised module, for people who read kernels."""
        opt, codegen = self._levels(source)
        tm = _target_machine(codegen, self.isa)
        mod = llvm.parse_assembly(source)
        _optimize(mod, tm, opt)
        return tm.emit_assembly(mod)
