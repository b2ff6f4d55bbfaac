"""Elementwise operators: math, arithmetic with broadcasting, comparisons, logic,
``Where``, ``Clip``, ``Cast``."""

from __future__ import annotations

from collections.abc import Callable
from functools import reduce
from typing import Any

import numpy as np

from ember.onnx.dtypes import NARROW, ember_dtype, numpy_dtype, onnx_type, to_narrow, widened
from ember.onnx.ops.common import scalar, scalar_operand
from ember.onnx.ops.registry import Node, numpy_op, op
from ember.tensor import Tensor

# ---------------------------------------------------------------------- unary math
_UNARY: dict[str, tuple[Callable[[Tensor], Tensor], Callable[[np.ndarray], np.ndarray] | None]] = {
    "Abs": (Tensor.abs, np.abs),
    "Neg": (Tensor.neg, np.negative),
    "Exp": (Tensor.exp, np.exp),
    "Log": (Tensor.log, np.log),
    "Sqrt": (Tensor.sqrt, np.sqrt),
    "Reciprocal": (Tensor.recip, np.reciprocal),
    "Sin": (Tensor.sin, np.sin),
    "Cos": (Tensor.cos, np.cos),
    "Tan": (Tensor.tan, np.tan),
    "Asin": (Tensor.asin, np.arcsin),
    "Acos": (Tensor.acos, np.arccos),
    "Atan": (Tensor.atan, np.arctan),
    "Sinh": (Tensor.sinh, np.sinh),
    "Cosh": (Tensor.cosh, np.cosh),
    "Tanh": (Tensor.tanh, np.tanh),
    "Asinh": (Tensor.asinh, np.arcsinh),
    "Acosh": (Tensor.acosh, np.arccosh),
    "Atanh": (Tensor.atanh, np.arctanh),
    "Erf": (Tensor.erf, None),
    "Floor": (Tensor.floor, np.floor),
    "Ceil": (Tensor.ceil, np.ceil),
    "Round": (Tensor.round, np.round),
    "Sign": (Tensor.sign, np.sign),
    "IsNaN": (Tensor.is_nan, np.isnan),
    "Not": (Tensor.bool_not, np.logical_not),
    "BitwiseNot": (Tensor.bitwise_not, np.invert),
}


def _unary_builder(fn: Callable[[Tensor], Tensor]) -> Callable[[Node], Callable[..., Any]]:
    return lambda node: fn


def _unary_numpy(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[Node], Callable[..., Any]]:
    def build(node: Node) -> Callable[..., Any]:
        def run(x: np.ndarray) -> np.ndarray:
            return np.asarray(fn(x)).astype(x.dtype) if x.dtype.kind == "f" else np.asarray(fn(x))

        return run

    return build


for _name, (_tensor_fn, _numpy_fn) in _UNARY.items():
    op(_name)(_unary_builder(_tensor_fn))
    if _numpy_fn is not None:
        numpy_op(_name)(_unary_numpy(_numpy_fn))


@op("Identity")
def identity(node: Node) -> Callable[..., Any]:
    return lambda x: x


numpy_op("Identity")(identity)


@op("IsInf")
def is_inf(node: Node) -> Callable[..., Any]:
    pos, neg = node.attr("detect_positive", 1), node.attr("detect_negative", 1)

    def run(x: Tensor) -> Tensor:
        if pos and neg:
            return x.is_inf()
        if pos:
            return x.equal_elem(float("inf"))
        if neg:
            return x.equal_elem(float("-inf"))
        return x.is_inf().bool_and(x.is_nan())  # all false

    return run


# ---------------------------------------------------------------------- binary arithmetic
def _div(a: Tensor, b: Tensor) -> Tensor:
    # ONNX divides ints as C does (toward zero); ember's ``/`` is true division.
    return a / b if a.is_float() else a.div(b, rounding_mode="trunc")


def _mod_builder(node: Node) -> Callable[..., Any]:
    if node.attr("fmod", 0):
        return lambda a, b: a.fmod(b)
    return lambda a, b: a.remainder(b)


def _pow(a: Tensor, b: Tensor) -> Tensor:
    # The result has the base's type (an int exponent on a float base, or the reverse).
    if a.is_float():
        return a.powf(b.cast(a.dtype))
    if b.is_float():
        return a.cast(b.dtype).powf(b).cast(a.dtype)
    return a.pow(b)


_BINARY: dict[str, Callable[[Any, Any], Any]] = {
    "Add": lambda a, b: a + b,
    "Sub": lambda a, b: a - b,
    "Mul": lambda a, b: a * b,
    "Div": _div,
    "Pow": _pow,
    "And": lambda a, b: a.bool_and(b),
    "Or": lambda a, b: a.bool_or(b),
    "Xor": lambda a, b: a.bool_xor(b),
    "BitwiseAnd": lambda a, b: a.bitwise_and(b),
    "BitwiseOr": lambda a, b: a.bitwise_or(b),
    "BitwiseXor": lambda a, b: a.bitwise_xor(b),
    "Equal": lambda a, b: a.equal(b),
    "Less": lambda a, b: a.lower(b),
    "LessOrEqual": lambda a, b: a.lower_equal(b),
    "Greater": lambda a, b: a.greater(b),
    "GreaterOrEqual": lambda a, b: a.greater_equal(b),
}

# ``x op scalar`` and ``scalar op x`` for a one-element constant operand: one fewer tensor,
# and a scalar op the fusion backends fold into their kernels.
_WITH_SCALAR: dict[str, tuple[Callable[[Tensor, Any], Tensor], Callable[[Any, Tensor], Tensor] | None]] = {
    "Add": (lambda x, s: x + s, lambda s, x: x + s),
    "Sub": (lambda x, s: x - s, lambda s, x: s - x),
    "Mul": (lambda x, s: x * s, lambda s, x: x * s),
    "Div": (lambda x, s: x / s if x.is_float() else x.div(s, rounding_mode="trunc"), None),
    "Pow": (lambda x, s: x.powf_scalar(float(s)) if x.is_float() else x**s, None),
    "Equal": (lambda x, s: x.equal_elem(s), lambda s, x: x.equal_elem(s)),
    "Less": (lambda x, s: x.lower_elem(s), lambda s, x: x.greater_elem(s)),
    "LessOrEqual": (lambda x, s: x.lower_equal_elem(s), lambda s, x: x.greater_equal_elem(s)),
    "Greater": (lambda x, s: x.greater_elem(s), lambda s, x: x.lower_elem(s)),
    "GreaterOrEqual": (lambda x, s: x.greater_equal_elem(s), lambda s, x: x.lower_equal_elem(s)),
}


def _binary_builder(name: str) -> Callable[[Node], Callable[..., Any]]:
    general = _BINARY[name]

    def build(node: Node) -> Callable[..., Any]:
        right, left = _WITH_SCALAR.get(name, (None, None))
        s = scalar_operand(node, 1, 0)
        if right is not None and s is not None:
            return lambda x, _c: right(x, s)
        s = scalar_operand(node, 0, 1)
        if left is not None and s is not None:
            return lambda _c, x: left(s, x)
        return general

    return build


for _name in _BINARY:
    op(_name)(_binary_builder(_name))
op("Mod")(_mod_builder)


def _np_div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    if a.dtype.kind in "iu" and b.dtype.kind in "iu":
        q = np.abs(a) // np.abs(b)
        return (q * np.sign(a) * np.sign(b)).astype(np.result_type(a, b))
    return (a / b).astype(np.result_type(a, b))


def _np_mod(node: Node) -> Callable[..., Any]:
    if node.attr("fmod", 0):
        return np.fmod
    return np.mod


_NP_BINARY: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "Add": np.add,
    "Sub": np.subtract,
    "Mul": np.multiply,
    "Div": _np_div,
    "Pow": lambda a, b: np.power(a, b).astype(a.dtype),
    "And": np.logical_and,
    "Or": np.logical_or,
    "Xor": np.logical_xor,
    "BitwiseAnd": np.bitwise_and,
    "BitwiseOr": np.bitwise_or,
    "BitwiseXor": np.bitwise_xor,
    "Equal": np.equal,
    "Less": np.less,
    "LessOrEqual": np.less_equal,
    "Greater": np.greater,
    "GreaterOrEqual": np.greater_equal,
}


def _np_binary_builder(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[[Node], Callable[..., Any]]:
    def build(node: Node) -> Callable[..., Any]:
        def run(a: np.ndarray, b: np.ndarray) -> np.ndarray:
            out = np.asarray(fn(a, b))
            # ONNX keeps the operands' type; numpy would widen int32 * int64.
            return out if out.dtype.kind == "b" or a.dtype == out.dtype else out.astype(a.dtype)

        return run

    return build


for _name, _fn in _NP_BINARY.items():
    numpy_op(_name)(_np_binary_builder(_fn))
numpy_op("Mod")(_np_mod)


@op("BitShift")
def bit_shift(node: Node) -> Callable[..., Any]:
    if node.attr("direction") == "LEFT":
        return lambda a, b: a.bitwise_left_shift(b)
    return lambda a, b: a.bitwise_right_shift(b)


# ---------------------------------------------------------------------- variadic
_VARIADIC = {
    "Sum": lambda a, b: a + b,
    "Max": lambda a, b: a.maximum(b),
    "Min": lambda a, b: a.minimum(b),
}


def _variadic_builder(name: str) -> Callable[[Node], Callable[..., Any]]:
    pair = _VARIADIC[name]

    def build(node: Node) -> Callable[..., Any]:
        return lambda *xs: reduce(pair, xs)

    return build


for _name in _VARIADIC:
    op(_name)(_variadic_builder(_name))


@op("Mean")
def mean(node: Node) -> Callable[..., Any]:
    return lambda *xs: reduce(lambda a, b: a + b, xs) / len(xs)


@numpy_op(["Sum", "Max", "Min", "Mean"])
def _np_variadic(node: Node) -> Callable[..., Any]:
    fn = {"Sum": np.add, "Max": np.maximum, "Min": np.minimum, "Mean": np.add}[node.op_type]

    def run(*xs: np.ndarray) -> np.ndarray:
        out = reduce(fn, xs)
        if node.op_type == "Mean":
            out = out / len(xs)
        return np.asarray(out).astype(xs[0].dtype)

    return run


# ---------------------------------------------------------------------- selection
@op("Where")
def where(node: Node) -> Callable[..., Any]:
    def run(cond: Tensor, x: Tensor, y: Tensor) -> Tensor:
        return x.where(cond, y)

    return run


@numpy_op("Where")
def _np_where(node: Node) -> Callable[..., Any]:
    def run(cond: np.ndarray, x: np.ndarray, y: np.ndarray) -> np.ndarray:
        return np.where(cond, x, y).astype(x.dtype)

    return run


@op("Clip", host=(1, 2))
def clip(node: Node) -> Callable[..., Any]:
    low, high = node.attr("min"), node.attr("max")  # opset 6 attributes; inputs since 11

    def run(x: Tensor, lo: Any = None, hi: Any = None) -> Tensor:
        a = scalar(lo) if lo is not None and np.size(lo) else low
        b = scalar(hi) if hi is not None and np.size(hi) else high
        if a is None and b is None:
            return x
        if a is not None and b is not None and a > b:  # ONNX: min(max(x, lo), hi) is hi everywhere
            return x.clamp(b, b)
        return x.clamp(a, b)

    return run


@numpy_op("Clip")
def _np_clip(node: Node) -> Callable[..., Any]:
    low, high = node.attr("min"), node.attr("max")

    def run(x: np.ndarray, lo: Any = None, hi: Any = None) -> np.ndarray:
        a = scalar(lo) if lo is not None and np.size(lo) else low
        b = scalar(hi) if hi is not None and np.size(hi) else high
        return np.minimum(np.maximum(x, a) if a is not None else x, b if b is not None else x).astype(x.dtype)

    return run


# ---------------------------------------------------------------------- types
@op("Cast")
def cast(node: Node) -> Callable[..., Any]:
    to = int(node.attr("to", 1))
    saturate = bool(node.attr("saturate", 1))
    if to in NARROW:
        return lambda x: round_narrow(x, to, saturate)
    dtype = ember_dtype(to, node.label)
    return lambda x: x.cast(dtype)


@numpy_op("Cast")
def _np_cast(node: Node) -> Callable[..., Any]:
    to = int(node.attr("to", 1))
    saturate = bool(node.attr("saturate", 1))
    if to in NARROW:
        return lambda x: to_narrow(np.asarray(x), to, saturate)
    dtype = numpy_dtype(to, node.label)

    def run(x: np.ndarray) -> np.ndarray:
        if dtype.kind in "iu" and x.dtype.kind == "f":
            return np.trunc(x).astype(dtype)
        return x.astype(dtype)

    return run


@op("CastLike")
def cast_like(node: Node) -> Callable[..., Any]:
    to = node.elem_type(1)
    saturate = bool(node.attr("saturate", 1))
    if to in NARROW:
        assert to is not None
        return lambda x, like: round_narrow(x, to, saturate)
    return lambda x, like: x.cast(like.dtype)


@numpy_op("CastLike")
def _np_cast_like(node: Node) -> Callable[..., Any]:
    saturate = bool(node.attr("saturate", 1))

    def run(x: np.ndarray, like: np.ndarray) -> np.ndarray:
        to = onnx_type(like.dtype)
        if to in NARROW:
            assert to is not None
            return to_narrow(np.asarray(x), to, saturate)
        return x.astype(like.dtype)

    return run


def round_narrow(x: Tensor, elem: int, saturate: bool) -> Tensor:
    """``x`` rounded to a narrow ONNX type (float8, float4, int4, int2) and held widened
    (:mod:`ember.onnx.dtypes`). The rounding runs on the host (``ml_dtypes``): the tensor is
    read back, so the cast is not differentiable and an ``ember.compile`` trace runs it eagerly."""
    rounded = widened(to_narrow(x.to_numpy(), elem, saturate), elem)
    return Tensor.from_data(rounded, device=x.device)
