"""The CUDA C lowering of the kernel IR's expressions, with flex's (numpy's) semantics.

:class:`CExpr` turns the :class:`~ember.backend.kernel.exprs.Expr` trees of a
fusion :class:`~ember.backend.kernel.steps.Kernel` into straight-line CUDA C: one
``const`` local per node, in dependency order, so shared subexpressions are
computed once. Where a leaf comes from is the caller's business: ``load`` gives
the C code reading a load node's element, ``scalar`` the code of a run-time
scalar (a kernel parameter eagerly, an element of a scalar array in a captured
plan), ``acc`` a reduction's result. The eager cuda backend builds its elementwise
kernels from these same trees (one op is a one-node tree), and the fusion layer
can lower a whole schedule's kernels with it (:mod:`.codegen`).

:data:`LOWERED_UNARY` and :data:`LOWERED_BINARY` list the ops lowered per dtype
family (``"f"`` floats, ``"i"`` int32/int64, ``"u"`` uint8, ``"b"`` bool) and the float
functions' CUDA names come from the kernel layer's op table
(:mod:`ember.backend.kernel.op_table`), shared with the LLVM and WGSL printers.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ember.backend.cuda.dtypes import UNSIGNED, compute_type, dtype_of, family, literal, round_code
from ember.backend.dtype import DType
from ember.backend.kernel.exprs import Expr
from ember.backend.kernel.op_table import BINARY_MATH, COMPARE, KERNEL_MATH, UNARY_MATH, KernelFn, MathFn
from ember.backend.kernel.op_table import LOWERED_BINARY as OP_TABLE_BINARY
from ember.backend.kernel.op_table import LOWERED_UNARY as OP_TABLE_UNARY
from ember.backend.ops import BinaryOp, UnaryOp

_LOGICAL = {BinaryOp.LOGICAL_AND: "&&", BinaryOp.LOGICAL_OR: "||", BinaryOp.LOGICAL_XOR: "!="}
_BITWISE = {BinaryOp.BITWISE_AND: "&", BinaryOp.BITWISE_OR: "|", BinaryOp.BITWISE_XOR: "^"}

#: The kernel layer's op table, with integer ``div`` (floored, as flex).
LOWERED_UNARY = OP_TABLE_UNARY
LOWERED_BINARY = {
    family: ops | {BinaryOp.DIV} if family in ("i", "u") else ops for family, ops in OP_TABLE_BINARY.items()
}


class LoweringError(NotImplementedError):
    """An op and dtype the CUDA C lowering does not cover (the caller falls back)."""


def lowers_unary(op: UnaryOp, dtype: np.dtype | DType) -> bool:
    return op in LOWERED_UNARY[family(dtype)]


def lowers_binary(op: BinaryOp, dtype: np.dtype | DType) -> bool:
    return op in LOWERED_BINARY[family(dtype)]


def _fn(name: str, dtype: np.dtype | DType) -> str:
    """The CUDA math function ``name`` for a float compute type (``expf`` or ``exp``)."""
    return name if dtype_of(dtype) is DType.FLOAT64 else name + "f"


def math_code(fn: MathFn, dtype: np.dtype | DType, *args: str) -> str:
    """C code of the float function ``fn`` (an entry of the kernel layer's op table)."""
    if fn.f32_via_f64 and dtype_of(dtype) is not DType.FLOAT64:
        return f"(float){fn.c}({', '.join(f'(double){a}' for a in args)})"
    return f"{_fn(fn.c, dtype)}({', '.join(args)})"


# ---------------------------------------------------------------------- single ops
def unary_code(op: UnaryOp | KernelFn, x: str, dtype: np.dtype | DType) -> str:
    """C code of ``op(x)`` for an operand of ``dtype`` (its compute type)."""
    fam = family(dtype)
    if isinstance(op, KernelFn):
        if fam != "f":
            raise LoweringError(f"ember: cuda: {op.value} is not defined for {dtype_of(dtype)}")
        return math_code(KERNEL_MATH[op], dtype, x)
    if op not in LOWERED_UNARY[fam]:
        raise LoweringError(f"ember: cuda: unary {op} is not defined for {dtype_of(dtype)}")
    if op in (UnaryOp.IS_NAN, UnaryOp.IS_INF, UnaryOp.IS_FINITE) and fam != "f":
        return "true" if op == UnaryOp.IS_FINITE else "false"
    if op == UnaryOp.LOGICAL_NOT:
        return f"({x} == 0)"
    if fam == "b":  # bitwise_not of bool
        return f"(!{x})"
    t = compute_type(dtype)
    if fam == "f":
        if op in UNARY_MATH:
            return math_code(UNARY_MATH[op], dtype, x)
        if op == UnaryOp.NEG:
            return f"(-{x})"
        if op == UnaryOp.RSQRT:
            return f"(({t})1 / {_fn('sqrt', dtype)}({x}))"
        if op == UnaryOp.RECIP:
            return f"(({t})1 / {x})"
        if op == UnaryOp.SIGN:  # +-0 and NaN give +0
            return f"fsign<{t}>({x})"
        if op == UnaryOp.SQUARE:
            return f"({x} * {x})"
        if op == UnaryOp.IS_NAN:
            return f"({x} != {x})"
        if op == UnaryOp.IS_INF:
            return f"({_fn('fabs', dtype)}({x}) == {'EMBER_INF_D' if t == 'double' else 'EMBER_INF_F'})"
        if op == UnaryOp.IS_FINITE:
            return f"({_fn('fabs', dtype)}({x}) < {'EMBER_INF_D' if t == 'double' else 'EMBER_INF_F'})"
        raise LoweringError(op)  # pragma: no cover - the tables above cover every member
    if fam == "u":
        if op == UnaryOp.NEG:
            return f"((unsigned char)(0u - (unsigned){x}))"
        if op == UnaryOp.ABS:
            return x
        if op == UnaryOp.SIGN:
            return f"((unsigned char)({x} != 0))"
        if op == UnaryOp.SQUARE:
            return f"((unsigned char)((unsigned){x} * (unsigned){x}))"
        return f"((unsigned char)~{x})"
    u = UNSIGNED[t]
    if op == UnaryOp.NEG:
        return f"(({t})(({u})0 - ({u}){x}))"
    if op == UnaryOp.ABS:
        return f"({x} < 0 ? ({t})(({u})0 - ({u}){x}) : {x})"
    if op == UnaryOp.SIGN:
        return f"(({t})(({x} > 0) - ({x} < 0)))"
    if op == UnaryOp.SQUARE:
        return f"(({t})(({u}){x} * ({u}){x}))"
    return f"(({t})~{x})"


def binary_code(op: BinaryOp, x: str, y: str, dtype: np.dtype | DType) -> str:
    """C code of ``op(x, y)`` for operands of ``dtype`` (their compute type)."""
    fam = family(dtype)
    if op not in LOWERED_BINARY[fam]:
        raise LoweringError(f"ember: cuda: binary {op} is not defined for {dtype_of(dtype)}")
    t = compute_type(dtype)
    if op in _LOGICAL:
        return f"(({x} != 0) {_LOGICAL[op]} ({y} != 0))"
    if op in COMPARE:
        return f"({x} {COMPARE[op]} {y})"
    if op in _BITWISE:
        return f"(({t})({x} {_BITWISE[op]} {y}))"
    if fam == "b":
        return f"({x} || {y})" if op == BinaryOp.MAXIMUM else f"({x} && {y})"
    if fam == "f":
        if op == BinaryOp.ADD:
            return f"({x} + {y})"
        if op == BinaryOp.SUB:
            return f"({x} - {y})"
        if op == BinaryOp.MUL:
            return f"({x} * {y})"
        if op == BinaryOp.DIV:
            return f"({x} / {y})"
        if op in BINARY_MATH:
            return math_code(BINARY_MATH[op], dtype, x, y)
        if op == BinaryOp.MAXIMUM:
            return f"nan_max<{t}>({x}, {y})"
        if op == BinaryOp.MINIMUM:
            return f"nan_min<{t}>({x}, {y})"
        if op == BinaryOp.REMAINDER:
            return f"py_fmod<{t}>({x}, {y})"
        return f"py_floordiv<{t}>({x}, {y})"
    if fam == "u":
        if op in (BinaryOp.ADD, BinaryOp.SUB, BinaryOp.MUL):
            sym = {BinaryOp.ADD: "+", BinaryOp.SUB: "-", BinaryOp.MUL: "*"}[op]
            return f"((unsigned char)((unsigned){x} {sym} (unsigned){y}))"
        if op == BinaryOp.MAXIMUM:
            return f"int_max<unsigned char>({x}, {y})"
        if op == BinaryOp.MINIMUM:
            return f"int_min<unsigned char>({x}, {y})"
        if op in (BinaryOp.FLOOR_DIV, BinaryOp.DIV):
            return f"py_udiv<unsigned char>({x}, {y})"
        if op == BinaryOp.REMAINDER:
            return f"py_umod<unsigned char>({x}, {y})"
        if op == BinaryOp.LEFT_SHIFT:
            return f"py_shl_u8({x}, {y})"
        return f"py_shr_u8({x}, {y})"
    u = UNSIGNED[t]
    width = 64 if t == "long long" else 32
    if op in (BinaryOp.ADD, BinaryOp.SUB, BinaryOp.MUL):
        sym = {BinaryOp.ADD: "+", BinaryOp.SUB: "-", BinaryOp.MUL: "*"}[op]
        return f"(({t})(({u}){x} {sym} ({u}){y}))"
    if op == BinaryOp.MAXIMUM:
        return f"int_max<{t}>({x}, {y})"
    if op == BinaryOp.MINIMUM:
        return f"int_min<{t}>({x}, {y})"
    if op in (BinaryOp.FLOOR_DIV, BinaryOp.DIV):
        return f"py_idiv<{t}, {u}>({x}, {y})"
    if op == BinaryOp.REMAINDER:
        return f"py_imod<{t}>({x}, {y})"
    if op == BinaryOp.LEFT_SHIFT:
        return f"py_shl<{t}, {u}>({x}, {y}, {width})"
    return f"py_shr<{t}, {u}>({x}, {y}, {width})"


def cast_code(x: str, src: np.dtype | DType, dst: np.dtype | DType) -> str:
    """C code converting ``x`` (compute type of ``src``) to the compute type of ``dst``,
    as numpy's ``astype`` does on x86 (floats to ints truncate; NaN and out-of-range
    values give the lowest int; uint8 wraps)."""
    s, d = dtype_of(src), dtype_of(dst)
    if s is d:
        return x
    t = compute_type(d)
    if d is DType.BOOL:
        return f"({x} != 0)"
    if s is DType.BOOL:
        return f"(({t})({x} ? 1 : 0))"
    if d.is_float:
        return f"(({t}){x})"
    if s.is_float:
        if d is DType.INT32:
            return f"f2i32((double){x})"
        if d is DType.INT64:
            return f"f2i64((double){x})"
        return f"((unsigned char)f2i64((double){x}))"
    return f"(({t}){x})"


def scalar_code(raw: str, param_is_float: bool, dtype: np.dtype | DType) -> str:
    """A run-time scalar held as ``double`` (or ``long long``) converted to ``dtype``'s
    compute type, as numpy converts a Python number; for float16/bfloat16 operands the
    scalar stays a float32 (the op computes in float32 and rounds its result)."""
    d = dtype_of(dtype)
    if d in (DType.FLOAT16, DType.BFLOAT16):  # float32, not rounded to the half type (as flex and PyTorch)
        return f"((float){raw})"
    if param_is_float:
        return cast_code(raw, DType.FLOAT64, d)
    if d.is_float:
        return f"(({compute_type(d)}){raw})"
    return cast_code(raw, DType.INT64, d)


# ---------------------------------------------------------------------- trees
class CExpr:
    """Emits the C statements of expression trees (see the module docstring).

    ``load(expr)`` returns C code of a load node's value (already in its compute
    type), ``scalar(expr)`` that of a scalar node, ``acc(expr)`` that of a reduction
    result. Each node becomes ``const <type> <prefix><n> = ...;`` in :attr:`lines`.
    """

    def __init__(
        self,
        load: Callable[[Expr], str],
        scalar: Callable[[Expr], str],
        acc: Callable[[Expr], str] | None = None,
        prefix: str = "v",
    ):
        self.load = load
        self.scalar = scalar
        self.acc = acc
        self.prefix = prefix
        self.lines: list[str] = []
        self.names: dict[int, str] = {}

    def value(self, root: Expr) -> str:
        """The name of the local holding ``root``'s value, emitting what is missing."""
        hit = self.names.get(id(root))
        if hit is not None:
            return hit
        for node in root.walk():
            if id(node) not in self.names:
                self._emit(node)
        return self.names[id(root)]

    def _emit(self, e: Expr) -> None:
        kind = e.kind
        dtype = e.dtype
        if kind == "load":
            code = self.load(e)
        elif kind == "const":
            code = literal(e.op, dtype)
        elif kind == "scalar":
            code = self.scalar(e)
        elif kind == "acc":
            if self.acc is None:
                raise LoweringError("ember: cuda: a reduction result outside a reduction kernel")
            code = self.acc(e)
        else:
            args = [self.names[id(a)] if type(a) is Expr else None for a in e.args]
            x = args[0]
            assert x is not None  # every kind's first operand is an expression (only clamp's bounds may be None)
            if kind == "unary":
                code = unary_code(e.op, x, e.args[0].dtype)
            elif kind == "binary":
                y = args[1]
                assert y is not None  # scalar operands are ``scalar`` expressions
                code = binary_code(e.op, x, y, e.args[0].dtype)
            elif kind == "where":
                code = f"({x} ? {args[1]} : {args[2]})"
            elif kind == "clamp":
                code = x
                if args[1] is not None:
                    code = binary_code(BinaryOp.MAXIMUM, code, args[1], dtype)
                if args[2] is not None:
                    code = binary_code(BinaryOp.MINIMUM, code, args[2], dtype)
            elif kind == "cast":
                code = cast_code(x, e.args[0].dtype, dtype)
            else:
                raise LoweringError(f"ember: cuda: unknown expression kind {kind!r}")
            if kind in ("unary", "binary", "cast") and dtype_of(dtype) in (DType.FLOAT16, DType.BFLOAT16):
                code = round_code(dtype, code)
        name = f"{self.prefix}{len(self.names)}"
        self.names[id(e)] = name
        self.lines.append(f"const {compute_type(dtype)} {name} = {code};")


def supported(expr: Expr) -> bool:
    """Whether every node of ``expr`` lowers (ops per dtype family)."""
    for node in expr.walk():
        if node.kind == "unary" and not lowers_unary(node.op, node.args[0].dtype):
            return False
        if node.kind == "binary" and not lowers_binary(node.op, node.args[0].dtype):
            return False
    return True


__all__ = [
    "LOWERED_BINARY",
    "LOWERED_UNARY",
    "CExpr",
    "LoweringError",
    "binary_code",
    "cast_code",
    "lowers_binary",
    "lowers_unary",
    "scalar_code",
    "supported",
    "unary_code",
]
