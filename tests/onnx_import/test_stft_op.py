"""STFT against onnxruntime: real and complex signals, with and without a window,
one-sided or full spectra; the window's gradient on an autodiff device."""

from __future__ import annotations

import numpy as np
import pytest

import ember.onnx
from ember import Device, Tensor
from tests.onnx_import.helpers import import_onnx, onnx_model, run_ort

BATCH, LENGTH, FRAME, STEP = 2, 64, 16, 6


def stft_model(onnx, channels, windowed, onesided):
    TP, helper = onnx.TensorProto, onnx.helper
    inputs = [("X", TP.FLOAT, [BATCH, LENGTH, channels])]
    names = ["X", "step"]
    nodes = [helper.make_node("Constant", [], ["step"], value=helper.make_tensor("s", TP.INT64, [], [STEP]))]
    if windowed:
        inputs.append(("W", TP.FLOAT, [FRAME]))
        names += ["W"]
    else:
        nodes.append(helper.make_node("Constant", [], ["len"], value=helper.make_tensor("l", TP.INT64, [], [FRAME])))
        names += ["", "len"]
    nodes.append(helper.make_node("STFT", names, ["Y"], onesided=int(onesided)))
    bins = FRAME // 2 + 1 if onesided else FRAME
    frames = (LENGTH - FRAME) // STEP + 1
    return onnx_model(onnx, nodes, inputs, [("Y", TP.FLOAT, [BATCH, frames, bins, 2])], opset=17)


@pytest.mark.parametrize("channels,onesided", [(1, True), (1, False), (2, False)])
@pytest.mark.parametrize("windowed", [True, False])
def test_stft_matches_onnxruntime(rng, channels, onesided, windowed):
    onnx, ort = import_onnx(), import_onnx("onnxruntime")
    data = stft_model(onnx, channels, windowed, onesided)
    feeds = [rng.standard_normal((BATCH, LENGTH, channels)).astype(np.float32)]
    if windowed:
        feeds.append(np.hanning(FRAME).astype(np.float32))
    (expected,) = run_ort(ort, data, *feeds)
    got = ember.onnx.load(data)(*[Tensor.from_data(f) for f in feeds])
    np.testing.assert_allclose(got.to_numpy(), expected, rtol=1e-4, atol=1e-4)


def test_the_windows_gradient_matches_finite_differences(rng):
    onnx = import_onnx()
    data = stft_model(onnx, 1, True, True)
    x = rng.standard_normal((BATCH, LENGTH, 1))
    w = np.hanning(FRAME)
    device = Device.flex().autodiff()
    model = ember.onnx.load(data, device=device)

    def power(window):
        y = model(Tensor.from_data(x, device=device, dtype="float64"), window)
        return (y * y).sum()

    we = Tensor.from_data(w, device=device, dtype="float64").require_grad()
    grad = we.grad(power(we).backward()).to_numpy()
    eps, i = 0.25, 5  # the power is quadratic in the window: central differences are exact
    plus, minus = w.copy(), w.copy()
    plus[i] += eps
    minus[i] -= eps
    numeric = (
        power(Tensor.from_data(plus, device=device, dtype="float64")).into_scalar()
        - power(Tensor.from_data(minus, device=device, dtype="float64")).into_scalar()
    ) / (2 * eps)
    np.testing.assert_allclose(grad[i], numeric, rtol=1e-4)
