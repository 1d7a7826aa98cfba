"""Kernels for ``nn.compile``: the best record of a task, its config built and checked by the
measurement worker, and the very bytes the worker ran loaded into this process.

The guarantee: a ``LocalMeasurer``'s builder returns a ``BuildResult`` whose ``binary`` is the
object code (compiled now or served by the compile cache, keyed by the source); that same
``BuildResult`` object is what the worker is sent to load, check against NumPy and time
(``time_builds``), and its ``binary`` is then what this process loads. Nothing is compiled in
this process, so the code that runs here is byte for byte the code that was checked
(``CheckedKernel.sha256`` names it).

OpenMP: ``bind_openmp`` binds the kernels' libgomp symbols to the libgomp this process already
mapped (torch's own copy under ``torch/lib``), so that no second OpenMP runtime is loaded.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
from dataclasses import dataclass
from typing import Any

from ..codegen.llvm import KERNEL_NAME
from ..errors import InvalidConfigError
from ..hardware.cpu import load_object, mapped_libraries
from ..hardware.device import Device
from ..loopast import Program
from ..records import Record, Records
from ..space import Config
from ..templates import space_for
from ..workloads import Workload

#: the OpenMP entry points generated kernels call (codegen/llvm.py)
OPENMP_SYMBOLS = ("GOMP_parallel", "omp_get_num_threads", "omp_get_thread_num")


@dataclass
class CheckedKernel:
    """A kernel loaded in this process after the worker checked its exact binary."""

    key: str  # the task's workload key
    workload: Workload
    config: Config
    program: Program
    sha256: str  # of the binary the worker checked and this process loaded
    address: int  # the loaded kernel's entry point
    engine: Any  # keeps the code alive
    seconds: float  # the worker's median time of one run
    device: str  # the device of the record the config came from
    note: str = ""  # e.g. rebuilt for another thread count

    @property
    def numels(self) -> list[int]:
        return [b.size for b in self.program.args[:-1]]

    @property
    def workspaces(self) -> list[int]:
        return [b.size for b in self.program.workspaces]


FALLBACK_CONFIGS = 3  # distinct configs tried, best first, before an operator keeps PyTorch's


def ranked_records(records: Records, key: str, device: str,
                   k: int = FALLBACK_CONFIGS) -> "list[tuple[Record, str]] | str":
    """Up to ``k`` ok records of distinct configs of ``key``, fastest first, each with a note:
    those of ``device``, else those of the same CPU at another thread count (their configs are
    rebuilt for ``device``'s); else why there is none. The runners-up stand in where the best
    config no longer builds in time or fails its check."""
    here = Device.parse(device)
    recs = records.query(key, "cpu", device, ok_only=True)
    note = ""
    if not recs:
        recs = [r for r in records.query(key, "cpu", ok_only=True) if _same_cpu(r.device, here)]
        note = "config tuned on {}, rebuilt for " + f"{here.threads} threads (PyTorch's) and checked"
    if not recs:
        elsewhere = sorted({r.device for r in records.query(key, "cpu", ok_only=True)})
        return f"no ok record on {device}" + (f" (only on {', '.join(elsewhere)})"
                                              if elsewhere else "")
    out, seen = [], set()
    for r in sorted(recs, key=lambda r: -r.gflops):
        if r.config_json not in seen:
            seen.add(r.config_json)
            out.append((r, note.format(r.device) if note else ""))
        if len(out) == k:
            break
    return out


def _same_cpu(text: str, here: Device) -> bool:
    try:
        d = Device.parse(text)
    except Exception:  # noqa: BLE001 - a malformed device is not this one
        return False
    return (d.kind, d.arch, d.model, d.isa) == (here.kind, here.arch, here.model, here.isa)


def config_of(workload: Workload, rec: Record) -> "Config | str":
    space = space_for(workload, "cpu")
    if rec.space_name != space.name:
        return f"the record's space {rec.space_name} is not this version's {space.name}"
    try:
        return space.from_json(rec.config_json)
    except InvalidConfigError as e:
        return f"the record's config no longer fits its space: {e}"


def check_and_load(measurer: Any, workload: Workload, config: Config, device: str,
                   note: str = "") -> "CheckedKernel | str":
    """Build ``config`` with ``measurer``'s builders, have its worker check and time that
    binary, and load the same bytes here; a string says why not."""
    build = measurer.build_all("build", [(workload, config)])[0]
    if not build.ok:
        return f"build failed: {build.error.name}: {build.error_msg.strip()[:300]}"
    result = measurer.time_builds(workload, [config], [build], measurer.options)[0]
    if not result.ok or result.unchecked:
        why = "its first run was stopped" if result.ok else \
            f"{result.error.name}: {result.error_msg.strip()[:300]}"
        return f"the measurement worker's check failed: {why}"
    binary = build.binary
    digest = hashlib.sha256(binary).hexdigest()
    engine, address = load_object(binary, KERNEL_NAME)
    return CheckedKernel(workload.key, workload, config, build.program, digest, address, engine,
                         result.median, device, note)


def bind_openmp(torch_lib: str) -> str:
    """Bind the kernels' OpenMP symbols (``OPENMP_SYMBOLS``) to the libgomp already mapped in
    this process, torch's copy (under ``torch_lib``) if it is there; returns its path ("" when
    none is mapped: the runtime then loads one as it initialises LLVM)."""
    import llvmlite.binding as llvm

    loaded = mapped_libraries("libgomp")
    if not loaded:
        return ""
    path = next((p for p in loaded if p.startswith(torch_lib + os.sep)), loaded[0])
    lib = ctypes.CDLL(path)  # mapped already: this is that copy, nothing new is loaded
    for name in OPENMP_SYMBOLS:
        llvm.add_symbol(name, ctypes.cast(getattr(lib, name), ctypes.c_void_p).value)
    return path


def openmp_copies() -> list[str]:
    """The libgomp files mapped in this process (more than one: two OpenMP runtimes)."""
    return [os.path.realpath(p) for p in mapped_libraries("libgomp")]


__all__ = ["CheckedKernel", "OPENMP_SYMBOLS", "bind_openmp", "check_and_load", "ranked_records",
           "config_of", "openmp_copies"]
