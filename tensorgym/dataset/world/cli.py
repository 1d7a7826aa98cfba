"""``tensorgym dataset fit-world`` and ``tensorgym dataset evaluate`` (added to the ``dataset``
command by ``tensorgym/dataset/cli.py``)."""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from .models import FAMILIES, REGRESSORS
from .model import DEFAULT_FAMILY, DEFAULT_FEATURES, FEATURES
from .samples import HOLDOUT


def _share(text: str) -> float:
    v = float(text)
    if not 0.0 <= v < 1.0:
        raise argparse.ArgumentTypeError(f"a share in [0, 1), got {text}")
    return v


def _common(p: Any) -> None:
    p.add_argument("dataset", help="a records database or an export (.parquet, .jsonl)")
    p.add_argument("--features", choices=FEATURES, default=DEFAULT_FEATURES,
                   help="schedule features: the knobs by name with their tile sums (default), "
                   "the config encoding as it is (both vectorised), or the loop-AST relation "
                   "features (~150 us a config)")
    p.add_argument("--seed", type=int, default=0, help="of the hold-out draw and the models")
    p.add_argument("--holdout", type=_share, default=HOLDOUT, metavar="SHARE",
                   help=f"share of each train task's configs held out (default {HOLDOUT})")
    p.add_argument("--device", help="the device to model, where the dataset holds several")
    p.add_argument("--test-task", action="append", metavar="KEY", dest="test_tasks",
                   help="a workload key to count as a test task (repeatable; default: the "
                   "corpus's test tasks)")
    p.add_argument("--json", action="store_true", help="print one JSON object")


def add_parsers(dsub: Any) -> None:
    f = dsub.add_parser("fit-world", help="fit a world model (time, failure, noise across tasks) "
                        "on a dataset's train tasks")
    _common(f)
    f.add_argument("--out", required=True, metavar="MODEL_DIR", help="directory to write")
    f.add_argument("--model", default=DEFAULT_FAMILY, choices=REGRESSORS + ("auto",),
                   help=f"the time head's family (default {DEFAULT_FAMILY}; auto: the one "
                   "that ranks the held-out configs best)")
    f.add_argument("--all", action="store_true", help="fit on every config of every task (no "
                   "hold-out, test tasks included: no metrics are recorded)")
    f.add_argument("--calibrate", action="store_true", help="also keep the quantiles of its "
                   "error on a held-out share of the configs it was fitted on (one more fit), "
                   "for replay's on_miss='draw'")
    e = dsub.add_parser("evaluate", help="compare world-model families (or judge a saved "
                        "model) on held-out configs of train tasks and on the test tasks")
    _common(e)
    e.add_argument("--model", metavar="MODEL_DIR", help="judge this saved model (from "
                   "fit-world) instead of fitting the families")
    e.add_argument("--models", default=",".join(FAMILIES),
                   help=f"families to compare (default {','.join(FAMILIES)})")


def _tasks(args: argparse.Namespace) -> tuple[Any, list]:
    from ..data import Dataset
    from .samples import task_samples

    data = Dataset.load(args.dataset)
    if not len(data):
        from ..data import DatasetError

        raise DatasetError(f"dataset {args.dataset} has no records")
    test_keys = args.test_tasks if args.test_tasks else corpus_test_keys()
    tasks = task_samples(data, args.device, test_keys)
    if not any(s.split == "test" for s in tasks):
        print(f"note: dataset {args.dataset} has no test task (none of its {len(tasks)} tasks "
              "is a corpus test task): only held-out configs of train tasks are evaluated",
              file=sys.stderr)
    return data, tasks


def corpus_test_keys() -> tuple[str, ...]:
    """The corpus's test task keys (``tensorgym.nn.corpus``): every other task is a train task,
    those of no corpus model included."""
    from ...nn.corpus import load_corpus

    return load_corpus().keys("test")


def _need_train_tasks(args: argparse.Namespace, tasks: list) -> None:
    from ...errors import TensorGymError

    if not any(s.split == "train" for s in tasks):
        raise TensorGymError(f"dataset {args.dataset} has no train task: all its {len(tasks)} "
                             "tasks are test tasks (the corpus's, or --test-task); nothing to fit "
                             "on (fit-world --all fits on every task)")


def _describe(data: Any, tasks: list) -> dict[str, Any]:
    return {"path": str(data.path), "digest": data.digest, "records": len(data),
            "device": tasks[0].task.device,
            "train_tasks": sorted(s.task.workload for s in tasks if s.split == "train"),
            "test_tasks": sorted(s.task.workload for s in tasks if s.split == "test"),
            "configs": sum(len(s) for s in tasks)}


def cmd_world(args: argparse.Namespace) -> int:
    if args.action == "fit-world":
        return _fit(args)
    return _evaluate(args)


def _progress(args: argparse.Namespace):
    if args.json:
        return None
    return lambda e: print(f"  {e.model}: fitted in {e.fit_seconds:.1f} s", file=sys.stderr,
                           flush=True)


def _fit(args: argparse.Namespace) -> int:
    from .evaluate import compare, evaluate_model, table
    from .model import WorldModel
    from .samples import split_samples

    data, tasks = _tasks(args)
    if not args.all:
        _need_train_tasks(args, tasks)
    family, compared = args.model, None
    if family == "auto":
        compared = compare(tasks, REGRESSORS, args.features, args.seed, args.holdout,
                           _progress(args))
        family = max(compared, key=lambda e: (e.heldout.get("pairwise", 0.0),
                                              e.heldout.get("spearman", 0.0))).model
    fit, _, _ = split_samples(tasks, args.seed, args.holdout)
    wm = WorldModel.fit(tasks if args.all else fit, family, args.features, args.seed)
    try:
        if args.calibrate:
            wm.calibrate(tasks if args.all else fit, args.seed, args.holdout)
        ev = None if args.all else evaluate_model(wm, tasks, args.seed, args.holdout)
        wm.save(args.out, dataset=_describe(data, tasks), seed=args.seed,
                holdout=args.holdout, trained_on="all" if args.all else "train",
                metrics=None if ev is None else {"heldout": ev.heldout, "test": ev.test},
                compared=None if compared is None else [e.to_json() for e in compared])
    finally:
        wm.close()
    if args.json:
        print(json.dumps({"out": str(args.out), "family": family, "features": args.features,
                          "metrics": None if ev is None else ev.to_json()}))
        return 0
    print(f"world model ({family}, {args.features} features) of {len(tasks)} tasks written to "
          f"{args.out}" + (" (fitted on everything: no metrics)" if args.all else ""))
    if ev is not None:
        print(table([ev]), end="")
    return 0


def _evaluate(args: argparse.Namespace) -> int:
    from ...errors import TensorGymError
    from .evaluate import compare, evaluate_model, table
    from .model import WorldModel

    if args.model is not None:
        wm = WorldModel.load(args.model)
        if wm.manifest.get("trained_on") == "all":
            print(f"warning: {args.model} was fitted on every config (--all): its scores are "
                  "on its own training data", file=sys.stderr)
        args.features = wm.features
        data, tasks = _tasks(args)
        try:
            evals = [evaluate_model(wm, tasks, args.seed, args.holdout)]
        finally:
            wm.close()
    else:
        families = [f.strip() for f in args.models.split(",") if f.strip()]
        bad = [f for f in families if f not in FAMILIES]
        if bad or not families:
            raise TensorGymError(f"unknown model famil{'ies' if len(bad) > 1 else 'y'} "
                                 f"{', '.join(bad) or '(none)'}; use {', '.join(FAMILIES)}")
        data, tasks = _tasks(args)
        _need_train_tasks(args, tasks)
        evals = compare(tasks, families, args.features, args.seed, args.holdout,
                        _progress(args))
    info = _describe(data, tasks)
    if args.json:
        print(json.dumps({"dataset": {k: v for k, v in info.items() if not k.endswith("tasks")},
                          "train_tasks": len(info["train_tasks"]),
                          "test_tasks": len(info["test_tasks"]), "seed": args.seed,
                          "holdout": args.holdout,
                          "evaluations": [e.to_json() for e in evals]}))
        return 0
    print(f"{args.dataset}: {info['records']} records, {info['configs']} configs, "
          f"{len(info['train_tasks'])} train tasks (held out: {args.holdout:.0%} of each's "
          f"configs, seed {args.seed}), {len(info['test_tasks'])} test tasks, on "
          f"{info['device']}")
    print(table(evals), end="")
    return 0
