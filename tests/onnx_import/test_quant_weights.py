"""Quantized ONNX weights imported as ember's packed ``QuantizedTensor`` and run by the
quantized kernels (``ember/onnx/quant_weights.py``), against onnxruntime: models quantized by
onnxruntime's own tool (``quantize_dynamic``; ``quantize_static`` in the QDQ and QOperator
formats) from a torch MLP and CNN, and hand-built ``DequantizeLinear`` readers (per tensor, per axis with
signed and unsigned zero points, blocked, Gemm with alpha/beta, grouped Conv) and integer
products (``MatMulInteger``/``ConvInteger`` then ``Cast``). Every reader must run on the packed
weight: no float copy of it among the model's constants."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

import ember.onnx
from ember import Tensor
from ember.backend.dtype import DType
from tests.conftest import import_torch
from tests.onnx_import.helpers import export, import_onnx, onnx_model, run_ort

QUANTIZED = "(quantized weight)"


def quantized_steps(model) -> list[str]:
    return [step.label for step in model.program.steps if step.label.endswith(QUANTIZED)]


def float_constants(model) -> list[tuple[int, ...]]:
    return [
        a.shape for _, a, dtype in model.program.const_tensors if dtype.is_float and a.ndim >= 2 and min(a.shape) > 1
    ]


def _mlp(torch):
    class Mlp(torch.nn.Module):  # MatMul + Add layers (every quantizer format takes MatMul)
        def __init__(self):
            super().__init__()
            self.a = torch.nn.Parameter(torch.randn(64, 96) * 0.1)
            self.b = torch.nn.Parameter(torch.randn(96, 10) * 0.1)
            self.bias = torch.nn.Parameter(torch.randn(96) * 0.1)

        def forward(self, x):
            return torch.relu(x @ self.a + self.bias) @ self.b

    return Mlp(), (4, 64)


def _cnn(torch):
    class Cnn(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.c2 = torch.nn.Conv2d(8, 8, 3, stride=2, groups=2)
            self.fc = torch.nn.Linear(72, 10)

        def forward(self, x):
            return self.fc(torch.relu(self.c2(torch.relu(self.c1(x)))).flatten(1))

    return Cnn(), (2, 3, 8, 8)


@pytest.mark.parametrize("net", ["mlp", "cnn"])
@pytest.mark.parametrize(
    "recipe", ["dynamic", "dynamic-uint8-per-channel", "qdq", "qdq-per-channel", "qoperator", "qoperator-per-channel"]
)
def test_models_quantized_by_onnxruntime_run_on_packed_weights(tmp_path, rng, net, recipe):
    torch = import_torch()
    onnx = import_onnx("onnx")
    ort = import_onnx("onnxruntime")
    ort.set_default_logger_severity(3)
    q = importlib.import_module("onnxruntime.quantization")
    torch.manual_seed(0)
    model, shape = (_mlp if net == "mlp" else _cnn)(torch)
    source, target = tmp_path / "float.onnx", tmp_path / "quantized.onnx"
    source.write_bytes(export(torch, model, (torch.zeros(*shape),), dynamic={"x": {0: "batch"}}))
    per_channel = recipe.endswith("per-channel")
    if recipe.startswith("dynamic"):
        weights = q.QuantType.QUInt8 if "uint8" in recipe else q.QuantType.QInt8
        q.quantize_dynamic(str(source), str(target), weight_type=weights, per_channel=per_channel)
        readers = {"MatMulInteger", "ConvInteger"}
    else:
        batches = iter([{"x": rng.standard_normal(shape).astype(np.float32)} for _ in range(4)])

        class Reader(q.CalibrationDataReader):
            def get_next(self):
                return next(batches, None)

        qoperator = recipe.startswith("qoperator")
        q.quantize_static(
            str(source),
            str(target),
            Reader(),
            quant_format=q.QuantFormat.QOperator if qoperator else q.QuantFormat.QDQ,
            per_channel=per_channel,
            op_types_to_quantize=["Conv", "MatMul", "Gemm"] if not qoperator else ["Conv", "MatMul"],
        )
        readers = {"QLinearMatMul", "QLinearConv"} if qoperator else {"MatMul", "Gemm", "Conv"}
    data = target.read_bytes()
    expected = sum(node.op_type in readers for node in onnx.load_from_string(data).graph.node)
    loaded = ember.onnx.load(data)
    # the CNN's head is a Gemm, which the QOperator format leaves in float (its QGemm is not ONNX)
    assert len(quantized_steps(loaded)) == expected == (2 if net == "mlp" or recipe.startswith("qoperator") else 3)
    assert float_constants(loaded) == []  # no float copy of a weight
    x = rng.standard_normal((3, *shape[1:])).astype(np.float32)
    (want,) = run_ort(ort, data, x)
    np.testing.assert_allclose(loaded(Tensor.from_data(x)).to_numpy(), want, rtol=1e-5, atol=1e-5)
    if recipe == "qdq-per-channel":  # traced and replayed by ember.compile
        compiled = ember.onnx.load(data, compile=True)
        for _ in range(2):
            np.testing.assert_allclose(compiled(Tensor.from_data(x)).to_numpy(), want, rtol=1e-5, atol=1e-5)


def run_ort_as_written(ort, data, *inputs):
    """onnxruntime with its graph optimizations off: its optimizer rewrites a
    DequantizeLinear -> MatMul into a dynamically quantized product (other numerics)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    session = ort.InferenceSession(data, options, providers=["CPUExecutionProvider"])
    return session.run(None, dict(zip([i.name for i in session.get_inputs()], inputs)))


def _init(onnx, array, name):
    return onnx.numpy_helper.from_array(array, name)


def _dequantize_then(onnx, reader, w, scale, zero, axis, reader_inputs, attrs, x_shape, extra=(), opset=13):
    T = onnx.TensorProto
    inits = [_init(onnx, w, "wq"), _init(onnx, scale, "s")]
    names = ["wq", "s"]
    if zero is not None:
        inits.append(_init(onnx, zero, "z"))
        names.append("z")
    nodes = [
        onnx.helper.make_node("DequantizeLinear", names, ["w"], axis=axis),
        onnx.helper.make_node(reader, reader_inputs, ["y"], **attrs),
    ]
    return onnx_model(onnx, nodes, [("x", T.FLOAT, list(x_shape))], [("y", T.FLOAT, None)], inits + list(extra), opset)


CASES = {
    # name: (reader, weight shape, values dtype, scale level, zero point kind, axis, attrs)
    "matmul-uint8-tensor": ("MatMul", (48, 20), np.uint8, "tensor", "value", 1, {}),
    "matmul-int8-axis-signed-zero": ("MatMul", (48, 20), np.int8, "axis", "value", 1, {}),
    "matmul-int8-axis-symmetric": ("MatMul", (64, 24), np.int8, "axis", None, 1, {}),
    "gemm-transB-alpha-beta": ("Gemm", (20, 48), np.int8, "axis", "value", 0, {"transB": 1, "alpha": 0.5, "beta": 2.0}),
    "gemm-uint8-bias": ("Gemm", (48, 20), np.uint8, "tensor", "value", 1, {}),
    "gemm-no-c": ("Gemm", (20, 64), np.int8, "axis", None, 0, {"transB": 1}),
    "conv-no-bias": ("Conv", (4, 3, 3), np.int8, "tensor", None, 0, {}),
    "conv-int8-groups": ("Conv", (8, 2, 3, 3), np.int8, "axis", "zero", 0, {"group": 2, "pads": [1, 0, 1, 2]}),
    "conv-uint8-strided": ("Conv", (6, 4, 3, 2), np.uint8, "tensor", "value", 0, {"strides": [2, 1]}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_dequantize_linear_weights_match_onnxruntime(rng, case):
    onnx = import_onnx("onnx")
    ort = import_onnx("onnxruntime")
    reader, shape, dtype, level, zero_kind, axis, attrs = CASES[case]
    info = np.iinfo(dtype)
    w = rng.integers(info.min, info.max + 1, shape).astype(dtype)
    n = shape[axis]
    scale = (np.abs(rng.standard_normal(n if level == "axis" else ())) * 0.02 + 0.001).astype(np.float32)
    zero = None
    if zero_kind == "value":
        zero = rng.integers(info.min // 2, info.max // 2, scale.shape).astype(dtype)
    elif zero_kind == "zero":
        zero = np.zeros(scale.shape, dtype)
    extra = []
    if reader == "Conv":
        x_shape = (2, shape[1] * attrs.get("group", 1), *(9, 8)[: len(shape) - 2])
        inputs = ["x", "w"]
        if "no-bias" not in case:
            extra.append(_init(onnx, rng.standard_normal(shape[0]).astype(np.float32), "b"))
            inputs.append("b")
    else:
        k = shape[1] if attrs.get("transB") else shape[0]
        n_out = shape[0] if attrs.get("transB") else shape[1]
        x_shape = (2, 3, k) if reader == "MatMul" else (5, k)
        inputs = ["x", "w"]
        if reader == "Gemm" and "no-c" not in case:
            c = rng.standard_normal((5, n_out) if "alpha" in attrs else (n_out,)).astype(np.float32)
            extra.append(_init(onnx, c, "c"))
            inputs.append("c")
    data = _dequantize_then(onnx, reader, w, scale, zero, axis, inputs, attrs, x_shape, extra)
    loaded = ember.onnx.load(data)
    assert len(quantized_steps(loaded)) == 1 and float_constants(loaded) == []
    x = rng.standard_normal(x_shape).astype(np.float32)
    (want,) = run_ort_as_written(ort, data, x)
    np.testing.assert_allclose(loaded(Tensor.from_data(x)).to_numpy(), want, rtol=1e-5, atol=1e-5)


def test_blocked_dequantize_linear_feeding_matmul(rng):
    """Blocks of 32 along the reduced axis (opset 21): one scale and zero point per block
    and output column; float64 numpy of the spec's dequantization as the oracle."""
    onnx = import_onnx("onnx")
    T = onnx.TensorProto
    k, n, block = 96, 20, 32
    w = rng.integers(-128, 128, (k, n)).astype(np.int8)
    scale = (np.abs(rng.standard_normal((k // block, n))) * 0.02 + 0.001).astype(np.float32)
    zero = rng.integers(-10, 10, (k // block, n)).astype(np.int8)
    nodes = [
        onnx.helper.make_node("DequantizeLinear", ["wq", "s", "z"], ["w"], axis=0, block_size=block),
        onnx.helper.make_node("MatMul", ["x", "w"], ["y"]),
    ]
    inits = [_init(onnx, w, "wq"), _init(onnx, scale, "s"), _init(onnx, zero, "z")]
    data = onnx_model(onnx, nodes, [("x", T.FLOAT, [4, k])], [("y", T.FLOAT, None)], inits, 21)
    loaded = ember.onnx.load(data)
    assert len(quantized_steps(loaded)) == 1
    x = rng.standard_normal((4, k)).astype(np.float32)
    dequantized = (w.astype(np.float64) - np.repeat(zero, block, 0)) * np.repeat(scale, block, 0)
    np.testing.assert_allclose(loaded(Tensor.from_data(x)).to_numpy(), x @ dequantized, rtol=1e-5, atol=1e-5)


def test_integer_products_then_cast_match_onnxruntime(rng):
    """``MatMulInteger`` (per-row activation zero points, per-column weight zero points) and
    ``ConvInteger``, each read by a Cast to float: the product runs on the packed weight."""
    onnx = import_onnx("onnx")
    ort = import_onnx("onnxruntime")
    T = onnx.TensorProto
    b = rng.integers(-128, 128, (40, 12)).astype(np.int8)
    w = rng.integers(0, 256, (6, 3, 3, 3)).astype(np.uint8)
    inits = [
        _init(onnx, b, "b"),
        _init(onnx, np.uint8(121), "za"),
        _init(onnx, rng.integers(-20, 20, 12).astype(np.int8), "zb"),
        _init(onnx, w, "w"),
        _init(onnx, np.uint8(7), "zx"),
        _init(onnx, np.uint8(131), "zw"),
    ]
    nodes = [
        onnx.helper.make_node("MatMulInteger", ["a", "b", "za", "zb"], ["acc"]),
        onnx.helper.make_node("Cast", ["acc"], ["y"], to=T.FLOAT),
        onnx.helper.make_node("ConvInteger", ["x", "w", "zx", "zw"], ["cacc"], pads=[1, 1, 1, 1]),
        onnx.helper.make_node("Cast", ["cacc"], ["cy"], to=T.FLOAT),
    ]
    inputs = [("a", T.UINT8, [4, 40]), ("x", T.UINT8, [2, 3, 6, 5])]
    data = onnx_model(onnx, nodes, inputs, [("y", T.FLOAT, None), ("cy", T.FLOAT, None)], inits, 13)
    loaded = ember.onnx.load(data)
    assert len(quantized_steps(loaded)) == 2
    a = rng.integers(0, 256, (4, 40)).astype(np.uint8)
    x = rng.integers(0, 256, (2, 3, 6, 5)).astype(np.uint8)
    wants = run_ort_as_written(ort, data, a, x)
    gots = loaded(Tensor.from_data(a, dtype=DType.UINT8), Tensor.from_data(x, dtype=DType.UINT8))
    for got, want in zip(gots, wants):
        np.testing.assert_array_equal(got.to_numpy(), want)  # small sums: exact in float32


def test_a_dequantized_weight_read_otherwise_stays_a_float_constant(rng):
    """The weight also read by an Add: no reader is rewritten, the graph runs as written."""
    onnx = import_onnx("onnx")
    ort = import_onnx("onnxruntime")
    T = onnx.TensorProto
    w = rng.integers(-128, 128, (16, 16)).astype(np.int8)
    nodes = [
        onnx.helper.make_node("DequantizeLinear", ["wq", "s"], ["w"]),
        onnx.helper.make_node("MatMul", ["x", "w"], ["m"]),
        onnx.helper.make_node("Add", ["m", "w"], ["y"]),
    ]
    inits = [_init(onnx, w, "wq"), _init(onnx, np.float32(0.05), "s")]
    data = onnx_model(onnx, nodes, [("x", T.FLOAT, [16, 16])], [("y", T.FLOAT, None)], inits, 13)
    loaded = ember.onnx.load(data)
    assert quantized_steps(loaded) == []
    x = rng.standard_normal((16, 16)).astype(np.float32)
    (want,) = run_ort(ort, data, x)
    np.testing.assert_allclose(loaded(Tensor.from_data(x)).to_numpy(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", ["cube", "flex+fusion"])
def test_quantized_readers_on_other_devices(rng, name):
    """The same model on cube (its WGSL quantized matmul) and under fusion (quantized_linear
    recorded as one call), against onnxruntime."""
    from tests.conftest import make_device

    onnx = import_onnx("onnx")
    ort = import_onnx("onnxruntime")
    reader, shape, dtype, level, zero_kind, axis, attrs = CASES["matmul-int8-axis-signed-zero"]
    w = rng.integers(-128, 128, shape).astype(dtype)
    scale = (np.abs(rng.standard_normal(shape[1])) * 0.02 + 0.001).astype(np.float32)
    zero = rng.integers(-64, 64, shape[1]).astype(dtype)
    data = _dequantize_then(onnx, reader, w, scale, zero, axis, ["x", "w"], attrs, (2, 3, shape[0]))
    device = make_device(name)
    loaded = ember.onnx.load(data, device=device)
    assert len(quantized_steps(loaded)) == 1
    x = rng.standard_normal((2, 3, shape[0])).astype(np.float32)
    (want,) = run_ort_as_written(ort, data, x)
    np.testing.assert_allclose(loaded(Tensor.from_data(x, device=device)).to_numpy(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("k", [64, 1100])
def test_qlinear_matmul_takes_the_packed_weight_only_where_its_sum_is_exact(rng, k):
    """255 * sum |w - z| per output below 2**24: the float32 sum equals the int32 one, so the
    requantized result is onnxruntime's exactly; a longer row (1100 x 127 x 255 > 2**24)
    stays on the int32 path."""
    onnx = import_onnx("onnx")
    ort = import_onnx("onnxruntime")
    T = onnx.TensorProto
    b = np.where(rng.random((k, 6)) < 0.5, -127, 127).astype(np.int8)
    inits = [
        _init(onnx, np.float32(0.02), "sa"),
        _init(onnx, np.uint8(128), "za"),
        _init(onnx, b, "b"),
        _init(onnx, np.full(6, 0.003, np.float32), "sb"),
        _init(onnx, np.zeros(6, np.int8), "zb"),
        _init(onnx, np.float32(0.5 * k / 64), "sy"),
        _init(onnx, np.uint8(100), "zy"),
    ]
    node = onnx.helper.make_node("QLinearMatMul", ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"], ["y"])
    data = onnx_model(onnx, [node], [("a", T.UINT8, [5, k])], [("y", T.UINT8, None)], inits, 13)
    loaded = ember.onnx.load(data)
    assert len(quantized_steps(loaded)) == (1 if k == 64 else 0)
    a = rng.integers(0, 256, (5, k)).astype(np.uint8)
    (want,) = run_ort_as_written(ort, data, a)
    np.testing.assert_array_equal(loaded(Tensor.from_data(a, dtype=DType.UINT8)).to_numpy(), want)


@pytest.mark.parametrize("kind", ["int4", "uint4", "int4-no-zero-point"])
@pytest.mark.parametrize("level", ["block", "axis"])
def test_4_bit_dequantize_linear_weights_run_packed_int4(rng, kind, level):
    """ONNX int4/uint4 weights (blocks of 32 along the reduced axis, or per output column)
    become ember's packed int4 (two values per byte): float64 numpy of the spec's
    dequantization as the oracle."""
    onnx = import_onnx("onnx")
    T = onnx.TensorProto
    k, n, block = 64, 12, 32
    low, high, elem = (0, 16, T.UINT4) if kind == "uint4" else (-8, 8, T.INT4)
    w = rng.integers(low, high, (k, n))
    shape = (k // block, n) if level == "block" else (n,)
    scale = (np.abs(rng.standard_normal(shape)) * 0.05 + 0.01).astype(np.float32)
    has_zero = kind != "int4-no-zero-point"
    zero = rng.integers(low, high, shape) if has_zero else np.zeros(shape, np.int64)
    attrs = {"axis": 0, "block_size": block} if level == "block" else {"axis": 1}
    nodes = [
        onnx.helper.make_node("DequantizeLinear", ["wq", "s", "z"] if has_zero else ["wq", "s"], ["w"], **attrs),
        onnx.helper.make_node("MatMul", ["x", "w"], ["y"]),
    ]
    inits = [onnx.helper.make_tensor("wq", elem, [k, n], w.flatten().tolist()), _init(onnx, scale, "s")]
    if has_zero:
        inits.append(onnx.helper.make_tensor("z", elem, list(shape), zero.flatten().tolist()))
    data = onnx_model(onnx, nodes, [("x", T.FLOAT, [3, k])], [("y", T.FLOAT, None)], inits, 21)
    loaded = ember.onnx.load(data)
    assert len(quantized_steps(loaded)) == 1
    (_, values, _) = loaded.program.const_tensors[0]
    assert values.dtype == np.uint8 and values.shape == (n, k // 2)  # packed two per byte
    x = rng.standard_normal((3, k)).astype(np.float32)
    reps = block if level == "block" else 1
    full_s = np.repeat(scale, reps, 0) if level == "block" else scale
    full_z = np.repeat(zero, reps, 0) if level == "block" else zero
    dequantized = (w - full_z) * full_s.astype(np.float64)
    np.testing.assert_allclose(loaded(Tensor.from_data(x)).to_numpy(), x @ dequantized, rtol=1e-5, atol=1e-5)
