"""Datasets of measurements and replay (issue 14): collect configs' measurements into a records
database, export them (Parquet, JSON lines), and serve them back behind the env's measurer with
virtual time (``gym.make(..., measure="replay", dataset=PATH)``); and the world model
(``world/``: one model across tasks of time, failure and noise). ``docs/dataset.md`` documents
the API. Nothing here imports pyarrow or xgboost until a Parquet file or a surrogate needs it."""
from __future__ import annotations

from typing import Any

_EXPORTS = {
    "Dataset": "data", "DatasetError": "data", "Task": "data",
    "ReplayMeasurer": "replay", "ReplayMissError": "replay",
    "ON_MISS": "replay", "SOURCES": "replay",
    "collect": "collection", "CollectReport": "collection", "make_measurer": "collection",
    "WorldModel": "world.model", "Prediction": "world.model",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'tensorgym.dataset' has no attribute {name!r}")
    from importlib import import_module

    return getattr(import_module(f"{__name__}.{module}"), name)


__all__ = list(_EXPORTS)
