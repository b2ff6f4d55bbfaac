"""``unique`` and ``unique_consecutive`` with ``dim`` (distinct slices) against PyTorch
on every device."""

from __future__ import annotations

import numpy as np
import pytest

from ember import Tensor
from ember.errors import DTypeError, IndexOutOfBoundsError


def _check(got, want):
    got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
    assert len(got) == len(want)
    for a, e in zip(got, want):
        a, e = a.to_numpy(), e.numpy()
        assert a.shape == e.shape, (a.shape, e.shape)
        np.testing.assert_array_equal(a, e)


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("inverse,counts", [(False, False), (True, True), (True, False), (False, True)])
def test_unique_dim_matches_torch(device, torch, rng, dim, inverse, counts):
    x = rng.integers(0, 2, (6, 5, 3)).astype(np.float32)
    x[3] = x[0]  # repeated slices along each dim
    x[:, 4] = x[:, 1]
    x[..., 2] = x[..., 0]
    for ours, theirs in (
        (lambda t, **k: t.unique(**k), torch.unique),
        (lambda t, **k: t.unique_consecutive(**k), torch.unique_consecutive),
    ):
        got = ours(Tensor.from_data(x, device=device), dim=dim, return_inverse=inverse, return_counts=counts)
        _check(got, theirs(torch.tensor(x), dim=dim, return_inverse=inverse, return_counts=counts))


def test_unique_dim_orders_slices_lexicographically(device, torch):
    rows = np.array([[2, -1, 5], [0, 9, 9], [2, -1, 5], [0, 9, 1], [-3, 0, 0]], np.int64)
    got = Tensor.from_data(rows, device=device).unique(dim=0, return_inverse=True, return_counts=True)
    _check(got, torch.unique(torch.tensor(rows), dim=0, return_inverse=True, return_counts=True))
    b = np.array([[True, False], [False, False], [True, False]])
    _check(Tensor.from_data(b, device=device).unique(dim=0), torch.unique(torch.tensor(b), dim=0))


def test_unique_dim_empty_and_errors(flex, torch):
    empty = np.zeros((0, 3), np.float32)
    _check(
        Tensor.from_data(empty, device=flex).unique(dim=0, return_counts=True),
        torch.unique(torch.tensor(empty), dim=0, return_counts=True),
    )
    with pytest.raises(IndexOutOfBoundsError, match="dim 2"):
        Tensor.zeros([2, 3], device=flex).unique(dim=2)
    z = Tensor.from_data(np.array([[1 + 1j, 2j]], np.complex64), device=flex)
    with pytest.raises(DTypeError, match="complex"):
        z.unique(dim=0)
