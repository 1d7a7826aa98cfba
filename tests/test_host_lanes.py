"""The host's vector width, from LLVM's view of this CPU's features."""
import llvmlite.binding as llvm

from tensorgym.hardware.host import host_vector_lanes, vector_lanes_of


def test_lanes_follow_the_widest_isa():
    assert vector_lanes_of({"avx512f": True, "avx2": True, "fma": True}) == 16
    assert vector_lanes_of({"avx512f": False, "avx2": True, "fma": True}) == 8
    assert vector_lanes_of({"avx512f": False, "avx2": False, "sse4.2": True}) == 4
    assert vector_lanes_of({"neon": True}) == 4 and vector_lanes_of({}) == 4


def test_host_lanes_match_llvm_host_features():
    features = llvm.get_host_cpu_features()
    lanes = host_vector_lanes()
    assert lanes in (4, 8, 16) and lanes == vector_lanes_of(features)
    assert (lanes == 16) == bool(features.get("avx512f"))
    assert host_vector_lanes() == lanes and host_vector_lanes.cache_info().hits >= 1  # cached
