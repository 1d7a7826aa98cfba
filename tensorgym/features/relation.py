"""Context relation features (paper section 4): treat the loops' context vectors as a bag of
points Z and summarise, for chosen feature pairs (i, j) and log2-spaced thresholds beta_t,

    R(ij)_t = max { Z_ki : loop k with Z_kj < beta_t }      (0 when no loop qualifies).

Z is already log2(1 + x) scaled, so thresholds evenly spaced in Z are log2-spaced in the raw
quantity (beta = 1 means about 1 byte/iteration, 29.5 about 2^29.5). The result has the same
length for every loop nest, which is what lets a model transfer across shapes and operators.
"""
from __future__ import annotations

import numpy as np

from .context import CTX, KIND_NAMES, N_SLOTS

THRESHOLDS = np.round(1.0 + 1.5 * np.arange(20), 2).astype(np.float32)


def _pairs() -> list[tuple[str, str]]:
    out = []
    for s in range(N_SLOTS):
        # the memory-hierarchy curve of each buffer: work and reuse achievable within a footprint
        out.append((f"slot{s}_access_count", f"slot{s}_touched_bytes"))
        out.append((f"slot{s}_reuse", f"slot{s}_touched_bytes"))
    out += [("body_execs", "footprint_bytes"), ("outer_iters", "footprint_bytes"),
            ("extent", "outer_iters")]
    out += [(f"kind_{k}", "footprint_bytes") for k in KIND_NAMES]
    return out


RELATION_PAIRS: tuple[tuple[str, str], ...] = tuple(_pairs())
RELATION_COLUMNS = frozenset(name for pair in RELATION_PAIRS for name in pair)  # that they read
_I = np.array([CTX[i] for i, _ in RELATION_PAIRS])
_J = np.array([CTX[j] for _, j in RELATION_PAIRS])
N_RELATION = len(RELATION_PAIRS) * len(THRESHOLDS)
RELATION_NAMES = tuple(f"R({i},{j})<{b:g}" for i, j in RELATION_PAIRS for b in THRESHOLDS)


def relation_features(z: np.ndarray) -> np.ndarray:
    """(len(RELATION_PAIRS) * len(THRESHOLDS),) float32, pair-major. Needs Z >= 0."""
    if z.shape[0] == 0:
        return np.zeros(N_RELATION, dtype=np.float32)
    zi = z[:, _I][:, :, None]  # (loops, pairs, 1)
    below = z[:, _J][:, :, None] < THRESHOLDS  # (loops, pairs, thresholds)
    return np.where(below, zi, 0.0).max(axis=0).astype(np.float32).ravel()


_J_UNIQUE, _J_INVERSE = np.unique(_J, return_inverse=True)
_STEP = float(THRESHOLDS[1] - THRESHOLDS[0])
_EVENLY_SPACED = np.array_equal(THRESHOLDS, THRESHOLDS[0] + _STEP * np.arange(len(THRESHOLDS)))


def _thresholds_at_or_below(z: np.ndarray) -> np.ndarray:
    """How many thresholds are <= each value of ``z`` (float32), as int32. For evenly spaced
    thresholds this is arithmetic, exact in float64: a float32 value that is not on a threshold
    is far further from it than float64 rounding reaches."""
    if not _EVENLY_SPACED:
        return np.searchsorted(THRESHOLDS, z, side="right").astype(np.int32)
    x = z.astype(np.float64)
    x -= float(THRESHOLDS[0])
    x /= _STEP
    np.floor(x, out=x)
    np.clip(x, -1, len(THRESHOLDS) - 1, out=x)
    return x.astype(np.int32) + 1


def relation_rows(z: np.ndarray, present: np.ndarray) -> np.ndarray:
    """``relation_features`` of n loop nests at once (n up to a few million: int32 indices):
    ``z`` (N_CONTEXT, loops, n) float32, loops where ``present`` (loops, n) is False left out.
    A loop with b thresholds at or below Z_kj counts for thresholds b, b+1, ... (Z_kj < beta_t
    exactly when t >= b), so R_t is the running maximum over t of the per-b maxima of Z_ki."""
    n = present.shape[1]
    n_pairs, n_t = len(RELATION_PAIRS), len(THRESHOLDS)
    zi = np.where(present, z[_I], np.float32(0.0))  # (pairs, loops, n)
    first = _thresholds_at_or_below(z[_J_UNIQUE])[_J_INVERSE]
    first *= n_pairs * n
    first += (np.arange(n_pairs, dtype=np.int32)[:, None, None] * n
              + np.arange(n, dtype=np.int32))
    r = np.zeros((n_t + 1, n_pairs, n), np.float32)
    np.maximum.at(r.reshape(-1), first.reshape(-1), zi.reshape(-1))
    for t in range(1, n_t):
        np.maximum(r[t - 1], r[t], out=r[t])
    return r[:n_t].transpose(2, 1, 0).reshape(n, -1)
