"""The WGSL printer of the kernel IR, and the builders cube's eager kernels use.

A kernel's expression is a :class:`~ember.backend.kernel.exprs.Expr` tree, whichever
path built it: cube's eager ops build one op at a time with the builders below (their
tensors are the launch's operands), and the fusion executor numbers the leaves of a
schedule's trees per launch (:class:`Launch`). :class:`Emitter` prints either as WGSL
``let`` statements. A tree is a value (equal and hashed by its structure), so it keys
the kernel cache.

Each node's WGSL compute type comes from its dtype (:data:`CTYPES`: float32 as ``f32``,
int32 and uint8 as ``i32``, int64 as ``i64`` on two words, bool, complex64 as ``c64``).
A uint8 value is an ``i32`` word reduced modulo 256 when stored; a fused kernel's
uint8 op results are masked where they are made, so it computes what the chain of
eager kernels computes (eager trees are typed by compute type and never hold uint8).
Leaves read operand ``j`` at the current element (through its broadcasting strides),
scalar ``k`` from the launch's parameter block, a constant (exact: written into the
kernel's source by its bits), the element's linear index, or reduction ``k``'s result
(in a fused reduction's epilogue).

>>> x = load(0, "f32")
>>> expr = binary("mul", unary("exp", x), scalar(0, "f32"))
>>> type_of(expr)
'f32'
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

from ember.backend.cube import wgsl
from ember.backend.kernel.exprs import Expr
from ember.backend.kernel.views import View
from ember.backend.ops import BinaryOp

__all__ = ["Expr", "Emitter", "Launch", "load", "scalar", "const", "acc", "index", "unary", "binary", "select"]

#: numpy dtype -> the WGSL compute type a value of it computes in.
CTYPES: dict[np.dtype, str] = {
    np.dtype(np.float32): "f32",
    np.dtype(np.int32): "i32",
    np.dtype(np.uint8): "i32",
    np.dtype(np.int64): "i64",
    np.dtype(np.bool_): "bool",
    np.dtype(np.complex64): "c64",
}
#: compute type -> the dtype of an eager kernel's values of it.
DTYPES: dict[str, np.dtype] = {
    "f32": np.dtype(np.float32),
    "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64),
    "bool": np.dtype(np.bool_),
    "c64": np.dtype(np.complex64),
}
_U8 = np.dtype(np.uint8)
_I32 = np.dtype(np.int32)
_LEAVES = frozenset({"load", "const", "scalar", "index"})  # never masked: their words are already bytes


def ctype(dtype: np.dtype) -> str:
    """The WGSL compute type of ``dtype``."""
    return CTYPES[dtype]


def type_of(expr: Expr) -> str:
    """The WGSL compute type of ``expr``'s value."""
    return CTYPES[expr.dtype]


@lru_cache(maxsize=4096)
def load(j: int, ct: str) -> Expr:
    """Operand ``j`` of the launch (already converted to its compute type ``ct``)."""
    return Expr("load", j, (), DTYPES[ct])


@lru_cache(maxsize=4096)
def scalar(k: int, ct: str) -> Expr:
    """Scalar parameter ``k`` of the launch, as ``ct``."""
    return Expr("scalar", k, (), DTYPES[ct])


def const(value: int | float | bool | complex, ct: str) -> Expr:
    """A constant of compute type ``ct`` (part of the kernel's source and key; not
    memoised: ``0.0 == -0.0`` would make a cache answer one for the other)."""
    if ct == "bool":
        value = bool(value)
    elif ct in ("i32", "i64"):
        value = int(value.real if isinstance(value, complex) else value)
    elif ct == "c64":
        value = complex(value)
    else:
        value = float(value.real if isinstance(value, complex) else value)
    return Expr("const", value, (), DTYPES[ct])


@lru_cache(maxsize=4096)
def acc(k: int, ct: str) -> Expr:
    """The result of reduction ``k`` of a fused reduction kernel (read in its epilogue)."""
    return Expr("acc", k, (), DTYPES[ct])


@lru_cache(maxsize=4096)
def index() -> Expr:
    """The element's linear index in the output, as ``i32``."""
    return Expr("index", None, (), _I32)


def _result(op: str, ct: str) -> np.dtype:
    return DTYPES["bool" if op in wgsl.BOOL_RESULT else wgsl.RESULT_TYPE.get(op, ct)]


@lru_cache(maxsize=4096)
def unary(op: str, a: Expr) -> Expr:
    ct = type_of(a)
    if ct not in wgsl.UNARY[op]:
        raise TypeError(f"ember: cube: {op} has no {ct} kernel")
    return Expr("unary", op, (a,), _result(op, ct))


@lru_cache(maxsize=4096)
def binary(op: str, a: Expr, b: Expr) -> Expr:
    ct, cb = type_of(a), type_of(b)
    if ct != cb or ct not in wgsl.BINARY[op]:
        raise TypeError(f"ember: cube: {op} has no ({ct}, {cb}) kernel")
    return Expr("binary", op, (a, b), _result(op, ct))


@lru_cache(maxsize=4096)
def select(cond: Expr, a: Expr, b: Expr) -> Expr:
    """``a`` where ``cond`` holds, else ``b``."""
    if type_of(cond) != "bool" or type_of(a) != type_of(b):
        raise TypeError("ember: cube: select needs a bool condition and operands of one type")
    return Expr("where", None, (cond, a, b), a.dtype)


@lru_cache(maxsize=4096)
def convert(a: Expr, ct: str) -> Expr:
    return a if type_of(a) == ct else Expr("cast", None, (a,), DTYPES[ct])


def num_inputs(expr: Expr) -> int:
    """One more than the largest operand index ``expr`` reads (0 for none)."""
    return max((e.op + 1 for e in expr.walk() if e.kind == "load"), default=0)


class Launch:
    """A schedule's trees as one launch's: each distinct ``(buffer, view)`` a load
    reads becomes operand ``load(j)`` (in order: :attr:`operands`), each run-time scalar
    slot becomes ``scalar(k)`` with the compute type it is read as (:attr:`scalars`),
    and a reduction's result ``acc(k)``; every other node keeps its op and dtype."""

    def __init__(self) -> None:
        self.operands: list[tuple[int, View]] = []  # load(j) -> (buffer, view)
        self.scalars: list[tuple[int, str]] = []  # scalar(k) -> (slot, compute type)
        self._operand_index: dict[tuple[int, View], int] = {}
        self._scalar_index: dict[tuple[int, str], int] = {}
        self._memo: dict[int, Expr] = {}

    def operand(self, buffer: int, view: View) -> int:
        key = (buffer, view)
        j = self._operand_index.get(key)
        if j is None:
            j = self._operand_index[key] = len(self.operands)
            self.operands.append(key)
        return j

    def _scalar(self, slot: int, ct: str) -> int:
        key = (slot, ct)
        k = self._scalar_index.get(key)
        if k is None:
            k = self._scalar_index[key] = len(self.scalars)
            self.scalars.append(key)
        return k

    def __call__(self, expr: Expr) -> Expr:
        """``expr`` with its leaves numbered (each node rebuilt once)."""
        memo = self._memo
        for e in expr.walk():
            if id(e) in memo:
                continue
            kind = e.kind
            if kind == "load":
                out = Expr("load", self.operand(e.op, e.args[0]), (), e.dtype)
            elif kind == "scalar":
                out = Expr("scalar", self._scalar(e.op, ctype(e.dtype)), (), e.dtype)
            elif kind == "acc":
                out = Expr("acc", e.op[1], (), e.dtype)  # op: (kernel, reduction index)
            elif not e.args:
                out = e
            else:
                out = Expr(kind, e.op, tuple(memo[id(a)] if type(a) is Expr else a for a in e.args), e.dtype)
            memo[id(e)] = out
        return memo[id(expr)]


class Emitter:
    """Prints expressions as ``let`` statements, each node once."""

    def __init__(
        self,
        loads: dict[int, str],
        scalars: dict[int, int],
        index: str = "i32(gi)",
        prefix: str = "v",
        accs: dict[int, str] | None = None,
    ) -> None:
        self.loads = loads  # operand index -> WGSL expression of its value
        self.scalars = scalars  # scalar index -> info position
        self.accs = accs or {}  # reduction index -> WGSL expression of its result
        self.index = index  # WGSL expression of the element's linear index (i32)
        self.prefix = prefix  # of the names of the emitted values
        self.lines: list[str] = []
        self._names: dict[Expr, str] = {}
        self._count = 0

    def emit(self, expr: Expr) -> str:
        name = self._names.get(expr)
        if name is not None:
            return name
        kind, op, args = expr.kind, expr.op, expr.args
        ct = CTYPES[expr.dtype]
        if kind == "load":
            code = self.loads[op]
        elif kind == "scalar":
            code = wgsl.info_scalar(self.scalars[op], ct)
        elif kind == "index":
            code = self.index
        elif kind == "const":
            code = wgsl.literal(op, ct)
        elif kind == "acc":
            code = self.accs[op]
        elif kind == "unary":
            code = wgsl.UNARY[op][type_of(args[0])].format(a=self.emit(args[0]))
        elif kind == "binary":
            code = wgsl.BINARY[op][type_of(args[0])].format(a=self.emit(args[0]), b=self.emit(args[1]))
        elif kind == "where":
            c, a, b = (self.emit(x) for x in args)
            code = f"select({b}, {a}, {c})"
        elif kind == "clamp":  # max with the low bound, then min with the high one
            code = self.emit(args[0])
            low, high = args[1], args[2]
            if low is not None:
                code = wgsl.BINARY[BinaryOp.MAXIMUM][ct].format(a=code, b=self.emit(low))
            if high is not None:
                if low is not None:
                    code = self._let(code, ct)
                code = wgsl.BINARY[BinaryOp.MINIMUM][ct].format(a=code, b=self.emit(high))
        elif kind == "cast":
            code = wgsl.convert(self.emit(args[0]), type_of(args[0]), ct)
        else:  # pragma: no cover - no builder or scheduler makes another kind
            raise ValueError(f"ember: cube: no WGSL for expression kind {kind!r}")
        name = self._let(code, ct)
        if expr.dtype == _U8 and kind not in _LEAVES:  # a uint8 result, reduced modulo 256
            name = self._let(wgsl.BINARY[BinaryOp.BITWISE_AND]["i32"].format(a=name, b=wgsl.literal(255, "i32")), ct)
        self._names[expr] = name
        return name

    def _let(self, code: str, ct: str) -> str:
        name = f"{self.prefix}{self._count}"
        self._count += 1
        self.lines.append(f"    let {name}: {ct} = {code};")
        return name
