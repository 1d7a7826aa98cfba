"""nn.compile's separable max pool (tensorgym/nn/pool.py): the same values as PyTorch's
max_pool2d, bit for bit, and the graph pass that uses it only where it applies."""
from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402

from tensorgym.nn.pool import MIN_OUTPUT, fast_pools, max_pool2d  # noqa: E402

CASES = [((1, 64, 112, 112), 3, 2, 1), ((1, 8, 111, 113), 3, 2, 1), ((2, 8, 15, 17), 3, 1, 1),
         ((1, 3, 20, 20), 2, 2, 0), ((1, 4, 9, 9), 5, 3, 2), ((1, 2, 7, 12), (2, 3), (1, 2), (1, 0)),
         ((3, 5, 6, 6), 3, 3, 0), ((1, 1, 5, 5), 5, 1, 0)]


@pytest.mark.parametrize("shape,k,s,p", CASES)
def test_separable_max_pool_equals_pytorch(shape, k, s, p):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(shape, generator=g)
    x.view(-1)[::97] = -math.inf
    x.view(-1)[5::211] = math.nan
    pair = lambda v: list(v) if isinstance(v, tuple) else [v, v]  # noqa: E731
    want = F.max_pool2d(x, k, s, p)
    got = max_pool2d(x, pair(k), pair(s), pair(p))
    assert got.shape == want.shape
    assert torch.equal(got.nan_to_num(nan=7.0), want.nan_to_num(nan=7.0))
    assert torch.equal(got.isnan(), want.isnan())


class _Pools(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.big = torch.nn.MaxPool2d(3, 2, 1)
        self.small = torch.nn.MaxPool2d(2)
        self.ceil = torch.nn.MaxPool2d(3, 2, 1, ceil_mode=True)

    def forward(self, x):
        y = self.big(x)
        return self.small(y).sum() + self.ceil(y).sum() + y.sum()


def test_the_pass_takes_large_floor_mode_pools_only():
    x = torch.randn(1, 16, 96, 96)
    model = _Pools().eval()
    gm = torch.export.export(model, (x,)).module()
    done = fast_pools(gm)
    gm.recompile()
    assert len(done) == 1  # the big one; the small one and the ceil-mode one stay
    assert 16 * 48 * 48 >= MIN_OUTPUT > 16 * 24 * 24
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert max_pool2d in targets
    with torch.no_grad():
        assert torch.equal(gm(x), model(x))


def test_pytorch_pools_restored_side_by_side():
    from tensorgym.nn.pool import with_pytorch_pools

    x = torch.randn(1, 16, 96, 96)
    model = _Pools().eval()
    gm = torch.export.export(model, (x,)).module()
    fast_pools(gm)
    gm.recompile()
    plain = with_pytorch_pools(gm)
    assert max_pool2d in [n.target for n in gm.graph.nodes]  # gm itself is unchanged
    assert max_pool2d not in [n.target for n in plain.graph.nodes]
    with torch.no_grad():
        assert torch.equal(plain(x), gm(x))
