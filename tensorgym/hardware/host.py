"""What this machine's CPU is, as far as code generation cares: its vector width. (What this
process may use of the machine, its cores and device locks, is ``tensorgym.processes.host``.)"""
from __future__ import annotations

from functools import lru_cache
from typing import Mapping

from ..errors import TargetUnavailableError


def vector_lanes_of(features: Mapping[str, bool]) -> int:
    """float32 lanes of the widest vector registers that LLVM CPU ``features`` name: 16 with
    ``avx512f``, 8 with ``avx2``, else 4 (SSE, NEON)."""
    if features.get("avx512f"):
        return 16
    return 8 if features.get("avx2") else 4


@lru_cache(maxsize=None)
def host_vector_lanes() -> int:
    """float32 lanes of this CPU's widest vector registers, from LLVM's host CPU features (what
    the CPU runtime compiles for): 16 on AVX-512, 8 on AVX2, else 4."""
    import llvmlite.binding as llvm  # noqa: PLC0415  (only callers that need the ISA load LLVM)
    try:
        features = llvm.get_host_cpu_features()
    except RuntimeError as e:  # LLVM cannot read this CPU's features
        raise TargetUnavailableError(f"cannot tell this CPU's vector width: {e}; pass the "
                                     "lanes explicitly where the caller takes them") from None
    return vector_lanes_of(features)
