"""Gradients against torch.autograd on random shapes (skipped without torch,
required in CI)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ember import Tensor
from ember.tensor import activation as act
from tests.conftest import import_torch, parity_device

pytestmark = [pytest.mark.torch, pytest.mark.filterwarnings("ignore:var.*degrees of freedom")]
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
AD = parity_device()  # flex+autodiff, or EMBER_PARITY_DEVICE (cuda+autodiff on a GPU machine)

BINARY = {
    "add": (lambda a, b: a.add(b), lambda a, b: a + b),
    "sub": (lambda a, b: a.sub(b), lambda a, b: a - b),
    "mul": (lambda a, b: a.mul(b), lambda a, b: a * b),
    "div": (lambda a, b: a.div(b.abs().add_scalar(0.5)), lambda a, b: a / (b.abs() + 0.5)),
    "maximum": (lambda a, b: a.maximum(b), lambda a, b: a.maximum(b)),
    "atan2": (lambda a, b: a.atan2(b), lambda a, b: a.atan2(b)),
}

UNARY = {
    "exp": (lambda x: x.exp(), lambda x: x.exp()),
    "tanh": (lambda x: x.tanh(), lambda x: x.tanh()),
    "sigmoid": (act.sigmoid, lambda x: x.sigmoid()),
    "gelu": (act.gelu, lambda x: __import__("torch").nn.functional.gelu(x)),
    "softmax": (lambda x: act.softmax(x, -1), lambda x: x.softmax(-1)),
    "log_softmax": (lambda x: act.log_softmax(x, 0), lambda x: x.log_softmax(0)),
    "sum_dim": (lambda x: x.sum_dim(-1), lambda x: x.sum(-1, keepdim=True)),
    "mean": (lambda x: x.mean(), lambda x: x.mean().reshape(1)),
    "var": (lambda x: x.var(1), lambda x: x.var(1, keepdim=True)),
    "cumsum": (lambda x: x.cumsum(0), lambda x: x.cumsum(0)),
    "flip_transpose": (lambda x: x.flip([0]).transpose(), lambda x: x.flip(0).transpose(-1, -2)),
    "sort": (lambda x: x.sort(-1), lambda x: x.sort(-1).values),
}


def _run_both(torch, ours, theirs, arrays):
    tensors = [Tensor.from_data(a, device=AD).require_grad() for a in arrays]
    torch_tensors = [torch.tensor(a, requires_grad=True) for a in arrays]
    out = ours(*tensors)
    ref = theirs(*torch_tensors)
    np.testing.assert_allclose(out.to_numpy(), ref.detach().numpy(), rtol=1e-10, atol=1e-12)
    weights = np.random.default_rng(0).uniform(0.5, 1.5, size=tuple(out.dims()))
    grads = out.mul(Tensor.from_data(weights, device=AD)).sum().backward()
    (ref * torch.tensor(weights)).sum().backward()
    for t, tt in zip(tensors, torch_tensors):
        g = t.grad(grads)
        expected = tt.grad.numpy() if tt.grad is not None else np.zeros(tt.shape)
        np.testing.assert_allclose(g.to_numpy() if g is not None else 0.0, expected, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("name", sorted(BINARY))
@SETTINGS
@given(shapes=hnp.mutually_broadcastable_shapes(num_shapes=2, min_dims=1, max_dims=3, max_side=4), data=st.data())
def test_binary_gradients_match_torch(name, shapes, data):
    torch = import_torch()
    # No tiny magnitudes: squares of ~1e-158 are subnormal, where libraries legitimately
    # differ (flush to zero or not) by orders of magnitude in atan2's gradient.
    elements = st.one_of(st.just(0.0), st.floats(1e-3, 3), st.floats(-3, -1e-3))
    a = data.draw(hnp.arrays(np.float64, shapes.input_shapes[0], elements=elements))
    b = data.draw(hnp.arrays(np.float64, shapes.input_shapes[1], elements=elements))
    if name == "maximum":
        b = b + 1e-3 * (a == b)  # ties split the gradient; covered by a finite-difference test
    _run_both(torch, *BINARY[name], [a, b])


@pytest.mark.parametrize("name", sorted(UNARY))
@SETTINGS
@given(
    x=hnp.arrays(
        np.float64,
        hnp.array_shapes(min_dims=2, max_dims=3, max_side=5),
        elements=st.floats(-3, 3, allow_nan=False, allow_subnormal=False),
    )
)
def test_unary_gradients_match_torch(name, x):
    torch = import_torch()
    if name == "sort":
        x = x + np.arange(x.size).reshape(x.shape) * 1e-6  # distinct values: a unique sort order
    _run_both(torch, *UNARY[name], [x])


@SETTINGS
@given(b=st.integers(1, 3), m=st.integers(1, 5), k=st.integers(1, 5), n=st.integers(1, 5), batch_left=st.booleans())
def test_matmul_gradients_match_torch(b, m, k, n, batch_left):
    torch = import_torch()
    rng = np.random.default_rng(b * 100 + m * 10 + k)
    left = rng.standard_normal((b, m, k) if batch_left else (m, k))
    right = rng.standard_normal((k, n) if batch_left else (b, k, n))
    _run_both(torch, lambda x, y: x.matmul(y), lambda x, y: x @ y, [left, right])


def test_indexing_gradients_match_torch():
    torch = import_torch()
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 5))
    idx = rng.integers(0, 5, size=(4, 7))
    sel = np.array([3, 0, 3, 1])
    _run_both(
        torch,
        lambda t: (
            t.gather(1, Tensor.from_data(idx, device=AD))
            .sum_dim(1)
            .add(t.select(1, Tensor.from_data(sel, device=AD)).sum_dim(1))
        ),
        lambda t: (
            t.gather(1, torch.tensor(idx)).sum(1, keepdim=True)
            + t.index_select(1, torch.tensor(sel)).sum(1, keepdim=True)
        ),
        [x],
    )
