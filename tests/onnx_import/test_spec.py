"""Operators whose ONNX semantics differ from ember's tensor ops: the import adapts to the
spec (checked against onnxruntime, or ONNX's reference evaluator where onnxruntime
departs from the spec), without changing the tensor ops."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import ember.onnx
from ember import Device, Tensor
from ember.errors import OnnxError
from tests.onnx_import.helpers import onnx_model, run_ort

F32, I64 = 1, 7


def node(onnx: Any, op: str, inputs: list[str], outputs: list[str], **attrs: Any) -> Any:
    return onnx.helper.make_node(op, inputs, outputs, name=f"{op.lower()}_1", **attrs)


def run_ember(data: bytes, *inputs: np.ndarray, device: Device | None = None) -> list[np.ndarray]:
    device = device or Device.flex()
    model = ember.onnx.load(data, device)
    out = model(*[Tensor.from_data(a, device=device) for a in inputs])
    return [o.to_numpy() for o in (out if isinstance(out, tuple) else (out,))]


def reference(onnx: Any, data: bytes, *inputs: np.ndarray) -> list[np.ndarray]:
    """ONNX's reference evaluator (the spec written in numpy)."""
    from onnx.reference import ReferenceEvaluator

    model = onnx.load_from_string(data)
    names = [i.name for i in model.graph.input]
    return ReferenceEvaluator(model).run(None, dict(zip(names, inputs)))


def test_clip_with_min_above_max_gives_max(onnx, ort, rng):
    x = rng.standard_normal((3, 4)).astype(np.float32) * 3
    lo, hi = (
        onnx.numpy_helper.from_array(np.array(2.0, np.float32), "lo"),
        onnx.numpy_helper.from_array(np.array(1.0, np.float32), "hi"),
    )
    data = onnx_model(
        onnx, [node(onnx, "Clip", ["x", "lo", "hi"], ["y"])], [("x", F32, [3, 4])], [("y", F32, [3, 4])], [lo, hi]
    )
    (got,) = run_ember(data, x)
    np.testing.assert_array_equal(got, reference(onnx, data, x)[0])
    np.testing.assert_array_equal(got, np.ones_like(x))


def test_int32_cumsum_stays_int32(onnx, ort):
    x = np.arange(12, dtype=np.int32).reshape(3, 4)
    axis = onnx.numpy_helper.from_array(np.array(1, np.int64), "axis")
    data = onnx_model(
        onnx, [node(onnx, "CumSum", ["x", "axis"], ["y"], exclusive=1)], [("x", 6, [3, 4])], [("y", 6, [3, 4])], [axis]
    )
    (got,) = run_ember(data, x)
    (want,) = run_ort(ort, data, x)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, want)


def test_one_hot_out_of_range_and_negative_indices(onnx, ort):
    indices = np.array([[0, -1, 7], [-5, 4, -6]], np.int64)  # 7 and -6 are out of range for depth 5
    depth = onnx.numpy_helper.from_array(np.array(5, np.int64), "depth")
    values = onnx.numpy_helper.from_array(np.array([-2.0, 3.0], np.float32), "values")
    data = onnx_model(
        onnx,
        [node(onnx, "OneHot", ["i", "depth", "values"], ["y"], axis=1)],
        [("i", I64, [2, 3])],
        [("y", F32, [2, 5, 3])],
        [depth, values],
    )
    (got,) = run_ember(data, indices)
    np.testing.assert_array_equal(got, reference(onnx, data, indices)[0])
    np.testing.assert_array_equal(got, run_ort(ort, data, indices)[0])
    assert (got[0, :, 2] == -2.0).all() and got[0, 4, 1] == 3.0  # 7: all off; -1: the last class


@pytest.mark.parametrize(("op", "fill"), [("ReduceMax", -np.inf), ("ReduceMin", np.inf), ("ReduceLogSumExp", -np.inf)])
def test_reductions_over_an_empty_axis(onnx, op, fill):
    x = np.zeros((2, 0, 4), np.float32)
    axes = onnx.numpy_helper.from_array(np.array([1], np.int64), "axes")
    data = onnx_model(
        onnx,
        [node(onnx, op, ["x", "axes"], ["y"], keepdims=1)],
        [("x", F32, [2, 0, 4])],
        [("y", F32, [2, 1, 4])],
        [axes],
        opset=18,
    )
    (got,) = run_ember(data, x)
    np.testing.assert_array_equal(got, reference(onnx, data, x)[0])
    np.testing.assert_array_equal(got, np.full((2, 1, 4), fill, np.float32))


def test_lp_normalization_of_a_zero_row_is_zero(onnx, ort, rng):
    x = rng.standard_normal((3, 4)).astype(np.float32)
    x[1] = 0
    for p in (1, 2):
        data = onnx_model(
            onnx, [node(onnx, "LpNormalization", ["x"], ["y"], axis=1, p=p)], [("x", F32, [3, 4])], [("y", F32, [3, 4])]
        )
        (got,) = run_ember(data, x)
        np.testing.assert_allclose(got, run_ort(ort, data, x)[0], rtol=1e-6)
        assert not np.isnan(got).any() and (got[1] == 0).all()


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
@pytest.mark.parametrize("include_pad", [0, 1])
def test_pools_with_pads_wider_than_half_the_kernel(onnx, ort, rng, op, include_pad):
    x = rng.standard_normal((1, 2, 5, 5)).astype(np.float32)
    attrs: dict[str, Any] = {"kernel_shape": [3, 3], "pads": [2, 2, 2, 1], "strides": [1, 2]}
    if op == "AveragePool":
        attrs["count_include_pad"] = include_pad
    data = onnx_model(onnx, [node(onnx, op, ["x"], ["y"], **attrs)], [("x", F32, [1, 2, 5, 5])], [("y", F32, None)])
    (got,) = run_ember(data, x)
    np.testing.assert_allclose(got, run_ort(ort, data, x)[0], rtol=1e-5, atol=1e-6)


def test_max_pool_on_uint8(onnx, ort, rng):
    x = rng.integers(0, 256, (1, 1, 6, 6)).astype(np.uint8)
    data = onnx_model(
        onnx,
        [node(onnx, "MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2])],
        [("x", 2, [1, 1, 6, 6])],
        [("y", 2, None)],
    )
    (got,) = run_ember(data, x)
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got, run_ort(ort, data, x)[0])


@pytest.mark.parametrize(("elem", "dtype"), [(3, np.int8), (5, np.int16), (4, np.uint16)])
def test_narrow_int_arithmetic_wraps_at_its_width(onnx, ort, elem, dtype):
    info = np.iinfo(dtype)
    a = np.array([info.max, info.min, info.max // 2 + 3, 7], dtype)
    b = np.array([1, 1, 2, 3], dtype)
    nodes = [
        node(onnx, "Add", ["a", "b"], ["s"]),
        node(onnx, "Mul", ["a", "b"], ["p"]),
        node(onnx, "Sub", ["b", "a"], ["d"]),
    ]
    data = onnx_model(onnx, nodes, [("a", elem, [4]), ("b", elem, [4])], [(n, elem, [4]) for n in ("s", "p", "d")])
    got = run_ember(data, a, b)
    want = reference(onnx, data, a, b)
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w.astype(np.int64))


def test_bitwise_not_of_uint16(onnx, ort):
    x = np.array([0, 1, 65535, 3034], np.uint16)
    data = onnx_model(onnx, [node(onnx, "BitwiseNot", ["x"], ["y"])], [("x", 4, [4])], [("y", 4, [4])], opset=18)
    (got,) = run_ember(data, x)
    np.testing.assert_array_equal(got, run_ort(ort, data, x)[0].astype(np.int64))


def _batch_norm(onnx: Any, training_mode: int | None) -> bytes:
    attrs = {} if training_mode is None else {"training_mode": training_mode}
    outputs = ["y", "mean_out", "var_out"] if training_mode else ["y"]
    return onnx_model(
        onnx,
        [node(onnx, "BatchNormalization", ["x", "s", "b", "mean", "var"], outputs, momentum=0.8, **attrs)],
        [("x", F32, [4, 3, 2, 2]), ("s", F32, [3]), ("b", F32, [3]), ("mean", F32, [3]), ("var", F32, [3])],
        [(o, F32, None) for o in outputs],
    )


def test_batch_norm_training_mode_on_every_device_with_the_population_variance(onnx, ort, rng):
    """training_mode=1: batch statistics and moved running averages, on flex as on an
    autodiff device; the running variance moves toward the population variance."""
    x = rng.standard_normal((4, 3, 2, 2)).astype(np.float32)
    s, b = rng.standard_normal(3).astype(np.float32), rng.standard_normal(3).astype(np.float32)
    mean, var = rng.standard_normal(3).astype(np.float32), rng.random(3).astype(np.float32) + 0.5
    data = _batch_norm(onnx, 1)
    want = reference(onnx, data, x, s, b, mean, var)
    population = x.var(axis=(0, 2, 3))
    np.testing.assert_allclose(want[2], 0.8 * var + 0.2 * population, rtol=1e-5)
    for device in (Device.flex(), Device.flex().autodiff()):
        got = run_ember(data, x, s, b, mean, var, device=device)
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
    # Inference (training_mode=0, as torch's eval export writes it) reads the running statistics.
    data = _batch_norm(onnx, 0)
    (got,) = run_ember(data, x, s, b, mean, var)
    np.testing.assert_allclose(got, run_ort(ort, data, x, s, b, mean, var)[0], rtol=1e-5, atol=1e-5)


def test_dropout_training_mode_decides(onnx, rng):
    x = rng.standard_normal((64, 32)).astype(np.float32) + 5
    ratio = onnx.numpy_helper.from_array(np.array(0.25, np.float32), "r")
    for mode in (True, False):
        flag = onnx.numpy_helper.from_array(np.array(mode), "t")
        data = onnx_model(
            onnx,
            [node(onnx, "Dropout", ["x", "r", "t"], ["y", "mask"])],
            [("x", F32, [64, 32])],
            [("y", F32, [64, 32]), ("mask", 9, [64, 32])],
            [ratio, flag],
        )
        for device in (Device.flex(), Device.flex().autodiff()):
            y, mask = run_ember(data, x, device=device)
            if mode:  # a random mask on every device: kept values scaled by 1 / (1 - ratio)
                assert 0.6 < mask.mean() < 0.9
                np.testing.assert_allclose(y[mask], x[mask] / 0.75, rtol=1e-6)
                assert (y[~mask] == 0).all()
            else:
                np.testing.assert_array_equal(y, x)
                assert mask.all()


def test_space_to_depth_modes(onnx, rng):
    """Opset 28's mode="CRD" (checked against ONNX's reference) and the default DCR."""
    x = rng.standard_normal((1, 2, 4, 6)).astype(np.float32)
    for mode in ("DCR", "CRD"):
        data = onnx_model(
            onnx,
            [node(onnx, "SpaceToDepth", ["x"], ["y"], blocksize=2, mode=mode)],
            [("x", F32, [1, 2, 4, 6])],
            [("y", F32, [1, 8, 2, 3])],
            opset=28,
        )
        with pytest.warns(UserWarning, match="opset 28, newer than"):
            (got,) = run_ember(data, x)
        np.testing.assert_array_equal(got, reference(onnx, data, x)[0])


def test_an_attribute_ember_does_not_read_is_refused(onnx, monkeypatch):
    """An attribute no builder reads is refused, naming the node, the attribute and its
    value as written; one holding the spec's default value is accepted."""
    from ember.onnx.ops import OPS

    opdef = OPS[("", "LeakyRelu")]
    monkeypatch.setattr(opdef, "build", lambda n: lambda x: x.leaky_relu(0.01))  # reads no alpha
    monkeypatch.setattr(opdef, "numpy", None)

    def model(alpha: float) -> bytes:
        nodes = [node(onnx, "Relu", ["x"], ["h"]), node(onnx, "LeakyRelu", ["h"], ["y"], alpha=alpha)]
        return onnx_model(onnx, nodes, [("x", F32, [2])], [("y", F32, [2])])

    with pytest.raises(
        OnnxError, match=r"node 'leakyrelu_1' \(LeakyRelu, opset 17\): attribute alpha=0.2 is not supported"
    ):
        ember.onnx.load(model(0.2), Device.flex())
    ember.onnx.load(model(0.01), Device.flex())  # the spec's default: what the builder does
