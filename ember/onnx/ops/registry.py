"""The operator table: one :class:`OpDef` per ONNX operator ember implements.

An operator is written as a *builder*: called once at load with the node (its
attributes, which inputs are known constants, their static shapes), it returns the
function the model runs at every ``forward``. That function takes the node's inputs
in order (``None`` for an omitted optional input) and returns the output, or a tuple
of outputs. Inputs listed in ``host`` are read on the host as numpy arrays (shapes,
axes, pads, scales...); the others arrive as ember Tensors, so everything a model
computes on tensors goes through ember's ops (autodiff, fusion, ``ember.compile``).

An operator may also give a ``numpy`` builder with the same contract over numpy
arrays: it folds constants at load and computes shape arithmetic (``Shape ->
Gather -> Concat -> Reshape``) on the host without touching a device. Without one,
such values are computed with the tensor builder on ``Device.flex()``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, overload

import numpy as np

from ember.errors import OnnxError

Builder = Callable[["Node"], Callable[..., Any]]


@dataclass
class OpDef:
    """How ember runs one ONNX operator."""

    name: str
    build: Builder
    host: frozenset[int] = frozenset()  # input positions read on the host (numpy)
    numpy: Builder | None = None  # the same operator over numpy arrays
    since: int = 1  # the oldest operator version (ONNX ``since_version``) implemented
    domain: str = ""
    shape_of: bool = False  # Shape and Size: the output depends on the input's shape only
    data_dependent: bool = False  # the output's shape depends on the input's values
    training: bool = False  # behaves differently on an autodiff device (Dropout, BatchNorm)
    eager: bool = False  # runs at every forward, never folded: sequences (lists of tensors), random draws


OPS: dict[tuple[str, str], OpDef] = {}


def op(
    name: str | Sequence[str],
    *,
    host: Sequence[int] = (),
    since: int = 1,
    domain: str = "",
    shape_of: bool = False,
    data_dependent: bool = False,
    training: bool = False,
    eager: bool = False,
) -> Callable[[Builder], Builder]:
    """Register a tensor builder for one or several operator names."""
    names = [name] if isinstance(name, str) else list(name)

    def register(build: Builder) -> Builder:
        for n in names:
            OPS[(domain, n)] = OpDef(
                n, build, frozenset(host), None, since, domain, shape_of, data_dependent, training, eager
            )
        return build

    return register


def numpy_op(name: str | Sequence[str], domain: str = "") -> Callable[[Builder], Builder]:
    """Register the numpy builder of operators already registered with :func:`op`."""
    names = [name] if isinstance(name, str) else list(name)

    def register(build: Builder) -> Builder:
        for n in names:
            OPS[(domain, n)].numpy = build
        return build

    return register


def lookup(domain: str, name: str) -> OpDef | None:
    return OPS.get(("" if domain == "ai.onnx" else domain, name))


def supported_ops() -> list[str]:
    """The names of the ONNX operators ember implements (domain-qualified outside ONNX's own)."""
    return sorted(n if d == "" else f"{d}.{n}" for d, n in OPS)


class Node:
    """A node as its builder sees it: attributes, constant inputs, static shapes."""

    def __init__(
        self,
        op_type: str,
        name: str,
        version: int,
        opset: int,
        attrs: dict[str, Any],
        inputs: list[str],
        outputs: list[str],
        consts: list[np.ndarray | None],
        shapes: list[tuple[int | None, ...] | None],
        types: Sequence[int | None] = (),
        out_types: Sequence[int | None] = (),
    ):
        self.op_type = op_type
        self.name = name
        self.version = version  # the operator's since_version in the model's opset
        self.opset = opset
        self.attrs = attrs
        self.inputs = inputs
        self.outputs = outputs
        self._consts = consts
        self._shapes = shapes
        self._types = list(types)
        self._out_types = list(out_types)
        self.read: set[str] = set()  # the attributes a builder asked for (the rest are refused)

    @property
    def label(self) -> str:
        return f"node {self.name!r} ({self.op_type})" if self.name else f"node (unnamed) ({self.op_type})"

    @property
    def where(self) -> str:
        """``node 'Conv_12' (Conv, opset 17)``: how messages name the node."""
        name = f"node {self.name!r}" if self.name else "node (unnamed)"
        return f"{name} ({self.op_type}, opset {self.opset})"

    def attr(self, key: str, default: Any = None) -> Any:
        """Attribute ``key`` as written in the file (``default`` when absent). Reading it tells
        the loader that the builder implements it: an attribute present in the node that no
        builder reads is refused at load."""
        self.read.add(key)
        return self.attrs.get(key, default)

    def uses(self, *keys: str) -> None:
        """Declare attributes a builder reads later, inside the function it returns."""
        self.read.update(keys)

    def unread(self) -> list[str]:
        """The node's attributes that no builder read."""
        return [key for key in self.attrs if key not in self.read]

    def describe_attr(self, key: str) -> str:
        """``key=value`` as the file writes it (``pads=[2, 2, 2, 2]``, ``mode='CRD'``)."""
        value = self.attrs.get(key)
        if isinstance(value, float):  # ONNX stores float32: its shortest decimal, as written
            return f"{key}={np.float32(value)!s}"
        if isinstance(value, (list, tuple)) and all(isinstance(v, float) for v in value):
            return f"{key}=[{', '.join(str(np.float32(v)) for v in value)}]"
        if isinstance(value, (list, tuple)) and all(isinstance(v, (int, float, str)) for v in value):
            return f"{key}={list(value)}"
        if isinstance(value, np.ndarray):
            return f"{key}=<tensor {value.dtype}{list(value.shape)}>"
        if isinstance(value, (int, float, str)):
            return f"{key}={value!r}"
        return f"{key}=<{type(value).__name__}>"

    def described(self) -> str:
        """The node as messages name it, with its attributes as the file writes them."""
        shown = [self.describe_attr(k) for k in self.attrs]
        return self.where + (f" with {', '.join(shown)}" if shown else "")

    def attr_error(self, key: str, message: str) -> OnnxError:
        """An error about attribute ``key``, naming the node and the value as written."""
        return self.error(f"attribute {self.describe_attr(key)}: {message}")

    def has(self, i: int) -> bool:
        """Whether optional input ``i`` is given."""
        return i < len(self.inputs) and self.inputs[i] != ""

    def const(self, i: int) -> np.ndarray | None:
        """Input ``i``'s value when it is known at load (a constant), else ``None``."""
        return self._consts[i] if i < len(self._consts) else None

    def shape(self, i: int) -> tuple[int | None, ...] | None:
        """Input ``i``'s static shape (``None`` for unknown dims), or ``None`` if unknown."""
        return self._shapes[i] if i < len(self._shapes) else None

    def elem_type(self, i: int) -> int | None:
        """Input ``i``'s ONNX element type as the file declares or infers it (``TensorProto.INT8``
        is 3), read from a constant's exact numpy dtype otherwise; ``None`` if unknown. Narrow
        ints are held wider on a device: this is the type the values stand for."""
        known = self._types[i] if i < len(self._types) else None
        if known:
            return known
        value = self.const(i)
        if value is None:
            return None
        from ember.onnx.dtypes import onnx_type

        return onnx_type(value.dtype)

    def out_elem_type(self, i: int = 0) -> int | None:
        """Output ``i``'s ONNX element type from shape inference, or ``None`` if unknown."""
        known = self._out_types[i] if i < len(self._out_types) else None
        return known or None

    def rank(self, i: int) -> int | None:
        shape = self.shape(i)
        return None if shape is None else len(shape)

    def error(self, message: str) -> OnnxError:
        return OnnxError(f"ember: ONNX {self.where}: {message}")

    @overload
    def ints(self, key: str) -> list[int] | None: ...

    @overload
    def ints(self, key: str, default: Sequence[int]) -> list[int]: ...

    @overload
    def ints(self, key: str, default: Sequence[int] | None) -> list[int] | None: ...

    def ints(self, key: str, default: Sequence[int] | None = None) -> list[int] | None:
        """Attribute ``key`` as a list of ints, else ``default`` (a list when given)."""
        self.read.add(key)
        value = self.attrs.get(key)
        if value is None:
            return None if default is None else list(default)
        return [int(v) for v in value]
