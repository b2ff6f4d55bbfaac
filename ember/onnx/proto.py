"""Reading ONNX files with the ``onnx`` package: parse the protobuf, check the model,
infer static shapes, and turn tensors and attributes into numpy and Python values.

Every failure (a missing package, a file that is not ONNX, a truncated file, a model
that fails ``onnx.checker``) raises :class:`~ember.errors.OnnxError` naming the fault.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import numpy as np

from ember.errors import OnnxError

Source = Any  # a path, bytes, or an onnx.ModelProto


def import_onnx() -> Any:
    """The ``onnx`` package, or an error saying how to install it."""
    try:
        import onnx
    except ImportError:
        raise OnnxError(
            "ember: reading ONNX models needs the onnx package: pip install 'ember[onnx]' (or pip install onnx)"
        ) from None
    return onnx


@dataclass
class ModelFile:
    """A parsed and checked model, with where it came from (for messages)."""

    model: Any  # onnx.ModelProto
    label: str  # the path, or "<bytes>"
    _light: Any = None

    @property
    def light(self) -> Any:
        """The model without its large initializers' values (see :func:`without_weights`):
        what the checker and shape inference read, so they do not serialize the weights."""
        if self._light is None:
            self._light = without_weights(self.model)
        return self._light

    @property
    def graph(self) -> Any:
        return self.model.graph

    def opsets(self) -> dict[str, int]:
        """``{domain: version}`` of the model's opset imports (ONNX's own domain is ``""``)."""
        out = {}
        for entry in self.model.opset_import:
            domain = "" if entry.domain in ("", "ai.onnx") else entry.domain
            out[domain] = int(entry.version)
        return out


def read_model(source: Source, check: bool = True) -> ModelFile:
    """Parse ``source`` (a path, bytes or an ``onnx.ModelProto``) and check it. An
    operator that the model's opset does not define raises :class:`UnknownOperator`
    with the parsed model attached (``error.file``), for the caller to name the node."""
    onnx = import_onnx()
    from google.protobuf.message import DecodeError

    if isinstance(source, onnx.ModelProto):
        model, label = source, "<ModelProto>"
    elif isinstance(source, (bytes, bytearray, memoryview)):
        label = "<bytes>"
        data = bytes(source)
        if not data:
            raise OnnxError("ember: the ONNX model is empty (0 bytes)")
        try:
            model = onnx.load_model_from_string(data)
        except (DecodeError, ValueError, RuntimeError) as error:
            raise OnnxError(
                f"ember: {label} is not a valid ONNX model (truncated or corrupt protobuf): {error}"
            ) from None
    elif isinstance(source, (str, os.PathLike)):
        label = os.fspath(source)
        if not os.path.exists(label):
            raise OnnxError(f"ember: no ONNX file at {label!r}")
        if os.path.isdir(label):
            raise OnnxError(f"ember: {label!r} is a directory, not an ONNX file")
        if os.path.getsize(label) == 0:
            raise OnnxError(f"ember: {label} is empty (0 bytes)")
        try:
            model = onnx.load(label)  # external data is read from the file's directory
        except onnx.checker.ValidationError as error:  # external data missing or out of place
            raise OnnxError(f"ember: {label}: cannot read its external data: {error}") from None
        except (DecodeError, ValueError, RuntimeError) as error:
            raise OnnxError(
                f"ember: {label} is not a valid ONNX file (truncated or corrupt protobuf): {error}"
            ) from None
        except OSError as error:
            raise OnnxError(f"ember: {label}: cannot read the model or its external data: {error}") from None
    else:
        raise OnnxError(f"ember: expected a path, bytes or an onnx.ModelProto, got {type(source).__name__}")
    file = ModelFile(model, label)
    if check:
        try:
            _check(onnx, file)
        except UnknownOperator as error:
            error.file = file
            raise
    return file


#: Initializers of at least this many values leave the copy the checker and shape
#: inference read: both serialize the model they are given (twice for inference), which
#: took seconds for a BERT-base export; small ones stay for shape inference to read
#: values from (a Reshape's shape, a Slice's bounds).
LARGE_INITIALIZER = 256


def without_weights(model: Any) -> Any:
    """A copy of ``model`` whose large initializers are graph inputs of the same type and
    dims instead: the graph's structure and shapes unchanged, without the weights' bytes.
    Their values are checked where they are read (:func:`to_array` names a tensor whose
    values do not match its dims)."""
    onnx = import_onnx()
    graph = model.graph
    large = [
        t
        for t in graph.initializer
        if t.data_location != onnx.TensorProto.EXTERNAL and _elements(t) >= LARGE_INITIALIZER
    ]
    if not large:
        return model
    light = onnx.ModelProto()
    for field, value in model.ListFields():
        if field.name != "graph":
            _copy_field(light, field, value)
    moved = {t.name for t in large}
    for field, value in graph.ListFields():
        if field.name != "initializer":
            _copy_field(light.graph, field, value)
    light.graph.initializer.extend(t for t in graph.initializer if t.name not in moved)
    declared = {info.name for info in graph.input}
    for tensor in large:
        if tensor.name not in declared:
            light.graph.input.append(
                onnx.helper.make_tensor_value_info(tensor.name, tensor.data_type, list(tensor.dims))
            )
    return light


def _copy_field(target: Any, field: Any, value: Any) -> None:
    """Sets protobuf ``field`` of ``target`` to ``value`` (a scalar, message or list)."""
    if hasattr(value, "extend"):  # a repeated field
        getattr(target, field.name).extend(value)
    elif field.message_type is None:
        setattr(target, field.name, value)
    else:
        getattr(target, field.name).CopyFrom(value)


def _elements(tensor: Any) -> int:
    """How many values a TensorProto holds, from its dims (reading ``raw_data`` would
    copy its bytes)."""
    count = 1
    for d in tensor.dims:
        count *= int(d)
    return count


class UnknownOperator(OnnxError):
    """The model check found an operator its opset does not define (the caller names it)."""

    file: ModelFile  # the model, set by read_model before the error leaves it


def _check(onnx: Any, file: ModelFile) -> None:
    model, label = file.model, file.label
    if not model.HasField("graph") or (not model.graph.node and not model.graph.output):
        raise OnnxError(f"ember: {label} holds no graph (an empty or truncated ONNX file)")
    try:
        onnx.checker.check_model(file.light)
    except onnx.checker.ValidationError as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        if "should be stored in" in first:
            raise OnnxError(
                f"ember: {label} keeps tensors in external data files: load it from its path, with the data "
                f"beside it ({first})"
            ) from None
        kind = UnknownOperator if "No Op registered" in first else OnnxError
        raise kind(f"ember: {label} fails the ONNX model check (truncated or malformed): {first}") from None
    except ValueError as error:  # models over 2 GB must be checked from their path
        if isinstance(label, str) and os.path.exists(label):
            try:
                onnx.checker.check_model(label)
                return
            except onnx.checker.ValidationError as inner:
                raise OnnxError(f"ember: {label} fails the ONNX model check: {inner}") from None
        raise OnnxError(f"ember: {label} cannot be checked: {error}") from None


def infer_shapes(file: ModelFile) -> dict[str, tuple[int, tuple[int | None, ...] | None]]:
    """``{value name: (elem_type, dims)}`` from ONNX's shape inference (``None`` for a
    dim or a rank it cannot tell). Values it cannot infer are missing."""
    onnx = import_onnx()
    try:
        inferred = onnx.shape_inference.infer_shapes(file.light, check_type=False, strict_mode=False, data_prop=True)
        infos = list(inferred.graph.value_info)
    except Exception:  # inference is an aid, not a requirement
        infos = []
    graph = file.graph
    out = {}
    for info in [*infos, *graph.input, *graph.output]:
        parsed = value_type(info)
        if parsed is not None:
            out[info.name] = parsed
    return out


def value_type(info: Any) -> tuple[int, tuple[int | None, ...] | None] | None:
    """``(elem_type, dims)`` of a ValueInfoProto holding a tensor type, else ``None``."""
    if not info.type.HasField("tensor_type"):
        return None
    tensor_type = info.type.tensor_type
    if not tensor_type.HasField("shape"):
        return (tensor_type.elem_type, None)
    dims = tuple(int(d.dim_value) if d.HasField("dim_value") else None for d in tensor_type.shape.dim)
    return (tensor_type.elem_type, dims)


def dim_names(info: Any) -> tuple[str | int | None, ...] | None:
    """A value's dims for display: ints, symbolic names (``"batch"``), or ``None``."""
    if not info.type.HasField("tensor_type") or not info.type.tensor_type.HasField("shape"):
        return None
    out: list[str | int | None] = []
    for d in info.type.tensor_type.shape.dim:
        out.append(int(d.dim_value) if d.HasField("dim_value") else (d.dim_param or None))
    return tuple(out)


def to_array(tensor: Any, where: str) -> np.ndarray:
    """A TensorProto's values as a numpy array (a copy, writable)."""
    onnx = import_onnx()
    if tensor.data_type == 8:
        raise OnnxError(f"ember: {where}: string tensors are not supported")
    try:
        array = onnx.numpy_helper.to_array(tensor)
    except Exception as error:
        raise OnnxError(f"ember: {where}: the tensor {tensor.name!r} cannot be read ({error})") from None
    expected = tuple(int(d) for d in tensor.dims)
    if array.shape != expected:
        raise OnnxError(
            f"ember: {where}: the tensor {tensor.name!r} holds {array.size} values for dims {list(expected)}"
        )
    return np.array(array, copy=True)


def attributes(node: Any, where: str) -> dict[str, Any]:
    """A node's attributes as Python values (tensors as numpy arrays)."""
    onnx = import_onnx()
    out: dict[str, Any] = {}
    for attr in node.attribute:
        if attr.ref_attr_name:
            raise OnnxError(f"ember: {where}: attribute references (function bodies) are not supported")
        kind = attr.type
        if kind == onnx.AttributeProto.TENSOR:
            out[attr.name] = to_array(attr.t, where)
        elif kind == onnx.AttributeProto.TENSORS:
            out[attr.name] = [to_array(t, where) for t in attr.tensors]
        elif kind == onnx.AttributeProto.STRING:
            out[attr.name] = attr.s.decode("utf-8", "replace")
        elif kind == onnx.AttributeProto.STRINGS:
            out[attr.name] = [s.decode("utf-8", "replace") for s in attr.strings]
        elif kind in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
            out[attr.name] = attr.g if kind == onnx.AttributeProto.GRAPH else list(attr.graphs)
        elif kind == onnx.AttributeProto.SPARSE_TENSOR:
            out[attr.name] = attr.sparse_tensor
        else:
            out[attr.name] = onnx.helper.get_attribute_value(attr)
    return out


def schema_version(op_type: str, domain: str, opset: int) -> int | None:
    """The ``since_version`` of the operator definition a model of ``opset`` uses, or
    ``None`` when ONNX does not define ``op_type`` there."""
    onnx = import_onnx()
    try:
        return int(onnx.defs.get_schema(op_type, opset, domain).since_version)
    except Exception:
        return None


def attribute_defaults(op_type: str, domain: str, opset: int) -> dict[str, Any]:
    """``{attribute: default value}`` of the operator's schema in ``opset`` (the attributes
    the spec gives a default; empty for an operator ONNX does not define)."""
    onnx = import_onnx()
    try:
        schema = onnx.defs.get_schema(op_type, opset, domain)
    except Exception:
        return {}
    out = {}
    for name, attr in schema.attributes.items():
        default = attr.default_value
        if default is not None and default.type != 0:
            out[name] = onnx.helper.get_attribute_value(default)
    return out


def attribute_value(node: Any, name: str) -> Any:
    """The raw value of the node's attribute ``name`` (as ``onnx.helper`` reads it)."""
    onnx = import_onnx()
    for attr in node.attribute:
        if attr.name == name:
            return onnx.helper.get_attribute_value(attr)
    return None


def type_name(tp: Any) -> str:
    """A TypeProto as ONNX writes it in its docs, with an article: ``a sequence
    (seq(tensor(float)))``, ``an optional value (optional(tensor(int64)))``."""
    from ember.onnx.dtypes import onnx_name

    def spell(t: Any) -> str:
        which = t.WhichOneof("value")
        if which == "tensor_type":
            return f"tensor({onnx_name(t.tensor_type.elem_type).lower()})"
        if which == "sequence_type":
            return f"seq({spell(t.sequence_type.elem_type)})"
        if which == "optional_type":
            return f"optional({spell(t.optional_type.elem_type)})"
        if which == "map_type":
            return f"map({onnx_name(t.map_type.key_type).lower()}, {spell(t.map_type.value_type)})"
        if which == "sparse_tensor_type":
            return f"sparse_tensor({onnx_name(t.sparse_tensor_type.elem_type).lower()})"
        return "an undefined type"

    kind = {
        "sequence_type": "a sequence",
        "optional_type": "an optional value",
        "map_type": "a map",
        "sparse_tensor_type": "a sparse tensor",
    }.get(tp.WhichOneof("value") or "", "a value of no type")
    return f"{kind} ({spell(tp)})"
