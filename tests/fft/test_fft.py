"""``ember.fft`` against ``torch.fft``: values, dtypes, norm modes, odd and even lengths,
cropping and padding, batched shapes, gradients (against PyTorch and central
differences in float64), on every device that holds complex tensors."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import Device, DType, Tensor
from ember.errors import DTypeError, ShapeError, ValueRangeError
from tests.fft.helpers import assert_complex_close, holds_complex, numeric_grad, real_loss

ONE_D = ["fft", "ifft", "rfft", "irfft", "hfft", "ihfft"]
REAL_INPUT = {"rfft", "ihfft"}


def _input(rng, name, shape, dtype=np.float64):
    x = rng.standard_normal(shape)
    if name in REAL_INPUT:
        return x.astype(dtype)
    complex_dtype = np.complex128 if dtype == np.float64 else np.complex64
    return (x + 1j * rng.standard_normal(shape)).astype(complex_dtype)


@pytest.mark.parametrize("name", ONE_D)
@pytest.mark.parametrize("n", [None, 7, 8, 3])
@pytest.mark.parametrize("norm", [None, "ortho", "forward"])
def test_one_d_against_torch(name, n, norm, rng, torch):
    a = _input(rng, name, (2, 6))
    ours = getattr(ember.fft, name)(Tensor.from_data(a), n=n, dim=-1, norm=norm)
    theirs = getattr(torch.fft, name)(torch.from_numpy(a), n=n, dim=-1, norm=norm).resolve_conj()
    assert ours.dtype is DType.from_numpy(theirs.numpy().dtype)
    assert_complex_close(ours, theirs.numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", ONE_D)
@pytest.mark.parametrize("n", [None, 8, 6])
def test_float32_gives_complex64_on_every_device(name, n, device, rng, torch):
    """Power-of-two and other lengths (radix-2 and Bluestein on cube), crops and pads."""
    if not holds_complex(device):
        return
    a = _input(rng, name, (5, 3), np.float32)
    ours = getattr(ember.fft, name)(Tensor.from_data(a, device=device), n=n, dim=0, norm="ortho")
    theirs = getattr(torch.fft, name)(torch.from_numpy(a), n=n, dim=0, norm="ortho").resolve_conj()
    assert ours.dtype is DType.from_numpy(theirs.numpy().dtype)
    assert_complex_close(ours, theirs.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("name", "kwargs"), [("fftn", {}), ("rfft2", {"s": (6, 8)}), ("irfftn", {"s": (3, 4, 7)})])
def test_n_d_on_every_device(name, kwargs, device, rng, torch):
    if not holds_complex(device):
        return
    a = _input(rng, "rfft" if name.startswith("rfft") else "fft", (3, 4, 5), np.float32)
    ours = getattr(ember.fft, name)(Tensor.from_data(a, device=device), **kwargs)
    theirs = getattr(torch.fft, name)(torch.from_numpy(a), **kwargs)
    assert_complex_close(ours, theirs.numpy(), rtol=1e-4, atol=1e-4)


@pytest.mark.slow
@pytest.mark.parametrize("n", [2**14, 3 * 5 * 7 * 11])
def test_long_transforms_keep_float32_accuracy(n, device, rng):
    """A long radix-2 and a long Bluestein transform stay within float32's rounding."""
    if not holds_complex(device):
        return
    a = rng.standard_normal((2, n)).astype(np.float32)
    ours = ember.fft.rfft(Tensor.from_data(a, device=device)).to_numpy()
    expected = np.fft.rfft(a.astype(np.float64))
    assert np.abs(ours - expected).max() / np.abs(expected).max() < 2e-6


@pytest.mark.parametrize(
    ("name", "kwargs"),
    [
        ("fft2", {}),
        ("ifft2", {"s": (3, 5)}),
        ("rfft2", {"norm": "ortho"}),
        ("irfft2", {"s": (4, 7)}),
        ("fftn", {"dim": (0, 2)}),
        ("ifftn", {"s": (2, 3), "norm": "forward"}),
        ("rfftn", {}),
        ("rfftn", {"s": (5, 6), "dim": (2, 0)}),
        ("irfftn", {"dim": (1, 2)}),
        ("irfftn", {"s": (3, 4, 5)}),
    ],
)
def test_n_d_against_torch(name, kwargs, rng, torch):
    real = name.startswith("rfft")
    a = _input(rng, "rfft" if real else "fft", (3, 4, 5))
    ours = getattr(ember.fft, name)(Tensor.from_data(a), **kwargs)
    theirs = getattr(torch.fft, name)(torch.from_numpy(a), **kwargs)
    assert_complex_close(ours, theirs.numpy(), rtol=1e-10, atol=1e-12)


def test_shifts_and_frequencies(rng, torch):
    a = rng.standard_normal((4, 5))
    x, t = Tensor.from_data(a), torch.from_numpy(a)
    for dim in (None, 1, (0, 1)):
        np.testing.assert_array_equal(ember.fft.fftshift(x, dim).to_numpy(), torch.fft.fftshift(t, dim).numpy())
        np.testing.assert_array_equal(ember.fft.ifftshift(x, dim).to_numpy(), torch.fft.ifftshift(t, dim).numpy())
    for n in (1, 6, 7):
        np.testing.assert_allclose(ember.fft.fftfreq(n, 0.5).to_numpy(), torch.fft.fftfreq(n, 0.5).numpy())
        np.testing.assert_allclose(ember.fft.rfftfreq(n).to_numpy(), torch.fft.rfftfreq(n).numpy())
    assert ember.fft.fftfreq(4, dtype="float64").dtype is DType.FLOAT64


def test_int_and_half_inputs_as_torch(flex):
    ints = Tensor.from_data(np.arange(6), device=flex)
    assert ember.fft.fft(ints).dtype is DType.COMPLEX64 and ember.fft.rfft(ints).dtype is DType.COMPLEX64
    half = Tensor.from_data(np.arange(6, dtype=np.float16), device=flex)
    assert_complex_close(ember.fft.rfft(half), np.fft.rfft(np.arange(6.0)), rtol=1e-3, atol=1e-3)


def test_errors(flex):
    x = Tensor.from_floats([1.0, 2.0, 3.0], device=flex)
    with pytest.raises(ValueRangeError, match="norm"):
        ember.fft.fft(x, norm="unitary")
    with pytest.raises(DTypeError, match="real input"):
        ember.fft.rfft(ember.fft.fft(x))
    with pytest.raises(ValueRangeError, match=">= 1"):
        ember.fft.fft(x, n=0)
    with pytest.raises(ShapeError, match="distinct"):
        ember.fft.fftn(x.reshape([1, 3]), dim=(1, -1))
    with pytest.raises(ShapeError, match="one size per dim"):
        ember.fft.fftn(x.reshape([1, 3]), s=(2, 2), dim=(1,))
    with pytest.raises(ShapeError, match="rank >= 1"):
        ember.fft.fft(Tensor.from_floats(1.0, device=flex))
    with pytest.raises(ShapeError, match="needs >= 1"):
        ember.fft.irfft(ember.fft.rfft(x, n=1))  # 2 * (1 - 1) = 0 output points


GRAD_CASES = [
    ("fft", {"n": 5}),
    ("ifft", {"n": 8, "norm": "ortho"}),
    ("rfft", {}),
    ("rfft", {"n": 9, "norm": "forward"}),
    ("irfft", {}),
    ("irfft", {"n": 7}),
    ("irfft", {"n": 12, "norm": "ortho"}),
    ("hfft", {"n": 9}),
    ("ihfft", {"norm": "forward"}),
    ("fft2", {"s": (3, 4)}),
    ("rfft2", {"norm": "ortho"}),
    ("irfft2", {"s": (4, 5)}),
    ("rfftn", {"s": (2, 5), "dim": (0, 1)}),
    ("irfftn", {"dim": (0, 1), "norm": "forward"}),
    ("ifft2", {"s": (4, 5), "norm": "ortho"}),
    ("fftn", {"dim": (0,)}),
    ("ifftn", {"s": (2, 7)}),
    ("fftshift", {}),
    ("ifftshift", {"dim": 1}),
]
#: ember.fft's functions that make tensors from sizes (nothing to differentiate).
NOT_DIFFERENTIABLE = {"fftfreq", "rfftfreq"}


def test_every_transform_has_a_gradient_case():
    assert set(ember.fft.__all__) - NOT_DIFFERENTIABLE == {name for name, _ in GRAD_CASES}


@pytest.mark.parametrize(("name", "kwargs"), GRAD_CASES)
def test_gradients_against_torch_and_finite_differences(name, kwargs, rng, torch):
    real = name in REAL_INPUT or name.startswith("rfft")
    a = _input(rng, "rfft" if real else "fft", (3, 6))
    x = Tensor.from_data(a, device=Device.flex().autodiff()).require_grad()
    out = getattr(ember.fft, name)(x, **kwargs)
    weights = rng.uniform(0.5, 1.5, tuple(out.dims()))
    grad = x.grad(real_loss(out, weights).backward())

    t = torch.tensor(a, requires_grad=True)
    tout = getattr(torch.fft, name)(t, **kwargs)
    tw = torch.from_numpy(weights)
    tloss = (tout.real * tw).sum() + (tout.imag * tw * tw).sum() if tout.is_complex() else (tout * tw).sum()
    tloss.backward()
    assert_complex_close(grad, t.grad.numpy(), rtol=1e-9, atol=1e-11)

    def loss(values):
        return float(real_loss(getattr(ember.fft, name)(Tensor.from_data(values), **kwargs), weights).item())

    assert_complex_close(grad, numeric_grad(loss, a), rtol=1e-6, atol=1e-6)


def test_gradients_on_every_autodiff_device(device, rng):
    if not device.is_autodiff() or not holds_complex(device):
        return
    a = rng.standard_normal((2, 8)).astype(np.float32)
    x = Tensor.from_data(a, device=device).require_grad()
    y = ember.fft.irfft(ember.fft.rfft(x, norm="ortho").mul_scalar(2.0), n=8, norm="ortho")
    grad = x.grad(y.sum().backward())
    np.testing.assert_allclose(grad.to_numpy(), np.full((2, 8), 2.0), rtol=1e-5)


def test_second_order_through_rfft(rng, torch):
    a = rng.standard_normal(6)
    x = Tensor.from_data(a, device=Device.flex().autodiff()).require_grad()
    spec = ember.fft.rfft(x)
    energy = spec.abs().mul(spec.abs()).sum()
    g = x.grad(energy.backward(create_graph=True))
    second = x.grad(g.mul(g).sum().backward())
    t = torch.tensor(a, requires_grad=True)
    ts = torch.fft.rfft(t)
    (tg,) = torch.autograd.grad((ts.abs() ** 2).sum(), t, create_graph=True)
    (tg2,) = torch.autograd.grad((tg * tg).sum(), t)
    np.testing.assert_allclose(g.to_numpy(), tg.detach().numpy(), rtol=1e-9)
    np.testing.assert_allclose(second.to_numpy(), tg2.numpy(), rtol=1e-9)


def test_compiled_step_traces_the_transforms(rng):
    """ember.compile records the FFTs in its graph (no eager fallback) and its runs
    match eager ones, gradients included."""
    import warnings

    from ember.capture.compiled import CompileWarning

    device = Device.flex().autodiff()

    def step(x):
        x = x.require_grad()
        spec = ember.fft.rfft(x * 2.0)
        y = ember.fft.irfft(spec * (1 + 0.5j), n=8)
        loss = (y * y).sum() + spec.abs().sum()
        return loss.detach(), x.grad(loss.backward())

    compiled = ember.compile(step)
    x = Tensor.from_data(rng.standard_normal(8).astype(np.float32), device=device)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileWarning)
        for _ in range(2):
            (loss, grad), (eager_loss, eager_grad) = compiled(x), step(x)
            np.testing.assert_allclose(loss.to_numpy(), eager_loss.to_numpy(), rtol=1e-6)
            np.testing.assert_allclose(grad.to_numpy(), eager_grad.to_numpy(), rtol=1e-5, atol=1e-6)
