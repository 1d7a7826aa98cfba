"""Measurement: the ``Measurer`` protocol and the local measurer (``measure.ray`` has the Ray
one, imported where asked for; ``dataset.replay`` the replay one); the build stage, the timing
worker, the drift calibration, the compile cache and the result types."""
from .base import MeasureOptions, Measurer, MeasurerDefaults, stop_bound
from .local import LocalMeasurer
from .result import BuildResult, MeasureResult, RunResult

__all__ = ["BuildResult", "LocalMeasurer", "MeasureOptions", "MeasureResult", "Measurer",
           "MeasurerDefaults", "RunResult", "stop_bound"]
