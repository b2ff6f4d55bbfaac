"""The checker and shape inference read the model without its large initializers'
values (they serialize what they are given): the same structure, dims and types, and
the same inferred shapes; a weight whose bytes do not match its dims is still named."""

from __future__ import annotations

import numpy as np
import pytest

from ember.errors import OnnxError
from tests.onnx_import.helpers import import_onnx


def _model(onnx, rng, weight: np.ndarray | None = None):
    helper = onnx.helper
    w = rng.standard_normal((64, 32)).astype(np.float32) if weight is None else weight
    shape = np.array([-1, 8, 4], np.int64)  # small: stays for inference to read
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Reshape", ["h", "shape"], ["r"]),
        helper.make_node("Relu", ["r"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [3, 64])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [3, 8, 4])],
        [onnx.numpy_helper.from_array(w, "w"), onnx.numpy_helper.from_array(shape, "shape")],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_light_copy_keeps_structure_and_shapes(rng):
    onnx = import_onnx()
    from ember.onnx import proto

    model = _model(onnx, rng)
    light = proto.without_weights(model)
    assert [t.name for t in light.graph.initializer] == ["shape"]  # the weight's bytes left
    moved = {i.name: proto.value_type(i) for i in light.graph.input}
    assert moved["w"] == (onnx.TensorProto.FLOAT, (64, 32))
    assert [n.op_type for n in light.graph.node] == ["MatMul", "Reshape", "Relu"]
    assert light.opset_import[0].version == 17 and light.ir_version == model.ir_version
    assert len(model.graph.initializer) == 2  # the model itself is untouched
    onnx.checker.check_model(light)
    file = proto.ModelFile(model, "<test>")
    shapes = proto.infer_shapes(file)
    full = onnx.shape_inference.infer_shapes(model, data_prop=True)
    expected = {i.name: proto.value_type(i) for i in full.graph.value_info}
    assert shapes["h"] == expected["h"] == (onnx.TensorProto.FLOAT, (3, 32))
    assert shapes["r"] == expected["r"] == (onnx.TensorProto.FLOAT, (3, 8, 4))  # read the small initializer


def test_a_weight_whose_bytes_miss_its_dims_is_named(rng):
    onnx = import_onnx()
    import ember.onnx

    model = _model(onnx, rng)
    weight = model.graph.initializer[0]
    weight.raw_data = weight.raw_data[:-8]  # two values short
    with pytest.raises(OnnxError, match="'w'"):
        ember.onnx.load(model.SerializeToString())
