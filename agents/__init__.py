"""The paper's tuner and its parts: cost models, parallel simulated annealing, diversity-aware
selection, transfer learning. ``make_agent(name, **options)`` builds an agent by name."""
from __future__ import annotations

from typing import Callable

from .annealing import ParallelAnnealer
from .cost_model import (BootstrapEnsemble, CostModel, XGBoostCostModel, make_model,
                         register_model)
from .selection import diversity_objective, select_batch, submodular_select
from .transfer import SourceData, TransferModel, load_source_data
from .tuner import FeatureCache, ModelTuner, XGBTuner

AGENTS: dict[str, Callable[..., ModelTuner]] = {
    "xgb": lambda **kw: ModelTuner(**{"model": "xgb", **kw}),
    "xgb-rank": lambda **kw: ModelTuner(**{"model": "xgb-rank", **kw}),
    "xgb-reg": lambda **kw: ModelTuner(**{"model": "xgb-reg", **kw}),
}




def _treegru(**options) -> CostModel:
    from .treegru import TreeGRUCostModel  # noqa: PLC0415  (torch only when the model is used)

    return TreeGRUCostModel(**options)


for _name, _preset in {"treegru": {}, "treegru-reg": {"loss": "reg"},
                       "treegru-vanilla": {"variant": "vanilla"}}.items():
    register_model(_name, lambda _p=_preset, **kw: _treegru(**{**_p, **kw}))
    AGENTS[_name] = lambda _n=_name, **kw: ModelTuner(**{"model": _n, **kw})


def register_agent(name: str, factory: Callable[..., object]) -> None:
    AGENTS[name] = factory


def make_agent(name: str, **options) -> ModelTuner:
    """``make_agent("xgb")``; ``make_agent("xgb", model_options={"loss": "reg"})``;
    ``make_agent("xgb", records=Records(path), source_workloads=["conv2d-C1", ...])``."""
    try:
        factory = AGENTS[name]
    except KeyError:
        raise ValueError(f"unknown agent {name!r}; registered: {', '.join(AGENTS)}") from None
    return factory(**options)


__all__ = [
    "AGENTS", "BootstrapEnsemble", "CostModel", "FeatureCache", "ModelTuner", "ParallelAnnealer",
    "SourceData", "TransferModel", "XGBTuner", "XGBoostCostModel", "diversity_objective",
    "load_source_data", "make_agent", "make_model", "register_agent", "register_model",
    "select_batch", "submodular_select",
]
