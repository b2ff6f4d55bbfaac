"""The quantization operators against onnxruntime: models quantized by onnxruntime's own
tool (``quantize_dynamic``; ``quantize_static`` with a calibration reader, QDQ and
QOperator formats, per tensor and per channel) from a small CNN with a MatMul head
exported by torch, and hand-built nodes (rounding ties, saturation, per-axis and blocked
scales, 8- and 16-bit types, integer products with per-row/per-column zero points,
grouped, strided, dilated and padded integer convolutions)."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import ember.onnx
from ember import Tensor
from ember.backend.dtype import DType
from ember.errors import OnnxError
from tests.conftest import import_torch
from tests.onnx_import.helpers import export, import_onnx, onnx_model, run_ort

# ---------------------------------------------------------------------- onnxruntime's quantizer
#: name -> (quantize_static's format or None for quantize_dynamic, per_channel, weight type, ops it must emit)
_RECIPES = {
    "dynamic-int8": (None, False, "QInt8", {"DynamicQuantizeLinear", "MatMulInteger", "ConvInteger"}),
    "dynamic-uint8-per-channel": (None, True, "QUInt8", {"DynamicQuantizeLinear", "MatMulInteger", "ConvInteger"}),
    "static-qdq": ("QDQ", False, "QInt8", {"QuantizeLinear", "DequantizeLinear"}),
    "static-qdq-per-channel": ("QDQ", True, "QInt8", {"QuantizeLinear", "DequantizeLinear"}),
    "static-qoperator": ("QOperator", False, "QInt8", {"QLinearConv", "QLinearMatMul", "QuantizeLinear"}),
    "static-qoperator-per-channel": ("QOperator", True, "QInt8", {"QLinearConv", "QLinearMatMul"}),
}


def _float_model(torch, path):
    """A small CNN (padded, strided and grouped convolutions) with a MatMul and a Linear head."""
    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.c2 = torch.nn.Conv2d(8, 8, 3, stride=2, groups=2)
            self.w = torch.nn.Parameter(torch.randn(72, 16) * 0.1)
            self.fc = torch.nn.Linear(16, 10)

        def forward(self, x):
            x = torch.relu(self.c2(torch.relu(self.c1(x))))
            return self.fc(torch.relu(x.flatten(1) @ self.w))

    x = torch.zeros(2, 3, 8, 8)
    path.write_bytes(export(torch, Net(), (x,), dynamic={"x": {0: "batch"}}))


@pytest.mark.parametrize("recipe", sorted(_RECIPES))
def test_models_quantized_by_onnxruntime_match_onnxruntime(tmp_path, rng, recipe):
    torch = import_torch()
    onnx = import_onnx("onnx")
    ort = import_onnx("onnxruntime")
    ort.set_default_logger_severity(3)
    quantization = importlib.import_module("onnxruntime.quantization")
    fmt, per_channel, weight_type, emitted = _RECIPES[recipe]
    source, target = tmp_path / "float.onnx", tmp_path / "quantized.onnx"
    _float_model(torch, source)
    weights = getattr(quantization.QuantType, weight_type)
    if fmt is None:
        quantization.quantize_dynamic(str(source), str(target), weight_type=weights, per_channel=per_channel)
    else:
        batches = [{"x": rng.standard_normal((2, 3, 8, 8)).astype(np.float32)} for _ in range(4)]

        class Reader(quantization.CalibrationDataReader):
            def __init__(self):
                self.batches = iter(batches)

            def get_next(self):
                return next(self.batches, None)

        quantization.quantize_static(
            str(source),
            str(target),
            Reader(),
            quant_format=getattr(quantization.QuantFormat, fmt),
            per_channel=per_channel,
            activation_type=quantization.QuantType.QUInt8,
            weight_type=weights,
            op_types_to_quantize=["Conv", "MatMul"] if fmt == "QOperator" else None,  # no com.microsoft QGemm
        )
    data = target.read_bytes()
    ops = {node.op_type for node in onnx.load_from_string(data).graph.node}
    assert emitted <= ops, f"the quantizer emitted {sorted(ops)}"
    x = rng.standard_normal((3, 3, 8, 8)).astype(np.float32)
    (want,) = run_ort(ort, data, x)
    got = ember.onnx.load(data)(Tensor.from_data(x)).to_numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    if recipe == "static-qoperator-per-channel":  # the integer ops trace and replay under ember.compile
        compiled = ember.onnx.load(data, compile=True)
        for _ in range(2):
            np.testing.assert_allclose(compiled(Tensor.from_data(x)).to_numpy(), want, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------- one node against onnxruntime
def _check(ort, data, *inputs, exact=True):
    wants = run_ort(ort, data, *inputs)
    gots = ember.onnx.load(data)(*[Tensor.from_data(v, dtype=_held(v)) for v in inputs])
    gots = gots if isinstance(gots, tuple) else (gots,)
    for got, want in zip(gots, wants):
        out = got.to_numpy()
        assert out.shape == want.shape
        if exact:
            np.testing.assert_array_equal(out, want.astype(out.dtype))
            assert np.can_cast(want.dtype, out.dtype), (want.dtype, out.dtype)
        else:
            np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-7)


def _held(v):
    return DType.INT32 if v.dtype in (np.int8, np.int16, np.uint16) else None


def _ties(rng, shape):
    """Values whose quotient by the scale 0.5 is a tie (x.5) or saturates."""
    return (rng.integers(-700, 700, shape) / 4).astype(np.float32)


@pytest.mark.parametrize("elem", ["UINT8", "INT8", "UINT16", "INT16"])
def test_quantize_and_dequantize_per_axis_round_half_to_even_and_saturate(rng, elem):
    onnx = import_onnx("onnx")
    ort = import_onnx("onnxruntime")
    T = onnx.TensorProto
    kind = getattr(T, elem)
    np_type = onnx.helper.tensor_dtype_to_np_dtype(kind)
    x = _ties(rng, (2, 3, 4))
    scale = np.array([0.5, 0.25, 2.0], np.float32)
    zero = np.array([1, 0, 3], np_type)
    nodes = [
        onnx.helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1),
        onnx.helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1),
    ]
    inits = [onnx.numpy_helper.from_array(scale, "s"), onnx.numpy_helper.from_array(zero, "z")]
    data = onnx_model(onnx, nodes, [("x", T.FLOAT, [2, 3, 4])], [("q", kind, None), ("y", T.FLOAT, None)], inits, 21)
    _check(ort, data, x)


def test_quantize_blocked_with_a_partial_block(rng):
    onnx = import_onnx("onnx")
    T = onnx.TensorProto
    x = rng.standard_normal((3, 7)).astype(np.float32) * 4
    scale = np.abs(rng.standard_normal((3, 3))).astype(np.float32) + 0.1
    zero = rng.integers(-5, 5, (3, 3)).astype(np.int8)
    nodes = [
        onnx.helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"], axis=1, block_size=3),
        onnx.helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"], axis=1, block_size=3),
    ]
    inits = [onnx.numpy_helper.from_array(scale, "s"), onnx.numpy_helper.from_array(zero, "z")]
    data = onnx_model(onnx, nodes, [("x", T.FLOAT, [3, 7])], [("q", T.INT8, None), ("y", T.FLOAT, None)], inits, 21)
    # float64 numpy oracle (onnxruntime's blocked kernels need a different layout of the block axis)
    full = np.repeat(scale, 3, axis=1)[:, :7]
    zeros = np.repeat(zero, 3, axis=1)[:, :7].astype(np.float64)
    q = np.clip(np.rint(x / full) + zeros, -128, 127)
    got_q, got_y = ember.onnx.load(data)(Tensor.from_data(x))
    np.testing.assert_array_equal(got_q.to_numpy(), q)
    np.testing.assert_allclose(got_y.to_numpy(), (q - zeros) * full, rtol=1e-6)


def test_dynamic_quantize_linear(rng):
    onnx = import_onnx("onnx")
    ort = import_onnx("onnxruntime")
    T = onnx.TensorProto
    node = onnx.helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])
    data = onnx_model(
        onnx, [node], [("x", T.FLOAT, [4, 5])], [("y", T.UINT8, None), ("s", T.FLOAT, None), ("z", T.UINT8, None)]
    )
    for x in (rng.standard_normal((4, 5)).astype(np.float32), np.abs(rng.standard_normal((4, 5))).astype(np.float32)):
        _check(ort, data, x, exact=False)


@pytest.mark.parametrize("signed", [False, True])
def test_qlinear_matmul_and_matmul_integer_per_row_and_column(rng, signed):
    onnx = import_onnx("onnx")
    ort = import_onnx("onnxruntime")
    T = onnx.TensorProto
    kind, np_type, low, high = (T.INT8, np.int8, -128, 128) if signed else (T.UINT8, np.uint8, 0, 256)
    a = rng.integers(low, high, (2, 4, 6)).astype(np_type)
    b = rng.integers(low, high, (6, 5)).astype(np_type)
    inits = [
        onnx.numpy_helper.from_array(np.float32(0.02), "sa"),
        onnx.numpy_helper.from_array(np_type(3), "za"),
        onnx.numpy_helper.from_array(np.float32(0.03), "sb"),
        onnx.numpy_helper.from_array(rng.integers(0, 20, 5).astype(np_type), "zb"),
        onnx.numpy_helper.from_array(np.float32(5.0), "sy"),
        onnx.numpy_helper.from_array(np_type(7), "zy"),
    ]
    nodes = [
        onnx.helper.make_node("QLinearMatMul", ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"], ["y"]),
        onnx.helper.make_node("MatMulInteger", ["a", "b", "za", "zb"], ["acc"]),
    ]
    data = onnx_model(
        onnx,
        nodes,
        [("a", kind, [2, 4, 6]), ("b", kind, [6, 5])],
        [("y", kind, None), ("acc", T.INT32, None)],
        inits,
        13,
    )
    _check(ort, data, a, b)


def test_matmul_integer_per_row_zero_point(rng):
    onnx = import_onnx("onnx")
    T = onnx.TensorProto
    a = rng.integers(0, 256, (4, 6)).astype(np.uint8)
    b = rng.integers(-128, 128, (6, 3)).astype(np.int8)
    za = rng.integers(0, 256, 4).astype(np.uint8)
    node = onnx.helper.make_node("MatMulInteger", ["a", "b", "za"], ["y"])
    data = onnx_model(
        onnx,
        [node],
        [("a", T.UINT8, [4, 6]), ("b", T.INT8, [6, 3])],
        [("y", T.INT32, None)],
        [onnx.numpy_helper.from_array(za, "za")],
        13,
    )
    got = ember.onnx.load(data)(Tensor.from_data(a), Tensor.from_data(b, dtype=DType.INT32)).to_numpy()
    np.testing.assert_array_equal(got, (a.astype(np.int64) - za[:, None]) @ b.astype(np.int64))


_CONVS = {
    "padded": dict(pads=[1, 2, 0, 1]),
    "strided-dilated": dict(strides=[2, 1], dilations=[1, 2]),
    "grouped": dict(group=2, pads=[1, 1, 1, 1]),
    "same-upper": dict(auto_pad="SAME_UPPER", strides=[2, 2]),
}


@pytest.mark.parametrize("case", sorted(_CONVS))
def test_conv_integer_and_qlinear_conv_per_channel(rng, case):
    onnx = import_onnx("onnx")
    ort = import_onnx("onnxruntime")
    T = onnx.TensorProto
    attrs = _CONVS[case]
    groups = attrs.get("group", 1)
    x = rng.integers(0, 256, (2, 4, 7, 6)).astype(np.uint8)
    w = rng.integers(-128, 128, (6, 4 // groups, 3, 3)).astype(np.int8)
    inits = [
        onnx.numpy_helper.from_array(np.float32(0.05), "sx"),
        onnx.numpy_helper.from_array(np.uint8(100), "zx"),
        onnx.numpy_helper.from_array(rng.uniform(0.001, 0.01, 6).astype(np.float32), "sw"),
        onnx.numpy_helper.from_array(np.zeros(6, np.int8), "zw"),
        onnx.numpy_helper.from_array(np.float32(2.0), "sy"),
        onnx.numpy_helper.from_array(np.uint8(128), "zy"),
        onnx.numpy_helper.from_array(rng.integers(-500, 500, 6).astype(np.int32), "bias"),
    ]
    nodes = [
        onnx.helper.make_node("QLinearConv", ["x", "sx", "zx", "w", "sw", "zw", "sy", "zy", "bias"], ["y"], **attrs),
        onnx.helper.make_node("ConvInteger", ["x", "w", "zx"], ["acc"], **attrs),
    ]
    data = onnx_model(
        onnx,
        nodes,
        [("x", T.UINT8, list(x.shape)), ("w", T.INT8, list(w.shape))],
        [("y", T.UINT8, None), ("acc", T.INT32, None)],
        inits,
        13,
    )
    got_y, got_acc = ember.onnx.load(data)(Tensor.from_data(x), Tensor.from_data(w, dtype=DType.INT32))
    torch = import_torch()
    # onnxruntime's ConvInteger takes uint8 weights only: the accumulator's oracle is torch's float64 convolution of the centred integers (exact)
    pads = attrs.get("pads", [0, 0, 0, 0])
    xs = torch.as_tensor(x.astype(np.float64) - 100)
    if attrs.get("auto_pad") == "SAME_UPPER":
        xs = torch.nn.functional.pad(xs, (0, 1, 1, 1))
    else:
        xs = torch.nn.functional.pad(xs, (pads[1], pads[3], pads[0], pads[2]))
    acc = torch.nn.functional.conv2d(
        xs,
        torch.as_tensor(w.astype(np.float64)),
        stride=attrs.get("strides", 1),
        dilation=attrs.get("dilations", 1),
        groups=groups,
    ).numpy()
    np.testing.assert_array_equal(got_acc.to_numpy(), acc)
    (want_y,) = run_ort(ort, _only(onnx, data, "y"), x, w)
    np.testing.assert_array_equal(got_y.to_numpy(), want_y)


def _only(onnx, data, output):
    """The model with one of its outputs (and the nodes computing it)."""
    model = onnx.load_from_string(data)
    keep = [n for n in model.graph.node if output in n.output]
    del model.graph.node[:]
    model.graph.node.extend(keep)
    kept = [o for o in model.graph.output if o.name == output]
    del model.graph.output[:]
    model.graph.output.extend(kept)
    return model.SerializeToString()


@pytest.mark.filterwarnings("ignore:.*newer than the opsets ember.onnx documents")
def test_quantization_to_an_exponent_only_type_is_refused():
    """FLOAT8E8M0 (opset 25's scale type) is the quantized type ember does not hold; the
    error names it and the types ember quantizes to (float8 and 4-bit among them)."""
    onnx = import_onnx("onnx")
    T = onnx.TensorProto
    node = onnx.helper.make_node("QuantizeLinear", ["x", "s"], ["q"], output_dtype=T.FLOAT8E8M0)
    data = onnx_model(
        onnx,
        [node],
        [("x", T.FLOAT, [3])],
        [("q", T.FLOAT8E8M0, [3])],
        [onnx.numpy_helper.from_array(np.float32(1.0), "s")],
        25,
    )
    with pytest.raises(OnnxError, match="FLOAT8E8M0: ember quantizes to UINT8, .*INT4.*FLOAT8E4M3FN"):
        ember.onnx.load(data)
