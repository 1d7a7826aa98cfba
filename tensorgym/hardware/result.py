"""The outcome of building and running one config."""
from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field

from ..errors import ErrorCode
from ..space import Config


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
    extra: dict = field(default_factory=dict, compare=False)

    @property
    def ok(self) -> bool:
        return self.error == ErrorCode.NO_ERROR and bool(self.costs)

    @property
    def median(self) -> float:
        return statistics.median(self.costs) if self.ok else math.inf

    @property
    def gflops(self) -> float:
        return self.flops / self.median / 1e9 if self.ok and self.median > 0 else 0.0
