"""The world model (issue 33): one model across tasks of a device that predicts, for (workload,
target, config), the run time, the probability of failure and the timing noise; with TenSet's
ranking metrics and the comparison of model families behind ``tensorgym dataset fit-world`` and
``tensorgym dataset evaluate``. ``docs/dataset.md`` ("World model") documents it."""
from __future__ import annotations

from typing import Any

_EXPORTS = {
    "WorldModel": "model", "Prediction": "model", "DEFAULT_FAMILY": "model",
    "encode_indices": "encode", "ConfigEncoder": "encode", "EncoderCache": "encode",
    "describe": "descriptor", "task_samples": "samples", "TaskSamples": "samples",
    "split_samples": "samples", "task_metrics": "metrics", "evaluate_tasks": "metrics",
    "compare": "evaluate", "evaluate_model": "evaluate", "Evaluation": "evaluate",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tensorgym.dataset.world' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"{__name__}.{module}"), name)


__all__ = list(_EXPORTS)
