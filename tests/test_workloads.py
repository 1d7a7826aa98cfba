import numpy as np
import pytest

from tensorgym.errors import UnknownWorkloadError
from tensorgym.workloads import WORKLOADS, conv2d, get_workload, matmul


def test_resnet18_table():
    assert [f"conv2d-C{i}" for i in range(1, 13)] + ["matmul-1024"] == list(WORKLOADS)
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
    with pytest.raises(ValueError):
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
