"""Comparisons, boolean logic and bitwise ops."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ember.backend.ops import BinaryOp, UnaryOp
from ember.errors import ValueRangeError
from ember.tensor.checks import BOOL_NP, as_scalar
from ember.tensor.ops.base import TensorOpsBase
from ember.tensor.ops.elementwise import binary, unary

if TYPE_CHECKING:
    from typing import Self


class CompareOps(TensorOpsBase):
    """Comparisons (giving bool tensors), bool logic and int bitwise ops.

    As in PyTorch, ``==`` and friends compare elementwise; tensors hash by identity.
    """

    __slots__ = ()

    def equal(self, other: Any) -> Self:
        return binary(self, other, BinaryOp.EQ, "equal", "cmp")

    def not_equal(self, other: Any) -> Self:
        return binary(self, other, BinaryOp.NE, "not_equal", "cmp")

    def greater(self, other: Any) -> Self:
        return binary(self, other, BinaryOp.GT, "greater", "cmp")

    def greater_equal(self, other: Any) -> Self:
        return binary(self, other, BinaryOp.GE, "greater_equal", "cmp")

    def lower(self, other: Any) -> Self:
        return binary(self, other, BinaryOp.LT, "lower", "cmp")

    def lower_equal(self, other: Any) -> Self:
        return binary(self, other, BinaryOp.LE, "lower_equal", "cmp")

    def equal_elem(self, value: Any) -> Self:
        return binary(self, as_scalar("equal_elem", value), BinaryOp.EQ, "equal_elem", "cmp")

    def not_equal_elem(self, value: Any) -> Self:
        return binary(self, as_scalar("not_equal_elem", value), BinaryOp.NE, "not_equal_elem", "cmp")

    def greater_elem(self, value: Any) -> Self:
        return binary(self, as_scalar("greater_elem", value), BinaryOp.GT, "greater_elem", "cmp")

    def greater_equal_elem(self, value: Any) -> Self:
        return binary(self, as_scalar("greater_equal_elem", value), BinaryOp.GE, "greater_equal_elem", "cmp")

    def lower_elem(self, value: Any) -> Self:
        return binary(self, as_scalar("lower_elem", value), BinaryOp.LT, "lower_elem", "cmp")

    def lower_equal_elem(self, value: Any) -> Self:
        return binary(self, as_scalar("lower_equal_elem", value), BinaryOp.LE, "lower_equal_elem", "cmp")

    # ------------------------------------------------------------------ bool logic
    def bool_and(self, other: Any) -> Self:
        return binary(self, other, BinaryOp.LOGICAL_AND, "bool_and", "bool")

    def bool_or(self, other: Any) -> Self:
        return binary(self, other, BinaryOp.LOGICAL_OR, "bool_or", "bool")

    def bool_xor(self, other: Any) -> Self:
        return binary(self, other, BinaryOp.LOGICAL_XOR, "bool_xor", "bool")

    def bool_not(self) -> Self:
        return unary(self, UnaryOp.LOGICAL_NOT, "bool_not", "bool")

    # ------------------------------------------------------------------ bitwise (ints)
    def bitwise_and(self, other: Any) -> Self:
        return binary(self, other, BinaryOp.BITWISE_AND, "bitwise_and", "int")

    def bitwise_or(self, other: Any) -> Self:
        return binary(self, other, BinaryOp.BITWISE_OR, "bitwise_or", "int")

    def bitwise_xor(self, other: Any) -> Self:
        return binary(self, other, BinaryOp.BITWISE_XOR, "bitwise_xor", "int")

    def bitwise_not(self) -> Self:
        """``~x`` on ints; logical not on bool (as PyTorch)."""
        if self._primitive.dtype == BOOL_NP:
            return self.bool_not()
        return unary(self, UnaryOp.BITWISE_NOT, "bitwise_not", "int")

    def bitwise_left_shift(self, other: Any) -> Self:
        return binary(self, other, BinaryOp.LEFT_SHIFT, "bitwise_left_shift", "int")

    def bitwise_right_shift(self, other: Any) -> Self:
        return binary(self, other, BinaryOp.RIGHT_SHIFT, "bitwise_right_shift", "int")

    def is_close(self, other: Any, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> Self:
        """Elementwise ``|self - other| <= atol + rtol * |other|`` as a bool tensor (shapes
        broadcast); equal values (infinities of one sign included) are close, infinities
        are close to nothing else, NaN to nothing unless ``equal_nan`` (``torch.isclose``)."""
        if rtol < 0 or atol < 0:
            raise ValueRangeError(f"ember: is_close: rtol and atol must be >= 0, got {rtol}, {atol}")
        if not isinstance(other, self.__class__):
            other = self.full_like(as_scalar("is_close", other))
        same = self.equal(other)
        if self._primitive.dtype == BOOL_NP and other._primitive.dtype == BOOL_NP:
            return same
        a, b = self.float(), other.float()
        bound = b.abs().mul_scalar(rtol).add_scalar(atol)
        close = a.sub(b).abs().lower_equal(bound).bool_and(a.is_finite()).bool_and(b.is_finite())
        close = close.bool_or(same)
        if equal_nan:
            close = close.bool_or(a.is_nan().bool_and(b.is_nan()))
        return close

    isclose = is_close

    def all_close(self, other: Any, rtol: float = 1e-5, atol: float = 1e-8, equal_nan: bool = False) -> bool:
        """Whether :meth:`is_close` holds everywhere (``torch.allclose``)."""
        return bool(self.is_close(other, rtol, atol, equal_nan).all().into_scalar())

    allclose = all_close

    def contains_nan(self) -> Self:
        """Whether any element is NaN, as a bool tensor of shape ``[1]`` (Burn's)."""
        return self.is_nan().any()

    def equal_all(self, other: Any) -> bool:
        """Whether shapes match and every element is equal."""
        return self.dims() == other.dims() and bool(self.equal(other).all().into_scalar())

    # ------------------------------------------------------------------ operators
    def __eq__(self, other: Any) -> Any:
        return self.equal(other)

    def __ne__(self, other: Any) -> Any:
        return self.not_equal(other)

    def __gt__(self, other: Any) -> Self:
        return self.greater(other)

    def __ge__(self, other: Any) -> Self:
        return self.greater_equal(other)

    def __lt__(self, other: Any) -> Self:
        return self.lower(other)

    def __le__(self, other: Any) -> Self:
        return self.lower_equal(other)

    def _logic(self, other: Any, bool_op: str, int_op: str) -> Self:
        if self._primitive.dtype.kind == "b":
            return getattr(self, bool_op)(other)
        return getattr(self, int_op)(other)

    def __and__(self, other: Any) -> Self:
        return self._logic(other, "bool_and", "bitwise_and")

    def __or__(self, other: Any) -> Self:
        return self._logic(other, "bool_or", "bitwise_or")

    def __xor__(self, other: Any) -> Self:
        return self._logic(other, "bool_xor", "bitwise_xor")

    __rand__ = __and__
    __ror__ = __or__
    __rxor__ = __xor__

    def __invert__(self) -> Self:
        return self.bool_not() if self._primitive.dtype.kind == "b" else self.bitwise_not()

    def __lshift__(self, other: Any) -> Self:
        return self.bitwise_left_shift(other)

    def __rshift__(self, other: Any) -> Self:
        return self.bitwise_right_shift(other)
