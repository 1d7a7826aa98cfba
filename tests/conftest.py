import numpy as np
import pytest

from tensorgym.workloads import conv2d, matmul

# Small shapes that keep compile + run fast but exercise every feature of the templates:
# padding, stride 2, non-power-of-two extents, 1x1 kernels.
SMALL_WORKLOADS = [
    matmul(32, 48, 16),
    matmul(17, 9, 13),
    conv2d(1, 8, 10, 10, 16, 3, 1, 1),
    conv2d(1, 4, 9, 9, 8, 3, 2, 1),
    conv2d(1, 6, 7, 7, 4, 1, 1, 0),
]


@pytest.fixture
def rng():
    return np.random.default_rng(1234)
