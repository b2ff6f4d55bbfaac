"""Operators of issue 32's list built on ember's existing ops: CumProd, Upsample, Compress,
Unique, LpPool and 3-d MaxPool/AveragePool, against onnxruntime (ONNX's reference
evaluator for CumProd, newer than onnxruntime), with gradients through the data-dependent
ones on an autodiff device."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import ember.onnx
from ember import Device, Tensor
from tests.onnx_import.helpers import onnx_model, run_ort
from tests.onnx_import.test_spec import reference, run_ember

F32, I64 = 1, 7


def node(onnx: Any, op: str, inputs: list[str], outputs: list[str], **attrs: Any) -> Any:
    return onnx.helper.make_node(op, inputs, outputs, **attrs)


@pytest.mark.parametrize(("exclusive", "reverse"), [(0, 0), (1, 0), (0, 1), (1, 1)])
def test_cum_prod(onnx, rng, exclusive, reverse):
    x = rng.uniform(0.5, 1.5, (3, 4)).astype(np.float32)
    x[1, 2] = 0
    axis = onnx.numpy_helper.from_array(np.array(1, np.int64), "axis")
    data = onnx_model(
        onnx,
        [node(onnx, "CumProd", ["x", "axis"], ["y"], exclusive=exclusive, reverse=reverse)],
        [("x", F32, [3, 4])],
        [("y", F32, [3, 4])],
        [axis],
        opset=26,
    )
    with pytest.warns(UserWarning, match="opset 26"):
        (got,) = run_ember(data, x)
    np.testing.assert_allclose(got, reference(onnx, data, x)[0], rtol=1e-6)


@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_upsample(onnx, ort, rng, mode):
    x = rng.standard_normal((1, 2, 3, 4)).astype(np.float32)
    scales = onnx.numpy_helper.from_array(np.array([1, 1, 2, 1.5], np.float32), "scales")
    data = onnx_model(
        onnx,
        [node(onnx, "Upsample", ["x", "scales"], ["y"], mode=mode)],
        [("x", F32, [1, 2, 3, 4])],
        [("y", F32, None)],
        [scales],
        opset=9,
    )
    (got,) = run_ember(data, x)
    np.testing.assert_allclose(got, run_ort(ort, data, x)[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_compress(onnx, ort, rng, axis):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    cond = np.array([True, False, True], bool)
    attrs = {} if axis is None else {"axis": axis}
    data = onnx_model(
        onnx,
        [node(onnx, "Compress", ["x", "c"], ["y"], **attrs)],
        [("x", F32, [3, 4]), ("c", 9, [3])],
        [("y", F32, None)],
    )
    (got,) = run_ember(data, x, cond)
    np.testing.assert_array_equal(got, run_ort(ort, data, x, cond)[0])
    # Differentiable with respect to the data: the gradient is one where a value was kept.
    device = Device.flex().autodiff()
    model = ember.onnx.load(data, device)
    xe = Tensor.from_data(x, device=device).require_grad()
    grads = model(xe, Tensor.from_data(cond, device=device)).sum().backward()
    kept = np.zeros_like(x)
    chosen = np.nonzero(cond)[0]
    if axis is None:
        kept.reshape(-1)[chosen] = 1  # the flattened positions
    elif axis == 0:
        kept[chosen, :] = 1
    else:
        kept[:, chosen] = 1
    np.testing.assert_array_equal(xe.grad(grads).to_numpy(), kept)


@pytest.mark.parametrize(("axis", "is_sorted"), [(None, 1), (None, 0), (0, 1), (0, 0)])
def test_unique(onnx, ort, axis, is_sorted):
    x = np.array([[2.0, 1.0], [2.0, 1.0], [0.5, 3.0], [2.0, 1.0]], np.float32)
    attrs: dict[str, Any] = {"sorted": is_sorted}
    if axis is not None:
        attrs["axis"] = axis
    outputs = ["y", "indices", "inverse", "counts"]
    data = onnx_model(
        onnx,
        [node(onnx, "Unique", ["x"], outputs, **attrs)],
        [("x", F32, [4, 2])],
        [("y", F32, None)] + [(o, I64, None) for o in outputs[1:]],
    )
    got = run_ember(data, x)
    for g, w in zip(got, run_ort(ort, data, x)):
        np.testing.assert_array_equal(g, w)


@pytest.mark.parametrize("p", [1, 2, 3])
def test_lp_pool(onnx, ort, rng, p):
    x = rng.standard_normal((1, 2, 5, 6)).astype(np.float32)
    attrs = {"kernel_shape": [3, 2], "strides": [2, 2], "pads": [1, 0, 1, 1], "p": p}
    data = onnx_model(
        onnx, [node(onnx, "LpPool", ["x"], ["y"], **attrs)], [("x", F32, [1, 2, 5, 6])], [("y", F32, None)]
    )
    (got,) = run_ember(data, x)
    np.testing.assert_allclose(got, run_ort(ort, data, x)[0], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("ceil_mode", [0, 1])
def test_3d_pooling(onnx, ort, rng, op, ceil_mode):
    x = rng.standard_normal((2, 3, 5, 6, 7)).astype(np.float32)
    attrs: dict[str, Any] = {
        "kernel_shape": [2, 3, 2],
        "strides": [2, 1, 2],
        "pads": [1, 1, 0, 0, 1, 1],
        "ceil_mode": ceil_mode,
    }
    if op == "AveragePool":
        attrs["count_include_pad"] = ceil_mode  # both divisors
    data = onnx_model(onnx, [node(onnx, op, ["x"], ["y"], **attrs)], [("x", F32, [2, 3, 5, 6, 7])], [("y", F32, None)])
    (got,) = run_ember(data, x)
    np.testing.assert_allclose(got, run_ort(ort, data, x)[0], rtol=1e-5, atol=1e-6)
