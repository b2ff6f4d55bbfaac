"""``ember.stft``/``ember.istft`` and the window functions against PyTorch."""

from __future__ import annotations

import numpy as np
import pytest

import ember
from ember import Device, DType, Tensor
from ember.errors import ShapeError, ValueRangeError
from tests.fft.helpers import assert_complex_close, holds_complex


@pytest.mark.parametrize("name", ["hann_window", "hamming_window", "blackman_window", "kaiser_window"])
@pytest.mark.parametrize("length", [0, 1, 2, 7, 16])
@pytest.mark.parametrize("periodic", [True, False])
def test_windows_against_torch(name, length, periodic, torch):
    ours = getattr(ember, name)(length, periodic, dtype="float64")
    theirs = getattr(torch, name)(length, periodic, dtype=torch.float64)
    np.testing.assert_allclose(ours.to_numpy(), theirs.numpy(), rtol=1e-12, atol=1e-12)
    assert getattr(ember, name)(4).dtype is DType.FLOAT32


STFT_CASES = [
    {"n_fft": 16, "hop_length": 4},
    {"n_fft": 15, "hop_length": 5, "center": False},
    {"n_fft": 16, "hop_length": 3, "win_length": 10, "pad_mode": "constant"},
    {"n_fft": 12, "normalized": True, "onesided": False},
    {"n_fft": 8, "hop_length": 2, "pad_mode": "replicate", "window": None},
    # the framing's paths: one gather (many pieces per frame, circular padding), hop-sized
    # blocks (the last one past the signal, a hop longer than a frame)
    {"n_fft": 16, "hop_length": 1},
    {"n_fft": 16, "hop_length": 6, "pad_mode": "circular"},
    {"n_fft": 13, "hop_length": 6, "center": False},
    {"n_fft": 10, "hop_length": 13},
]


@pytest.mark.parametrize("case", STFT_CASES)
@pytest.mark.parametrize("batched", [False, True])
@pytest.mark.filterwarnings("ignore:A window was not provided")
def test_stft_against_torch(case, batched, rng, torch):
    a = rng.standard_normal((2, 50) if batched else (50,))
    kwargs = dict(case)
    use_window = kwargs.pop("window", True)
    win = kwargs.get("win_length", kwargs["n_fft"])
    ours = ember.stft(
        Tensor.from_data(a), window=ember.hann_window(win, dtype="float64") if use_window else None, **kwargs
    )
    theirs = torch.stft(
        torch.from_numpy(a),
        window=torch.hann_window(win, dtype=torch.float64) if use_window else None,
        return_complex=True,
        **kwargs,
    )
    assert_complex_close(ours, theirs.numpy(), rtol=1e-10, atol=1e-12)


def test_stft_return_complex_false_gives_the_real_view(rng, torch):
    a = rng.standard_normal(40).astype(np.float32)
    ours = ember.stft(Tensor.from_data(a), 8, return_complex=False)
    theirs = torch.view_as_real(torch.stft(torch.from_numpy(a), 8, return_complex=True))
    np.testing.assert_allclose(ours.to_numpy(), theirs.numpy(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "case",
    [
        {"n_fft": 16, "hop_length": 4},
        {"n_fft": 16, "hop_length": 4, "center": False, "length": 40, "window": "hamming_window"},
        {"n_fft": 15, "hop_length": 5, "normalized": True, "length": 57},
        {"n_fft": 12, "hop_length": 3, "win_length": 8},
    ],
)
def test_istft_against_torch_and_round_trip(case, rng, torch):
    a = rng.standard_normal((2, 60))
    kwargs = dict(case)
    length = kwargs.pop("length", None)
    kind = kwargs.pop("window", "hann_window")  # hann's zero first sample fails NOLA without centring
    win = kwargs.get("win_length", kwargs["n_fft"])
    window, twindow = getattr(ember, kind)(win, dtype="float64"), getattr(torch, kind)(win, dtype=torch.float64)
    spec = ember.stft(Tensor.from_data(a), window=window, **kwargs)
    tspec = torch.stft(torch.from_numpy(a), window=twindow, return_complex=True, **kwargs)
    ours = ember.istft(spec, window=window, length=length, **kwargs)
    theirs = torch.istft(tspec, window=twindow, length=length, **kwargs)
    np.testing.assert_allclose(ours.to_numpy(), theirs.numpy(), rtol=1e-9, atol=1e-10)
    if kwargs.get("center", True):  # the round trip is exact where the frames cover the signal
        n = ours.shape[-1]
        np.testing.assert_allclose(ours.to_numpy(), a[:, :n], rtol=1e-9, atol=1e-10)


def test_round_trip_on_every_device(device, rng):
    if not holds_complex(device):
        return
    a = rng.standard_normal(64).astype(np.float32)
    window = ember.hann_window(16, device=device)
    spec = ember.stft(Tensor.from_data(a, device=device), 16, 4, window=window)
    y = ember.istft(spec, 16, 4, window=window, length=64)
    np.testing.assert_allclose(y.to_numpy(), a, rtol=1e-4, atol=1e-5)


def test_stft_gradients_against_torch(rng, torch):
    a = rng.standard_normal(40)
    x = Tensor.from_data(a, device=Device.flex().autodiff()).require_grad()
    spec = ember.stft(x, 10, 3, window=ember.hann_window(10, dtype="float64"))
    weights = rng.uniform(0.5, 1.5, tuple(spec.dims()))
    w = Tensor.from_data(weights, device=x.device)
    back = ember.istft(spec.mul(w), 10, 3, window=ember.hann_window(10, dtype="float64"), length=40)
    loss = spec.abs().mul(w).sum().add(back.mul(back).sum())
    grad = x.grad(loss.backward())

    t = torch.tensor(a, requires_grad=True)
    tw = torch.hann_window(10, dtype=torch.float64)
    ts = torch.stft(t, 10, 3, window=tw, return_complex=True)
    tb = torch.istft(ts * torch.from_numpy(weights), 10, 3, window=tw, length=40)
    ((ts.abs() * torch.from_numpy(weights)).sum() + (tb * tb).sum()).backward()
    np.testing.assert_allclose(grad.to_numpy(), t.grad.numpy(), rtol=1e-8, atol=1e-10)


def test_errors(flex):
    x = Tensor.from_floats([0.0] * 20, device=flex)
    with pytest.raises(ValueRangeError, match="win_length"):
        ember.stft(x, 8, win_length=9)
    with pytest.raises(ShapeError, match="window must be"):
        ember.stft(x, 8, window=ember.hann_window(6))
    with pytest.raises(ShapeError, match="reflect"):
        ember.stft(Tensor.from_floats([1.0, 2.0], device=flex), 8)
    with pytest.raises(ValueRangeError, match="pad_mode"):
        ember.stft(x, 8, pad_mode="wrap")
    spec = ember.stft(x, 8, 4, window=ember.hann_window(8, periodic=False))
    with pytest.raises(ValueRangeError, match="NOLA"):
        ember.istft(spec, 8, 4, window=ember.hann_window(8, periodic=False), center=False)
    with pytest.raises(ShapeError, match="frequency bins"):
        ember.istft(spec, 10)


@pytest.mark.parametrize("pad_mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize(("n_fft", "hop"), [(16, 4), (13, 6), (16, 1), (10, 13)])
def test_flex_framing_kernel_matches_its_composite(rng, pad_mode, n_fft, hop):
    """Flex's ``stft_frames`` (a strided view times the window) and the composite the
    other devices run (``ember.backend.composites``, over the protocol: hop-sized
    blocks or one gather) give the same frames, for real and complex signals."""
    from ember.backend.composites import COMPOSITES
    from ember.backend.ops import FusedOp
    from ember.tensor.fused import composite_of

    assert composite_of(FusedOp.STFT_FRAMES) is COMPOSITES["stft_frames"]  # not a tensor-level composite
    real = rng.standard_normal((2, 50))
    for signal in (real, real + 1j * rng.standard_normal((2, 50)), real[0].astype(np.float32)):
        x = Tensor.from_data(signal)
        backend = x.device.backend
        for window in (ember.hann_window(n_fft, dtype="float64"), None):
            prim = None if window is None else window.primitive
            kernel = backend.stft_frames(x.primitive, prim, n_fft, hop, n_fft // 2, pad_mode)
            expected = COMPOSITES["stft_frames"](backend, x.primitive, prim, n_fft, hop, n_fft // 2, pad_mode)
            assert kernel.dtype == expected.dtype
            np.testing.assert_array_equal(kernel, expected)
