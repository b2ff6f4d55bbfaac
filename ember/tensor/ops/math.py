"""More math functions: logarithms and exponentials in other bases, inverse
hyperbolics, and the composites PyTorch users expect (``hypot``, ``fmod``,
``logaddexp``, ``lerp``, ``xlogy``, ...).

Primitives (``log2``, ``log10``, ``exp2``, ``asinh``, ``acosh``, ``atanh``,
``copysign``) are one backend op each; ``ember/backend/ops.py`` says why. The rest
are written here once over exact ops, so every backend and autodiff run them.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, cast

import ml_dtypes

from ember.backend.ops import BinaryOp, UnaryOp
from ember.errors import DTypeError, ValueRangeError
from ember.tensor.checks import BOOL_NP, FLOAT_NP, as_scalar
from ember.tensor.ops.base import TensorOpsBase
from ember.tensor.ops.elementwise import binary, is_integral, unary

if TYPE_CHECKING:
    from typing import Self

    from ember.tensor.tensor import Tensor

_LN2 = math.log(2.0)
_DEG = math.pi / 180.0


class MathOps(TensorOpsBase):
    """Elementwise math beyond the arithmetic basics (float results unless noted)."""

    __slots__ = ()

    # These two run functions of ember.tensor.activation, typed over Tensor (what self is).
    def softmax(self, dim: int) -> Tensor:
        """``exp(x) / sum(exp(x))`` along ``dim`` (``ember.tensor.activation.softmax``)."""
        from ember.tensor.activation import softmax

        return softmax(cast("Tensor", self), dim)

    def log_softmax(self, dim: int) -> Tensor:
        """``log(softmax(x))`` along ``dim``, computed stably."""
        from ember.tensor.activation import log_softmax

        return log_softmax(cast("Tensor", self), dim)

    def sigmoid(self) -> Tensor:
        """``1 / (1 + exp(-x))`` (``ember.tensor.activation.sigmoid``; PyTorch's ``Tensor.sigmoid``)."""
        from ember.tensor.activation import sigmoid

        return sigmoid(cast("Tensor", self))

    def relu(self) -> Tensor:
        """``max(x, 0)`` (``ember.tensor.activation.relu``; PyTorch's ``Tensor.relu``)."""
        from ember.tensor.activation import relu

        return relu(cast("Tensor", self))

    def clip(self, min: Any = None, max: Any = None) -> Self:
        """PyTorch's alias of :meth:`clamp`."""
        return self.clamp(min, max)

    # ------------------------------------------------------------------ primitives
    def log2(self) -> Self:
        """The base-2 logarithm (exact at powers of two)."""
        return unary(self, UnaryOp.LOG2, "log2", "float")

    def log10(self) -> Self:
        """The base-10 logarithm (exact at powers of ten)."""
        return unary(self, UnaryOp.LOG10, "log10", "float")

    def exp2(self) -> Self:
        """``2 ** self``."""
        return unary(self, UnaryOp.EXP2, "exp2", "float")

    def asinh(self) -> Self:
        return unary(self, UnaryOp.ASINH, "asinh", "float")

    def acosh(self) -> Self:
        """The inverse hyperbolic cosine (NaN below 1)."""
        return unary(self, UnaryOp.ACOSH, "acosh", "float")

    def atanh(self) -> Self:
        """The inverse hyperbolic tangent (NaN outside [-1, 1], infinite at +-1)."""
        return unary(self, UnaryOp.ATANH, "atanh", "float")

    arcsinh = asinh
    arccosh = acosh
    arctanh = atanh

    def copysign(self, other: Any) -> Self:
        """``|self|`` with the sign (bit) of ``other``, ``-0.0`` and NaNs included."""
        return binary(self, other, BinaryOp.COPYSIGN, "copysign", "float")

    # ------------------------------------------------------------------ composites
    def deg2rad(self) -> Self:
        """Degrees to radians."""
        return self.float().mul_scalar(_DEG)

    def rad2deg(self) -> Self:
        """Radians to degrees."""
        return self.float().mul_scalar(1.0 / _DEG)

    def hypot(self, other: Any) -> Self:
        """``sqrt(self^2 + other^2)`` without overflow or underflow: the larger
        magnitude times ``sqrt(1 + r^2)``, ``r`` the ratio of the smaller to it;
        infinite where either operand is (even against NaN, as C's ``hypot``)."""
        a = self.float().abs()
        b = other.float().abs() if isinstance(other, self.__class__) else abs(float(as_scalar("hypot", other)))
        big, small = a.maximum(b), a.minimum(b)
        ratio = small.div(big.mask_fill(big.equal_elem(0.0), 1.0))
        out = big.mul(ratio.mul(ratio).add_scalar(1.0).sqrt())
        infinite = a.is_inf()
        if not isinstance(b, float):
            infinite = infinite.bool_or(b.is_inf())
        elif math.isinf(b):
            return out.full_like(math.inf)
        return out.mask_fill(infinite, math.inf)

    def fmod(self, other: Any) -> Self:
        """The C remainder: ``self - trunc(self / other) * other``, with the sign of
        ``self`` (``remainder`` takes the divisor's). Exact, computed as
        ``s * remainder(s * self, |other|)`` with ``s = copysign(1, self)``; ints stay ints.
        Its gradient is PyTorch's: 1 for ``self``, ``-trunc(self / other)`` for ``other``."""
        if self._primitive.dtype == BOOL_NP:
            raise DTypeError("ember: fmod: not defined on bool tensors; cast first")
        divisor: Any
        if isinstance(other, self.__class__):
            divisor = other.mul(_unit_sign(other)) if other._primitive.dtype in FLOAT_NP else other.abs()
        else:
            divisor = abs(as_scalar("fmod", other))
        if self._primitive.dtype not in FLOAT_NP:
            magnitude = self.abs().remainder(divisor)
            if magnitude._primitive.dtype in FLOAT_NP:
                return magnitude.copysign(self.float())
            return magnitude.mul(self.sign())
        # |x|, |y| and the result's sign as products with a constant +-1 (-0.0 gives -1):
        # exact, and with PyTorch's gradients (1 for x, -trunc(x / y) for y) even where x
        # or the remainder is 0, where the subgradients of abs and copysign would give 0.
        sign = _unit_sign(self)
        return self.mul(sign).remainder(divisor).mul(sign)

    def fmod_scalar(self, value: Any) -> Self:
        return self.fmod(as_scalar("fmod_scalar", value))

    def logaddexp(self, other: Any) -> Self:
        """``log(exp(self) + exp(other))``, computed stably (infinities included)."""
        a = self.float()
        b = other.float() if isinstance(other, self.__class__) else float(as_scalar("logaddexp", other))
        diff = a.sub(b)
        same = a.equal(b) if isinstance(b, self.__class__) else a.equal_elem(b)
        diff = diff.mask_fill(same, 0.0)  # inf - inf: the sum is the common value
        peak = a.maximum(b) if isinstance(b, self.__class__) else a.clamp_min(b)
        return peak.add(diff.abs().neg().exp().log1p())

    def logaddexp2(self, other: Any) -> Self:
        """``log2(2^self + 2^other)``, computed stably."""
        scaled = other.float().mul_scalar(_LN2) if isinstance(other, self.__class__) else float(other) * _LN2
        return self.float().mul_scalar(_LN2).logaddexp(scaled).div_scalar(_LN2)

    def lerp(self, end: Any, weight: Any) -> Self:
        """``self + weight * (end - self)`` (PyTorch's two-sided form: exact at both ends)."""
        start = self.float()
        if not isinstance(end, self.__class__):
            end = start.full_like(float(as_scalar("lerp", end)))
        span = end.sub(start)
        if not isinstance(weight, self.__class__):
            w = float(as_scalar("lerp", weight))
            return start.add(span.mul_scalar(w)) if abs(w) < 0.5 else end.sub(span.mul_scalar(1.0 - w))
        low = start.add(span.mul(weight))
        high = end.sub(span.mul(weight.float().neg().add_scalar(1.0)))
        return high.mask_where(weight.abs().lower_elem(0.5), low)

    def xlogy(self, other: Any) -> Self:
        """``self * log(other)``, 0 where ``self`` is 0 (unless ``other`` is NaN)."""
        x = self.float()
        y = other.float() if isinstance(other, self.__class__) else x.full_like(float(as_scalar("xlogy", other)))
        # Where x is 0, log(y) is replaced by 0 only where it is not finite (y <= 0 or
        # +inf; a NaN y stays NaN): the value is 0 there, and the gradient for x is
        # log(y) wherever that is finite, as PyTorch's.
        zero = x.equal_elem(0.0).bool_and(y.lower_equal_elem(0.0).bool_or(y.equal_elem(math.inf)))
        return x.mul(y.mask_fill(zero, 1.0).log())

    def fmax(self, other: Any) -> Self:
        """The elementwise maximum ignoring NaN: NaN only where both are NaN."""
        return self._nan_ignoring(other, "fmax")

    def fmin(self, other: Any) -> Self:
        """The elementwise minimum ignoring NaN: NaN only where both are NaN."""
        return self._nan_ignoring(other, "fmin")

    def _nan_ignoring(self, other: Any, op: str) -> Self:
        both = self.maximum(other) if op == "fmax" else self.minimum(other)
        if both._primitive.dtype not in FLOAT_NP:
            return both
        a = self.cast(both.dtype) if self.dtype != both.dtype else self
        b = other.cast(both.dtype) if isinstance(other, self.__class__) else both.full_like(float(other))
        # ``b`` only where it wins strictly or only ``a`` is NaN: ties (and the gradient)
        # go to the first input, as PyTorch's.
        wins = b.greater(a) if op == "fmax" else b.lower(a)
        return a.mask_where(wins.bool_or(a.is_nan().bool_and(b.is_nan().bool_not())), b)

    def ldexp(self, other: Any) -> Self:
        """``self * 2 ** other``."""
        exponent = (
            other.float().exp2() if isinstance(other, self.__class__) else 2.0 ** float(as_scalar("ldexp", other))
        )
        return self.float().mul(exponent)

    def frac(self) -> Self:
        """The fractional part, ``self - trunc(self)`` (sign of ``self``)."""
        if self._primitive.dtype not in FLOAT_NP:
            return self.zeros_like() if self._primitive.dtype != BOOL_NP else self.int().zeros_like()
        return self.sub(self.trunc())

    def lgamma(self) -> Self:
        """``log |Gamma(x)|`` (``ember.special.lgamma``)."""
        from ember.tensor.special import lgamma

        return cast("Self", lgamma(cast("Any", self)))

    def digamma(self) -> Self:
        """``d/dx log Gamma(x)`` (``ember.special.digamma``)."""
        from ember.tensor.special import digamma

        return cast("Self", digamma(cast("Any", self)))

    def polygamma(self, n: int) -> Self:
        """The ``n``-th derivative of ``digamma`` (``ember.special.polygamma``)."""
        from ember.tensor.special import polygamma

        return cast("Self", polygamma(n, cast("Any", self)))

    def erfinv(self) -> Self:
        """The inverse error function (``ember.special.erfinv``)."""
        from ember.tensor.special import erfinv

        return cast("Self", erfinv(cast("Any", self)))

    def i0(self) -> Self:
        """The modified Bessel function ``I_0`` (``ember.special.i0``)."""
        from ember.tensor.special import i0

        return cast("Self", i0(cast("Any", self)))

    def sinc(self) -> Self:
        """The normalised sinc, ``sin(pi x) / (pi x)``, 1 at 0."""
        x = self.float()
        zero = x.equal_elem(0.0)
        px = x.mask_fill(zero, 1.0).mul_scalar(math.pi)
        return px.sin().div(px).mask_fill(zero, 1.0)

    def logit(self, eps: float | None = None) -> Self:
        """``log(p / (1 - p))``; with ``eps`` the input is first clamped to ``[eps, 1 - eps]``."""
        p = self.float()
        if eps is not None:
            if not 0.0 <= eps <= 0.5:
                raise ValueRangeError(f"ember: logit: eps must lie in [0, 0.5], got {eps}")
            p = p.clamp(eps, 1.0 - eps)
        # log(p) - log(1 - p): its slope 1/p + 1/(1 - p) is +inf at 0 and 1, as PyTorch's.
        out = p.log().sub(p.neg().log1p())
        if eps is not None or not p.is_require_grad():
            return out
        # Outside [0, 1] the value is NaN and so is the gradient (PyTorch's), taken from
        # sqrt(p (1 - p)), which is NaN there in value and slope (its argument is -1
        # inside, where the branch is not taken and its gradient is cut).
        outside = p.lower_elem(0.0).bool_or(p.greater_elem(1.0))
        return out.mask_where(outside, p.mul(p.neg().add_scalar(1.0)).mask_fill(outside.bool_not(), -1.0).sqrt())

    def nan_to_num(self, nan: float = 0.0, posinf: float | None = None, neginf: float | None = None) -> Self:
        """NaN, +inf and -inf replaced (infinities by the dtype's largest finite values
        unless given)."""
        if self._primitive.dtype not in FLOAT_NP:
            return self.__class__(self._primitive, self._device)
        info = ml_dtypes.finfo(self._primitive.dtype)
        out = self.mask_fill(self.is_nan(), float(nan))
        out = out.mask_fill(self.equal_elem(math.inf), float(info.max if posinf is None else posinf))
        return out.mask_fill(self.equal_elem(-math.inf), float(info.min if neginf is None else neginf))


def _unit_sign(x: Any) -> Any:
    """``copysign(1, x)`` of a float tensor, cut from the graph: +-1, -1 at -0.0."""
    return x.full_like(1.0).copysign(x).detach()


def div_rounded(self: Any, other: Any, rounding_mode: str) -> Any:
    """``self / other`` rounded toward zero (``"trunc"``) or minus infinity (``"floor"``);
    int operands stay int (PyTorch's ``div(..., rounding_mode=...)``)."""
    if rounding_mode == "floor":
        return self.floor_div(other)
    if rounding_mode != "trunc":
        raise ValueRangeError(f"ember: div: rounding_mode must be None, 'trunc' or 'floor', got {rounding_mode!r}")
    cls = self.__class__
    a = self.int() if self._primitive.dtype == BOOL_NP else self
    b = other.int() if isinstance(other, cls) and other._primitive.dtype == BOOL_NP else other
    if a._primitive.dtype in FLOAT_NP or (b._primitive.dtype in FLOAT_NP if isinstance(b, cls) else not is_integral(b)):
        return a.div(b).trunc()
    # Ints: the floor quotient, one up where the remainder is nonzero and the signs differ.
    floor = a.floor_div(b)
    b_negative = b.lower_elem(0) if isinstance(b, cls) else b < 0
    differ = a.lower_elem(0)
    differ = (
        differ.bool_xor(b_negative) if isinstance(b_negative, cls) else (differ.bool_not() if b_negative else differ)
    )
    return floor.add(a.remainder(b).not_equal_elem(0).bool_and(differ).cast(floor.dtype))
