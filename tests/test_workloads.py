import pickle
import tracemalloc

import gymnasium as gym
import numpy as np
import pytest

import tensorgym  # noqa: F401  (registers the envs)
from tensorgym import workloads
from tensorgym.errors import InvalidWorkloadError, UnknownWorkloadError, WorkloadTooLargeError
from tensorgym.workloads import (MAX_BYTES_ENV, MAX_TENSOR_BYTES, WORKLOADS, Workload, conv2d,
                                 get_workload, matmul)


def test_resnet18_table():
    assert [f"conv2d-C{i}" for i in range(1, 13)] + ["matmul-1024"] == list(WORKLOADS)[:13]
    c6 = WORKLOADS["conv2d-C6"]
    assert c6.params == (1, 128, 28, 28, 128, 3, 1, 1)
    assert c6.output.shape == (1, 128, 28, 28)
    assert c6.flops == 2 * 128 * 28 * 28 * 128 * 9
    c1 = WORKLOADS["conv2d-C1"]
    assert c1.output.shape == (1, 64, 112, 112)


def test_get_workload_parses_shapes():
    assert get_workload("conv2d:1,96,17,17,160,3,1,1") == conv2d(1, 96, 17, 17, 160, 3, 1, 1)
    assert get_workload("matmul:333,517,129").params == (333, 517, 129)
    assert get_workload(WORKLOADS["conv2d-C6"].key) is WORKLOADS["conv2d-C6"]
    for bad in ["conv2d-C99", "matmul:1,2", "conv3d:1,2,3", "matmul:a,b,c", ""]:
        with pytest.raises(UnknownWorkloadError):
            get_workload(bad)
    with pytest.raises(InvalidWorkloadError, match="larger than the padded input"):
        conv2d(1, 3, 2, 2, 4, 5, 1, 0)


def _direct_conv(data, weight, stride, pad):
    n, c, h, w = data.shape
    oc, _, k, _ = weight.shape
    x = np.pad(data, ((0, 0), (0, 0), (pad, pad), (pad, pad))).astype(np.float64)
    oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
    out = np.zeros((n, oc, oh, ow))
    for o in range(oc):
        for y in range(oh):
            for xx in range(ow):
                out[0, o, y, xx] = np.sum(
                    x[0, :, y * stride:y * stride + k, xx * stride:xx * stride + k] * weight[o])
    return out


def test_references_match_direct_loops():
    w = conv2d(1, 3, 7, 7, 4, 3, 2, 1)
    ins = w.random_inputs(0)
    np.testing.assert_allclose(w.reference(ins), _direct_conv(*ins, 2, 1), rtol=1e-5, atol=1e-5)
    m = matmul(5, 6, 7)
    a, b = m.random_inputs(1)
    np.testing.assert_allclose(m.reference([a, b]), a.astype(np.float64) @ b, rtol=1e-5)


def test_sizes_are_exact_integers_of_the_right_count():
    for bad in [(2.9, 2, 3), (2.0, 2, 3), (True, 2, 3), ("8", 2, 3), (None, 2, 3), (8, 8, 1j)]:
        with pytest.raises(InvalidWorkloadError, match="integers"):
            matmul(*bad)
    with pytest.raises(InvalidWorkloadError, match="name must be a str"):
        matmul(8, 8, 8, 7)
    with pytest.raises(InvalidWorkloadError, match="takes 3 sizes"):
        Workload("matmul", (8, 8))
    with pytest.raises(InvalidWorkloadError, match="takes 8 sizes"):
        Workload("conv2d", (1, 3, 8, 8, 4, 3))
    with pytest.raises(InvalidWorkloadError, match="unknown op"):
        Workload("conv3d", (1, 2, 3))
    for bad in ["matmul:8,8,8,7", "matmul:2.9,2,3", "matmul:8,8", "matmul: 8,8,8", "matmul:8,8,",
                "matmul:+8,8,8", "matmul:-8,8,8", "matmul:0,8,8", "conv2d:1,3,8,8,4,3",
                "conv2d:1,3,2,2,4,5,1,0"]:
        with pytest.raises(UnknownWorkloadError, match="cannot build"):
            get_workload(bad)
    with pytest.raises(UnknownWorkloadError, match="got int"):
        get_workload(5)


def test_keys_of_valid_workloads_are_unchanged():
    w = matmul(np.int64(8), np.int32(16), 24)
    assert w.key == "matmul:8,16,24" and w == matmul(8, 16, 24)
    assert all(type(p) is int for p in w.params)
    assert get_workload("matmul:08,16,24").key == "matmul:8,16,24"
    assert [w.key for w in WORKLOADS.values()][:2] == ["conv2d:1,3,224,224,64,7,2,3",
                                                       "conv2d:1,64,56,56,64,3,1,1"]
    assert WORKLOADS["matmul-1024"].key == "matmul:1024,1024,1024"
    assert get_workload("conv2d:1,96,17,17,160,3,1,1").key == "conv2d:1,96,17,17,160,3,1,1"


def test_tensors_over_the_size_limit_are_refused_before_allocating():
    assert MAX_TENSOR_BYTES == 2 * 2**30
    huge = "matmul:100000,100000,100000"
    tracemalloc.start()
    try:
        with pytest.raises(WorkloadTooLargeError, match=r"112 GiB .* limit of 2 GiB"):
            get_workload(huge)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2**20
    with pytest.raises(WorkloadTooLargeError):
        gym.make("TensorSched-v0", workload=huge, records=False)
    # exactly at the limit (A 1 GiB, B and C 0.5 GiB each) and just over
    assert matmul(16384, 8192, 16384).nbytes == 2 * 2**30
    with pytest.raises(WorkloadTooLargeError):
        matmul(16384, 8193, 16384)
    with pytest.raises(WorkloadTooLargeError):
        conv2d(1, 1024, 1024, 1024, 1024, 3, 1, 1)


def test_the_size_limit_can_be_raised(monkeypatch):
    big = matmul(16384, 16384, 16384, max_bytes=4 * 2**30)
    assert big.nbytes == 3 * 2**30
    assert get_workload("matmul:16384,16384,16384", max_bytes=2**32) == big
    # made once, checked once: a worker unpickles it whatever its own limit
    assert pickle.loads(pickle.dumps(big)) == big
    monkeypatch.setenv(MAX_BYTES_ENV, str(4 * 2**30))
    assert get_workload("matmul:16384,16384,16384") == big
    monkeypatch.setenv(MAX_BYTES_ENV, "1000")
    with pytest.raises(WorkloadTooLargeError):
        matmul(16, 16, 16)
    assert matmul(16, 16, 16, max_bytes=4096).key == "matmul:16,16,16"  # the keyword wins
    monkeypatch.setenv(MAX_BYTES_ENV, "lots")
    with pytest.raises(InvalidWorkloadError, match=MAX_BYTES_ENV):
        matmul(16, 16, 16)
    monkeypatch.delenv(MAX_BYTES_ENV)
    monkeypatch.setattr(workloads, "MAX_TENSOR_BYTES", 1000)
    with pytest.raises(WorkloadTooLargeError):
        matmul(16, 16, 16)


def test_random_inputs_are_float32_made_without_a_float64_copy():
    w = matmul(1, 1, 2**20)  # A and B are 4 MiB each in float32
    tracemalloc.start()
    try:
        a, b = w.random_inputs(3)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert a.dtype == b.dtype == np.float32 and a.shape == (1, 2**20)
    assert peak < 1.2 * (a.nbytes + b.nbytes)  # a float64 draw alone would be 8 MiB more
    assert -1 <= a.min() and a.max() < 1 and abs(float(a.mean())) < 0.01
    again = w.random_inputs(3)
    assert np.array_equal(a, again[0]) and np.array_equal(b, again[1])
    assert not np.array_equal(a, w.random_inputs(4)[0])
