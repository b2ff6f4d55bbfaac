"""RotaryEmbedding (opset 23), NonMaxSuppression and RoiAlign against onnxruntime, with
hand-built nodes; gradients through RotaryEmbedding and RoiAlign on an autodiff device."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import ember.onnx
from ember import Device, Tensor
from ember.errors import OnnxError
from tests.onnx_import.helpers import onnx_model, run_ort
from tests.onnx_import.test_spec import run_ember

F32, I64 = 1, 7

pytestmark = pytest.mark.filterwarnings("ignore:.*newer than the opsets ember.onnx documents")


def rotary_case(onnx: Any, rng: Any, rank: int, interleaved: int, rotary_dim: int, positions: bool):
    batch, heads, seq, size, max_pos = 2, 3, 5, 8, 12
    half = (rotary_dim or size) // 2
    x = rng.standard_normal((batch, heads, seq, size) if rank == 4 else (batch, seq, heads * size))
    angles = rng.uniform(0, 6, (max_pos, half) if positions else (batch, seq, half))
    cos, sin = np.cos(angles).astype(np.float32), np.sin(angles).astype(np.float32)
    inputs = [("x", F32, list(x.shape)), ("cos", F32, list(cos.shape)), ("sin", F32, list(sin.shape))]
    arrays = [x.astype(np.float32), cos, sin]
    if positions:
        inputs.append(("pos", I64, [batch, seq]))
        arrays.append(rng.integers(0, max_pos, (batch, seq)).astype(np.int64))
    attrs: dict[str, Any] = {"interleaved": interleaved}
    if rotary_dim:
        attrs["rotary_embedding_dim"] = rotary_dim
    if rank == 3:
        attrs["num_heads"] = heads
    node = onnx.helper.make_node("RotaryEmbedding", [n for n, _, _ in inputs], ["y"], **attrs)
    data = onnx_model(onnx, [node], inputs, [("y", F32, list(x.shape))], opset=23)
    return data, arrays


@pytest.mark.parametrize("rank", [3, 4])
@pytest.mark.parametrize("interleaved", [0, 1])
@pytest.mark.parametrize("rotary_dim", [0, 4])
@pytest.mark.parametrize("positions", [True, False])
def test_rotary_embedding(onnx, ort, rng, rank, interleaved, rotary_dim, positions):
    data, arrays = rotary_case(onnx, rng, rank, interleaved, rotary_dim, positions)
    (got,) = run_ember(data, *arrays)
    np.testing.assert_allclose(got, run_ort(ort, data, *arrays)[0], rtol=1e-5, atol=1e-6)


def test_rotary_embedding_gradient_is_the_inverse_rotation(onnx, rng):
    """The rotation is orthogonal: the gradient of ``sum(y * g)`` is ``g`` rotated back."""
    data, arrays = rotary_case(onnx, rng, 4, 0, 0, False)
    device = Device.flex().autodiff()
    model = ember.onnx.load(data, device)
    x = Tensor.from_data(arrays[0], device=device).require_grad()
    g = rng.standard_normal(arrays[0].shape).astype(np.float32)
    y = model(x, *[Tensor.from_data(a, device=device) for a in arrays[1:]])
    grads = (y * Tensor.from_data(g, device=device)).sum().backward()
    cos, sin = arrays[1][:, None], arrays[2][:, None]  # [batch, 1, seq, half]
    g1, g2 = g[..., :4], g[..., 4:]
    expected = np.concatenate([cos * g1 + sin * g2, -sin * g1 + cos * g2], -1)
    np.testing.assert_allclose(x.grad(grads).to_numpy(), expected, rtol=1e-5, atol=1e-6)


def test_rotary_embedding_3d_without_num_heads_is_refused(onnx, rng):
    data, arrays = rotary_case(onnx, rng, 3, 0, 0, False)
    model = onnx.load_from_string(data)
    attrs = model.graph.node[0].attribute
    attrs.remove(next(a for a in attrs if a.name == "num_heads"))
    with pytest.raises(OnnxError, match="num_heads"):
        run_ember(model.SerializeToString(), *arrays)


def nms_case(onnx, rng, center: int, extra: dict[str, Any]):
    batch, classes, n = 2, 3, 12
    lo = rng.uniform(0, 8, (batch, n, 2))
    size = rng.uniform(1, 4, (batch, n, 2))
    if center:
        boxes = np.concatenate([lo + size / 2, size], -1)
    else:  # [y1, x1, y2, x2], some with the corners swapped
        boxes = np.concatenate([lo, lo + size], -1)
        boxes[:, ::3] = boxes[:, ::3][..., [2, 3, 0, 1]]
    boxes = boxes.astype(np.float32)
    scores = rng.random((batch, classes, n)).astype(np.float32)
    scores[0, 0, 3] = scores[0, 0, 5]  # a tie: the lower index first
    names, inits = ["boxes", "scores"], []
    for name, value, dtype in [("limit", extra.get("limit"), np.int64), ("iou", extra.get("iou"), np.float32)]:
        if value is not None or (name == "iou" and "floor" in extra):
            names.append(name if value is not None else "")
            if value is not None:
                inits.append(onnx.numpy_helper.from_array(np.array([value], dtype), name))
    if "floor" in extra:
        if "limit" not in extra:
            names.insert(2, "")
        names.append("floor")
        inits.append(onnx.numpy_helper.from_array(np.array([extra["floor"]], np.float32), "floor"))
    node = onnx.helper.make_node("NonMaxSuppression", names, ["sel"], center_point_box=center)
    data = onnx_model(
        onnx,
        [node],
        [("boxes", F32, [batch, n, 4]), ("scores", F32, [batch, classes, n])],
        [("sel", I64, [None, 3])],
        inits,
        opset=11,
    )
    return data, [boxes, scores]


@pytest.mark.parametrize("center", [0, 1])
@pytest.mark.parametrize(
    "extra",
    [{}, {"limit": 4}, {"limit": 20, "iou": 0.2}, {"limit": 5, "iou": 0.0, "floor": 0.4}, {"limit": 3, "floor": 0.7}],
)
def test_non_max_suppression(onnx, ort, rng, center, extra):
    data, arrays = nms_case(onnx, rng, center, extra)
    (got,) = run_ember(data, *arrays)
    (want,) = run_ort(ort, data, *arrays)
    assert got.dtype == np.int64 and got.shape[1:] == (3,)
    np.testing.assert_array_equal(got, want)
    if extra.get("limit"):
        assert len(got) > 0


def test_non_max_suppression_scores_computed_in_the_graph(onnx, ort, rng):
    """Scores from an upstream op (a tensor read back at every call): the output's
    length follows them."""
    data, arrays = nms_case(onnx, rng, 0, {"limit": 6, "iou": 0.3})
    model = onnx.load_from_string(data)
    model.graph.node.insert(0, onnx.helper.make_node("Sigmoid", ["logits"], ["scores"]))
    model.graph.input[1].name = "logits"
    data = model.SerializeToString()
    loaded = ember.onnx.load(data, Device.flex())
    for _ in range(2):
        logits = rng.standard_normal(arrays[1].shape).astype(np.float32) * 3
        got = loaded(*[Tensor.from_data(a) for a in (arrays[0], logits)]).to_numpy()
        np.testing.assert_array_equal(got, run_ort(ort, data, arrays[0], logits)[0])


def roi_case(onnx, rng, mode: str, transform: str, ratio: int, scale: float):
    x = rng.standard_normal((2, 3, 10, 12)).astype(np.float32)
    corner = rng.uniform(-2, 14, (6, 2)) / scale
    rois = np.concatenate([corner, corner + rng.uniform(0.5, 9, (6, 2)) / scale], -1).astype(np.float32)
    batch = np.array([0, 1, 1, 0, 1, 0], np.int64)
    node = onnx.helper.make_node(
        "RoiAlign",
        ["x", "rois", "batch"],
        ["y"],
        mode=mode,
        coordinate_transformation_mode=transform,
        output_height=3,
        output_width=4,
        sampling_ratio=ratio,
        spatial_scale=scale,
    )
    data = onnx_model(
        onnx,
        [node],
        [("x", F32, [2, 3, 10, 12]), ("rois", F32, [6, 4]), ("batch", I64, [6])],
        [("y", F32, [6, 3, 3, 4])],
        opset=16,
    )
    return data, [x, rois, batch]


@pytest.mark.parametrize("mode", ["avg", "max"])
@pytest.mark.parametrize("transform", ["half_pixel", "output_half_pixel"])
@pytest.mark.parametrize(("ratio", "scale"), [(0, 1.0), (2, 0.5)])
def test_roi_align(onnx, ort, rng, mode, transform, ratio, scale):
    data, arrays = roi_case(onnx, rng, mode, transform, ratio, scale)
    (got,) = run_ember(data, *arrays)
    np.testing.assert_allclose(got, run_ort(ort, data, *arrays)[0], rtol=1e-5, atol=1e-5)


def test_roi_align_gradient(onnx, ort, rng):
    """Average RoiAlign is linear in X: the gradient of ``sum(y * g)`` dotted with any
    ``dx`` is ``sum(g * (y(x + dx) - y(x)))``, with onnxruntime's ``y``."""
    data, (x, rois, batch) = roi_case(onnx, rng, "avg", "half_pixel", 0, 1.0)
    device = Device.flex().autodiff()
    xt = Tensor.from_data(x, device=device).require_grad()
    y = ember.onnx.load(data, device)(xt, Tensor.from_data(rois, device=device), Tensor.from_data(batch, device=device))
    g = rng.standard_normal(y.dims()).astype(np.float32)
    grad = xt.grad((y * Tensor.from_data(g, device=device)).sum().backward()).to_numpy()
    for _ in range(3):
        dx = rng.standard_normal(x.shape).astype(np.float32)
        change = run_ort(ort, data, x + dx, rois, batch)[0] - run_ort(ort, data, x, rois, batch)[0]
        np.testing.assert_allclose((grad * dx).sum(), (g * change).sum(), rtol=1e-4, atol=1e-4)


def test_roi_align_opset_10_default_is_output_half_pixel(onnx, ort, rng):
    """Before opset 16 RoiAlign had no coordinate_transformation_mode and behaved as
    ``output_half_pixel`` (no half-pixel shift, regions at least one pixel)."""
    data, arrays = roi_case(onnx, rng, "avg", "output_half_pixel", 0, 1.0)
    model = onnx.load_from_string(data)
    attrs = model.graph.node[0].attribute
    attrs.remove(next(a for a in attrs if a.name == "coordinate_transformation_mode"))
    model.opset_import[0].version = 10
    data10 = model.SerializeToString()
    (got,) = run_ember(data10, *arrays)
    np.testing.assert_allclose(got, run_ort(ort, data10, *arrays)[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, run_ember(data, *arrays)[0], rtol=1e-6, atol=1e-6)


@pytest.mark.gpu
def test_the_cube_backend_runs_rotary_roi_align_and_nms(onnx, rng):
    """On wgpu (with autodiff): RotaryEmbedding and RoiAlign give flex's outputs and
    input gradients; NonMaxSuppression picks the same boxes."""
    from tests.conftest import _gpu_device

    gpu = _gpu_device()
    cases = [rotary_case(onnx, rng, 3, 1, 4, True), roi_case(onnx, rng, "avg", "half_pixel", 2, 0.5)]
    cases.append(roi_case(onnx, rng, "max", "output_half_pixel", 0, 1.0))
    for data, arrays in cases:
        results = []
        for device in (Device.flex().autodiff(), gpu.autodiff()):
            x = Tensor.from_data(arrays[0], device=device).require_grad()
            out = ember.onnx.load(data, device)(x, *[Tensor.from_data(a, device=device) for a in arrays[1:]])
            grads = out.square().sum().backward()
            results.append((out.to_numpy(), x.grad(grads).to_numpy()))
        (out_flex, grad_flex), (out_gpu, grad_gpu) = results
        np.testing.assert_allclose(out_gpu, out_flex, rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(grad_gpu, grad_flex, rtol=1e-4, atol=1e-5)
    data, arrays = nms_case(onnx, rng, 1, {"limit": 5, "iou": 0.3})
    (want,) = run_ember(data, *arrays)
    np.testing.assert_array_equal(run_ember(data, *arrays, device=gpu)[0], want)
