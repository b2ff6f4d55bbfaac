"""``ember.onnx.load``: an ONNX model as an ember Module."""

from __future__ import annotations

from ember.device import Device
from ember.onnx.model import OnnxModel
from ember.onnx.plan import Planner, check_node, unsupported_error
from ember.onnx.proto import Source, UnknownOperator, read_model


def load(source: Source, device: Device | None = None, *, untie: bool = True) -> OnnxModel:
    """Import an ONNX model (a path, the file's bytes, or an ``onnx.ModelProto``).

    Returns an :class:`OnnxModel` on ``device`` (default ``Device.default()``) whose
    float initializers are :class:`~ember.module.Param` s (trainable; an initializer
    holding infinities, such as an attention mask, is not) and whose ``forward`` runs
    the graph with ember's tensor ops: it differentiates on an autodiff device and
    compiles with ``ember.compile``. Shape arithmetic is folded here when the model
    fixes its input shapes, and computed from the inputs' shapes at ``forward`` for
    dynamic dims.

    ``untie=False`` keeps ``Identity(initializer)`` aliases tied (exporters use them to
    deduplicate initializers whose values happen to be equal).

    Raises :class:`~ember.errors.OnnxError` for a file that is not a valid ONNX model
    and for an operator ember does not implement (naming the operator, the node and
    the opset).

    >>> model = ember.onnx.load("model.onnx", Device.flex().autodiff())  # doctest: +SKIP
    >>> logits = model(images)                                           # doctest: +SKIP
    """
    device = device or Device.default()
    try:
        file = read_model(source)
    except UnknownOperator as error:  # name the node, the operator and the opset
        opsets = error.file.opsets()
        found = [p for p in (check_node(node, opsets)[2] for node in error.file.graph.node) if p is not None]
        if found:
            raise unsupported_error(found, error.file.label) from None
        raise
    program, params, states = Planner(file, device, untie=untie).build()
    return OnnxModel(params=params, states=states, program=program)
