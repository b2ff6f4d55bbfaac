"""``ember.onnx.load``: an ONNX model as an ember Module."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence

from ember.capture import compile as compile_fn
from ember.device import Device
from ember.errors import OnnxError
from ember.onnx.model import OnnxModel, _run_eager
from ember.onnx.plan import Planner
from ember.onnx.proto import ModelFile, Source, UnknownOperator, read_model
from ember.onnx.support import check_node, unsupported_error
from ember.onnx.trainable import Trainable, check_trainable

Dims = Sequence[int | str | None]
DOCUMENTED_OPSET = 21  # the newest ONNX opset README's list of operators covers


def load(
    source: Source,
    device: Device | None = None,
    *,
    input_shapes: Mapping[str, Dims] | None = None,
    untie: bool = True,
    trainable: Trainable = None,
    compile: bool = False,
    buckets: Mapping[str, int] | None = None,
    bucket_sizes: Sequence[int] | None = None,
) -> OnnxModel:
    """Import an ONNX model (a path, the file's bytes, or an ``onnx.ModelProto``).

    Returns an :class:`OnnxModel` on ``device`` (default ``Device.default()``) whose
    weights are :class:`~ember.module.Param` s and whose ``forward`` runs the graph with
    ember's tensor ops: it differentiates on an autodiff device and compiles with
    ``ember.compile``. By default an initializer is a weight (trains) when the graph
    reads it as one: Conv/ConvTranspose weight and bias, a MatMul/Gemm operand of rank
    >= 2 and the bias added to it, a normalization's scale and bias, an embedding table
    read by Gather (:mod:`ember.onnx.trainable` lists the rule). Every other initializer
    (scalars, masks, folded tables) is a constant of the program, never a ``Param``;
    ``model.describe_params()`` lists which is which, and why. Shape arithmetic is folded here when the model
    fixes its input shapes, and computed from the inputs' shapes at ``forward`` for
    dynamic dims.

    ``input_shapes`` replaces the dims the file declares for some inputs (ints, or a
    name or ``None`` for a dynamic dim): ``{"images": ["batch", 3, 224, 224]}`` lets a
    model exported with a fixed batch take any batch, where its graph allows (a
    ``Reshape`` the exporter wrote with the batch fixed still needs that batch).

    ``trainable`` replaces the rule: a :class:`~ember.module.ParamGroup` trains the float
    initializers it matches (their paths are ``weights.<initializer name>``:
    ``ParamGroup.contains("embeddings")``), a callable ``(name, info) -> bool`` decides
    each one from an :class:`~ember.onnx.InitializerInfo` (its shape, dtype, the operator
    types that read it, and the rule's answer ``info.default``: ``lambda name, info:
    info.default or "position" in name`` adds to the rule). An initializer holding
    infinities or NaN never trains.

    ``compile=True`` runs ``forward`` through ``ember.compile``: the first call per
    input shapes traces the graph, later calls replay it without Python per op (an op
    the capture cannot trace, such as one whose output shape depends on values, makes
    that call run eagerly, with one ``CompileWarning``); ``model.stats`` counts traces
    and replays. ``If``, ``Loop`` and ``Scan`` decide at trace time: a constant or
    shape-derived condition or trip count traces the taken branch or unrolls the loop; one
    read from a tensor's values runs eagerly (:mod:`ember.onnx.control`). It compiles the forward only: on an autodiff device, and inside
    another compiled function, the model runs eagerly; compile a training step whole
    with ``ember.compile``.

    ``buckets`` (with ``compile=True``) names inputs and the dim of each that holds
    independent rows, ``{"images": 0}``: a batch of any size then runs the trace of its
    bucket (the next power of two, or the next of ``bucket_sizes``), its rows padded and
    the outputs cut back (see ``ember.compile``'s ``buckets``), so a dynamic batch traces
    once per bucket instead of once per size. A graph whose ops mix rows (a mean over the
    batch) raises :class:`~ember.capture.BucketError` naming the op.

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
    newest = file.opsets().get("", 0)
    if newest > DOCUMENTED_OPSET:
        warnings.warn(
            f"ember: {file.label} imports ONNX opset {newest}, newer than the opsets ember.onnx documents "
            f"(up to {DOCUMENTED_OPSET}): an operator ONNX redefined since runs as ember implements it, "
            "which may differ; compare its outputs with onnxruntime",
            stacklevel=2,
        )
    if input_shapes:
        file = with_input_shapes(file, input_shapes)
    check_trainable(trainable)
    program, params, states = Planner(file, device, untie=untie, trainable=trainable).build()
    if (buckets is not None or bucket_sizes is not None) and not compile:
        raise OnnxError("ember: onnx.load: buckets pad the rows of a compiled forward; pass compile=True with them")
    compiled = None
    if compile:
        names = [spec.name for spec in program.inputs]
        unknown = [name for name in buckets or {} if name not in names]
        if unknown:
            raise OnnxError(
                f"ember: onnx.load: buckets names {unknown[0]!r}; the model's inputs are {', '.join(names)}"
            )
        # _run_eager(model, *inputs): input i is argument i + 1
        dims: dict[str | int, int] | None = None
        if buckets:
            dims = {names.index(name) + 1: dim for name, dim in buckets.items()}
        compiled = compile_fn(_run_eager, buckets=dims, bucket_sizes=bucket_sizes)
    return OnnxModel(weights=params, states=states, program=program, compiled=compiled)


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
