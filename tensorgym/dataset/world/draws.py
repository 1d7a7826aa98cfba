"""Drawn answers: a world model whose misses carry the model's own error, not only its mean.

A regression predicts each config's expected log time. Over a task's configs those predictions
spread less than the true times do (the model cannot tell every fast config from its
neighbours), so the best of 64 predicted configs is slower than the best of the same 64 timed:
a replay answered by the point estimate promises less than the machine gives (issue 33's
sim-to-real ratio). A *drawn* answer multiplies the point estimate by exp(r), with r drawn from
the model's residuals log(true / predicted) on configs held out of its fit, so the answers
spread as the times do.

Each config's draw is fixed: its quantile comes from hashes of (seed, workload key, the
config's knob choices), so a config is answered alike on every request, episode and agent, as a
recorded config is (a machine has one time per config, not a new one each time it is asked).

The draws of similar configs are alike, as the model's errors are: on held-out configs of the
corpus, the residuals of two configs of a task that differ in one knob correlate at about 0.6,
in two at 0.25, in three or more at ~0. Independent draws would instead give every neighbour of
a good config a fresh chance of a lucky draw, a ragged world that a local search exploits far
past what the machine gives. So the draw is a random field over the knobs with correlation
rho ** d between configs that differ in d knobs (a Hamming kernel), rho fitted on the held-out
pairs: the sum of ``FIELD_FEATURES`` hashed terms, each of the config's choices of a random
subset of the knobs (every knob in it with probability 1 - rho), so that two configs share a
term exactly when they agree on its subset. The sum's normal CDF is the draw's quantile.

The error's spread depends on where a config stands in its task: on the corpus's held-out
configs, those the model ranks in the fastest 1% of their task's space have residuals of
standard deviation 0.37 and a 5% quantile of -0.54, the ones at 1-25% 0.51-0.54 and -0.76 to
-0.79. A search finds the configs the model ranks fastest, so pooled quantiles would promise
it luck those configs do not have. So the quantiles are kept per band of the config's
*predicted rank*: the share of ``RANK_SAMPLE`` random configs of its task (a fixed sample) the
model predicts faster (bands ``RANK_EDGES``), each band's from its own held-out configs (the
pooled ones where a band has fewer than ``MIN_RESIDUALS``).
"""
from __future__ import annotations

import functools
import math
import zlib
from typing import Any, Sequence

import numpy as np

from ...errors import TensorGymError

QUANTILES = 101  # residual quantiles kept in the model's manifest
TAIL = 0.005  # the lowest and highest kept are the 0.5% and 99.5% ones
MIN_RESIDUALS = 50  # held-out configs with a time needed to calibrate draws
MANIFEST_KEY = "residual_quantiles"
RHO_KEY = "residual_rho"
FIELD_FEATURES = 64  # hashed terms of the draw's random field
MAX_DISTANCE = 4  # pairs of configs differing in 1..MAX_DISTANCE knobs fit rho
RANK_EDGES = (0.0, 0.01, 0.05, 0.25, 1.0)  # bands of predicted rank with their own quantiles
RANK_SAMPLE = 2000  # random configs of a task its predicted ranks are read against
BANDS_KEY = "residual_rank_edges"

_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser on uint64 (wrapping arithmetic)."""
    with np.errstate(over="ignore"):
        x = (x + np.uint64(0x9E3779B97F4A7C15)) & _MASK
        x = ((x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _MASK
        x = ((x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _MASK
        return x ^ (x >> np.uint64(31))


def _unit(x: np.ndarray) -> np.ndarray:
    """Hashes to floats in (0, 1)."""
    return ((x >> np.uint64(11)).astype(np.float64) + 0.5) / float(1 << 53)


def _salt(*parts: int) -> np.uint64:
    h = np.zeros(1, np.uint64)
    for p in parts:
        h = _mix(h ^ np.uint64(p & 0xFFFFFFFFFFFFFFFF))
    return h[0]


def knob_choices(space: Any, indices: np.ndarray) -> np.ndarray:
    """(n, knobs) int64: each config index decoded into its knobs' choices (mixed radix, the
    last knob fastest, as ``ConfigSpace.get``)."""
    indices = np.asarray(indices).reshape(-1)
    if space.size >= 2 ** 62:  # past int64: decode one by one
        return np.array([space.get(int(i)).choices for i in indices], np.int64).reshape(
            len(indices), len(space.knobs))
    rest = indices.astype(np.int64)
    out = np.zeros((len(rest), len(space.knobs)), np.int64)
    for k in range(len(space.knobs) - 1, -1, -1):
        rest, out[:, k] = np.divmod(rest, space.knobs[k].size)
    return out


def field_normals(workload_key: str, knob_names: Sequence[str], choices: np.ndarray,
                  rho: float, seed: int = 0) -> np.ndarray:
    """(n,) near-standard-normal values, one per config (rows of ``choices``), whose
    correlation between two configs differing in d knobs is rho ** d (the module docstring)."""
    salts, knob_hash, member = _terms(workload_key, tuple(knob_names), float(rho), seed)
    c = np.asarray(choices, np.int64).astype(np.uint64).reshape(-1, len(knob_hash))
    h = np.repeat(salts[:, None], len(c), 1)  # (terms, configs)
    for k, kh in enumerate(knob_hash):
        rows = member[:, k]
        if rows.any():
            h[rows] = _mix(h[rows] ^ _mix(c[:, k] ^ kh)[None, :])
    u = _unit(_mix(h))
    return ((u - 0.5) * math.sqrt(12.0)).sum(0) / math.sqrt(len(salts))  # each term: variance 1


@functools.lru_cache(maxsize=256)
def _terms(workload_key: str, knob_names: tuple[str, ...], rho: float,
           seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The field's terms: a salt each, the knobs' hashes, and which knobs each term reads
    ((terms, knobs) bool, every knob with probability 1 - rho)."""
    w = zlib.crc32(workload_key.encode())
    knob_hash = np.array([zlib.crc32(n.encode()) for n in knob_names], np.uint64)
    salts = np.array([_salt(seed, w, m, 1) for m in range(FIELD_FEATURES)], np.uint64)
    member = np.array([[_unit(np.array([_salt(seed, w, m, int(kh), 2)]))[0] < 1.0 - rho
                        for kh in knob_hash] for m in range(FIELD_FEATURES)], bool)
    member = member.reshape(FIELD_FEATURES, len(knob_hash))
    return salts, knob_hash, member


def config_uniforms(workload_key: str, knob_names: Sequence[str], choices: np.ndarray,
                    rho: float, seed: int = 0) -> np.ndarray:
    """(n,) floats in (0, 1): the quantiles of the configs' draws (``field_normals``'s normal
    CDF), uniform over configs."""
    from scipy.special import ndtr

    z = field_normals(workload_key, knob_names, choices, rho, seed)
    return np.clip(ndtr(z), 1e-12, 1 - 1e-12)


def residual_quantiles(residuals: np.ndarray, n: int = QUANTILES) -> list[float]:
    """``n`` evenly spaced quantiles (0 to 1) of held-out log residuals, as a list (JSON)."""
    r = np.asarray(residuals, np.float64)
    r = r[np.isfinite(r)]
    if len(r) < MIN_RESIDUALS:
        raise TensorGymError(f"{len(r)} held-out configs with a time; calibrating drawn "
                             f"answers needs {MIN_RESIDUALS} (a larger dataset)")
    return [float(q) for q in np.quantile(r, _levels(n))]


def _levels(n: int) -> np.ndarray:
    """The probabilities of the kept quantiles: TAIL to 1 - TAIL, so that no draw goes past
    what a few held-out configs (not a single outlier) show."""
    return np.linspace(TAIL, 1.0 - TAIL, n)


def draw_factors(quantiles: Sequence[float], u: np.ndarray) -> np.ndarray:
    """exp(the residual at quantile ``u``), linearly between the kept quantiles (the outer
    ones below TAIL and above 1 - TAIL)."""
    q = np.asarray(quantiles, np.float64)
    return np.exp(np.interp(u, _levels(len(q)), q))


def calibration(tasks: Sequence[Any], fit: Any, seed: int, share: float) -> dict[str, Any]:
    """Residual quantiles of a model ``fit(tasks_less_holdout)`` on each task's held-out share
    of configs (``samples.holdout_mask``; every task counts as a train task here)."""
    from dataclasses import replace

    from .samples import holdout_mask

    kept, held = [], []
    for s in tasks:
        mask = holdout_mask(replace(s, split="train"), seed, share)
        kept.append(s.subset(~mask))
        if mask.any():
            held.append(s.subset(mask))
    model = fit(kept)
    residuals, ranks, pairs = [], [], []
    for h in held:
        ok = np.isfinite(h.seconds)
        if ok.any():
            p = model.predict_indices(h.workload, h.task.target, h.indices[ok], spread=False)
            r = np.log(h.seconds[ok]) - np.log(p.seconds)
            residuals.append(r)
            ranks.append(predicted_ranks(model, h.workload, h.task.target, p.seconds))
            pairs.append(_pairs(knob_choices(h.space, h.indices[ok]), r - r.mean()))
    r = np.concatenate(residuals) if residuals else np.zeros(0)
    rank = np.concatenate(ranks) if ranks else np.zeros(0)
    pooled = residual_quantiles(r)
    bands, counts = [], []
    for lo, hi in zip(RANK_EDGES[:-1], RANK_EDGES[1:]):
        inside = (rank >= lo) & ((rank < hi) if hi < 1.0 else (rank <= hi))
        counts.append(int(inside.sum()))
        bands.append(residual_quantiles(r[inside]) if inside.sum() >= MIN_RESIDUALS else pooled)
    rho, by_distance = fit_rho(pairs)
    return {MANIFEST_KEY: bands, BANDS_KEY: list(RANK_EDGES), "residual_band_configs": counts,
            RHO_KEY: rho, "residual_correlation": by_distance,
            "residual_configs": int(np.isfinite(r).sum()), "residual_holdout": share,
            "residual_seed": seed}


def predicted_ranks(model: Any, workload: Any, target: str, seconds: np.ndarray) -> np.ndarray:
    """Each predicted time's rank in its task: the share of a fixed sample of ``RANK_SAMPLE``
    random configs of the space that ``model`` predicts faster (0: faster than all)."""
    return np.searchsorted(model.rank_reference(workload, target), seconds) / RANK_SAMPLE


def band_factors(manifest: dict, u: np.ndarray, rank: np.ndarray) -> np.ndarray:
    """``draw_factors`` with each config's band's quantiles (a manifest of one flat list of
    quantiles: one band)."""
    q = manifest[MANIFEST_KEY]
    if not q or not isinstance(q[0], list):
        return draw_factors(q, u)
    edges = np.asarray(manifest[BANDS_KEY], np.float64)
    band = np.clip(np.searchsorted(edges, rank, side="right") - 1, 0, len(q) - 1)
    out = np.empty(len(u))
    for b in np.unique(band):
        sel = band == b
        out[sel] = draw_factors(q[b], u[sel])
    return out


def _pairs(choices: np.ndarray, r: np.ndarray) -> dict[int, np.ndarray]:
    """A task's held-out residual pairs (each task's mean residual taken off), by the number of
    knobs the two configs differ in (1..MAX_DISTANCE)."""
    i, j = np.triu_indices(len(r), 1)
    d = (choices[i] != choices[j]).sum(1)
    return {k: np.stack([r[i[d == k]], r[j[d == k]]], 1) for k in range(1, MAX_DISTANCE + 1)}


def fit_rho(pairs: Sequence[dict[int, np.ndarray]]) -> tuple[float, dict[str, list[float]]]:
    """rho whose powers rho ** d best fit (least squares, weighted by the number of pairs) the
    residuals' correlation at each distance d; 0 (independent draws) without pairs to tell.
    Also each distance's (correlation, pairs), for the manifest."""
    corr, weight = {}, {}
    for d in range(1, MAX_DISTANCE + 1):
        parts = [p[d] for p in pairs if len(p.get(d, ()))]
        ab = np.concatenate(parts) if parts else np.zeros((0, 2))
        if len(ab) >= 10 and ab.std(0).min() > 0:
            corr[d] = float(np.corrcoef(ab[:, 0], ab[:, 1])[0, 1])
            weight[d] = len(ab)
    if not corr:
        return 0.0, {}
    grid = np.linspace(0.0, 0.95, 96)
    loss = [sum(weight[d] * (corr[d] - g ** d) ** 2 for d in corr) for g in grid]
    return float(grid[int(np.argmin(loss))]), {str(d): [corr[d], weight[d]] for d in corr}


__all__ = ["BANDS_KEY", "RANK_EDGES", "RANK_SAMPLE", "band_factors", "predicted_ranks",
           "FIELD_FEATURES", "MANIFEST_KEY", "MIN_RESIDUALS", "QUANTILES", "RHO_KEY",
           "calibration", "config_uniforms", "draw_factors", "field_normals", "fit_rho",
           "knob_choices", "residual_quantiles"]
