"""Bad files and unsupported models raise a clear ``OnnxError``; ``describe`` reports
operators, opsets and shapes and flags what ember lacks."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import ember.onnx
from ember import Device, Tensor
from ember.errors import DTypeError, EmberError, ModuleError, OnnxError
from tests.onnx_import.helpers import onnx_model


@pytest.fixture
def small(onnx) -> bytes:
    """y = relu(x @ w + b) with a dynamic batch: a valid model to break."""
    helper, numpy_helper = onnx.helper, onnx.numpy_helper
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(3).astype(np.float32), "b")
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"], name="matmul"),
        helper.make_node("Add", ["h", "b"], ["z"], name="add"),
        helper.make_node("Relu", ["z"], ["y"], name="relu"),
    ]
    return onnx_model(onnx, nodes, [("x", 1, ["batch", 4])], [("y", 1, ["batch", 3])], [w, b])


def test_a_valid_model_loads(small):
    model = ember.onnx.load(small, Device.flex())
    assert model(Tensor.zeros([2, 4])).dims() == [2, 3]
    assert set(model.weights) == {"w", "b"}


@pytest.mark.parametrize(
    "data", [b"", b"not an onnx file at all \xff\xfe\x00", b"\x08" * 7], ids=["empty", "garbage", "wire-junk"]
)
def test_bytes_that_are_not_onnx(onnx, data):
    with pytest.raises(OnnxError, match="ember: "):
        ember.onnx.load(data)


def test_every_truncation_raises_an_ember_error(small):
    for cut in sorted({*range(0, len(small), 7), len(small) - 1, len(small) - 2}):
        with pytest.raises(OnnxError) as info:
            ember.onnx.load(small[:cut], Device.flex())
        assert "ember:" in str(info.value)


def test_files(small, tmp_path):
    path = tmp_path / "model.onnx"
    path.write_bytes(small[: len(small) // 2])
    with pytest.raises(OnnxError, match=r"model.onnx .*(truncated|corrupt|check)"):
        ember.onnx.load(path)
    with pytest.raises(OnnxError, match="no ONNX file at"):
        ember.onnx.load(tmp_path / "missing.onnx")
    with pytest.raises(OnnxError, match="is a directory"):
        ember.onnx.load(tmp_path)
    (tmp_path / "empty.onnx").write_bytes(b"")
    with pytest.raises(OnnxError, match="empty"):
        ember.onnx.load(tmp_path / "empty.onnx")
    with pytest.raises(OnnxError, match="expected a path, bytes or an onnx.ModelProto"):
        ember.onnx.load(12)
    path.write_bytes(small)
    assert ember.onnx.load(str(path), Device.flex())(Tensor.zeros([1, 4])).dims() == [1, 3]


def test_a_model_failing_the_checker(onnx):
    nodes = [onnx.helper.make_node("Relu", ["nowhere"], ["y"], name="r")]
    data = onnx_model(onnx, nodes, [("x", 1, [2])], [("y", 1, [2])])
    with pytest.raises(OnnxError, match="fails the ONNX model check"):
        ember.onnx.load(data)


def test_an_unsupported_operator_names_the_op_the_node_and_the_opset(onnx):
    helper = onnx.helper
    nodes = [
        helper.make_node("Relu", ["x"], ["h"], name="act"),
        helper.make_node("Binarizer", ["h"], ["y"], name="bin_1", domain="ai.onnx.ml"),
    ]
    data = onnx_model(onnx, nodes, [("x", 1, [3, 3])], [("y", 1, [3, 3])], opset=17, domains={"ai.onnx.ml": 3})
    with pytest.raises(
        OnnxError, match=r"unsupported ONNX operator ai.onnx.ml.Binarizer \(node 'bin_1', opset 3\).*describe"
    ):
        ember.onnx.load(data)
    report = ember.onnx.describe(data)
    assert not report.supported and "Binarizer" in str(report) and "UNSUPPORTED" in str(report)


def test_a_custom_domain_operator(onnx):
    helper = onnx.helper
    nodes = [helper.make_node("FusedThing", ["x"], ["y"], name="fused", domain="com.example")]
    data = onnx_model(onnx, nodes, [("x", 1, [2])], [("y", 1, [2])], domains={"com.example": 1})
    with pytest.raises(OnnxError, match=r"com\.example\.FusedThing \(node 'fused', opset 1\)"):
        ember.onnx.load(data)


def test_an_operator_newer_than_the_models_opset(onnx):
    """Gelu exists from opset 20: a model importing opset 17 cannot use it."""
    helper = onnx.helper
    graph = helper.make_graph(
        [helper.make_node("Gelu", ["x"], ["y"], name="g")],
        "g",
        [helper.make_tensor_value_info("x", 1, [2])],
        [helper.make_tensor_value_info("y", 1, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(OnnxError, match=r"Gelu \(node 'g', opset 17\): ONNX defines no Gelu in opset 17"):
        ember.onnx.load(model.SerializeToString(), Device.flex())
    report = ember.onnx.describe(model)
    assert [(o.op_type, o.supported) for o in report.ops] == [("Gelu", False)]


def test_a_missing_onnx_package_says_how_to_install_it(monkeypatch, small):
    monkeypatch.setitem(sys.modules, "onnx", None)
    with pytest.raises(OnnxError, match=r"pip install 'ember\[onnx\]'"):
        ember.onnx.load(small)


def test_wrong_inputs_at_forward(small):
    model = ember.onnx.load(small, Device.flex())
    with pytest.raises(ModuleError, match=r"takes 1 input\(s\) \(x\), got 2"):
        model(Tensor.zeros([1, 4]), Tensor.zeros([1, 4]))
    with pytest.raises(DTypeError, match="must be an ember Tensor"):
        model(np.zeros((1, 4), np.float32))
    with pytest.raises(DTypeError, match=r"'x' must be float32, got int64"):
        model(Tensor.zeros([1, 4], dtype="int64"))
    with pytest.raises(EmberError, match=r"must have shape \[batch, 4\]"):
        model(Tensor.zeros([1, 5]))
    assert model(x=Tensor.zeros([1, 4], dtype="float64")).dtype.value == "float32"  # floats are cast
    with pytest.raises(ModuleError, match="has no input 'z'"):
        model(z=Tensor.zeros([1, 4]))


def test_an_error_inside_the_graph_names_the_node(onnx):
    helper = onnx.helper
    nodes = [helper.make_node("Reshape", ["x", "s"], ["y"], name="bad_reshape")]
    data = onnx_model(onnx, nodes, [("x", 1, ["n"]), ("s", 7, [2])], [("y", 1, None)])
    model = ember.onnx.load(data, Device.flex())
    with pytest.raises(OnnxError, match=r"node 'bad_reshape' \(Reshape, opset 17\): cannot reshape"):
        model(Tensor.zeros([6]), Tensor.from_data(np.array([4, 4])))


def test_describe_lists_ops_opsets_and_shapes(onnx, small):
    report = ember.onnx.describe(small)
    assert report.supported and report.opsets == {"": 17}
    assert [(o.op_type, o.count, o.supported) for o in report.ops] == [
        ("MatMul", 1, True),
        ("Add", 1, True),
        ("Relu", 1, True),
    ]
    assert report.inputs[0].dims == ("batch", 4) and report.outputs[0].dims == ("batch", 3)
    assert report.nodes[0].outputs[0].dims == ("batch", 3)  # inferred
    text = str(report)
    assert "ai.onnx 17" in text and "x: float[batch, 4]" in text and "ember implements every operator" in text


def test_external_data(onnx, tmp_path):
    """Weights in a separate file load from the model's path; a missing data file, or the
    model's bytes without their data, raise an OnnxError saying so."""
    helper, numpy_helper = onnx.helper, onnx.numpy_helper
    w = numpy_helper.from_array(np.arange(16, dtype=np.float32).reshape(4, 4), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", 1, [1, 4])],
        [helper.make_tensor_value_info("y", 1, [1, 4])],
        [w],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save_model(model, tmp_path / "m.onnx", save_as_external_data=True, location="m.data", size_threshold=0)
    imported = ember.onnx.load(tmp_path / "m.onnx", Device.flex())
    np.testing.assert_array_equal(imported(Tensor.ones([1, 4])).to_numpy(), [[24.0, 28.0, 32.0, 36.0]])
    with pytest.raises(OnnxError, match="external data"):
        ember.onnx.load((tmp_path / "m.onnx").read_bytes())
    (tmp_path / "m.data").unlink()
    with pytest.raises(OnnxError, match="external data"):
        ember.onnx.load(tmp_path / "m.onnx")


def test_a_failing_operator_names_the_node_and_its_attributes_as_written(onnx):
    """An ember op failing inside a node is reported as the node, with its attributes as the
    file writes them, not as the ember op that raised (conv2d)."""
    helper = onnx.helper
    conv = helper.make_node("Conv", ["x", "w"], ["y"], name="Conv_12", pads=[1, 1, 1, 1], kernel_shape=[3, 3])
    data = onnx_model(onnx, [conv], [("x", 1, [1, 3, 5, 5]), ("w", 1, [4, "c", 3, 3])], [("y", 1, None)])
    model = ember.onnx.load(data, Device.flex())
    with pytest.raises(EmberError) as info:
        model(Tensor.zeros([1, 3, 5, 5]), Tensor.zeros([4, 2, 3, 3]))
    message = str(info.value)
    assert message.startswith(
        "ember: ONNX node 'Conv_12' (Conv, opset 17) with kernel_shape=[3, 3], pads=[1, 1, 1, 1] failed: "
    )
    assert "conv2d" not in message


def test_element_types_are_named_as_tensor_proto_names_them(onnx):
    helper = onnx.helper
    for elem, name in [(24, "FLOAT8E8M0"), (27, "FLOAT6E2M3"), (28, "FLOAT6E3M2")]:
        graph = helper.make_graph(
            [helper.make_node("Identity", ["x"], ["y"])],
            "g",
            [helper.make_tensor_value_info("x", elem, [2])],
            [helper.make_tensor_value_info("y", elem, [2])],
        )
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 25)])
        with (
            pytest.raises(OnnxError, match=rf"the ONNX element type {name} has no ember dtype") as info,
            pytest.warns(UserWarning, match="opset 25"),
        ):
            ember.onnx.load(model, Device.flex())
        assert "type type" not in str(info.value)


def test_an_opset_newer_than_documented_warns(onnx):
    data = onnx_model(onnx, [onnx.helper.make_node("Relu", ["x"], ["y"])], [("x", 1, [2])], [("y", 1, [2])], opset=22)
    with pytest.warns(UserWarning, match=r"opset 22, newer than the opsets ember.onnx documents \(up to 21\)"):
        ember.onnx.load(data, Device.flex())


def test_an_input_that_is_not_a_tensor_sequence_or_optional_is_named_as_such(onnx):
    """Sequence and optional inputs are taken (a list of tensors, None for an empty
    optional); a map input is refused, naming its type as ONNX writes it."""
    helper = onnx.helper
    info = helper.make_value_info("m", helper.make_map_type_proto(7, helper.make_tensor_type_proto(1, [2])))
    graph = helper.make_graph(
        [helper.make_node("Identity", ["m"], ["y"])], "g", [info], [helper.make_value_info("y", info.type)]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    with pytest.raises(
        OnnxError, match=r"graph input 'm' is a map \(map\(int64, tensor\(float\)\)\): ember.onnx takes"
    ):
        ember.onnx.load(model, Device.flex())


def test_the_describe_hint_follows_how_the_model_came(onnx, tmp_path):
    helper = onnx.helper
    node = helper.make_node("Binarizer", ["x"], ["y"], name="bin", domain="ai.onnx.ml")
    data = onnx_model(onnx, [node], [("x", 1, [3, 3])], [("y", 1, [3, 3])], domains={"ai.onnx.ml": 3})
    with pytest.raises(OnnxError, match=r"describe\(\) of the same bytes lists") as info:
        ember.onnx.load(data)
    assert "describe(path)" not in str(info.value)
    path = tmp_path / "det.onnx"
    path.write_bytes(data)
    with pytest.raises(OnnxError, match=r"ember.onnx.describe\('.*det.onnx'\) lists"):
        ember.onnx.load(path)
