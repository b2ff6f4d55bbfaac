"""The elementwise ops of the kernel IR: what each printer lowers, and how it spells
each float function.

One table for the three printers of the kernel IR: LLVM IR
(:mod:`ember.backend.kernel.llvm.ops`), CUDA C (:mod:`ember.backend.cuda.lowering`)
and WGSL (:mod:`ember.backend.cube.wgsl`). :data:`LOWERED_UNARY` and
:data:`LOWERED_BINARY` list the ops compiled per dtype family (``"f"`` floats, ``"i"``
signed ints, ``"u"`` uint8, ``"b"`` bool); anything else runs eagerly.
:data:`UNARY_MATH` and :data:`BINARY_MATH` give each float function once, with one
entry per printer: the C library's name (libm on the CPU, CUDA's math library), the
LLVM intrinsic or the float32 decomposition of
:class:`~ember.backend.kernel.llvm.mathlib.MathLib`, and the WGSL built-in or helper.

Adding a transcendental is one :class:`MathFn` here, plus its decompositions where a
printer has no library call for it (a ``MathLib`` method, a WGSL helper).

:class:`KernelFn` names float functions that kernels use but the backend protocol has
no op for (flex's native kernels: the flushed ``exp`` of softmax and the LSTM cell,
GELU's normal tail); :data:`KERNEL_MATH` spells them per printer like the others, and
an :class:`~ember.backend.kernel.exprs.Expr` ``unary`` node takes one as its op.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from ember.backend.ops import BinaryOp, UnaryOp


@dataclass(frozen=True)
class MathFn:
    """One float function's spelling per printer."""

    #: The C name of the float64 function in libm and CUDA's math library (float32:
    #: the same name with an ``f``).
    c: str
    #: WGSL: a built-in, or a helper function of ``ember.backend.cube.wgsl.HELPERS``.
    wgsl: str
    #: LLVM: an intrinsic used for every float type (``"llvm.sqrt"``), instead of libm.
    llvm_intrinsic: str | None = None
    #: LLVM: the :class:`~ember.backend.kernel.llvm.mathlib.MathLib` method computing
    #: the float32 function (vectorisable, within an ulp or two); float64 calls libm.
    llvm_f32: str | None = None
    #: Narrower floats compute in float64 and round (``log10``: exact at powers of ten).
    f32_via_f64: bool = False


UNARY_MATH: dict[UnaryOp, MathFn] = {
    UnaryOp.ABS: MathFn("fabs", "abs", llvm_intrinsic="llvm.fabs"),
    UnaryOp.EXP: MathFn("exp", "exp", llvm_f32="exp_f32"),
    UnaryOp.LOG: MathFn("log", "log", llvm_f32="log_f32"),
    UnaryOp.LOG1P: MathFn("log1p", "log1p_f"),
    UnaryOp.EXPM1: MathFn("expm1", "expm1_f"),
    UnaryOp.SQRT: MathFn("sqrt", "sqrt", llvm_intrinsic="llvm.sqrt"),
    UnaryOp.SIN: MathFn("sin", "sin"),
    UnaryOp.COS: MathFn("cos", "cos"),
    UnaryOp.TAN: MathFn("tan", "tan"),
    UnaryOp.TANH: MathFn("tanh", "tanh_f", llvm_f32="tanh_f32"),
    UnaryOp.SINH: MathFn("sinh", "sinh_f"),
    UnaryOp.COSH: MathFn("cosh", "cosh"),
    UnaryOp.ASIN: MathFn("asin", "asin_f"),
    UnaryOp.ACOS: MathFn("acos", "acos_f"),
    UnaryOp.ATAN: MathFn("atan", "atan_f"),
    UnaryOp.ERF: MathFn("erf", "erf_f", llvm_f32="erf_f32"),
    UnaryOp.LOG2: MathFn("log2", "log2"),
    UnaryOp.LOG10: MathFn("log10", "log10_f", f32_via_f64=True),
    UnaryOp.EXP2: MathFn("exp2", "exp2"),
    UnaryOp.ASINH: MathFn("asinh", "asinh_f"),
    UnaryOp.ACOSH: MathFn("acosh", "acosh_f"),
    UnaryOp.ATANH: MathFn("atanh", "atanh_f"),
    UnaryOp.ROUND: MathFn("rint", "round", llvm_intrinsic="llvm.roundeven"),  # half to even, as numpy
    UnaryOp.FLOOR: MathFn("floor", "floor", llvm_intrinsic="llvm.floor"),
    UnaryOp.CEIL: MathFn("ceil", "ceil", llvm_intrinsic="llvm.ceil"),
    UnaryOp.TRUNC: MathFn("trunc", "trunc", llvm_intrinsic="llvm.trunc"),
}


class KernelFn(str, Enum):
    """Float functions of kernels that are not ops of the backend protocol."""

    #: ``exp`` with results below the smallest normal float flushed to 0 (and ``inf``
    #: above the largest): no lane takes the CPU's slow subnormal path.
    EXP_FLUSHED = "exp_flushed"
    #: The normal tail ``Q(z) = erfc(z / sqrt 2) / 2`` for ``z >= 0`` (Abramowitz &
    #: Stegun 7.1.26 with the flushed ``exp``): exact GELU is ``relu(x) - |x| Q(|x|)``.
    NORMAL_TAIL = "normal_tail"


KERNEL_MATH: dict[KernelFn, MathFn] = {
    KernelFn.EXP_FLUSHED: MathFn("ember_exp_flushed", "exp_flushed_f", llvm_f32="exp_f32_flushed"),
    KernelFn.NORMAL_TAIL: MathFn("ember_normal_tail", "normal_tail_f", llvm_f32="normal_tail_q_f32"),
}

BINARY_MATH: dict[BinaryOp, MathFn] = {
    BinaryOp.POW: MathFn("pow", "pow_f"),
    BinaryOp.ATAN2: MathFn("atan2", "atan2_f"),
    BinaryOp.COPYSIGN: MathFn("copysign", "copysign_f", llvm_intrinsic="llvm.copysign"),
}

#: Comparisons and their C / LLVM predicate.
COMPARE = {
    BinaryOp.EQ: "==",
    BinaryOp.NE: "!=",
    BinaryOp.GT: ">",
    BinaryOp.GE: ">=",
    BinaryOp.LT: "<",
    BinaryOp.LE: "<=",
}
LOGICAL = frozenset({BinaryOp.LOGICAL_AND, BinaryOp.LOGICAL_OR, BinaryOp.LOGICAL_XOR})
BITWISE = frozenset({BinaryOp.BITWISE_AND, BinaryOp.BITWISE_OR, BinaryOp.BITWISE_XOR})

_FLOAT_UNARY = frozenset(UnaryOp) - {UnaryOp.BITWISE_NOT}
_INT_UNARY = frozenset(
    {
        UnaryOp.NEG,
        UnaryOp.ABS,
        UnaryOp.SIGN,
        UnaryOp.SQUARE,
        UnaryOp.IS_NAN,
        UnaryOp.IS_INF,
        UnaryOp.IS_FINITE,
        UnaryOp.LOGICAL_NOT,
        UnaryOp.BITWISE_NOT,
    }
)
_BOOL_UNARY = frozenset({UnaryOp.IS_NAN, UnaryOp.IS_INF, UnaryOp.IS_FINITE, UnaryOp.LOGICAL_NOT, UnaryOp.BITWISE_NOT})
#: Unary ops a printer compiles, per dtype family.
LOWERED_UNARY = {"f": _FLOAT_UNARY, "i": _INT_UNARY, "u": _INT_UNARY, "b": _BOOL_UNARY}

_FLOAT_BINARY = (
    frozenset({BinaryOp.ADD, BinaryOp.SUB, BinaryOp.MUL, BinaryOp.DIV, BinaryOp.REMAINDER, BinaryOp.FLOOR_DIV})
    | {BinaryOp.MAXIMUM, BinaryOp.MINIMUM}
    | set(BINARY_MATH)
    | set(COMPARE)
    | LOGICAL
)
_INT_BINARY = (
    frozenset({BinaryOp.ADD, BinaryOp.SUB, BinaryOp.MUL, BinaryOp.REMAINDER, BinaryOp.FLOOR_DIV})
    | {BinaryOp.MAXIMUM, BinaryOp.MINIMUM, BinaryOp.LEFT_SHIFT, BinaryOp.RIGHT_SHIFT}
    | set(COMPARE)
    | LOGICAL
    | BITWISE
)
_BOOL_BINARY = frozenset({BinaryOp.MAXIMUM, BinaryOp.MINIMUM}) | set(COMPARE) | LOGICAL | BITWISE
#: Binary ops a printer compiles, per dtype family (CUDA C adds integer ``div``).
LOWERED_BINARY = {"f": _FLOAT_BINARY, "i": _INT_BINARY, "u": _INT_BINARY, "b": _BOOL_BINARY}

#: Float unary ops every printer spells by itself (not functions of one argument).
OWN_UNARY = frozenset(
    {
        UnaryOp.NEG,
        UnaryOp.RSQRT,
        UnaryOp.RECIP,
        UnaryOp.SIGN,
        UnaryOp.SQUARE,
        UnaryOp.IS_NAN,
        UnaryOp.IS_INF,
        UnaryOp.IS_FINITE,
        UnaryOp.LOGICAL_NOT,
    }
)

__all__ = [
    "BINARY_MATH",
    "KERNEL_MATH",
    "BITWISE",
    "COMPARE",
    "LOGICAL",
    "LOWERED_BINARY",
    "LOWERED_UNARY",
    "OWN_UNARY",
    "UNARY_MATH",
    "KernelFn",
    "MathFn",
]
