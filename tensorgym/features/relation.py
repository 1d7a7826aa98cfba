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
