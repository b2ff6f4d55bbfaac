"""What ember supports of a node: its operator and version, its attributes (an attribute no
builder reads is refused), and the width of the narrow int types it computes in."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ember.errors import OnnxError
from ember.onnx import proto
from ember.onnx.ops import Node, OpDef, lookup
from ember.tensor import Tensor

# ONNX element types ember holds in a wider int: (width, signed) (int8, uint16, int16, uint32).
NARROW = {3: (8, True), 4: (16, False), 5: (16, True), 12: (32, False)}
# Operators whose int results can leave their type's range (wrapped to its width).
WRAPPING = {
    "Add",
    "Sub",
    "Mul",
    "Div",
    "Neg",
    "Abs",
    "Pow",
    "Sum",
    "Mean",
    "BitShift",
    "BitwiseNot",
    "CumSum",
    "ReduceSum",
    "ReduceProd",
    "ReduceSumSquare",
    "ReduceL1",
    "MatMul",
    "Gemm",
    "Cast",
    "CastLike",
}


@dataclass
class Unsupported:
    op_type: str
    domain: str
    node: str
    opset: int
    reason: str

    def describe(self) -> str:
        op = self.op_type if not self.domain else f"{self.domain}.{self.op_type}"
        name = repr(self.node) if self.node else "(unnamed)"
        return f"{op} (node {name}, opset {self.opset}): {self.reason}"


def node_opset(opsets: dict[str, int], domain: str) -> int:
    return opsets.get("" if domain == "ai.onnx" else domain, 0)


def check_node(node: Any, opsets: dict[str, int]) -> tuple[OpDef | None, int, Unsupported | None]:
    """The operator definition and ONNX version of ``node``, or why ember cannot run it."""
    domain = "" if node.domain in ("", "ai.onnx") else node.domain
    opset = node_opset(opsets, domain)
    opdef = lookup(domain, node.op_type)
    if opdef is None:
        reason = "ember does not implement this operator"
        return None, 0, Unsupported(node.op_type, domain, node.name, opset, reason)
    version = proto.schema_version(node.op_type, domain, opset) if domain == "" else opset
    if version is None:
        reason = f"ONNX defines no {node.op_type} in opset {opset}"
        return None, 0, Unsupported(node.op_type, domain, node.name, opset, reason)
    if version < opdef.since:
        reason = (
            f"ember implements {node.op_type} from its version {opdef.since}, the model uses version {version}; "
            f"re-export with a newer opset (e.g. opset_version=17)"
        )
        return None, version, Unsupported(node.op_type, domain, node.name, opset, reason)
    return opdef, version, None


def unsupported_error(found: list[Unsupported], label: str) -> OnnxError:
    first = found[0]
    more = ""
    if len(found) > 1:
        others = sorted({u.op_type for u in found[1:]} - {first.op_type})
        more = f"; {len(found) - 1} more unsupported node(s)" + (f" ({', '.join(others)})" if others else "")
    if label.startswith("<"):  # the model came as bytes or a ModelProto, not from a path
        how = f"ember.onnx.describe() of the same {'bytes' if label == '<bytes>' else 'ModelProto'}"
    else:
        how = f"ember.onnx.describe({label!r})"
    return OnnxError(
        f"ember: {label}: unsupported ONNX operator {first.describe()}{more}. "
        f"{how} lists every operator of the model and flags the ones ember lacks"
    )


def check_attributes(label: str, node: Any, opdef: OpDef, view: Node) -> None:
    """Refuse an attribute that no builder of the operator reads (ember would silently
    ignore it), unless it holds the value the spec gives as its default."""
    if not view.unread():
        return
    with contextlib.suppress(Exception):
        opdef.build(view)  # the tensor builder may read attributes the numpy one does not
    unread = view.unread()
    if not unread:
        return
    defaults = proto.attribute_defaults(node.op_type, "" if node.domain == "ai.onnx" else node.domain, view.opset)
    for key in unread:
        if key in defaults and _same(proto.attribute_value(node, key), defaults[key]):
            continue
        read = sorted(k for k in view.read if k in view.attrs)
        raise OnnxError(
            f"ember: {label}: ONNX {view.where}: attribute {view.describe_attr(key)} "
            "is not supported: ember's implementation does not read it"
            + (f" (it reads {', '.join(read)})" if read else "")
        )


def narrow(fn: Callable[..., Any], elem_type: int | None) -> Callable[..., Any]:
    """``fn`` with its output wrapped to the width of its ONNX type when that is an int
    ember holds wider (int8, int16, uint16 in int32; uint32 in int64): ONNX's arithmetic
    wraps at the type's own width."""
    bits = NARROW.get(elem_type) if elem_type is not None else None
    if bits is None:
        return fn
    width, signed = bits

    def wrapped(*args: Any) -> Any:
        return wrap_int(fn(*args), width, signed)

    return wrapped


def wrap_int(x: Tensor, width: int, signed: bool) -> Tensor:
    """Int values reduced modulo ``2**width`` (two's complement when ``signed``)."""
    low = x.bitwise_and((1 << width) - 1)
    if not signed:
        return low
    half = 1 << (width - 1)
    return low.where(low.lower_elem(half), low - (1 << width))


def _same(value: Any, default: Any) -> bool:
    if isinstance(value, bytes) or isinstance(default, bytes):
        return value == default
    try:
        return bool(np.array_equal(np.asarray(value), np.asarray(default)))
    except Exception:
        return False
