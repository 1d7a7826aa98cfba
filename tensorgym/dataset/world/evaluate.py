"""``tensorgym dataset evaluate``: the world model's families compared on one dataset, and a saved
model judged on it.

The tasks are split by the corpus (``cli.corpus_test_keys``: tasks of no corpus model are
train tasks); a seeded share (``samples.HOLDOUT``) of each train task's configs is held out.
Each family is fitted on the rest of the train tasks' configs and scored (``metrics.py``, per
task, then averaged) on the held-out configs of the train tasks and on the test tasks' configs.
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any, Optional, Sequence

import numpy as np

from ...errors import TensorGymError
from . import models
from .metrics import NAMES, evaluate_tasks, spearman
from .model import DEFAULT_FEATURES, NOISE_FLOOR, WorldModel, _head
from .samples import HOLDOUT, TaskSamples, split_samples


@dataclass
class Evaluation:
    """One family's (or saved model's) scores: ``heldout`` and ``test`` are ``metrics``'
    means (``test`` None without a test task); ``fail``/``noise``: the other heads' scores."""

    model: str
    features: str
    heldout: dict[str, float]
    test: Optional[dict[str, float]]
    fit_seconds: float = 0.0
    heads: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _rows(wm: WorldModel, tasks: Sequence[TaskSamples]) -> list[dict[str, np.ndarray]]:
    return [wm.training_rows([s]) for s in tasks]


def _scores(predict: Any, parts: list[dict[str, np.ndarray]]) -> Optional[dict[str, float]]:
    if not parts:
        return None
    preds = [predict(p["X"]) if len(p["X"]) else np.zeros(0) for p in parts]
    # true seconds per FLOP (a task's FLOPs are one number: its ranking and time ratios are the
    # seconds'); predictions stay logs, which order the same
    out = evaluate_tasks(preds, [np.exp(p["y_time"]) for p in parts])
    return out if out["tasks"] else None  # no task with two timed configs: nothing scored


def compare(tasks: Sequence[TaskSamples], families: Sequence[str] = models.FAMILIES,
            features: str = DEFAULT_FEATURES, seed: int = 0, holdout: float = HOLDOUT,
            progress: Any = None) -> list[Evaluation]:
    """Fit each of ``families`` on the fit share of the train tasks; score each on the held-out
    configs and the test tasks. The failure and noise heads (the same whatever the family) are
    scored once, in the first evaluation's ``heads``."""
    fit, held, test = split_samples(tasks, seed, holdout)
    if not any(np.isfinite(s.seconds).any() for s in fit):
        raise TensorGymError("no train task has a successful record to fit on")
    wm = WorldModel(models.Constant(), models.Constant(), models.Constant(), "xgb", features)
    try:
        train = wm.training_rows(fit)
        held_rows, test_rows = _rows(wm, held), _rows(wm, test)
    finally:
        wm.close()
    X, y, t = train["X"], train["y_time"], train["time_rows"]
    out = []
    for family in families:
        t0 = time.perf_counter()
        model = models.make(family, seed).fit(X[t], y[t], train["groups"][t])
        seconds = time.perf_counter() - t0
        out.append(Evaluation(family, features, _scores(model.predict, held_rows) or {},
                              _scores(model.predict, test_rows), seconds))
        if progress:
            progress(out[-1])
    if out:
        out[0].heads = _head_scores(train, held_rows + test_rows, seed)
    return out


def _head_scores(train: dict[str, np.ndarray], parts: list[dict[str, np.ndarray]],
                 seed: int) -> dict[str, Any]:
    """The failure head's Brier score and AUC and the noise head's Spearman rho, over every
    evaluated config (held-out and test together)."""
    X = train["X"]
    fail = _head(X, train["fail"], "binary:logistic", seed)
    n = train["noise_rows"]
    noise = _head(X[n], train["log_noise"][n], "reg:squarederror", seed) if n.any() else \
        models.Constant(np.log(NOISE_FLOOR))
    parts = [p for p in parts if len(p["X"])]
    out: dict[str, Any] = {"failure_rate_train": float(np.mean(train["fail"])) if len(X) else 0}
    if not parts:
        return out
    Xe = np.concatenate([p["X"] for p in parts])
    fe = np.concatenate([p["fail"] for p in parts])
    pf = np.clip(fail.predict(Xe), 0, 1)
    out["failure_rate_eval"] = float(fe.mean())
    out["fail_brier"] = float(np.mean((pf - fe) ** 2))
    labels = fe > 0.5
    if labels.any() and not labels.all():
        out["fail_auc"] = _auc(pf, labels)
    rhos = []
    for p in parts:
        m = p["noise_rows"]
        if m.sum() >= 2:
            rhos.append(spearman(noise.predict(p["X"][m]), p["log_noise"][m]))
    if rhos:
        out["noise_spearman"] = float(np.mean(rhos))
    return out


def _auc(score: np.ndarray, labels: np.ndarray) -> float:
    """Area under the ROC curve: the chance a failing config scores above a good one."""
    from .metrics import ranks

    r = ranks(score)
    pos = labels.sum()
    neg = len(labels) - pos
    return float((r[labels].sum() - pos * (pos + 1) / 2) / (pos * neg))


def evaluate_model(wm: WorldModel, tasks: Sequence[TaskSamples],
                   seed: Optional[int] = None, holdout: Optional[float] = None) -> Evaluation:
    """A saved model's scores: its manifest's seed and hold-out share split the tasks as they
    were split when it was fitted (unless given)."""
    seed = int(wm.manifest.get("seed", 0)) if seed is None else seed
    holdout = float(wm.manifest.get("holdout", HOLDOUT)) if holdout is None else holdout
    _, held, test = split_samples(tasks, seed, holdout)
    return Evaluation(wm.family, wm.features, _scores(wm.time.predict, _rows(wm, held)) or {},
                      _scores(wm.time.predict, _rows(wm, test)))


def table(evals: Sequence[Evaluation]) -> str:
    """The comparison as text: one row per model and side (held-out configs of train tasks,
    test tasks)."""
    heads = {"spearman": "rho", "pairwise": "pairs", "top1_recall": "top1", "top5_recall":
             "top5", "top1_score": "top1 s", "top5_score": "top5 s"}
    lines = [f"{'model':<10} {'features':<9} {'side':<8} {'tasks':>5} "
             + " ".join(f"{heads[n]:>6}" for n in NAMES) + f" {'fit s':>6}"]
    for e in evals:
        for side, m in (("held-out", e.heldout), ("test", e.test)):
            if not m:
                continue
            lines.append(f"{e.model:<10} {e.features:<9} {side:<8} {m['tasks']:>5} "
                         + " ".join(f"{m[n]:>6.3f}" for n in NAMES)
                         + (f" {e.fit_seconds:>6.1f}" if e.fit_seconds else f" {'-':>6}"))
    for e in evals:
        if e.heads:
            lines.append("other heads: " + ", ".join(
                f"{k} {v:.3f}" for k, v in e.heads.items()))
    return "\n".join(lines) + "\n"


__all__ = ["Evaluation", "compare", "evaluate_model", "table"]
