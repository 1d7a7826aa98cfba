"""Ranking metrics of a cost model (TenSet's, Zheng et al., NeurIPS 2021 datasets track),
computed per task and then averaged over tasks (each task counts once).

For one task, with true run times ``t`` and predicted ones ``p`` of its n configs (lower is
better; ties in a sort are broken by the configs' order, stably):

- ``spearman``: Spearman's rho of ``p`` and ``t``: Pearson's correlation of their ranks (tied
  values share their mean rank); 0 when either is constant.
- ``pairwise``: pairwise accuracy: of the pairs (i, j) with t_i != t_j, the share that ``p``
  orders the same way (p_i < p_j where t_i < t_j); a pair ``p`` ties counts one half.
- ``top{k}_recall``: of the k configs with the smallest true times, the share that are among the
  k with the smallest predicted times (k = min(k, n)). ``top1_recall`` is 1 when the predicted
  best is the true best, else 0.
- ``top{k}_score``: TenSet's top-k score: the true best time over the best true time among the
  k configs predicted fastest (1: the predicted top-k holds the best config).

A task needs at least ``MIN_CONFIGS`` configs with a time to be scored; others are left out.
"""
from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import numpy as np

MIN_CONFIGS = 2
TOP_K = (1, 5)
NAMES = ("spearman", "pairwise") + tuple(f"top{k}_recall" for k in TOP_K) + \
    tuple(f"top{k}_score" for k in TOP_K)


def ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n of ``x`` (ascending), tied values sharing their mean rank."""
    x = np.asarray(x, np.float64)
    order = np.argsort(x, kind="stable")
    sx = x[order]
    starts = np.flatnonzero(np.r_[True, sx[1:] != sx[:-1]])
    ends = np.r_[starts[1:], len(x)]
    mean_rank = (starts + ends + 1) / 2.0  # ranks starts+1 .. ends
    out = np.empty(len(x))
    out[order] = np.repeat(mean_rank, ends - starts)
    return out


def spearman(pred: np.ndarray, true: np.ndarray) -> float:
    a, b = ranks(pred), ranks(true)
    a -= a.mean()
    b -= b.mean()
    den = np.sqrt((a * a).sum() * (b * b).sum())
    return float((a * b).sum() / den) if den > 0 else 0.0


def pairwise_accuracy(pred: np.ndarray, true: np.ndarray, block: int = 2048) -> float:
    pred, true = np.asarray(pred, np.float64), np.asarray(true, np.float64)
    good = total = 0.0
    for s in range(0, len(true), block):  # rows in blocks: n^2 pairs without n^2 memory
        dt = np.sign(true[s:s + block, None] - true[None, :])
        dp = np.sign(pred[s:s + block, None] - pred[None, :])
        valid = dt != 0
        total += valid.sum()
        good += (valid & (dt == dp)).sum() + 0.5 * (valid & (dp == 0)).sum()
    return float(good / total) if total else 0.5


def top_k_recall(pred: np.ndarray, true: np.ndarray, k: int) -> float:
    k = min(k, len(true))
    best_true = set(np.argsort(true, kind="stable")[:k].tolist())
    best_pred = set(np.argsort(pred, kind="stable")[:k].tolist())
    return len(best_true & best_pred) / k


def top_k_score(pred: np.ndarray, true: np.ndarray, k: int) -> float:
    k = min(k, len(true))
    chosen = np.argsort(pred, kind="stable")[:k]
    return float(np.min(true) / np.min(np.asarray(true)[chosen]))


def task_metrics(pred: np.ndarray, true: np.ndarray) -> dict[str, float]:
    """Every metric of ``NAMES`` for one task (see the module docstring)."""
    pred, true = np.asarray(pred, np.float64), np.asarray(true, np.float64)
    if pred.shape != true.shape or pred.ndim != 1:
        raise ValueError(f"pred and true must be 1-D of one length, got {pred.shape} and "
                         f"{true.shape}")
    if len(true) < MIN_CONFIGS:
        raise ValueError(f"a task needs at least {MIN_CONFIGS} configs to be scored")
    out = {"spearman": spearman(pred, true), "pairwise": pairwise_accuracy(pred, true)}
    for k in TOP_K:
        out[f"top{k}_recall"] = top_k_recall(pred, true, k)
    for k in TOP_K:
        out[f"top{k}_score"] = top_k_score(pred, true, k)
    return out


def mean_metrics(per_task: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """Each metric averaged over tasks (``tasks``: how many), NaN of none."""
    rows = list(per_task)
    out = {name: float(np.mean([r[name] for r in rows])) if rows else float("nan")
           for name in NAMES}
    out["tasks"] = len(rows)
    return out


def evaluate_tasks(preds: Sequence[np.ndarray], trues: Sequence[np.ndarray]
                   ) -> dict[str, float]:
    """``mean_metrics`` over the tasks with at least ``MIN_CONFIGS`` finite true times (configs
    without one are left out of their task)."""
    rows = []
    for p, t in zip(preds, trues):
        p, t = np.asarray(p, np.float64), np.asarray(t, np.float64)
        ok = np.isfinite(t)
        if ok.sum() >= MIN_CONFIGS:
            rows.append(task_metrics(p[ok], t[ok]))
    return mean_metrics(rows)


__all__ = ["MIN_CONFIGS", "NAMES", "TOP_K", "evaluate_tasks", "mean_metrics",
           "pairwise_accuracy", "ranks", "spearman", "task_metrics", "top_k_recall",
           "top_k_score"]
