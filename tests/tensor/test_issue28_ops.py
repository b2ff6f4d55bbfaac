"""The ops of issue 28 against PyTorch on every device: searchsorted/bucketize, isin,
unique/unique_consecutive, histc, diff, tensor_split, slice_dim, put, masked_scatter,
cdist, gumbel_softmax, randint/randperm, the bool forms of sign/square/bitwise_not and
the logical ops, one_hot_fill's axis, volumetric and integer pooling, BCE's pos_weight."""

from __future__ import annotations

import numpy as np
import pytest

import ember.nn.functional as F
from ember import Tensor
from ember.errors import ShapeError, ValueRangeError
from ember.nn import AvgPool3dConfig, MaxPool3dConfig
from ember.nn.loss import BinaryCrossEntropyLossConfig


def _t(x, device):
    return Tensor.from_data(x, device=device)


def _same(actual, expected):
    a = actual.to_numpy()
    e = expected.numpy() if hasattr(expected, "numpy") else np.asarray(expected)
    assert a.shape == e.shape, (a.shape, e.shape)
    np.testing.assert_array_equal(a, e)


def test_searchsorted_bucketize_isin(device, torch, rng):
    seq = np.sort(rng.integers(0, 20, 15)).astype(np.float32)
    v = rng.integers(-2, 22, (3, 4)).astype(np.float32)
    for right in (False, True):
        _same(
            _t(seq, device).searchsorted(_t(v, device), right=right),
            torch.searchsorted(torch.tensor(seq), torch.tensor(v), right=right),
        )
    s2 = np.sort(rng.standard_normal((2, 3, 7)).astype(np.float32), -1)
    v2 = rng.standard_normal((2, 3, 5)).astype(np.float32)
    _same(
        _t(s2, device).searchsorted(_t(v2, device), side="right"),
        torch.searchsorted(torch.tensor(s2), torch.tensor(v2), side="right"),
    )
    unsorted = rng.standard_normal(9).astype(np.float32)
    order = np.argsort(unsorted)
    _same(
        _t(unsorted, device).searchsorted(_t(v2, device), sorter=_t(order, device)),
        torch.searchsorted(torch.tensor(unsorted), torch.tensor(v2), sorter=torch.tensor(order)),
    )
    _same(
        _t(seq, device).searchsorted(_t(v, device), out_int32=True),
        torch.searchsorted(torch.tensor(seq), torch.tensor(v), out_int32=True),
    )
    bounds = np.array([1.0, 3.0, 5.0], np.float32)
    x = np.array([[0.0, 1.0], [4.0, 6.0]], np.float32)
    for right in (False, True):
        _same(
            _t(x, device).bucketize(_t(bounds, device), right=right),
            torch.bucketize(torch.tensor(x), torch.tensor(bounds), right=right),
        )
    ints = rng.integers(0, 6, (4, 5))
    _same(
        _t(ints, device).isin(Tensor.from_ints([1, 3, 3], device=device)),
        torch.isin(torch.tensor(ints), torch.tensor([1, 3, 3])),
    )
    _same(_t(ints, device).isin(2, invert=True), torch.isin(torch.tensor(ints), 2, invert=True))
    with pytest.raises(ValueRangeError, match="side"):
        _t(seq, device).searchsorted(_t(v, device), side="middle")


@pytest.mark.parametrize("inverse,counts", [(False, False), (True, True), (True, False), (False, True)])
def test_unique_and_unique_consecutive(device, torch, rng, inverse, counts):
    x = rng.integers(0, 5, (4, 6))
    for ours, theirs in (
        (lambda t, **k: t.unique(**k), torch.unique),
        (lambda t, **k: t.unique_consecutive(**k), torch.unique_consecutive),
    ):
        a = ours(_t(x, device), return_inverse=inverse, return_counts=counts)
        e = theirs(torch.tensor(x), return_inverse=inverse, return_counts=counts)
        a, e = (a, e) if isinstance(a, tuple) else ((a,), (e,))
        assert len(a) == len(e)
        for got, want in zip(a, e):
            _same(got, want)
    floats = np.array([2.5, -1.0, 2.5, 0.0, -1.0], np.float32)
    _same(_t(floats, device).unique(), torch.unique(torch.tensor(floats)))


def test_histc(device, torch, rng):
    h = rng.standard_normal(200).astype(np.float32)
    _same(_t(h, device).histc(10, -1, 1), torch.histc(torch.tensor(h), 10, -1, 1))
    _same(_t(h, device).histc(7), torch.histc(torch.tensor(h), 7))


def test_diff_tensor_split_slice_dim(device, torch, rng):
    x = rng.standard_normal((3, 6)).astype(np.float32)
    tx = torch.tensor(x)
    np.testing.assert_allclose(_t(x, device).diff().to_numpy(), torch.diff(tx).numpy(), rtol=1e-6)
    np.testing.assert_allclose(_t(x, device).diff(2, dim=0).to_numpy(), torch.diff(tx, 2, dim=0).numpy(), rtol=1e-6)
    pre, app = np.ones((3, 1), np.float32), np.zeros((3, 2), np.float32)
    np.testing.assert_allclose(
        _t(x, device).diff(1, -1, _t(pre, device), _t(app, device)).to_numpy(),
        torch.diff(tx, 1, -1, torch.tensor(pre), torch.tensor(app)).numpy(),
        rtol=1e-6,
    )
    b = np.array([True, True, False, True])
    _same(_t(b, device).diff(), torch.diff(torch.tensor(b)))
    for spec in (3, 4, [1, 4], [2, -1, 9]):
        ours = _t(x, device).tensor_split(spec, dim=1)
        theirs = torch.tensor_split(tx, spec, dim=1)
        assert len(ours) == len(theirs)
        for a, e in zip(ours, theirs):
            _same(a, e)
    _same(_t(x, device).slice_dim(1, slice(1, None, 2)), tx[:, 1::2])
    _same(_t(x, device).slice_dim(0, (1, 3)), tx[1:3])
    _same(_t(x, device).slice_dim(1, -1), tx[:, -1:])
    _same(_t(x, device).slice_dim(1, range(0, 4)), tx[:, 0:4])


def test_put_and_masked_scatter_with_gradients(device, torch, rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    src = rng.standard_normal(5).astype(np.float32)
    index = np.array([0, -1, 5, 7, 2])
    for accumulate in (False, True):
        e = torch.tensor(x).put(torch.tensor(index), torch.tensor(src), accumulate=accumulate)
        np.testing.assert_allclose(
            _t(x, device).put(_t(index, device), _t(src, device), accumulate).to_numpy(), e.numpy(), rtol=1e-6
        )
    mask = rng.random((3, 4)) < 0.5
    source = rng.standard_normal((4, 4)).astype(np.float32)
    tx, ts = torch.tensor(x, requires_grad=True), torch.tensor(source, requires_grad=True)
    ty = tx.masked_scatter(torch.tensor(mask), ts)
    weights = np.arange(12, dtype=np.float32).reshape(3, 4)
    (ty * torch.tensor(weights)).sum().backward()
    ex, es = _t(x, device).require_grad(), _t(source, device).require_grad()
    ey = ex.masked_scatter(_t(mask, device), es)
    np.testing.assert_allclose(ey.to_numpy(), ty.detach().numpy(), rtol=1e-6)
    if device.is_autodiff():
        grads = ey.mul(_t(weights, device)).sum().backward()
        np.testing.assert_allclose(ex.grad(grads).to_numpy(), tx.grad.numpy())
        np.testing.assert_allclose(es.grad(grads).to_numpy(), ts.grad.numpy())


@pytest.mark.parametrize("p", [0.0, 1.0, 2.0, 3.0, float("inf")])
def test_cdist_with_gradients(device, torch, rng, p):
    for rows in (5, 30):  # 30 rows: the matmul form for p = 2
        a = rng.standard_normal((2, rows, 3)).astype(np.float32)
        b = rng.standard_normal((2, 7, 3)).astype(np.float32)
        b[0, 0] = a[0, 0]  # a zero distance
        ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
        tr = torch.cdist(ta, tb, p)
        ea, eb = _t(a, device).require_grad(), _t(b, device).require_grad()
        er = F.cdist(ea, eb, p)
        # atol: PyTorch's float32 matmul form leaves ~7e-4 at the zero distance
        np.testing.assert_allclose(er.to_numpy(), tr.detach().numpy(), rtol=1e-4, atol=1e-3)
        if device.is_autodiff() and p:
            tr.sum().backward()
            grads = er.sum().backward()
            np.testing.assert_allclose(ea.grad(grads).to_numpy(), ta.grad.numpy(), rtol=1e-3, atol=1e-3)
            np.testing.assert_allclose(eb.grad(grads).to_numpy(), tb.grad.numpy(), rtol=1e-3, atol=1e-3)


def test_gumbel_softmax_and_random_ints(device, rng):
    device.seed(3)
    logits = _t(rng.standard_normal((6, 5)).astype(np.float32), device).require_grad()
    soft = F.gumbel_softmax(logits, tau=0.7)
    np.testing.assert_allclose(soft.sum_dim(1).to_numpy(), np.ones((6, 1)), rtol=1e-5)
    hard = F.gumbel_softmax(logits, tau=0.7, hard=True, dim=0)
    h = hard.to_numpy()
    assert set(np.unique(h)) <= {0.0, 1.0} and np.array_equal(h.sum(0), np.ones(5))
    if device.is_autodiff():  # straight-through: the soft sample's gradient
        weights = _t(np.arange(30, dtype=np.float32).reshape(6, 5), device)
        g = logits.grad(hard.mul(weights).sum().backward())
        assert g is not None and np.abs(g.to_numpy()).sum() > 0
    draws = Tensor.randint(-3, 4, [4000], device=device).to_numpy()
    assert draws.dtype == np.int64 and set(np.unique(draws)) == set(range(-3, 4))
    assert abs(np.bincount(draws + 3).min() - 4000 / 7) < 120
    like = Tensor.zeros([2, 3], device=device, dtype="int32").randint_like(5)
    assert like.dtype.name == "INT32" and like.dims() == [2, 3] and like.to_numpy().min() >= 0
    perm = Tensor.randperm(50, device=device).to_numpy()
    assert sorted(perm.tolist()) == list(range(50)) and perm.tolist() != list(range(50))
    device.seed(3)
    again = Tensor.randint(-3, 4, [4000], device=device)
    device.seed(3)
    np.testing.assert_array_equal(again.to_numpy(), Tensor.randint(-3, 4, [4000], device=device).to_numpy())


def test_bool_elementwise_and_logical_ops(device, torch):
    b = np.array([True, False, True])
    tb = torch.tensor(b)
    _same(_t(b, device).sign(), torch.sign(tb))
    _same(_t(b, device).square(), torch.square(tb))
    _same(_t(b, device).bitwise_not(), torch.bitwise_not(tb))
    _same(_t(b, device).logical_not(), torch.logical_not(tb))
    x = np.array([0.0, 2.0, -1.0], np.float32)
    y = np.array([3, 0, 1])
    tx, ty = torch.tensor(x), torch.tensor(y)
    _same(_t(x, device).logical_not(), torch.logical_not(tx))
    _same(_t(x, device).logical_and(_t(y, device)), torch.logical_and(tx, ty))
    _same(_t(x, device).logical_or(_t(y, device)), torch.logical_or(tx, ty))
    _same(_t(x, device).logical_xor(_t(y, device)), torch.logical_xor(tx, ty))
    hot = Tensor.from_ints([0, 2], device=device).one_hot_fill(3, 5, -1, axis=0)
    _same(hot, [[5, -1], [-1, -1], [-1, 5]])


def test_pooling_3d_and_on_ints(device, torch, rng):
    x = rng.standard_normal((2, 3, 6, 7, 5)).astype(np.float32)
    tx = torch.tensor(x, requires_grad=True)
    ex = _t(x, device).require_grad()
    ty = torch.nn.functional.max_pool3d(tx, (2, 3, 2), stride=(2, 2, 1), padding=(1, 1, 0))
    ey = F.max_pool3d(ex, (2, 3, 2), stride=(2, 2, 1), padding=(1, 1, 0))
    np.testing.assert_allclose(ey.to_numpy(), ty.detach().numpy())
    ta = torch.nn.functional.avg_pool3d(tx, 2, padding=1, count_include_pad=False)
    ea = F.avg_pool3d(ex, 2, padding=1, count_include_pad=False)
    np.testing.assert_allclose(ea.to_numpy(), ta.detach().numpy(), rtol=1e-5, atol=1e-6)
    if device.is_autodiff():
        (ty.sum() + ta.sum()).backward()
        grads = ey.sum().add(ea.sum()).backward()
        np.testing.assert_allclose(ex.grad(grads).to_numpy(), tx.grad.numpy(), rtol=1e-5, atol=1e-6)
    assert MaxPool3dConfig(2).init()(_t(x, device)).dims() == [2, 3, 3, 3, 2]
    assert AvgPool3dConfig((1, 2, 2)).init()(_t(x, device)).dims() == [2, 3, 6, 3, 2]
    xi = rng.integers(-100, 100, (1, 2, 4, 6))
    _same(F.max_pool2d(_t(xi, device), 2), torch.nn.functional.max_pool2d(torch.tensor(xi), 2))
    _same(F.avg_pool2d(_t(xi, device), (2, 3)), torch.nn.functional.avg_pool2d(torch.tensor(xi), (2, 3)))


def test_bce_with_logits_pos_weight(device, torch, rng):
    x = (rng.standard_normal((4, 3)) * 5).astype(np.float32)
    y = (rng.random((4, 3)) < 0.5).astype(np.float32)
    pw = np.array([0.5, 2.0, 3.0], np.float32)
    tx = torch.tensor(x, requires_grad=True)
    tl = torch.nn.functional.binary_cross_entropy_with_logits(tx, torch.tensor(y), pos_weight=torch.tensor(pw))
    ex = _t(x, device).require_grad()
    el = F.binary_cross_entropy_with_logits(ex, _t(y, device), pos_weight=_t(pw, device))
    np.testing.assert_allclose(el.to_numpy(), tl.detach().numpy(), rtol=1e-5)
    module = BinaryCrossEntropyLossConfig(logits=True, pos_weight=[0.5, 2.0, 3.0]).init()
    np.testing.assert_allclose(module(_t(x, device), _t(y, device)).to_numpy().reshape(()), tl.item(), rtol=1e-5)
    if device.is_autodiff():
        tl.backward()
        np.testing.assert_allclose(ex.grad(el.backward()).to_numpy(), tx.grad.numpy(), rtol=1e-4, atol=1e-6)


def test_errors(flex):
    x = Tensor.from_floats([1.0, 2.0], device=flex)
    with pytest.raises(ShapeError, match="cdist"):
        F.cdist(x, x)
    with pytest.raises(ValueRangeError, match="low < high"):
        Tensor.randint(3, 3, [2], device=flex)
    with pytest.raises(ShapeError, match="put: source has 1 elements"):
        x.put(Tensor.from_ints([0, 1], device=flex), Tensor.from_floats([1.0], device=flex))
    with pytest.raises(ValueRangeError, match="diff: n must be"):
        x.diff(-1)


def test_int8_wraps_at_its_width(device, torch):
    x = np.array([100, 120, -128, 5, -7], np.int8)
    a, t = _t(x, device), torch.tensor(x)
    assert a.dtype.name == "INT8"
    _same(a.add(a), t + t)
    _same(a.mul(a), t * t)
    _same(a.neg(), -t)
    _same(
        a.sub(_t(np.array([1, -10, 1, 0, 0], np.int8), device)), t - torch.tensor([1, -10, 1, 0, 0], dtype=torch.int8)
    )
    _same(a.sum(), t.sum().reshape(1))  # widened to int64, as PyTorch
    _same(a.cast("float32"), t.float())
    _same(a.add(_t(np.array([1, 2, 3, 4, 5], np.uint8), device)), (t.int() + torch.tensor([1, 2, 3, 4, 5]).int()))


def test_uint64_on_flex_and_refused_on_cube(device):
    x = np.array([2**64 - 1, 5, 0], np.uint64)
    if device.backend_name == "cube":
        from ember.errors import DTypeError

        with pytest.raises(DTypeError, match="uint64 is not available on the GPU"):
            _t(x, device)
        return
    u = _t(x, device)
    assert u.dtype.name == "UINT64"
    one = _t(np.ones(3, np.uint64), device)
    np.testing.assert_array_equal(u.add(one).to_numpy(), x + np.uint64(1))  # wraps to 0
    np.testing.assert_array_equal(u.max().to_numpy(), [2**64 - 1])
    np.testing.assert_array_equal(u.lower_elem(6).to_numpy(), [False, True, True])
    from ember.errors import DTypeError

    with pytest.raises(DTypeError, match="uint64 does not promote"):
        u.add(Tensor.from_ints([1, 2, 3], device=device))
