"""The compile cache and duplicate kernels: no source is compiled twice, no kernel timed twice
in one batch, and a damaged cache costs only time."""
import numpy as np
import pytest

from tensorgym.measure.compile_cache import CompileCache
from tensorgym.measure import LocalMeasurer, MeasureOptions, Measurer
from tensorgym.templates import space_for
from tensorgym.workloads import matmul

W = matmul(24, 16, 20)


@pytest.fixture
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))  # builders inherit it
    return tmp_path / "tensorgym" / "compiled"


def _measurer(**kw) -> Measurer:
    return LocalMeasurer("cpu", MeasureOptions(repeat=2, min_repeat_ms=1, n_parallel=2, **kw))


def test_a_second_build_of_the_same_source_comes_from_the_cache(cache_home):
    configs = space_for(W, "cpu").sample(np.random.default_rng(0), 6)
    m = _measurer()
    try:
        first = m.measure(W, configs)
        assert all(r.ok for r in first), [r.error_msg for r in first]
        assert not any(r.extra.get("compile_cache") for r in first)
        assert len(list(cache_home.glob("*/*.bin"))) >= 1
        m.close()  # new builder processes: only the disk cache remains
        again = m.measure(W, configs)
        assert all(r.ok and r.extra.get("compile_cache") for r in again)
    finally:
        m.close()


def test_configs_that_are_the_same_kernel_are_timed_once(cache_home):
    c = space_for(W, "cpu").sample(np.random.default_rng(1), 1)[0]
    m = _measurer()
    try:
        a, b = m.measure(W, [c, c])
        assert a.ok and b.ok and b.costs == a.costs
        assert b.extra["same_kernel_as"] == c.index and "same_kernel_as" not in a.extra
    finally:
        m.close()


def test_no_cache_when_switched_off(cache_home):
    m = _measurer(compile_cache=False)
    try:
        assert all(r.ok for r in m.measure(W, space_for(W, "cpu").sample(np.random.default_rng(2), 2)))
        assert not list(cache_home.glob("*/*.bin"))
    finally:
        m.close()


def test_a_damaged_or_unwritable_cache_only_costs_time(tmp_path):
    cache = CompileCache(tmp_path / "c")
    cache.put("ab" + "0" * 62, b"object code")
    path = next((tmp_path / "c").glob("*/*.bin"))
    path.write_bytes(b"\x80garbage")
    assert CompileCache(tmp_path / "c").get("ab" + "0" * 62) is None  # recompile, never crash
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    unwritable = CompileCache(blocked / "c")
    unwritable.put("cd" + "0" * 62, b"x")  # no error
    assert unwritable.get("cd" + "0" * 62) == b"x"  # still served from memory


def test_prune_keeps_the_newest_files(tmp_path):
    cache = CompileCache(tmp_path, memory=1, max_files=3)
    keys = [f"{i:02d}" + "0" * 62 for i in range(5)]
    for k in keys:
        cache.put(k, k.encode())
    cache.prune()
    assert len(list(tmp_path.glob("*/*.bin"))) == 3
