"""Helpers of the ONNX import tests: optional packages (a skip, or a failure under
``EMBER_REQUIRE_ONNX=1``), torch's exporter, onnxruntime as the oracle, and small
models built with ``onnx.helper``."""

from __future__ import annotations

import io
import os
import warnings
from typing import Any

import numpy as np
import pytest

REQUIRE_ONNX = os.environ.get("EMBER_REQUIRE_ONNX") == "1"


def import_onnx(name: str = "onnx") -> Any:
    """``onnx`` or ``onnxruntime``, or a skip (a failure when EMBER_REQUIRE_ONNX=1)."""
    try:
        module = __import__(name)
    except ImportError:
        if REQUIRE_ONNX:
            pytest.fail(f"{name} is required (EMBER_REQUIRE_ONNX=1) but not installed: pip install -e '.[test]'")
        pytest.skip(f"{name} is not installed")
    return module


def export(
    torch: Any,
    model: Any,
    args: tuple,
    dynamic: dict[str, dict[int, str]] | None = None,
    opset: int = 17,
    **kwargs: Any,
) -> bytes:
    """``model`` exported by torch's TorchScript exporter (``dynamo=False``), as bytes.

    The TorchScript exporter needs only torch and onnx (the default dynamo exporter
    also needs onnxscript and takes seconds per model)."""
    model.eval()
    names = [f"x{i}" for i in range(len(args))] if len(args) > 1 else ["x"]
    options: dict[str, Any] = {"input_names": names, "output_names": ["y"], "opset_version": opset}
    if dynamic:
        options["dynamic_axes"] = dynamic
    options.update(kwargs)
    buffer = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(model, args, buffer, dynamo=False, **options)
    return buffer.getvalue()


def run_ort(ort: Any, data: bytes, *inputs: np.ndarray) -> list[np.ndarray]:
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    return session.run(None, dict(zip(names, inputs)))


def onnx_model(
    onnx: Any,
    nodes: list[Any],
    inputs: list[tuple[str, int, list[Any]]],
    outputs: list[tuple[str, int, list[Any] | None]],
    initializers: Any = (),
    opset: int = 17,
    domains: dict[str, int] | None = None,
    check: bool = True,
) -> bytes:
    """A one-graph model built with ``onnx.helper``, serialized. Outputs given without a
    shape take the type and shape ONNX's shape inference gives them."""
    helper = onnx.helper
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info(n, t, s) for n, t, s in inputs],
        [
            helper.make_tensor_value_info(n, t, s) if s is not None else onnx.ValueInfoProto(name=n)
            for n, t, s in outputs
        ],
        initializer=list(initializers),
    )
    imports = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in (domains or {}).items()]
    model = helper.make_model(graph, opset_imports=imports, ir_version=8 if opset <= 17 else 9 if opset <= 19 else 10)
    if check and any(s is None for _, _, s in outputs):
        model = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    return model.SerializeToString()


def constants_as_initializers(onnx: Any, data: bytes) -> bytes:
    """The model with every ``Constant`` node's tensor moved into an initializer, as the
    dynamo exporter, onnxsim and onnxruntime's optimizers write scalars, masks and
    folded tables."""
    model = onnx.load_from_string(data)
    graph = model.graph
    kept = []
    for node in graph.node:
        if node.op_type == "Constant" and len(node.attribute) == 1 and node.attribute[0].name == "value":
            tensor = onnx.TensorProto()
            tensor.CopyFrom(node.attribute[0].t)
            tensor.name = node.output[0]
            graph.initializer.append(tensor)
        else:
            kept.append(node)
    del graph.node[:]
    graph.node.extend(kept)
    return model.SerializeToString()
