"""Arithmetic, math functions and matmul."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ember.backend.dtype import DType
from ember.backend.ops import BinaryOp, UnaryOp
from ember.errors import DTypeError, ShapeError, ValueRangeError
from ember.tensor import autocast
from ember.tensor.checks import BOOL_NP, FLOAT_NP, as_scalar, check_device, check_float_range, promote_pair
from ember.tensor.ops.base import TensorOpsBase
from ember.tensor.ops.elementwise import binary, is_integral, reverse_scalar, unary
from ember.tensor.ops.math import div_rounded
from ember.tensor.shape import broadcast_shapes

if TYPE_CHECKING:
    from typing import Self


class ArithmeticOps(TensorOpsBase):
    """Elementwise arithmetic with numpy broadcasting, math functions, matmul.

    Binary ops take a tensor or a Python number; dtypes promote as in PyTorch (an
    int tensor meeting a float becomes float32).
    """

    __slots__ = ()

    # ------------------------------------------------------------------ binary
    def add(self, other: Any) -> Self:
        """``self + other``."""
        return binary(self, other, BinaryOp.ADD, "add", "arith")

    def add_scalar(self, value: Any) -> Self:
        return binary(self, as_scalar("add_scalar", value, complex_ok=True), BinaryOp.ADD, "add_scalar", "arith")

    def sub(self, other: Any) -> Self:
        """``self - other``."""
        return binary(self, other, BinaryOp.SUB, "sub", "arith")

    def sub_scalar(self, value: Any) -> Self:
        return binary(self, as_scalar("sub_scalar", value, complex_ok=True), BinaryOp.SUB, "sub_scalar", "arith")

    def mul(self, other: Any) -> Self:
        """``self * other``."""
        return binary(self, other, BinaryOp.MUL, "mul", "arith")

    def mul_scalar(self, value: Any) -> Self:
        return binary(self, as_scalar("mul_scalar", value, complex_ok=True), BinaryOp.MUL, "mul_scalar", "arith")

    def div(self, other: Any, rounding_mode: str | None = None) -> Self:
        """True division ``self / other`` (ints give float32); ``rounding_mode="trunc"``
        or ``"floor"`` rounds the quotient and keeps int dtypes (as PyTorch)."""
        if rounding_mode is not None:
            return div_rounded(self, other, rounding_mode)
        return binary(self, other, BinaryOp.DIV, "div", "float")

    def div_scalar(self, value: Any) -> Self:
        return binary(self, as_scalar("div_scalar", value, complex_ok=True), BinaryOp.DIV, "div_scalar", "float")

    def floor_div(self, other: Any) -> Self:
        """``self // other``: division rounded toward minus infinity."""
        return binary(self, other, BinaryOp.FLOOR_DIV, "floor_div", "arith")

    def remainder(self, other: Any) -> Self:
        """``self % other`` with the sign of the divisor, as Python's ``%``."""
        return binary(self, other, BinaryOp.REMAINDER, "remainder", "arith")

    def remainder_scalar(self, value: Any) -> Self:
        return binary(self, as_scalar("remainder_scalar", value), BinaryOp.REMAINDER, "remainder_scalar", "arith")

    def powf(self, other: Any) -> Self:
        """``self ** other`` in floating point (ints give float32)."""
        return binary(self, other, BinaryOp.POW, "powf", "float")

    def powf_scalar(self, value: Any) -> Self:
        return binary(self, as_scalar("powf_scalar", value), BinaryOp.POW, "powf_scalar", "float")

    def powi(self, other: Any) -> Self:
        """``self ** other`` with an int exponent; int tensors stay int (exponent >= 0)."""
        if isinstance(other, self.__class__):
            if other._primitive.dtype in FLOAT_NP or other._primitive.dtype == BOOL_NP:
                raise DTypeError(f"ember: powi: the exponent must be an int tensor, got {other.dtype}")
            if self._primitive.dtype not in FLOAT_NP and bool(other.lower_elem(0).any().into_scalar()):
                raise ValueRangeError("ember: powi: an int tensor cannot take negative exponents; use powf")
            return binary(self, other, BinaryOp.POW, "powi", "arith")
        return self.powi_scalar(other)

    def powi_scalar(self, value: Any) -> Self:
        if not is_integral(value):
            raise DTypeError(f"ember: powi_scalar: the exponent must be an int, got {value!r}; use powf_scalar")
        value = int(value)
        if self._primitive.dtype not in FLOAT_NP:
            if value < 0:
                raise ValueRangeError(
                    "ember: powi_scalar: an int tensor cannot take negative exponents; use powf_scalar"
                )
            return binary(self, value, BinaryOp.POW, "powi_scalar", "arith")
        if value == 2:
            return unary(self, UnaryOp.SQUARE, "powi_scalar", "float")
        check_float_range("powi_scalar", value)
        return binary(self, float(value), BinaryOp.POW, "powi_scalar", "float")

    def pow(self, other: Any) -> Self:
        """``self ** other``: ``powi`` for int exponents on int tensors, else ``powf``."""
        if self._primitive.dtype not in FLOAT_NP and (
            is_integral(other) or (isinstance(other, self.__class__) and other._primitive.dtype not in FLOAT_NP)
        ):
            return self.powi(other)
        if is_integral(other):
            return self.powi_scalar(other)
        return self.powf(other)

    def atan2(self, other: Any) -> Self:
        """The angle of the point ``(other, self)``, elementwise."""
        return binary(self, other, BinaryOp.ATAN2, "atan2", "float")

    def maximum(self, other: Any) -> Self:
        """The elementwise maximum (NaN propagates; bools stay bool). Burn's ``max_pair``."""
        if self._primitive.dtype == BOOL_NP and _is_bool(other, self.__class__):
            return binary(self, other, BinaryOp.LOGICAL_OR, "maximum", "bool")
        return binary(self, other, BinaryOp.MAXIMUM, "maximum", "arith")

    def minimum(self, other: Any) -> Self:
        """The elementwise minimum (NaN propagates; bools stay bool). Burn's ``min_pair``."""
        if self._primitive.dtype == BOOL_NP and _is_bool(other, self.__class__):
            return binary(self, other, BinaryOp.LOGICAL_AND, "minimum", "bool")
        return binary(self, other, BinaryOp.MINIMUM, "minimum", "arith")

    max_pair = maximum
    min_pair = minimum

    # ------------------------------------------------------------------ unary
    def neg(self) -> Self:
        return unary(self, UnaryOp.NEG, "neg", "numeric")

    def abs(self) -> Self:
        """The absolute value; of a complex tensor its modulus (a float tensor)."""
        if self._primitive.dtype.kind == "c":
            return self._complex_abs()  # type: ignore[attr-defined]  # ComplexOps, mixed into Tensor
        return unary(self, UnaryOp.ABS, "abs", "numeric")

    def sign(self) -> Self:
        """-1, 0 or 1 by the sign (a bool tensor is its own sign, as in PyTorch)."""
        if self._primitive.dtype == BOOL_NP:
            return self.__class__(self._primitive, self._device)
        return unary(self, UnaryOp.SIGN, "sign", "numeric")

    def square(self) -> Self:
        """``x * x`` (a bool tensor gives int64, as in PyTorch)."""
        if self._primitive.dtype == BOOL_NP:
            return self.int()
        return unary(self, UnaryOp.SQUARE, "square", "numeric")

    def recip(self) -> Self:
        """``1 / self`` (float)."""
        return unary(self, UnaryOp.RECIP, "recip", "float")

    def exp(self) -> Self:
        return unary(self, UnaryOp.EXP, "exp", "float")

    def log(self) -> Self:
        """The natural logarithm."""
        return unary(self, UnaryOp.LOG, "log", "float")

    def log1p(self) -> Self:
        return unary(self, UnaryOp.LOG1P, "log1p", "float")

    def expm1(self) -> Self:
        return unary(self, UnaryOp.EXPM1, "expm1", "float")

    def sqrt(self) -> Self:
        return unary(self, UnaryOp.SQRT, "sqrt", "float")

    def rsqrt(self) -> Self:
        return unary(self, UnaryOp.RSQRT, "rsqrt", "float")

    def sin(self) -> Self:
        return unary(self, UnaryOp.SIN, "sin", "float")

    def cos(self) -> Self:
        return unary(self, UnaryOp.COS, "cos", "float")

    def tan(self) -> Self:
        return unary(self, UnaryOp.TAN, "tan", "float")

    def tanh(self) -> Self:
        return unary(self, UnaryOp.TANH, "tanh", "float")

    def sinh(self) -> Self:
        return unary(self, UnaryOp.SINH, "sinh", "float")

    def cosh(self) -> Self:
        return unary(self, UnaryOp.COSH, "cosh", "float")

    def asin(self) -> Self:
        return unary(self, UnaryOp.ASIN, "asin", "float")

    def acos(self) -> Self:
        return unary(self, UnaryOp.ACOS, "acos", "float")

    def atan(self) -> Self:
        return unary(self, UnaryOp.ATAN, "atan", "float")

    def erf(self) -> Self:
        return unary(self, UnaryOp.ERF, "erf", "float")

    def _integral_or(self, op: UnaryOp) -> Self:
        if (
            self._primitive.dtype not in FLOAT_NP and self._primitive.dtype.kind != "c"
        ):  # ints are integral; complex is refused
            return self.__class__(self._primitive, self._device)
        return unary(self, op, str(op), "float")

    def round(self) -> Self:
        """Round half to even (as PyTorch and numpy)."""
        return self._integral_or(UnaryOp.ROUND)

    def floor(self) -> Self:
        return self._integral_or(UnaryOp.FLOOR)

    def ceil(self) -> Self:
        return self._integral_or(UnaryOp.CEIL)

    def trunc(self) -> Self:
        return self._integral_or(UnaryOp.TRUNC)

    def is_nan(self) -> Self:
        """A bool tensor, true where ``self`` is NaN (a complex value where either part is)."""
        if self._primitive.dtype not in FLOAT_NP and self._primitive.dtype.kind != "c":
            return self.full_like(False).cast("bool")
        return unary(self, UnaryOp.IS_NAN, "is_nan", "any")

    def is_inf(self) -> Self:
        """A bool tensor, true where ``self`` is infinite (a complex value where either part is)."""
        if self._primitive.dtype not in FLOAT_NP and self._primitive.dtype.kind != "c":
            return self.full_like(False).cast("bool")
        return unary(self, UnaryOp.IS_INF, "is_inf", "any")

    def is_finite(self) -> Self:
        """A bool tensor, true where ``self`` is finite (a complex value where both parts are)."""
        if self._primitive.dtype not in FLOAT_NP and self._primitive.dtype.kind != "c":
            return self.full_like(True).cast("bool")
        return unary(self, UnaryOp.IS_FINITE, "is_finite", "any")

    def clamp(self, min: Any = None, max: Any = None) -> Self:
        """Values limited to ``[min, max]``; either bound may be ``None``, a number or a
        tensor that broadcasts with ``self`` (as PyTorch: the shapes broadcast, the dtypes
        promote, a NaN bound gives NaN, and where ``min > max`` the result is ``max``)."""
        if min is None and max is None:
            raise ValueRangeError("ember: clamp: give min, max or both")
        if self._primitive.dtype == BOOL_NP:
            raise DTypeError("ember: clamp: not defined on bool tensors; cast first")
        if isinstance(min, self.__class__) or isinstance(max, self.__class__):
            return self._clamp_tensors(min, max)
        lo = None if min is None else as_scalar("clamp", min)
        hi = None if max is None else as_scalar("clamp", max)
        if lo is not None and hi is not None and lo > hi:
            raise ValueRangeError(f"ember: clamp: min {lo} is greater than max {hi}")
        p = self._primitive
        fractional = (lo is not None and not is_integral(lo)) or (hi is not None and not is_integral(hi))
        if p.dtype not in FLOAT_NP and fractional:
            p = self._device._backend.cast(p, DType.FLOAT32)
        return self.__class__(self._device._backend.clamp(p, lo, hi), self._device)

    def _clamp_tensors(self, lo: Any, hi: Any) -> Self:
        """``clamp`` with a tensor bound: ``minimum(maximum(self, lo), hi)``, whose
        gradient follows PyTorch's rule: ``self`` gets it where ``lo <= self <= hi``,
        ``lo`` where ``self < lo < hi``, ``hi`` where ``self > hi`` or ``hi < lo``, and
        nobody where none holds (a NaN, or ``self < lo == hi``)."""
        for bound in (lo, hi):
            if bound is not None and not isinstance(bound, self.__class__):
                as_scalar("clamp", bound)
            elif isinstance(bound, self.__class__) and bound._primitive.dtype == BOOL_NP:
                raise DTypeError("ember: clamp: a bool tensor cannot be a bound; cast it first")
        out = self
        if lo is not None:
            out = out.maximum(lo)
        if hi is not None:
            out = out.minimum(hi)
        if not self._device.is_autodiff() or out._primitive.dtype not in FLOAT_NP:
            return out
        dtype = out.dtype
        x = self if self.dtype == dtype else self.cast(dtype)
        value = out = out.detach()
        if lo is not None and hi is not None:
            out = out.mask_where(x.greater(hi).bool_or(_lower(hi, lo)), _as(hi, dtype))
            out = out.mask_where(x.lower(lo).bool_and(_lower(lo, hi)), _as(lo, dtype))
            inside = x.greater_equal(lo).bool_and(x.lower_equal(hi))
        elif lo is not None:
            out = out.mask_where(x.lower(lo), _as(lo, dtype))
            inside = x.greater_equal(lo)
        else:
            out = out.mask_where(x.greater(hi), _as(hi, dtype))
            inside = x.lower_equal(hi)
        out = out.mask_where(inside, x)
        # A NaN bound gives NaN even where the masks route the gradient to a number.
        return out.add(value.full_like(0.0).mask_fill(value.is_nan(), math.nan))

    def clamp_min(self, min: Any) -> Self:
        return self.clamp(min, None)

    def clamp_max(self, max: Any) -> Self:
        return self.clamp(None, max)

    # ------------------------------------------------------------------ matmul
    def matmul(self, other: Any) -> Self:
        """Matrix product; batch dims broadcast; rank-1 operands act as a row/column
        vector whose dim is dropped from the result, as in numpy."""
        if not isinstance(other, self.__class__):
            raise DTypeError(f"ember: matmul: expected a Tensor, got {type(other).__name__}")
        if autocast.ACTIVE:
            self, other = autocast.cast_inputs("matmul", self, other)
        d = self._device
        if other._device is not d:
            check_device("matmul", self, other)
        a, b = self._primitive, other._primitive
        if a.dtype != b.dtype:
            a, b = promote_pair("matmul", self, other)
        if a.dtype == BOOL_NP:
            raise DTypeError("ember: matmul: not defined on bool tensors; cast to float first")
        sa, sb = a.shape, b.shape
        if len(sa) == 0 or len(sb) == 0:
            raise ShapeError(f"ember: matmul: needs rank >= 1 operands, got shapes {list(sa)} and {list(sb)}")
        backend = d._backend
        squeeze_a = squeeze_b = False
        if len(sa) == 1:
            a, sa, squeeze_a = backend.reshape(a, (1,) + sa), (1,) + sa, True
        if len(sb) == 1:
            b, sb, squeeze_b = backend.reshape(b, sb + (1,)), sb + (1,), True
        if sa[-1] != sb[-2]:
            raise ShapeError(
                f"ember: matmul: shapes {list(self._primitive.shape)} and {list(other._primitive.shape)} do not "
                f"line up: the left's last dim ({sa[-1]}) must equal the right's second-to-last "
                f"({sb[-2]}); transpose or reshape an operand"
            )
        if len(sa) > 2 or len(sb) > 2:
            batch = broadcast_shapes("matmul", sa[:-2], sb[:-2])
            if len(sa) < len(batch) + 2:
                a = backend.reshape(a, (1,) * (len(batch) + 2 - len(sa)) + sa)
            if len(sb) < len(batch) + 2:
                b = backend.reshape(b, (1,) * (len(batch) + 2 - len(sb)) + sb)
        out = backend.matmul(a, b)
        if squeeze_a or squeeze_b:
            shape = list(out.shape)
            if squeeze_b:
                del shape[-1]
            if squeeze_a:
                del shape[-1 if squeeze_b else -2]
            out = backend.reshape(out, tuple(shape))
        return self.__class__(out, d)

    def dot(self, other: Any) -> Self:
        """The inner product of two rank-1 tensors, as a one-element rank-1 tensor."""
        if self.rank != 1 or getattr(other, "rank", None) != 1:
            raise ShapeError("ember: dot: needs two rank-1 tensors")
        return self.mul(other).sum()

    # ------------------------------------------------------------------ operators
    def __add__(self, other: Any) -> Self:
        return self.add(other)

    def __radd__(self, other: Any) -> Self:
        return self.add(other)

    def __sub__(self, other: Any) -> Self:
        return self.sub(other)

    def __rsub__(self, other: Any) -> Self:
        return reverse_scalar(self, other, BinaryOp.SUB, "rsub", "arith")

    def __mul__(self, other: Any) -> Self:
        return self.mul(other)

    def __rmul__(self, other: Any) -> Self:
        return self.mul(other)

    def __truediv__(self, other: Any) -> Self:
        return self.div(other)

    def __rtruediv__(self, other: Any) -> Self:
        return reverse_scalar(self, other, BinaryOp.DIV, "rdiv", "float")

    def __floordiv__(self, other: Any) -> Self:
        return self.floor_div(other)

    def __rfloordiv__(self, other: Any) -> Self:
        return reverse_scalar(self, other, BinaryOp.FLOOR_DIV, "rfloordiv", "arith")

    def __mod__(self, other: Any) -> Self:
        return self.remainder(other)

    def __rmod__(self, other: Any) -> Self:
        return reverse_scalar(self, other, BinaryOp.REMAINDER, "rmod", "arith")

    def __pow__(self, other: Any) -> Self:
        return self.pow(other)

    def __rpow__(self, other: Any) -> Self:
        return reverse_scalar(self, other, BinaryOp.POW, "rpow", "float")

    def __neg__(self) -> Self:
        return self.neg()

    def __pos__(self) -> Self:
        return self.__class__(self._primitive, self._device)

    def __abs__(self) -> Self:
        return self.abs()

    def __matmul__(self, other: Any) -> Self:
        return self.matmul(other)


def _lower(a: Any, b: Any) -> Any:
    """``a < b`` for a tensor and a tensor or number on either side."""
    return a.lower(b) if hasattr(a, "lower") else b.greater(a)


def _as(value: Any, dtype: DType) -> Any:
    """A clamp bound in the result's dtype (numbers stay numbers)."""
    return value.cast(dtype) if hasattr(value, "cast") and value.dtype != dtype else value


def _is_bool(value: Any, cls: type[Any]) -> bool:
    return isinstance(value, bool) or (isinstance(value, cls) and value._primitive.dtype == BOOL_NP)
