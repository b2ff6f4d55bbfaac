"""``ember.onnx.load``: an ONNX model as an ember Module."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ember.device import Device
from ember.errors import OnnxError
from ember.onnx.model import OnnxModel
from ember.onnx.plan import Planner, check_node, unsupported_error
from ember.onnx.proto import ModelFile, Source, UnknownOperator, read_model

Dims = Sequence[int | str | None]


def load(
    source: Source,
    device: Device | None = None,
    *,
    input_shapes: Mapping[str, Dims] | None = None,
    untie: bool = True,
) -> OnnxModel:
    """Import an ONNX model (a path, the file's bytes, or an ``onnx.ModelProto``).

    Returns an :class:`OnnxModel` on ``device`` (default ``Device.default()``) whose
    float initializers are :class:`~ember.module.Param` s (trainable; an initializer
    holding infinities, such as an attention mask, is not) and whose ``forward`` runs
    the graph with ember's tensor ops: it differentiates on an autodiff device and
    compiles with ``ember.compile``. Shape arithmetic is folded here when the model
    fixes its input shapes, and computed from the inputs' shapes at ``forward`` for
    dynamic dims.

    ``input_shapes`` replaces the dims the file declares for some inputs (ints, or a
    name or ``None`` for a dynamic dim): ``{"images": ["batch", 3, 224, 224]}`` lets a
    model exported with a fixed batch take any batch, where its graph allows (a
    ``Reshape`` the exporter wrote with the batch fixed still needs that batch).

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
    if input_shapes:
        file = with_input_shapes(file, input_shapes)
    program, params, states = Planner(file, device, untie=untie).build()
    return OnnxModel(weights=params, states=states, program=program)


def with_input_shapes(file: ModelFile, input_shapes: Mapping[str, Dims]) -> ModelFile:
    """A copy of the model with new dims on some inputs, and the shapes the file recorded
    for other values dropped (shape inference derives them again from the new dims)."""
    model = type(file.model)()
    model.CopyFrom(file.model)
    graph = model.graph
    inputs = {info.name: info for info in graph.input}
    for name, dims in input_shapes.items():
        info = inputs.get(name)
        if info is None or not info.type.HasField("tensor_type"):
            raise OnnxError(f"ember: {file.label} has no tensor input {name!r}; its inputs are {', '.join(inputs)}")
        shape = info.type.tensor_type.shape
        shape.ClearField("dim")
        for i, d in enumerate(dims):
            dim = shape.dim.add()
            if isinstance(d, bool) or not (d is None or isinstance(d, (int, str))) or (isinstance(d, int) and d < 0):
                raise OnnxError(
                    f"ember: input_shapes[{name!r}]: dim {i} must be an int >= 0, a name or None, got {d!r}"
                )
            if isinstance(d, int):
                dim.dim_value = d
            else:
                dim.dim_param = d or f"{name}_dim{i}"
    del graph.value_info[:]
    for info in graph.output:
        if info.type.HasField("tensor_type"):
            info.type.tensor_type.ClearField("shape")
    return ModelFile(model, file.label)
