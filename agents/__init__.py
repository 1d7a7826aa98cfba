"""The paper's tuner and its parts: cost models, parallel simulated annealing, diversity-aware
selection, transfer learning. Importing it registers its tuners in ``tensorgym.registry``
(``xgb``, ``xgb-rank``, ``xgb-reg``, ``treegru``, ``treegru-reg``, ``treegru-vanilla``)."""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

from tensorgym import registry
from tensorgym.registry import AGENTS, Option

from .annealing import ParallelAnnealer
from .cost_model import (BootstrapEnsemble, CostModel, XGBoostCostModel, make_model,
                         register_model)
from .selection import diversity_objective, select_batch, submodular_select
from .transfer import SourceData, TransferModel, load_source_data
from .tuner import OPTIONS, FeatureCache, ModelTuner, XGBTuner


def _treegru(**options) -> CostModel:
    from .treegru import TreeGRUCostModel  # noqa: PLC0415  (torch only when the model is used)

    return TreeGRUCostModel(**options)


for _name, _preset in {"treegru": {}, "treegru-reg": {"loss": "reg"},
                       "treegru-vanilla": {"variant": "vanilla"}}.items():
    register_model(_name, lambda _p=_preset, **kw: _treegru(**{**_p, **kw}))


def _tuner(model: str) -> Callable[..., ModelTuner]:
    def build(**options: Any) -> ModelTuner:
        if isinstance(options.get("records"), str):  # a path, e.g. from the command line
            from tensorgym.records import Records  # noqa: PLC0415

            options["records"] = Records(options["records"])
        return ModelTuner(**{"model": model, **options})

    return build


_HELP = {"xgb": "the paper's tuner: XGBoost rank model, simulated annealing, diverse batches",
         "xgb-rank": "xgb (the rank loss, named)", "xgb-reg": "xgb with a regression loss",
         "treegru": "the tuner with the TreeGRU cost model (context variant, rank loss)",
         "treegru-reg": "the tuner with the TreeGRU cost model (regression loss)",
         "treegru-vanilla": "the tuner with the vanilla TreeGRU (Figure 3c: node identifiers)"}
for _name, _help in _HELP.items():
    registry.register(_name, _tuner(_name), tuple(
        replace(o, default=_name) if o.name == "model" else o for o in OPTIONS), _help)


def register_agent(name: str, factory: Callable[..., object], options: tuple[Option, ...] = (),
                   help: str = "") -> None:
    """Kept for one release: ``tensorgym.registry.register``."""
    registry.register(name, factory, options, help, replace=True)


def make_agent(name: str, **options) -> Any:
    """``make_agent("xgb")``; ``make_agent("xgb", model_options={"loss": "reg"})``;
    ``make_agent("xgb", records=Records(path), source_workloads=["conv2d-C1", ...])``. Kept for
    one release: ``tensorgym.registry.make``."""
    return registry.make(name, **options)


__all__ = [
    "AGENTS", "BootstrapEnsemble", "CostModel", "FeatureCache", "ModelTuner", "ParallelAnnealer",
    "SourceData", "TransferModel", "XGBTuner", "XGBoostCostModel", "diversity_objective",
    "load_source_data", "make_agent", "make_model", "register_agent", "register_model",
    "select_batch", "submodular_select",
]
