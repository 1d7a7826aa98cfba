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


# Datasets for replay tests: measured for real, as few samples as give a median.
TINY_MEASURE = dict(repeat=3, max_repeat=3, min_repeat_ms=1.0, calibrate=False)
TINY_WORKLOAD = "matmul:16,16,16"  # the tiny-cpu suite's one task


def collect_dataset(directory, workload: str, n_configs: int) -> str:
    """A records database of ``n_configs`` random configs of ``workload`` (and the reference)."""
    from tensorgym.dataset import collect
    from tensorgym.measure import MeasureOptions

    path = directory / "dataset.db"
    collect([workload], n_configs=n_configs, db=str(path), threads=1, progress=False,
            options=MeasureOptions(**TINY_MEASURE))
    return str(path)


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory):
    """Six configs of TINY_WORKLOAD, shared (read only) by the replay test files."""
    return collect_dataset(tmp_path_factory.mktemp("tiny-dataset"), TINY_WORKLOAD, 6)
