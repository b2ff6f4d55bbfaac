"""Complex tensors against numpy and PyTorch: creation, arithmetic, parts, errors and
gradients (PyTorch's convention), on every device that holds them."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import Device, DType, Tensor, TensorData
from ember.backend.dtype import promote
from ember.errors import DTypeError, ShapeError
from tests.fft.helpers import assert_complex_close, complex_dtype, holds_complex, numeric_grad, real_loss, tolerance


def _c(rng, shape, dtype=np.complex128):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


def test_dtypes_names_and_promotion():
    assert DType.parse("complex64") is DType.COMPLEX64 and DType.parse("cdouble") is DType.COMPLEX128
    assert DType.from_numpy(np.complex64) is DType.COMPLEX64 and ember.complex128 is DType.COMPLEX128
    assert DType.COMPLEX64.is_complex and DType.COMPLEX64.kind == "complex" and not DType.COMPLEX64.is_float
    assert DType.COMPLEX64.to_real() is DType.FLOAT32 and DType.FLOAT64.to_complex() is DType.COMPLEX128
    assert DType.COMPLEX64.itemsize == 8
    # PyTorch's rules: complex wins; complex64 meeting float64 widens to complex128.
    assert promote(DType.COMPLEX64, DType.FLOAT32) is DType.COMPLEX64
    assert promote(DType.COMPLEX64, DType.FLOAT64) is DType.COMPLEX128
    assert promote(DType.INT64, DType.COMPLEX64) is DType.COMPLEX64
    assert promote(DType.COMPLEX128, DType.COMPLEX64) is DType.COMPLEX128


def test_creation_and_read_out(device, rng):
    if not holds_complex(device):
        return
    a = _c(rng, (2, 3), np.complex64)
    t = Tensor.from_data(a, device=device)
    assert t.dtype is DType.COMPLEX64 and t.is_complex() and not t.is_float()
    assert_complex_close(t, a)
    assert Tensor.from_data([1j, 2.0], device=device).dtype is DType.COMPLEX64  # as torch.tensor
    wide = complex_dtype(device)
    assert Tensor.from_data(TensorData(a.astype(wide)), device=device).dtype is DType.from_numpy(wide)
    assert Tensor.full([2], 1 + 2j, device=device).tolist() == [1 + 2j, 1 + 2j]
    assert Tensor.from_data(np.array([3 - 4j], wide), device=device).item() == 3 - 4j
    with pytest.raises(DTypeError, match="complex"):
        Tensor.from_data(a, device=device, dtype="float32")


def test_special_values_are_classified_by_both_parts(device):
    """is_nan/is_inf/is_finite of complex values, against numpy: a value is NaN or
    infinite where either part is, finite where both parts are."""
    if not holds_complex(device):
        return
    inf, nan = np.inf, np.nan
    a = np.array([complex(inf, 0), complex(0, -inf), complex(nan, 0), complex(0, nan), 1 + 2j, complex(inf, nan)])
    t = Tensor.from_data(a.astype(np.complex64), device=device)
    assert t.is_finite().tolist() == np.isfinite(a).tolist()
    assert t.is_inf().tolist() == np.isinf(a).tolist()
    assert t.is_nan().tolist() == np.isnan(a).tolist()


def test_arithmetic_against_numpy(device, rng):
    if not holds_complex(device):
        return
    dtype = complex_dtype(device)
    tol = tolerance(dtype)
    a, b = _c(rng, (3, 4), dtype), _c(rng, (4,), dtype)
    x, y = Tensor.from_data(a, device=device), Tensor.from_data(b, device=device)
    r = rng.standard_normal((3, 4)).astype(np.float64 if dtype == np.complex128 else np.float32)
    real = Tensor.from_data(r, device=device)
    a, b = a.astype(np.complex128), b.astype(np.complex128)  # the oracle in float64
    for ours, expected in [
        (x + y, a + b),
        (x - y, a - b),
        (x * y, a * b),
        (x / y, a / b),
        (x * real, a * r),  # promotion of a real operand
        (x * 2.5 - 1, a * 2.5 - 1),
        (x * 1j, a * 1j),
        (real * (2 - 1j), r * (2 - 1j)),
        (1.0 - x, 1.0 - a),
        (-x, -a),
        (x.exp(), np.exp(a)),
        (x.log(), np.log(a)),
        (x.sqrt(), np.sqrt(a)),
        (x.sin(), np.sin(a)),
        (x.cosh(), np.cosh(a)),
        (x.tanh(), np.tanh(a)),
        (x.recip(), 1 / a),
        (x.matmul(y.reshape([4, 1])), a @ b.reshape(4, 1)),
        (x.sum(), np.array([a.sum()])),
        (x.mean_dim(1), a.mean(1, keepdims=True)),
        (x.cumsum(1), np.cumsum(a, 1)),
        (x.swap_dims(0, 1), a.T),
        (x[1:, ::2], a[1:, ::2]),
        (Tensor.cat([x, x], 0), np.concatenate([a, a])),
        (x.select(1, Tensor.from_ints([3, 0], device=device)), a[:, [3, 0]]),
        (x.mask_where(real.greater_elem(0), y), np.where(r > 0, b, a)),
    ]:
        assert_complex_close(ours, expected, **tol)
    assert (x == x).all().item() and not (x != x).any().item()


def test_parts_against_torch(device, rng, torch):
    if not holds_complex(device):
        return
    a = _c(rng, (5,), np.complex64)
    a[0] = 0
    x, tx = Tensor.from_data(a, device=device), torch.from_numpy(a)
    assert x.abs().dtype is DType.FLOAT32
    for ours, theirs in [
        (x.abs(), tx.abs()),
        (x.angle(), tx.angle()),
        (x.real(), tx.real),
        (x.imag(), tx.imag),
        (x.conj(), tx.conj().resolve_conj()),
        (ember.view_as_real(x), torch.view_as_real(tx)),
        (ember.complex(x.real(), x.imag()), torch.complex(tx.real, tx.imag)),
        (ember.polar(x.abs(), x.angle()), torch.polar(tx.abs(), tx.angle())),
        (ember.view_as_complex(ember.view_as_real(x)), tx),
    ]:
        assert_complex_close(ours, theirs.numpy(), rtol=1e-5, atol=1e-6)
    r = Tensor.from_data(np.array([-2.0, 0.0, 3.0], np.float32), device=device)
    assert r.angle().tolist() == pytest.approx([np.pi, 0.0, 0.0])
    assert r.real().tolist() == r.tolist() and r.conj().tolist() == r.tolist()


def test_errors_name_the_fix(flex):
    x = Tensor.from_data(np.array([1 + 1j, 2j]), device=flex)
    for op in (lambda: x < x, lambda: x.greater_elem(0), lambda: x.max(), lambda: x.argmax(0), lambda: x.floor()):
        with pytest.raises(DTypeError, match="complex"):
            op()
    with pytest.raises(DTypeError, match="needs a complex"):
        Tensor.from_floats([1.0], device=flex).imag()
    with pytest.raises(ShapeError, match="size 2"):
        ember.view_as_complex(Tensor.zeros([3], device=flex))
    with pytest.raises(DTypeError, match="does not fit float32"):
        Tensor.full([2], 1j, device=flex, dtype="float32")
    with pytest.raises(DTypeError, match="does not take complex"):
        Tensor.from_floats([1.0], device=flex).clamp(0, 1j)
    with pytest.raises(DTypeError, match="share a dtype"):
        ember.complex(Tensor.zeros([1], device=flex), Tensor.zeros([1], device=flex, dtype="float64"))


def _grad_case(z, w, r):
    """Every op the FFT code uses, and a matmul: a real-valued function of two complex
    inputs and a real one."""
    u = z * w + z.conj() / (w + 3) - ember.complex(r, r.mul_scalar(0.5))
    v = ember.polar(u.abs(), u.angle().mul_scalar(0.7)) + u.exp().mul_scalar(0.1)
    m = v.reshape([2, 3]).matmul(w.reshape([3, 2]).conj())
    return ember.view_as_real(m).sum_dim(-1).squeeze_dim(-1).add(m.imag()).add(v.real().sum())


def test_gradients_against_torch_and_finite_differences(rng, torch):
    a, b, c = _c(rng, (6,)), _c(rng, (6,)), rng.standard_normal(6)
    weights = rng.uniform(0.5, 1.5, (2, 2))
    device = Device.flex().autodiff()
    z, w, r = (Tensor.from_data(v, device=device).require_grad() for v in (a, b, c))
    grads = real_loss(_grad_case(z, w, r), weights).backward()

    tz, tw, tr = (torch.tensor(v, requires_grad=True) for v in (a, b, c))
    tu = tz * tw + tz.conj() / (tw + 3) - torch.complex(tr, tr * 0.5)
    tv = torch.polar(tu.abs(), tu.angle() * 0.7) + tu.exp() * 0.1
    tm = tv.reshape(2, 3) @ tw.reshape(3, 2).conj()
    tout = torch.view_as_real(tm).sum(-1) + tm.imag + tv.real.sum()
    (tout * torch.from_numpy(weights)).sum().backward()
    for ours, theirs in [(z, tz), (w, tw), (r, tr)]:
        assert_complex_close(ours.grad(grads), theirs.grad.numpy(), rtol=1e-9, atol=1e-10)

    flex = Device.flex()

    def loss(za):
        out = _grad_case(*(Tensor.from_data(v, device=flex) for v in (za, b, c)))
        return float(real_loss(out, weights).item())

    assert_complex_close(z.grad(grads), numeric_grad(loss, a), rtol=1e-5, atol=1e-6)


def test_gradients_on_every_autodiff_device(device, rng):
    if not device.is_autodiff() or not holds_complex(device):
        return
    a = _c(rng, (4,), np.complex64)
    z = Tensor.from_data(a, device=device).require_grad()
    grads = z.abs().mul(z.abs()).sum().backward()  # sum |z|^2: gradient 2 z in PyTorch's convention
    np.testing.assert_allclose(z.grad(grads).to_numpy(), 2 * a, rtol=1e-5)
