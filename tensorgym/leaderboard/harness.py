"""The few places the harness touches the core: the runtime's options, re-measuring a config,
and describing the machine (the env itself is ``tensorgym.envs.make_env``). Kept apart so the
leaderboard, validation and CLI share them (configs timed side by side with each other and the
vendor library: ``compare``)."""
from __future__ import annotations

import os
import platform
import statistics
from importlib import metadata
from typing import Any

from tensorgym.errors import TensorGymError
from tensorgym.hardware.device import Device
from tensorgym.templates import TARGET_ALIASES
from tensorgym.workloads import Workload


def runtime_options(target: str, threads: int = 0) -> dict[str, Any]:
    """Runtime keyword arguments: the CPU runtime's thread count (0: all cores). Any alias of
    the CPU target counts; an unknown target gets none (making its runtime says what is wrong)."""
    return {"num_threads": threads} if TARGET_ALIASES.get(target) == "cpu" and threads else {}


def remeasure(workload: Workload, target: str, config_json: "str | dict", repeats: int = 3,
              measurer: Any = None, threads: int = 0) -> tuple[list[float], str]:
    """One config timed in ``repeats`` rounds by ``compare.remeasure`` (not trials), with the
    measurer's own options, as in the search whose figure it checks: (every sample in seconds,
    "" or the error of the round that failed)."""
    from tensorgym.measure import MeasureOptions

    from .compare import remeasure as side_by_side

    c = side_by_side(workload, target, {"config": config_json}, repeats, measurer, vendor=False,
                     threads=threads, options=measurer.options if measurer else MeasureOptions())
    return c.costs("config"), c.errors.get("config", "")


def gflops_of(workload: Workload, costs: list[float]) -> float:
    return workload.flops / statistics.median(costs) / 1e9 if costs else 0.0


def device_info(target: str, threads: int = 0) -> dict[str, Any]:
    from tensorgym.hardware.runtime import get_runtime

    runtime = get_runtime(target, **runtime_options(target, threads))
    runtime.check_available()  # raises TargetUnavailableError, saying what to use instead
    return {"name": runtime.device_name(), "target": target, "host": platform.node(),
            "platform": platform.platform(), "machine": platform.machine(),
            "cpu_count": os.cpu_count()}


def device_threads(device_name: str) -> "int | None":
    """The CPU runtime's thread count, from its fingerprint (``cpu/<arch>/<model>/<n>t``); None
    for another device or a string that names none."""
    try:
        return Device.parse(device_name).threads or None
    except TensorGymError:
        return None


def software_versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for dist in ("tensorgym", "numpy", "llvmlite", "gymnasium", "torch", "stable-baselines3",
                 "sb3-contrib", "xgboost", "pyopencl"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    return out
