"""The outcome of building and running one config."""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field
from typing import Any, Optional

from ..errors import ErrorCode
from ..loopast import Program
from ..space import Config


def spread(costs) -> float:
    """Coefficient of variation of timing samples (0 for fewer than two)."""
    if len(costs) < 2:
        return 0.0
    mean = sum(costs) / len(costs)
    return math.sqrt(sum((c - mean) ** 2 for c in costs) / (len(costs) - 1)) / mean if mean else 0.0


@dataclass(frozen=True)
class MeasureResult:
    """``costs`` are seconds per kernel run, one per timed sample (each sample averages ``number``
    runs). The reported statistic is the median of the samples; ``gflops`` derives from it."""

    config: Config
    costs: tuple[float, ...]
    error: ErrorCode = ErrorCode.NO_ERROR
    error_msg: str = ""
    flops: int = 0
    build_time: float = 0.0  # seconds spent lowering + generating + compiling
    run_time: float = 0.0  # seconds of wall time spent measuring (warm-up, check, samples)
    timestamp: float = 0.0
    cached: bool = False  # served from the records database, not measured now
    # timing stopped once the kernel was surely slower than the bound: fewer samples
    early_stop: bool = False
    unchecked: bool = False  # stopped during its first run: a lower bound, never compared
    confirmed: bool = False  # timed again freshly loaded; ``costs`` are the new samples only
    drift: Optional[float] = None  # the machine's speed moved meanwhile (calibration after / before)
    source: str = "measured"  # "measured", or a replay's "recorded" / "surrogate" answer
    extra: dict = field(default_factory=dict, compare=False)  # how it was measured, in detail

    @property
    def ok(self) -> bool:
        return self.error == ErrorCode.NO_ERROR and bool(self.costs)

    @property
    def median(self) -> float:
        return statistics.median(self.costs) if self.ok else math.inf

    @property
    def cv(self) -> float:
        """Coefficient of variation of the samples (0 with fewer than two)."""
        return spread(self.costs) if self.ok else 0.0

    @property
    def gflops(self) -> float:
        return self.flops / self.median / 1e9 if self.ok and self.median > 0 else 0.0


@dataclass(frozen=True)
class BuildResult:
    """What a builder process returns for one config: the program and its binary, or why not."""

    error: ErrorCode
    time: float  # seconds spent lowering, rendering and compiling
    error_msg: str = ""
    program: Optional[Program] = None
    binary: Any = None
    key: str = ""  # hash of the source and the compiler: equal keys are the same kernel
    cached: bool = False  # the binary came from the compile cache
    lowering_bug: bool = False  # lowering raised something other than InvalidConfigError
    compile_info: dict = field(default_factory=dict)  # how it was built (``Runtime.compile_info``)

    @property
    def ok(self) -> bool:
        return self.error == ErrorCode.NO_ERROR


@dataclass(frozen=True)
class RunResult:
    """What the measurement worker returns for one kernel (``worker.run_job``)."""

    costs: tuple[float, ...] = ()  # seconds per run, one per sample
    error: ErrorCode = ErrorCode.NO_ERROR
    error_msg: str = ""
    run_time: float = 0.0  # wall seconds of the job: load, check, samples
    number: int = 0  # runs per sample (0: no sample taken)
    suspect: bool = False  # the job may have damaged the worker process: restart it
    early_stop: bool = False  # timing stopped once the kernel was surely slower than the bound
    unchecked: bool = False  # stopped during its first run: a lower bound, never compared
    first: float = 0.0  # seconds of the checked first run, cold (0: not taken); never a sample

    @property
    def ok(self) -> bool:
        return self.error == ErrorCode.NO_ERROR and bool(self.costs)
