"""``xgb-pretrained``: the reference tuner whose cost model starts from a whole train dataset
(TenSet's use of a pretrained model), the transfer baseline a learned agent must beat.

A pretrained model is the tuner's global model (``TransferModel``, Equation 4) fitted once on
every record of the corpus's train tasks in a dataset, saved as a small file and loaded by name;
each tune then fits only its local correction on top of it. Train one with

    python -m tensorgym.agents.pretrained --dataset data/corpus-cpu.parquet \\
        --out agents/weights/xgb-pretrained-cpu.json

(the file records the dataset's digest, device, tasks and rows). Only train-split tasks are
used, so that the corpus's test tasks stay unseen.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Optional

import numpy as np

from tensorgym.errors import TensorGymError
from tensorgym.dataset.cache import feature_code_hash
from tensorgym.features import feature_length

from .cost_model import XGBoostCostModel
from .transfer import load_source_data

WEIGHTS = Path(__file__).resolve().parent / "weights"
DEFAULT_FILE = {"cpu": WEIGHTS / "xgb-pretrained-cpu.json"}
SCHEMA = "tensorgym-pretrained-cost-model"


def save_model(model: XGBoostCostModel, path: "str | os.PathLike", about: dict) -> None:
    """Write a fitted XGBoost cost model and what it was fitted on as one JSON file."""
    if not model.fitted:
        raise TensorGymError("save_model needs a fitted cost model")
    obj = {"schema": SCHEMA, "feature_mode": model.feature_mode, "loss": model.loss,
           "n_features": model.n_features, "columns": model._columns.tolist(),
           "feature_length": feature_length(model.feature_mode),
           "about": {**about, "feature_code": feature_code_hash()},
           "booster": json.loads(bytes(model._booster.save_raw("json")))}
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(f"{path}.tmp")
    tmp.write_text(json.dumps(obj, separators=(",", ":")))
    tmp.replace(path)


def load_model(path: "str | os.PathLike") -> XGBoostCostModel:
    """The cost model saved at ``path``; a clear error if it is missing, damaged, or was fitted
    on features this code no longer computes."""
    import xgboost as xgb

    p = Path(path)
    if not p.is_file():
        raise TensorGymError(f"no pretrained cost model at {p}: train one with python -m "
                             "tensorgym.agents.pretrained --dataset DATASET --out FILE")
    try:
        obj = json.loads(p.read_text())
        if obj.get("schema") != SCHEMA:
            raise ValueError(f"not a {SCHEMA} file")
        model = XGBoostCostModel(loss=obj["loss"], feature_mode=obj["feature_mode"])
        booster = xgb.Booster()
        booster.load_model(bytearray(json.dumps(obj["booster"]).encode()))
    except (OSError, ValueError, KeyError, TypeError, xgb.core.XGBoostError) as e:
        raise TensorGymError(f"pretrained cost model {p} is damaged: {e}") from None
    if obj.get("feature_length") != feature_length(model.feature_mode):
        raise TensorGymError(f"pretrained cost model {p} was fitted on {model.feature_mode} "
                             f"features of length {obj.get('feature_length')}, this tensorgym "
                             f"computes {feature_length(model.feature_mode)}: train it again "
                             "(python -m tensorgym.agents.pretrained)")
    booster.set_param({"nthread": model.params["nthread"]})
    model._booster, model._columns = booster, np.asarray(obj["columns"], np.int64)
    model.n_features, model._with_margin = int(obj["n_features"]), False
    model.about = obj.get("about", {})
    return model


def train(dataset: "str | os.PathLike", out: "str | os.PathLike", target: str = "cpu",
          split: str = "train", feature_mode: str = "relation", seed: int = 0,
          max_rows: Optional[int] = None) -> dict:
    """Fit the global model on the records of ``split``'s corpus tasks in ``dataset`` (one
    device: the dataset's only one for ``target``) and save it at ``out``; returns its
    ``about``."""
    from tensorgym.dataset import Dataset
    from tensorgym.nn.corpus import load_corpus

    data = Dataset.load(dataset)
    devices = data.devices(target)
    if len(devices) != 1:
        raise TensorGymError(f"dataset {dataset} has {len(devices)} {target} devices "
                             f"({', '.join(devices) or 'none'}); give one of one device")
    keys = set(load_corpus().keys(split))
    tasks = sorted({t.workload for t in data.by_task if t.target == target} & keys)
    if not tasks:
        raise TensorGymError(f"dataset {dataset} holds no {split} task of the corpus on {target}")
    with tempfile.TemporaryDirectory() as tmp:
        from tensorgym.records import Records

        db = os.path.join(tmp, "train.db")
        data.to_records(db)
        records = Records(db)
        try:
            source = load_source_data(records, tasks, target, feature_mode, device=devices[0],
                                      max_samples=max_rows, rng=np.random.default_rng(seed))
        finally:
            records.close()
    model = XGBoostCostModel(loss="rank", feature_mode=feature_mode, seed=seed)
    model.fit(source.X, source.y, groups=source.groups)
    about = {"dataset": Path(dataset).name, "digest": data.digest, "device": devices[0],
             "split": split, "tasks": len(source.counts), "rows": len(source), "seed": seed}
    save_model(model, out, about)
    return about


def pretrained_model(name: "str | os.PathLike | None", target: str = "cpu") -> XGBoostCostModel:
    """The model of a file path, or the shipped one of ``target`` (``name`` None)."""
    if name is None:
        if target not in DEFAULT_FILE:
            raise TensorGymError(f"no pretrained cost model is shipped for {target}; give one "
                                 "with --opt pretrained=FILE")
        name = DEFAULT_FILE[target]
    return load_model(name)


def main(argv: Any = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tensorgym.agents.pretrained",
                                description="fit xgb-pretrained's cost model on a dataset")
    p.add_argument("--dataset", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--target", default="cpu")
    p.add_argument("--split", default="train", choices=("train", "all"))
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-rows", type=int, default=None)
    args = p.parse_args(argv)
    try:
        about = train(args.dataset, args.out, args.target, args.split, seed=args.seed,
                      max_rows=args.max_rows)
    except TensorGymError as e:
        print(f"error: {e}")
        return 2
    print(f"{args.out}: pretrained on {about['rows']} records of {about['tasks']} "
          f"{about['split']} tasks of {about['dataset']} ({about['device']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())


__all__ = ["DEFAULT_FILE", "load_model", "pretrained_model", "save_model", "train"]
