"""The paper's tuner and its parts: cost models, parallel simulated annealing, diversity-aware
selection, transfer learning. Importing it registers its tuners in ``tensorgym.registry``
(``xgb``, ``xgb-rank``, ``xgb-reg``, ``treegru``, ``treegru-reg``, ``treegru-vanilla``) and, of
the kind ``COST_MODEL``, the cost models of the same names (``registry.make_model``)."""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable

from tensorgym import registry
from tensorgym.records import Records
from tensorgym.registry import AGENTS, COST_MODEL, Option

from .annealing import ParallelAnnealer
from .cost_model import BootstrapEnsemble, CostModel, XGBoostCostModel
from .selection import diversity_objective, select_batch, submodular_select
from .transfer import SourceData, TransferModel, load_source_data
from .tuner import OPTIONS, FeatureCache, ModelTuner, XGBTuner


#: ``TreeGRUCostModel``'s keyword arguments, declared here for the registry so that declaring
#: them loads no torch (a test holds them to the constructor's signature)
TREEGRU_OPTIONS = (
    Option("variant", str, "context", "context (relation-style node features) or vanilla "
           "(Figure 3c: node identifiers)"),
    Option("loss", str, "rank", "rank (Equation 2) or reg (squared error)"),
    Option("hidden", int, 64, "hidden units"),
    Option("n_slots", int, 8, "buffer slots of a node's features"),
    Option("n_epochs", int, 20, "training epochs"),
    Option("min_steps", int, 60, "optimizer steps at least"),
    Option("batch_size", int, 128, "trees per training batch"),
    Option("lr", float, 3e-3, "learning rate"),
    Option("weight_decay", float, 1e-5, "weight decay"),
    Option("warm_start", bool, True, "a refit starts from the last weights"),
    Option("max_names", int, 256, "loop names embedded (vanilla)"),
    Option("predict_batch", int, 4096, "trees per prediction batch"),
    Option("num_threads", (int, type(None)), 1, "torch threads (None: torch's default)"),
    Option("seed", int, 0, "torch's seed"),
    Option("device", str, None, "torch device (None: cuda where there is one, else cpu)"),
)


def _treegru(preset: dict) -> Callable[..., CostModel]:
    def build(**options: Any) -> CostModel:
        from .treegru import TreeGRUCostModel  # noqa: PLC0415  (torch only when the model is used)

        return TreeGRUCostModel(**{**preset, **options})

    return build


for _name, _preset, _help in (
        ("treegru", {}, "TreeGRU over loop ASTs (context variant, rank loss)"),
        ("treegru-reg", {"loss": "reg"}, "TreeGRU, regression loss"),
        ("treegru-vanilla", {"variant": "vanilla"}, "the vanilla TreeGRU (node identifiers)")):
    registry.register(_name, _treegru(_preset),
                      tuple(replace(o, default=_preset.get(o.name, o.default))
                            for o in TREEGRU_OPTIONS), _help, kind=COST_MODEL)


def _tuner(model: str, **preset: Any) -> Callable[..., ModelTuner]:
    def build(**options: Any) -> ModelTuner:
        if isinstance(options.get("records"), str):  # a path, e.g. from the command line
            options["records"] = Records(options["records"])
        return ModelTuner(**{"model": model, **preset, **options})

    return build


_HELP = {"xgb": "the paper's tuner: XGBoost rank model, simulated annealing, diverse batches",
         "xgb-rank": "xgb (the rank loss, named)", "xgb-reg": "xgb with a regression loss",
         "treegru": "the tuner with the TreeGRU cost model (context variant, rank loss)",
         "treegru-reg": "the tuner with the TreeGRU cost model (regression loss)",
         "treegru-vanilla": "the tuner with the vanilla TreeGRU (Figure 3c: node identifiers)"}
for _name, _help in _HELP.items():
    registry.register(_name, _tuner(_name), tuple(
        replace(o, default=_name) if o.name == "model" else o for o in OPTIONS), _help)
registry.register("xgb-pretrained", _tuner("xgb", pretrained="shipped"), tuple(
    replace(o, default={"model": "xgb", "pretrained": "shipped"}[o.name])
    if o.name in ("model", "pretrained") else o for o in OPTIONS),
    "xgb whose cost model starts from a model pretrained on the corpus's train dataset "
    "(agents/pretrained.py; the transfer baseline)")


def _edit_agent(**options: Any) -> Any:
    from .edit_agent import EditPolicyAgent  # noqa: PLC0415  (loads the weights file)

    return EditPolicyAgent(**options)


registry.register("ppo-pretrained", _edit_agent, (
    Option("policy", str, None, "a saved edit policy (.npz; default: the shipped one, "
           "agents/weights/ppo-pretrained-cpu.npz)"),
    Option("target", str, "cpu", "the target the policy was trained on"),
    Option("batch_size", int, 4, "the most configs asked at once"),
    Option("seeds", int, 8, "seed schedules measured first (the reference tuner's warm start); "
           "1: the reference schedule alone, as the policy was trained")),
    "a hill climb whose moves come from an edit policy learned by MaskablePPO on the corpus's "
    "train tasks on replay (agents/edit_policy.py; numpy only)")


__all__ = [
    "AGENTS", "BootstrapEnsemble", "CostModel", "FeatureCache", "ModelTuner", "ParallelAnnealer",
    "SourceData", "TransferModel", "XGBTuner", "XGBoostCostModel", "diversity_objective",
    "TREEGRU_OPTIONS", "load_source_data", "select_batch", "submodular_select",
]
