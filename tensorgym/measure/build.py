"""The build stage, in builder processes: lower a config, render its source, compile it.

It sits above the templates and the lowering (it calls them in each builder process, so that
lowering runs in parallel with the other builds) and below the measurers that time its results.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import inspect
import time
import traceback
from pathlib import Path

from ..errors import ErrorCode, InvalidConfigError
from ..hardware.target import get_target
from ..loopast import Program
from ..lower import lower
from ..space import Config
from ..templates import check_config
from ..workloads import Workload
from .compile_cache import CompileCache, source_key
from .result import BuildResult



class Builder:
    """What a builder process serves: lower, render and compile. Never raises for a bad config or
    a compiler error: those come back as error codes. A source compiled before on this machine
    comes from the compile cache."""

    def __init__(self, target: str, runtime_kwargs: dict, compile_cache: bool = True) -> None:
        self.target = get_target(target)
        self.runtime = self.target.runtime(**runtime_kwargs)
        self.fingerprint = _compiler_fingerprint(self.runtime, runtime_kwargs)
        self.cache = CompileCache() if compile_cache and self.fingerprint else None

    def build(self, workload: Workload, config: Config) -> BuildResult:
        t0 = time.perf_counter()
        limits = self.target.limits(self.runtime)
        try:
            check_config(workload, config, limits)
            program = lower(workload, config)
        except InvalidConfigError as e:
            return BuildResult(ErrorCode.INSTANTIATION_ERROR, time.perf_counter() - t0, str(e))
        except Exception:  # noqa: BLE001 - a bug of the template or lowering, not of the config
            return BuildResult(ErrorCode.UNKNOWN_ERROR, time.perf_counter() - t0,
                               f"lowering bug: {traceback.format_exc()[-2000:]}",
                               lowering_bug=True)
        return self._compile(program, t0)

    def build_program(self, program: Program) -> BuildResult:
        return self._compile(program, time.perf_counter())

    def _compile(self, program: Program, t0: float) -> BuildResult:
        code = compile_error(self.target.kind)
        try:
            source = self.runtime.render(program)
        except Exception as e:  # noqa: BLE001
            return BuildResult(code, time.perf_counter() - t0, f"{type(e).__name__}: {e}"[-2000:])
        key = source_key(self.fingerprint, source)
        info = self.runtime.compile_info(program, source)  # decided by the source alone
        binary = self.cache.get(key) if self.cache is not None else None
        if binary is not None:
            return BuildResult(ErrorCode.NO_ERROR, time.perf_counter() - t0, program=program,
                               binary=binary, key=key, cached=True, compile_info=info)
        try:
            binary = self.runtime.compile(source, program)
        except Exception as e:  # noqa: BLE001
            return BuildResult(code, time.perf_counter() - t0, f"{type(e).__name__}: {e}"[-2000:],
                               key=key)
        if self.cache is not None:
            self.cache.put(key, binary)
        return BuildResult(ErrorCode.NO_ERROR, time.perf_counter() - t0, program=program,
                           binary=binary, key=key, compile_info=info)


def _compiler_fingerprint(runtime, runtime_kwargs: dict) -> str:
    """What decides a binary besides its source: the device, the runtime's own code (its compiler
    passes and options) and the compiler packages. Empty where the device cannot be named."""
    try:
        device = runtime.device_name()
        code = Path(inspect.getsourcefile(type(runtime))).read_bytes()
    except Exception:  # noqa: BLE001 - no device here: no caching rather than a wrong binary
        return ""
    versions = []
    for package in ("llvmlite", "pyopencl", "cuda-python"):
        try:
            versions.append(f"{package}={importlib.metadata.version(package)}")
        except importlib.metadata.PackageNotFoundError:
            pass
    digest = hashlib.sha256(code).hexdigest()[:16]
    return f"{runtime.target}|{device}|{sorted(runtime_kwargs.items())}|{digest}|{versions}"


def compile_error(target: str) -> ErrorCode:
    return ErrorCode.COMPILE_HOST if target == "cpu" else ErrorCode.COMPILE_DEVICE
